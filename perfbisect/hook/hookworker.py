"""The detached worker a pull starts: ``python -m perfbisect.hook.hookworker CONFIG HOOK_DIR``.

Its own module so that the queue (``checkqueue``) stays beneath the use cases: this is the one place
that, holding the worker lock, enters the CLI (``perfbisect check --drain``) with its error boundary.
"""

from __future__ import annotations

import os
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """The hook's entry: ``python -m perfbisect.hook.hookworker CONFIG HOOK_DIR``.

    Only the standard library is imported until the worker lock is ours: a pull that finds a worker
    already draining costs an interpreter start, not perfbisect's imports. The lock holder becomes
    the worker (``perfbisect.hook.check.drain``) behind the CLI's error boundary.
    """
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m perfbisect.hook.hookworker CONFIG HOOK_DIR", file=sys.stderr)
        return 2
    try:
        os.setsid()  # leave the terminal's session: a closed terminal or a later Ctrl-C must not stop the check
    except OSError:
        pass
    from .checkqueue import WORKER_LOCK, WorkerLock

    lock = WorkerLock(Path(args[1]) / WORKER_LOCK)
    if not lock.try_acquire():
        return 0  # the worker draining now looks at the queue again after releasing its lock
    sys.argv = ["perfbisect", "check", "--drain", "--config", args[0]]
    from . import check
    from ..cli import main as cli

    check.HELD_LOCK = lock
    try:
        cli.main()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
