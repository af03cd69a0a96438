"""What the commands of the command line share: the options (one spelling, one help text, one check
each), the use cases loaded lazily, and the few helpers every command calls (where the config is, the
good/bad words, the exit code of a verdict, --format).

The Typer object the commands are registered on, and the one error boundary, are in ``main``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Annotated, Optional

import typer

from ..errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION, UsageError
from ..report.console import err_console, show
from ..settings import number_problem


def _import_lazily(name: str) -> ModuleType:
    """``name`` imported now, executed on first use: `--help` and `init` do not pay for scipy,
    SQLAlchemy and git that the use cases pull in."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, module)
    spec.loader.exec_module(module)
    return module


# The use cases (perfbisect.app), a module each by what it does: every command goes through them.
app_bisection = _import_lazily("perfbisect.app.bisection")
app_calibration = _import_lazily("perfbisect.app.calibration")
app_housekeeping = _import_lazily("perfbisect.app.housekeeping")
app_measuring = _import_lazily("perfbisect.app.measuring")
app_planning = _import_lazily("perfbisect.app.planning")
app_reports = _import_lazily("perfbisect.app.reports")
app_resume = _import_lazily("perfbisect.app.resume")
# What a command opens (``Workspace``) and its locks (``Workspace.exclusive``).
workspace = _import_lazily("perfbisect.app.workspace")


# The options several commands share, defined once (one spelling, one help text, one check).
ConfigOpt = Annotated[
    Optional[Path],
    typer.Option("--config", "-c", help="perfbisect.toml (default: ./perfbisect.toml or $PERFBISECT_CONFIG)."),
]


def _db_value(value: str | None) -> str | None:
    """--db "" would silently mean the default database: refused."""
    if value is not None and not value.strip():
        raise typer.BadParameter("--db is empty. Give a file path or a database URL, or leave --db out to use the default.")
    if value is not None and ("://" not in value or value.lower().startswith("sqlite")):
        from ..errors import StoreError
        from ..store.location import locate

        where = locate(value).path  # a SQLite file, named by path or sqlite:///path
        folder = where.parent if where is not None else None
        if folder is not None and not folder.is_dir():
            raise StoreError(
                f"The folder {folder} that --db {value} names does not exist. perfbisect makes the database file, "
                f"not folders a typo may have named: create it (mkdir -p {folder}) or fix --db."
            )
    return value


DbOpt = Annotated[
    Optional[str],
    typer.Option(
        "--db", metavar="PATH|URL", callback=_db_value,
        help="Results database: a SQLite file, or postgresql+psycopg://USER@HOST:PORT/DB for a store shared by "
        "several nodes (default: \\[store] url, else <repo>/.git/perfbisect/results.sqlite).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout (progress stays on stderr).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Only warnings and the result.")]


def checked_number(param: typer.CallbackParam, value: float | int | None) -> float | int | None:
    """A numeric flag obeys the config's one rule for numbers (``settings.number_problem``):
    NaN, inf or 10^30 is a usage error (exit 2), never a crash or a wait without end."""
    problem = number_problem(value, "/".join(param.opts) or str(param.name)) if value is not None else None
    if problem:
        raise typer.BadParameter(problem + ".")
    return value


