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


class ConsoleProgress:
    """Progress on stderr: steps, finer detail (unless --quiet) and warnings."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet

    def info(self, message: str) -> None:
        if not self.quiet:
            err_console.print(show(message))

    def detail(self, message: str) -> None:
        if not self.quiet:
            err_console.print(f"[dim]{show(message)}[/dim]")

    def warn(self, message: str) -> None:
        err_console.print(f"[yellow]warning:[/yellow] {show(message)}")


def print_error(message: str) -> None:
    """``Error: <one paragraph>`` on stderr: how every error perfbisect reports reads."""
    err_console.print(f"[bold red]Error:[/bold red] {show(message)}")


def print_lines(lines: list[str]) -> None:
    for line in lines:
        out_console.print(show(line))


def print_report(report: Path | None) -> None:
    if report is not None:
        out_console.print(f"report: {show(str(report))}")
