"""The `perfbisect` command: its Typer object, every command registered on it, and its one error
boundary (``main``): parse, call ``perfbisect.app``, print, exit.

Exit codes: 0 finished (no regression, or one found without --fail-on-regression); 1 regression found
with --fail-on-regression; 2 usage or config error; 3 inconclusive; 4 measurement broke.

The commands themselves, one thin function each with its options and the ``--help`` examples users
read, are in the modules beside this one, by what they do: ``bisection`` (run, resume, plan, patches
check, demo), ``measuring`` (measure, compare, calibrate), ``results`` (report, log), ``housekeeping``
(init, doctor, skip, gc) and ``pulls`` (hook, check, status); what they share is in ``options``. The
logic is in ``app`` and the printing in ``render``/``console``.
"""

from __future__ import annotations

import os
import sys

from ..interrupts import install_early_handlers

# The `perfbisect` command itself (its script; `python -m perfbisect.cli` installs them in __main__), not a
# test importing this module: a SIGINT or SIGTERM is caught from here on, while typer, rich and the rest
# still load (a second or more on a busy machine), and main() then exits 128 + its number saying so
# (perfbisect.interrupts).
if os.path.basename(sys.argv[0] if sys.argv else "") == "perfbisect":
    install_early_handlers()

import errno  # after the handlers, on purpose
import signal
import traceback
from typing import Annotated

import typer

from .. import __version__
from ..errors import EXIT_OK, EXIT_RUNTIME, PerfbisectError, internal_error_message
from ..interrupts import (
    forget_earlier_signals,
    install_signal_handlers,
    reported,
    say_interrupted,
    signalled,
    stopped_message,
)
from ..report.console import out_console, print_error, print_json
from . import bisection, housekeeping, measuring, pulls, results


def _flag_type(display_type_rich):
    """A flag (--json, --wait) takes no value: its help shows no "<bool>" type beside it."""
    def shown(self, ctx):
        return None if getattr(self, "is_flag", False) else display_type_rich(self, ctx)
    return shown


# Only where this Typer has the hook (0.27, on the GPU node, has not: its help keeps the type; nothing else changes).
if hasattr(typer.core.TyperOption, "display_type_rich"):
    typer.core.TyperOption.display_type_rich = _flag_type(typer.core.TyperOption.display_type_rich)

EPILOG_EXIT = (
    "Exit codes: 0 finished · 1 regression found (with --fail-on-regression) · "
    "2 usage/config error · 3 inconclusive · 4 measurement broke."
)

cli = typer.Typer(
    name="perfbisect",
    help=(
        "Find the commit that made an LLM serving engine slower, without blaming thermal or clock "
        "drift. perfbisect re-applies your patch stack on each commit, rebuilds, benchmarks with "
        "repeated runs across separate server sessions, stores every result in SQLite, and only "
        "blames a commit when the difference exceeds the measured noise.\n\n"
        "Example:  perfbisect run good=bba2fc4 bad=HEAD"
    ),
    epilog=EPILOG_EXIT,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
    # Help text is Rich markup: a config table name in it is written "\\[store]" so that it shows.
    rich_markup_mode="rich",
)
patches_app = typer.Typer(help="Inspect the patch stack over history, and carry it over where it stops applying.",
                          no_args_is_help=True)
cli.add_typer(patches_app, name="patches")
hook_app = typer.Typer(help="The post-`git pull` hook: every pull is checked, a regression bisected.", no_args_is_help=True)
cli.add_typer(hook_app, name="hook")

# Every command, in the order `perfbisect --help` lists them (Typer keeps the order they were added in;
# the groups, `patches` and `hook`, come after the commands).
cli.command()(bisection.run)
cli.command()(bisection.resume)
cli.command()(bisection.demo)
cli.command()(bisection.plan)
patches_app.command("check")(bisection.patches_check)
patches_app.command("carry")(bisection.patches_carry)
cli.command()(measuring.measure)
cli.command("compare")(measuring.compare_cmd)
cli.command()(measuring.calibrate)
cli.command("report")(results.report_cmd)
cli.command()(housekeeping.doctor)
cli.command()(housekeeping.init)
cli.command()(housekeeping.skip)
cli.command()(results.log)
cli.command()(housekeeping.gc)
# The post-`git pull` hook: hook install/uninstall/status, check, status (logic in hook.py, check.py)
hook_app.command("install")(pulls.hook_install)
hook_app.command("uninstall")(pulls.hook_uninstall)
hook_app.command("status")(pulls.hook_status)
cli.command("check")(pulls.check_cmd)
cli.command("status")(pulls.status_cmd)


