"""The detached worker a pull starts: ``python -m perfbisect.hook.hookworker CONFIG HOOK_DIR``.

Its own module so that the queue (``checkqueue``) stays beneath the use cases: this is the one place
that, holding the worker lock, runs the check (``check.drain``, what `perfbisect check --drain` runs)
behind an error boundary of its own. It does not enter the command line, which stands above every
package (tests/test_layers.py): its boundary here says a failure as the CLI's does, in the worker's log.
"""

from __future__ import annotations

import os
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """The hook's entry: ``python -m perfbisect.hook.hookworker CONFIG HOOK_DIR``.

    Only the standard library is imported until the worker lock is ours: a pull that finds a worker
    already draining costs an interpreter start, not perfbisect's imports. The lock holder becomes
    the worker (``perfbisect.hook.check.drain``) behind ``drain_answered``'s error boundary.
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
    # The command it stands for: the locks it takes name their holder by it (runtime.locks.this_command).
    sys.argv = ["perfbisect", "check", "--drain", "--config", args[0]]
    return drain_answered(Path(args[0]), lock)


def drain_answered(config_path: Path, lock) -> int:
    """``check.drain`` (holding ``lock``, the worker lock) and its exit status, behind the worker's error
    boundary, which answers as the CLI's does (``perfbisect.cli.main``): a ``PerfbisectError`` is
    ``Error: <its paragraph>`` on stderr and its exit status, any other exception the one paragraph of
    ``errors.internal_error_message`` and 4 (``PERFBISECT_DEBUG=1`` prints the traceback), a SIGTERM or
    SIGINT one line and 128 + its number. stderr is the worker's log (hooks/perfbisect-hook.sh)."""
    import signal
    import traceback

    from ..interrupts import install_early_handlers

    install_early_handlers()  # a signal while perfbisect loads is noted, and answered below
    from ..errors import EXIT_OK, EXIT_RUNTIME, PerfbisectError, internal_error_message
    from ..interrupts import install_signal_handlers, say_interrupted, signalled, stopped_message
    from ..report.console import print_error
    from . import check

    check.HELD_LOCK = lock
    try:
        install_signal_handlers()
        if signalled:  # it came while the worker was still loading
            raise KeyboardInterrupt
        check.drain(config_path)
        return EXIT_OK
    except KeyboardInterrupt as exc:  # check.drain has marked the queue's worker stopped
        signum = getattr(exc, "signum", None) or (signalled[0] if signalled else signal.SIGINT)
        say_interrupted(stopped_message(signum))
        return 128 + signum
    except PerfbisectError as exc:  # what the check could not do: one paragraph, its documented exit status
        if os.environ.get("PERFBISECT_DEBUG"):
            traceback.print_exc()
        print_error(str(exc))
        return exc.exit_code
    except Exception as exc:
        if os.environ.get("PERFBISECT_DEBUG"):
            traceback.print_exc()
        print_error(internal_error_message(exc))
        return EXIT_RUNTIME


if __name__ == "__main__":
    raise SystemExit(main())
