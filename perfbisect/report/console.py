"""perfbisect's terminal: results on stdout, progress, warnings and errors on stderr.

Every piece of repository or server text goes through ``show`` (inert: escape sequences and
control characters are shown, never acted on; no rich markup).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rich.console import Console
from rich.markup import escape

err_console = Console(stderr=True, highlight=False, soft_wrap=True)
out_console = Console(highlight=False, soft_wrap=True)

# C0/C1 control characters except tab and newline, and the bidi overrides that reorder what is shown.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def inert(text: str) -> str:
    """Repository text (subjects, paths, workload output) made harmless for a terminal: escape
    sequences and control characters are shown as \\xNN instead of acting on the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


def show(text: str) -> str:
    """Text printed as it is: inert, and no rich markup."""
    return escape(inert(text))


def print_json(data) -> None:
    """One JSON object on stdout: never NaN or Infinity (not JSON; null instead)."""
    from .render import json_value

    out_console.print_json(json.dumps(json_value(data), default=str, allow_nan=False))


def fit(text: str, width: int) -> str:
    """``text`` on one line of at most ``width`` characters ("…" where it was cut)."""
    one = " ".join(text.split())
    return one if len(one) <= width else one[: max(width - 1, 0)] + "…"


class ConsoleProgress:
    """Progress on stderr: steps, finer detail (unless --quiet) and warnings.

    Where a bisection stands (``search``) is a live status line at the bottom of a terminal — trial
    k of at most N, phase, best answer and its probability, elapsed, ETA, and the latest detail (a
    server's readiness polling) — and a plain line per trial when stderr is not a terminal. With
    --quiet a heartbeat line still comes every ``PERFBISECT_HEARTBEAT_S`` seconds (60).
    """

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self._status = None  # (cost.SearchStatus, monotonic time it was set)
        self._last_detail = ""
        self._live = None
        self._stop = None

    def info(self, message: str) -> None:
        self._last_detail = message.strip()
        if not self.quiet:
            err_console.print(show(message))

    def detail(self, message: str) -> None:
        self._last_detail = message.strip()
        if not self.quiet:
            err_console.print(f"[dim]{show(message)}[/dim]")

    def warn(self, message: str) -> None:
        err_console.print(f"[yellow]warning:[/yellow] {show(message)}")

    # -- where a long search stands ------------------------------------------------------------

    def _line(self) -> str:
        import dataclasses
        import time

        from .costs import search_status_line

        status, at = self._status
        return search_status_line(dataclasses.replace(status, elapsed_s=status.elapsed_s + time.monotonic() - at))

    def _compact(self) -> str:
        import dataclasses
        import time

        from .costs import search_status_compact

        status, at = self._status
        return search_status_compact(dataclasses.replace(status, elapsed_s=status.elapsed_s + time.monotonic() - at))

    def search(self, status) -> None:
        import time

        from .costs import search_status_line

        self._status = (status, time.monotonic())
        self._last_detail = ""
        if self.quiet:
            self._start_heartbeat()
        elif err_console.is_terminal:
            self._start_live()
        else:
            err_console.print(show(search_status_line(status)))

    def _start_live(self) -> None:
        if self._live is not None:
            return
        from rich.live import Live
        from rich.spinner import Spinner
        from rich.table import Table

        def render():
            # One row each, cut to the terminal's width: a wrapped live line leaves its old rows behind.
            width = max(err_console.width - 3, 20)
            grid = Table.grid()
            grid.add_row(Spinner("dots", text=f"[bold]{show(fit(self._compact(), width))}[/bold]"))
            if self._last_detail:
                grid.add_row(f"  [dim]{show(fit(self._last_detail, width - 2))}[/dim]")
            return grid

        self._live = Live(console=err_console, get_renderable=render, refresh_per_second=4, transient=True)
        self._live.start()

    def _start_heartbeat(self) -> None:
        if self._stop is not None:
            return
        import os
        import threading

        every = float(os.environ.get("PERFBISECT_HEARTBEAT_S", "60") or 60)
        self._stop = threading.Event()

        def beat(stop=self._stop):
            while not stop.wait(every):
                err_console.print(f"still working: {show(self._line())}")

        threading.Thread(target=beat, name="perfbisect-heartbeat", daemon=True).start()

    def done(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._stop is not None:
            self._stop.set()
            self._stop = None


def print_error(message: str) -> None:
    """``Error: <one paragraph>`` on stderr: how every error perfbisect reports reads."""
    err_console.print(f"[bold red]Error:[/bold red] {show(message)}")


def print_lines(lines: list[str]) -> None:
    for line in lines:
        out_console.print(show(line))


def print_report(report: Path | None) -> None:
    if report is not None:
        out_console.print(f"report: {show(str(report))}")