@cli.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        out_console.print(f"perfbisect {__version__}")
        raise typer.Exit()


def _usage_error(exc: BaseException) -> bool:
    """Click's usage errors (typer vendors Click privately: recognised by what they can do, not by class)."""
    return callable(getattr(exc, "format_message", None)) and callable(getattr(exc, "show", None)) \
        and isinstance(getattr(exc, "exit_code", None), int)


def _json_error(message: str, exit_code: int, kind: str) -> None:
    """With --json, a failure is one JSON object on stdout too, for CI to read (the paragraph stays on stderr)."""
    print_json({"error": message, "exit_code": exit_code, "kind": kind})


class _WatchedStdout:
    """``sys.stdout`` while a command runs, remembering the first write that failed (a full disk, a pipe
    whose reader went away): that failure is the machine's, exit 4 with a line on stderr, never the
    1 that means "regression found" (Typer's answer to a broken pipe) or a traceback."""

    def __init__(self, inner):
        self._inner = inner
        self.failed: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self._inner.write(text)
        except OSError as exc:
            self.failed = self.failed or exc
            raise

    def flush(self) -> None:
        try:
            self._inner.flush()
        except OSError as exc:
            self.failed = self.failed or exc
            raise

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


# Commands whose exit status carries a verdict: cut short while printing, their status was never reached.
_VERDICT_COMMANDS = {"run", "resume", "compare", "check", "measure", "calibrate", "demo"}


def _pipe_closed_status(pending: int | None) -> int:
    """The exit status when the pipe's reader went away: the command's own where it was reached (a regression's 1
    stays 1), else 0 for a listing or help (`perfbisect --help | head`, `perfbisect log | head -3`: the reader's
    choice, not an error) and 4 for a command whose status is its verdict (the verdict was never reached)."""
    if pending is not None:
        return pending
    words = [a for a in sys.argv[1:] if not a.startswith("-")]
    if "--help" in sys.argv[1:] or not words or words[0] not in _VERDICT_COMMANDS:
        return EXIT_OK
    return EXIT_RUNTIME


def _stdout_failed(watched: _WatchedStdout, pending: int | None = None) -> None:
    """Exit 4 saying why the result could not be printed (a full disk); where the pipe's reader went away, quietly,
    with ``_pipe_closed_status(pending)`` (``pending``: the status the command was exiting with, if it got there).
    stdout is pointed at /dev/null first, so that the interpreter's last flush of what is still buffered cannot
    fail again (exit 120)."""
    exc = watched.failed
    assert exc is not None
    try:
        fd = watched._inner.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, AttributeError, ValueError):
        pass  # not a file descriptor (a test's StringIO): nothing is flushed at exit
    if exc.errno == errno.EPIPE:
        sys.exit(_pipe_closed_status(pending))
    why = "the disk or device it goes to refused it"
    print_error(
        f"Cannot write to standard output: {exc.strerror or exc} ({why}), so the result was not printed. "
        f"What the command stored is kept (`perfbisect log` lists it, `perfbisect report` renders it). "
        f"Point stdout at a disk with space, a file or a terminal, and run the command again."
    )
    sys.exit(EXIT_RUNTIME)


def _exit_interrupted(json_out: bool, signum: int | None = None) -> None:
    """Exit 128 + the signal that stopped the command, saying so where the command itself has not
    (a signal while perfbisect started, opened its store or waited for a lock: Typer answers those
    with a silent 130 of its own, whatever the signal)."""
    signum = signum if signum is not None else (signalled[0] if signalled else signal.SIGINT)
    if not reported:
        message = stopped_message(signum)
        if json_out:
            # Plain json, no import: the signal may have cut an import short (a half-loaded SQLAlchemy),
            # and what prints the line must not depend on it.
            import json

            out_console.file.write(json.dumps({"error": message, "exit_code": 128 + signum, "kind": "Interrupted",
                                               "bisection": None, "resume": None}, indent=2) + "\n")
            out_console.file.flush()
        say_interrupted(message)
    sys.exit(128 + signum)


