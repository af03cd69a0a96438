"""The command line: parse, call ``perfbisect.app``, print, exit. The one error boundary.

Exit codes: 0 finished (no regression, or one found without --fail-on-regression); 1 regression found
with --fail-on-regression; 2 usage or config error; 3 inconclusive; 4 measurement broke.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__
from .errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, PerfbisectError, UsageError

EPILOG_EXIT = (
    "Exit codes: 0 finished · 1 regression found (with --fail-on-regression) · "
    "2 usage/config error · 3 inconclusive · 4 measurement broke."
)

app = typer.Typer(
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
    rich_markup_mode="rich",
)
patches_app = typer.Typer(help="Inspect the patch stack over history.", no_args_is_help=True)
app.add_typer(patches_app, name="patches")

err_console = Console(stderr=True, highlight=False, soft_wrap=True)
out_console = Console(highlight=False, soft_wrap=True)

ConfigOpt = Annotated[
    Optional[Path],
    typer.Option("--config", "-c", help="perfbisect.toml (default: ./perfbisect.toml or $PERFBISECT_CONFIG)."),
]
DbOpt = Annotated[
    Optional[Path],
    typer.Option("--db", help="Results database (default: <repo>/.git/perfbisect/results.sqlite)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout (progress stays on stderr).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Only warnings and the result.")]
WaitIdleOpt = Annotated[
    float,
    typer.Option("--wait-idle", metavar="SECONDS", help="When other processes hold the GPUs, wait up to this long instead of refusing."),
]


class ConsoleProgress:
    """Progress on stderr: steps, finer detail (unless --quiet) and warnings."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet

    def info(self, message: str) -> None:
        if not self.quiet:
            err_console.print(escape(message))

    def detail(self, message: str) -> None:
        if not self.quiet:
            err_console.print(f"[dim]{escape(message)}[/dim]")

    def warn(self, message: str) -> None:
        err_console.print(f"[yellow]warning:[/yellow] {escape(message)}")


def fail(exc: PerfbisectError) -> typer.Exit:
    err_console.print(f"[bold red]Error:[/bold red] {escape(str(exc))}")
    return typer.Exit(code=exc.exit_code)


def _config_path(config: Path | None) -> Path:
    if config is not None:
        return config
    env = os.environ.get("PERFBISECT_CONFIG")
    return Path(env) if env else Path.cwd() / "perfbisect.toml"


def parse_revs(args: list[str], good: str | None, bad: str | None) -> tuple[str, str]:
    """Accept `good=REV bad=REV` positional words as well as --good/--bad."""
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or key not in ("good", "bad") or not value:
            raise UsageError(
                f"Cannot read '{arg}': write the range as good=REV bad=REV (for example "
                f"`perfbisect run good=bba2fc4 bad=HEAD`), or use --good/--bad."
            )
        if key == "good":
            good = value
        else:
            bad = value
    if not good or not bad:
        missing = "good" if not good else "bad"
        raise UsageError(
            f"The {missing} revision is missing. Give both ends: `good=REV bad=REV` (good is the last "
            f"commit known to be fast, bad a later one known to be slow)."
        )
    return good, bad


def _exit_for(outcome, fail_on_regression: bool) -> int:
    from .model import Verdict

    if outcome.verdict is Verdict.INCONCLUSIVE:
        return EXIT_INCONCLUSIVE
    if outcome.verdict is Verdict.REGRESSED and fail_on_regression:
        return EXIT_REGRESSION
    return EXIT_OK


def _load(config: Path | None):
    from .config import load_config

    return load_config(_config_path(config))


# ------------------------------------------------------------------------------------------------


