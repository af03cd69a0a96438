"""How perfbisect stops on Ctrl-C and SIGTERM: every ``with`` unwinds (servers torn down, the trial
stored as interrupted), then one line says what was kept and how to go on, and the exit status is
128 + the signal's number (130, 143). With ``--json`` the same is one JSON object on stdout, shaped like
every other failure's (``error``, ``exit_code``, ``kind``) plus the bisection and its resume command.
"""

from __future__ import annotations

import shlex
import signal
import threading
from contextlib import contextmanager
from pathlib import Path

from .errors import Interrupted, PerfbisectError
from .workload_kinds import kind_of

# Imported light on purpose (typer and rich only inside the functions that print): ``perfbisect.cli``
# installs ``install_early_handlers`` before it imports anything heavy, so a signal in the first
# moments of a command is caught, not left to the interpreter's defaults.


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


@contextmanager
def interruptible(ws, *, resume_id: int | None = None, resumable: bool = False, options: str = "",
                  json_out: bool = False):
    """Turn Ctrl-C / SIGTERM (after every ``with`` inside has torn its server down) into one line
    saying what was kept and how to go on, and exit 128 + the signal's number. ``json_out``: also one
    JSON object on stdout, so a script reading ``--json`` learns it was cut short and how to resume."""
    import typer

    from .report.console import print_json

    try:
        yield
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        try:
            _trials, bisections = ws.store.release_own()
        except PerfbisectError:
            bisections = []
        bid = resume_id if resume_id is not None else (max(bisections) if bisections else None)
        resume = f"perfbisect resume {bid}{options}" if resumable and bid is not None else None
        if resume is not None:
            what = f"bisection #{bid} is saved with every finished trial; run `{resume}` to continue it"
        elif resumable:
            what = "the bisection had not started yet: nothing to resume; run the same command again"
        else:
            what = "the trials finished so far are stored (see `perfbisect log`)"
        stopped = "the server was stopped" if kind_of(ws.config.workload).serves else "the workload command was stopped"
        message = f"Interrupted by {signal_name(signum)}: {stopped}; {what}."
        if json_out:
            print_json({"error": message, "exit_code": 128 + signum, "kind": "Interrupted",
                        "bisection": bid if resumable else None, "resume": resume})
        say_interrupted(message)
        raise typer.Exit(code=128 + signum) from None


# Whether the line saying what a signal stopped has been printed (by ``interruptible`` or a command's
# own handler): the CLI's boundary prints its general line only where nobody has.
reported: list[bool] = []


def say_interrupted(message: str) -> None:
    """Print the one line saying what a signal stopped (on stderr), and remember that it was said."""
    from .report.console import err_console, show

    reported.append(True)
    err_console.print(show(message))


def stopped_message(signum: int) -> str:
    """The line for a signal that arrived outside any command's own handling (while perfbisect started,
    opened its store or took its locks, or in a command that measures nothing)."""
    return (f"Interrupted by {signal_name(signum)} before the command finished: it stopped there, and what "
            f"it had stored before is kept; run the same command again to do the rest.")


def resume_options(config: Path | None, db: Path | str | None) -> str:
    """The -c/--db a resume needs to find the same bisection, as the user gave them (a password in a
    database URL masked: it is printed)."""
    from .errors import mask_secrets as mask

    parts = []
    if config is not None:
        parts.append(f" -c {shlex.quote(str(config))}")
    if db is not None:
        parts.append(f" --db {shlex.quote(mask(str(db)))}")
    return "".join(parts)


signalled: list[int] = []


def _on_signal(signum: int, _frame: object) -> None:
    # The first SIGINT/SIGTERM unwinds the run (servers torn down, trial marked interrupted); later
    # ones are ignored so they cannot cut that teardown short. SIGKILL still ends everything, and
    # then the children die with us (see perfbisect.runtime.children).
    if signalled:
        return
    signalled.append(signum)
    raise Interrupted(signum)


def install_signal_handlers() -> None:
    """SIGTERM behaves like Ctrl-C: an orderly teardown, then exit 143 (130 for Ctrl-C)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)


def _note_signal(signum: int, _frame: object) -> None:
    if not signalled:
        signalled.append(signum)


_early: list[bool] = []  # install_early_handlers ran: this process is the `perfbisect` command itself


def install_early_handlers() -> None:
    """Until ``install_signal_handlers`` runs (while the CLI imports its libraries), a SIGINT or SIGTERM
    is only noted: raised in the middle of an import it would end in a traceback (Ctrl-C) or a silent
    death (SIGTERM). The CLI's entry point finds it noted and exits 128 + its number, saying so."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _note_signal)
    _early.append(True)


def forget_earlier_signals() -> None:
    """A command starting in a process that ran others (tests call ``cli.main`` many times) does not
    inherit their signal or their interrupted line; in the `perfbisect` command itself a signal noted
    while it loaded is kept, for the entry point to answer."""
    if not _early:
        signalled.clear()
        reported.clear()