def main() -> None:
    """Entry point of the `perfbisect` script, and its one error boundary: a ``PerfbisectError`` from
    any command becomes ``Error: <message>`` on stderr and the error's exit status; anything else
    is an internal error (exit 4). With ``--json`` every failure (usage errors included) is also one
    JSON object on stdout: ``{"error": ..., "exit_code": ..., "kind": ...}``. A SIGINT or SIGTERM
    exits 128 + its number (130, 143) with one line saying so, whenever it comes."""
    forget_earlier_signals()
    json_out = "--json" in sys.argv[1:]
    stdout = sys.stdout
    sys.stdout = watched = _WatchedStdout(stdout)
    try:
        _main(json_out, watched)
    finally:
        sys.stdout = stdout


def _main(json_out: bool, watched: _WatchedStdout) -> None:
    try:
        install_signal_handlers()
        if signalled:  # it came while the CLI was still loading (perfbisect.interrupts.install_early_handlers)
            _exit_interrupted(json_out)
        if not json_out:
            cli()
        else:  # Click's own usage errors come back here instead of exiting, to be answered in JSON too
            code = cli(standalone_mode=False)
            if signalled and code in (1, 130, 128 + signalled[0]):  # an interrupt Click turned into its own status
                _exit_interrupted(json_out)
            sys.exit(code if isinstance(code, int) else EXIT_OK)
    except SystemExit as exc:
        # Click turns an interrupt outside a command's own handling into "Aborted!" and status 1, Typer
        # into a silent 130 (for SIGTERM too); a command's own handling exits 128 + the signal.
        if signalled and exc.code in (1, 130, 128 + signalled[0]):
            _exit_interrupted(json_out)
        # A write that failed while the command printed: it never reached its own status (Click answers a broken
        # pipe with 1 of its own). One that fails only in the last flush: the command did, and keeps it.
        cut_short = watched.failed is not None
        if not cut_short:
            try:  # what is still buffered is part of the result: a write that fails now fails the command
                watched.flush()
            except OSError:
                pass
        if watched.failed is not None:
            code = exc.code
            reached = code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_RUNTIME)
            _stdout_failed(watched, None if cut_short else reached)
        raise
    except KeyboardInterrupt as exc:
        _exit_interrupted(json_out, getattr(exc, "signum", None))
    except PerfbisectError as exc:  # what a command could not do: one paragraph, its documented exit status
        if os.environ.get("PERFBISECT_DEBUG"):
            traceback.print_exc()
        piped_away = watched.failed is not None and watched.failed.errno == errno.EPIPE
        if watched.failed is not None and not piped_away:
            _stdout_failed(watched)
        if json_out and not piped_away:
            _json_error(str(exc), exc.exit_code, type(exc).__name__)
        print_error(str(exc))  # stderr still reaches the user when stdout's reader went away
        sys.exit(exc.exit_code)
    except Exception as exc:
        if json_out and _usage_error(exc):  # Click's (as Typer vendors it): a bad option, a missing argument
            _json_error(exc.format_message(), exc.exit_code, "UsageError")
            exc.show()
            sys.exit(exc.exit_code)
        if json_out and type(exc).__name__ == "Abort":  # Click's "Aborted!" (an interrupt at a prompt)
            if signalled:
                _exit_interrupted(json_out)
            sys.exit(1)
        if os.environ.get("PERFBISECT_DEBUG"):
            traceback.print_exc()
        if watched.failed is not None:  # the result could not be printed: say that, not "a bug"
            _stdout_failed(watched)
        if json_out:
            _json_error(internal_error_message(exc), EXIT_RUNTIME, "InternalError")
        print_error(internal_error_message(exc))
        sys.exit(EXIT_RUNTIME)