WaitIdleOpt = Annotated[
    float,
    typer.Option("--wait-idle", callback=checked_number, metavar="SECONDS", min=0, help="When other processes hold the GPUs, wait up to this long for them (the wait shows on the progress line and in `perfbisect status`); 0 refuses at once."),
]
WaitOpt = Annotated[
    bool,
    typer.Option("--wait", help="When another perfbisect holds this repository or the GPU node, wait for it instead of refusing."),
]
RevArgs = Annotated[Optional[list[str]], typer.Argument(help="good=REV bad=REV", show_default=False)]
GoodOpt = Annotated[Optional[str], typer.Option("--good", help="Last commit known to be fast.")]
BadOpt = Annotated[Optional[str], typer.Option("--bad", help="A later commit known (or feared) to be slow.")]
FailOnRegressionOpt = Annotated[
    bool, typer.Option("--fail-on-regression", help="Exit 1 when a regression is found (for hooks and CI).")
]
ModesOpt = Annotated[Optional[list[str]], typer.Option("--mode", "-m", help="Mode(s) to measure (repeatable; default: every mode).")]
ModeOpt = Annotated[Optional[str], typer.Option("--mode", "-m", help="Mode (default: the metric's mode).")]
SessionsOpt = Annotated[int, typer.Option("--trials", "-n", callback=checked_number, min=1, help="Server sessions per build (A and B each).")]
LimitOpt = Annotated[int, typer.Option("--limit", callback=checked_number, min=1, help="How many to show.")]
FormatOpt = Annotated[
    str, typer.Option("--format", help="text, or markdown: a summary for a CI job summary or a pull-request comment.")
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Start even when the estimate exceeds \\[cost] budget_gpu_hours (no question).")]


def config_path(config: Path | None) -> Path:
    """The config file a command reads: -c, else $PERFBISECT_CONFIG, else perfbisect.toml in the working directory
    or the nearest folder above it, up to the repository's top (as git finds .git): a command works from any
    subdirectory of the checkout."""
    if config is not None:
        return config
    env = os.environ.get("PERFBISECT_CONFIG")
    if env:
        return Path(env)
    here = Path.cwd()
    folders = (here, *here.parents)
    top = next((i for i, f in enumerate(folders) if (f / ".git").exists()), 0)  # outside a checkout: here only
    for folder in folders[: top + 1]:
        if (folder / "perfbisect.toml").is_file():
            return folder / "perfbisect.toml"
    return here / "perfbisect.toml"


def parse_revs(args: list[str], good: str | None, bad: str | None) -> tuple[str, str]:
    """Accept `good=REV bad=REV` positional words as well as --good/--bad."""
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or key not in ("good", "bad") or not value:
            raise UsageError(
                f"Cannot read '{arg}': write the range as good=REV bad=REV (for example "
                f"`perfbisect run good=bba2fc4 bad=HEAD`), or use --good/--bad."
            )
        given = good if key == "good" else bad
        if given is not None and given != value:
            raise UsageError(
                f"The {key} revision is given twice, as {key}={value} and --{key} {given}. Give it once "
                f"(`{key}=REV` or `--{key} REV`)."
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


def exit_for(verdict: str, fail_on_regression: bool) -> int:
    """The documented exit code of a verdict (a ``Verdict`` or its value, as ``check`` reports it)."""
    if verdict == "inconclusive":
        return EXIT_INCONCLUSIVE
    if verdict == "regressed" and fail_on_regression:
        return EXIT_REGRESSION
    return EXIT_OK


def nothing_measured(first_error: str, hint: str) -> str:
    """The error of a command whose trials all failed (exit 4), with the first trial's reason and ``hint`` (what
    to try: ``try_once_hint``)."""
    first = " ".join(first_error.split())[:600]
    return (
        f"No trial produced a measurement, so nothing was compared. The first trial failed with: {first} "
        f"Fix that ({hint}) and run again."
    )


def try_once_hint(cfg, good: str | None = None, bad: str | None = None) -> str:
    """How to try one trial's work by hand, in the target's words."""
    from ..workload_kinds import kind_of

    if kind_of(cfg.workload).serves:
        return "run `perfbisect doctor --launch` to start the server once"
    where = f" --range {good}..{bad}" if good and bad else ""
    return (f"run `perfbisect doctor --launch{where}` to run workload.command once at HEAD"
            + (" and at both endpoints" if where else "") + " and see the metric it prints")


def output_format(fmt: str, json_out: bool) -> str:
    """--format checked: text or markdown, and not markdown together with --json."""
    if fmt not in ("text", "markdown"):
        raise UsageError(f"--format is {fmt!r}; use text or markdown (or --json for one JSON object).")
    if fmt == "markdown" and json_out:
        raise UsageError("--format markdown and --json both choose what stdout holds: pass one of them.")
    return fmt


def load(config: Path | None):
    """The config of ``config_path(config)``, loaded and checked (config.load_config)."""
    from ..config import load_config

    return load_config(config_path(config))


DEMO_DIRS = ("demo", "demo-drift")  # under ./.perfbisect: where `perfbisect demo` builds, with and without --drift-only


def reading_config(config: Path | None, db: str | None):
    """The config a command that only reads results (log, report) uses: -c, $PERFBISECT_CONFIG or
    ./perfbisect.toml; with none of those and no --db, the demo's of this directory (the newest, said on
    stderr), so `perfbisect log` right after `perfbisect demo` shows it; else None with --db."""
    if config is not None or config_path(None).exists():
        return load(config)
    if db is not None:
        return None
    demos = [Path.cwd() / ".perfbisect" / d for d in DEMO_DIRS]
    demos = [d for d in demos if (d / "perfbisect.toml").is_file() and (d / "results.sqlite").is_file()]
    if not demos:
        raise UsageError(
            f"No config file at {config_path(None)} and no --db. Run this where perfbisect.toml is, or pass "
            f"-c CONFIG or --db PATH (after `perfbisect demo`: --db .perfbisect/demo/results.sqlite)."
        )
    newest = max(demos, key=lambda d: (d / "results.sqlite").stat().st_mtime)
    err_console.print(f"no perfbisect.toml here: reading the demo's results in {show(str(newest))} "
                      f"(-c CONFIG or --db PATH for others)")
    return load(newest / "perfbisect.toml")
