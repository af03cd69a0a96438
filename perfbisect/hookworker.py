"""Kept for git hooks installed before the package layout (they run ``python -m perfbisect.hookworker``):
the worker is ``perfbisect.hook.hookworker``; this runs it, so an earlier install keeps checking pulls.
`perfbisect hook install` writes the new path."""

from perfbisect.hook.hookworker import main

if __name__ == "__main__":
    raise SystemExit(main())