@app.command()
def run(
    revs: Annotated[Optional[list[str]], typer.Argument(help="good=REV bad=REV", show_default=False)] = None,
    good: Annotated[Optional[str], typer.Option("--good", help="Last commit known to be fast.")] = None,
    bad: Annotated[Optional[str], typer.Option("--bad", help="A later commit known (or feared) to be slow.")] = None,
    config: ConfigOpt = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    wait_idle: WaitIdleOpt = 0.0,
    fail_on_regression: Annotated[
        bool, typer.Option("--fail-on-regression", help="Exit 1 when a regression is found (for hooks and CI).")
    ] = False,
) -> None:
    """Bisect good..bad and name the commit that changed performance beyond noise.

    Example:  perfbisect run good=bba2fc4 bad=HEAD
    Example:  perfbisect run --good v0.5.0 --bad origin/main --json
    """
    from . import app as core
    from .summary import format_outcome, outcome_json

    try:
        g, b = parse_revs(revs or [], good, bad)
        cfg = _load(config)
        with core.Workspace.open(cfg, db) as ws:
            result = core.run_bisection(ws, g, b, ConsoleProgress(quiet), wait_idle_s=wait_idle)
    except PerfbisectError as exc:
        raise fail(exc) from None
    if json_out:
        out_console.print_json(json.dumps(outcome_json(result)))
    else:
        for line in format_outcome(result):
            out_console.print(escape(line))
    raise typer.Exit(code=_exit_for(result.outcome, fail_on_regression))


@app.command()
def resume(
    bisection: Annotated[Optional[int], typer.Argument(help="Bisection id (default: the latest unfinished).")] = None,
    config: ConfigOpt = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    wait_idle: WaitIdleOpt = 0.0,
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help="Exit 1 on a regression.")] = False,
) -> None:
    """Continue an interrupted bisection without repeating any stored trial.

    Example:  perfbisect resume
    Example:  perfbisect resume 3 --json
    """
    from . import app as core
    from .summary import format_outcome, outcome_json

    try:
        cfg = _load(config)
        with core.Workspace.open(cfg, db) as ws:
            bid = bisection if bisection is not None else core.latest_unfinished(ws)
            result = core.run_bisection(ws, "", "", ConsoleProgress(quiet), wait_idle_s=wait_idle, resume_id=bid)
    except PerfbisectError as exc:
        raise fail(exc) from None
    if json_out:
        out_console.print_json(json.dumps(outcome_json(result)))
    else:
        for line in format_outcome(result):
            out_console.print(escape(line))
    raise typer.Exit(code=_exit_for(result.outcome, fail_on_regression))


@app.command()
def demo(
    directory: Annotated[
        Optional[Path], typer.Option("--dir", help="Where to build the demo (default: ./.perfbisect/demo).")
    ] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    drift_only: Annotated[
        bool, typer.Option("--drift-only", help="Plant no code change, only session drift: nothing must be blamed.")
    ] = False,
    commits: Annotated[int, typer.Option("--commits", min=10, max=400, help="Length of the demo history.")] = 36,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the emulator's noise.")] = 7,
) -> None:
    """Build a throwaway SGLang-shaped repository with a planted slowdown and bisect it for real.

    Everything is the real pipeline (worktrees, patch stack, builds, server processes, HTTP
    streaming, SQLite, statistics, search); only the GPU server is replaced by perfbisect's
    SGLang emulator.

    Example:  perfbisect demo
    Example:  perfbisect demo --json --drift-only
    """
    from . import app as core
    from .summary import format_outcome, outcome_json

    try:
        result, target = core.run_demo(
            directory or Path.cwd() / ".perfbisect" / "demo",
            ConsoleProgress(quiet),
            drift_only=drift_only,
            commits=commits,
            seed=seed,
        )
    except PerfbisectError as exc:
        raise fail(exc) from None
    if json_out:
        data = outcome_json(result)
        data["planted"] = target.planted
        data["demo_dir"] = str(target.root)
        out_console.print_json(json.dumps(data))
    else:
        for line in format_outcome(result):
            out_console.print(escape(line))
        planted = target.planted[:10] if target.planted else "nothing (drift only)"
        hit = (result.outcome.culprit == target.planted) if target.planted else result.outcome.culprit is None
        mark = "[green]✓[/green]" if hit else "[red]✗[/red]"
        out_console.print(f"{mark} planted: {escape(planted)}")
    raise typer.Exit(code=_exit_for(result.outcome, False))


def main() -> None:
    """Entry point of the `perfbisect` script."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
