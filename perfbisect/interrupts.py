"""How perfbisect stops on Ctrl-C and SIGTERM: every ``with`` unwinds (servers torn down, the trial
stored as interrupted), then one line says what was kept and how to go on, and the exit status is
128 + the signal's number (130, 143). With ``--json`` the same is one JSON object on stdout, shaped like
every other failure's (``error``, ``exit_code``, ``kind``) plus the bisection and its resume command.
"""

from __future__ import annotations

import shlex
import signal
from contextlib import contextmanager
from pathlib import Path

import typer

from .report.console import err_console, print_json, show
from .errors import Interrupted, PerfbisectError


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


@contextmanager
def interruptible(ws, *, resume_id: int | None = None, resumable: bool = False, options: str = "",
                  json_out: bool = False):
    """Turn Ctrl-C / SIGTERM (after every ``with`` inside has torn its server down) into one line
    saying what was kept and how to go on, and exit 128 + the signal's number. ``json_out``: also one
    JSON object on stdout, so a script reading ``--json`` learns it was cut short and how to resume."""
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
        message = f"Interrupted by {signal_name(signum)}: the server was stopped; {what}."
        if json_out:
            print_json({"error": message, "exit_code": 128 + signum, "kind": "Interrupted",
                        "bisection": bid if resumable else None, "resume": resume})
        err_console.print(show(message))
        raise typer.Exit(code=128 + signum) from None


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
