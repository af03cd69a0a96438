"""Kept for git hooks installed before the package layout (they run ``python -m perfbisect.hookworker``):
the worker is ``perfbisect.hook.hookworker``; this runs it, so an earlier install keeps checking pulls.
`perfbisect hook install` writes the new path, and `perfbisect hook status` tells a hook that still runs this one
to be installed again. A compatibility shim: removed in perfbisect 0.3."""

from perfbisect.hook.hookworker import main

if __name__ == "__main__":
    raise SystemExit(main())
