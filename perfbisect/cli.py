"""The command line: parse, call ``perfbisect.app``, print, exit. The one error boundary.

Exit codes: 0 finished (no regression, or one found without --fail-on-regression); 1 regression found
with --fail-on-regression; 2 usage or config error; 3 inconclusive; 4 measurement broke.

Why ~900 lines: one thin function per command (twenty of them), each with its options and the ``--help`` examples
users read; the logic is in ``app`` and the printing in ``render``/``console``.
"""

from __future__ import annotations

import os
import sys

from .interrupts import install_early_handlers

# The `perfbisect` command itself (its script, or `python -m perfbisect.cli`), not a test importing this
# module: a SIGINT or SIGTERM is caught from here on, while typer, rich and the rest still load (a second
# or more on a busy machine), and main() then exits 128 + its number saying so (perfbisect.interrupts).
if __name__ == "__main__" or os.path.basename(sys.argv[0] if sys.argv else "") == "perfbisect":
    install_early_handlers()

import errno  # after the handlers, on purpose
import importlib.util
import shutil
import signal
import traceback
from pathlib import Path
from types import ModuleType
from typing import Annotated, Optional

import typer

from . import __version__
from .report.console import (
    ConsoleProgress,
    err_console,
    out_console,
    print_error,
    print_json,
    print_lines,
    print_report,
    show,
)
from .errors import (
    EXIT_INCONCLUSIVE,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_RUNTIME,
    EXIT_USAGE,
    PerfbisectError,
    StoreError,
    UsageError,
)
from .settings import DEFAULT_WAIT_IDLE_S, number_problem
from .interrupts import (
    forget_earlier_signals,
    install_signal_handlers,
    interruptible,
    reported,
    resume_options,
    say_interrupted,
    signal_name,
    signalled,
    stopped_message,
)


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


app = _import_lazily("perfbisect.app")  # the use cases: every command goes through them


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
patches_app = typer.Typer(help="Inspect the patch stack over history.", no_args_is_help=True)
cli.add_typer(patches_app, name="patches")

ConfigOpt = Annotated[
    Optional[Path],
    typer.Option("--config", "-c", help="perfbisect.toml (default: ./perfbisect.toml or $PERFBISECT_CONFIG)."),
]
def _db_value(value: str | None) -> str | None:
    """--db "" would silently mean the default database: refused."""
    if value is not None and not value.strip():
        raise typer.BadParameter("--db is empty. Give a file path or a database URL, or leave --db out to use the default.")
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
def _number(param: typer.CallbackParam, value: float | int | None) -> float | int | None:
    """A numeric flag obeys the config's one rule for numbers (``settings.number_problem``):
    NaN, inf or 10^30 is a usage error (exit 2), never a crash or a wait without end."""
    problem = number_problem(value, "/".join(param.opts) or str(param.name)) if value is not None else None
    if problem:
        raise typer.BadParameter(problem + ".")
    return value


WaitIdleOpt = Annotated[
    float,
    typer.Option("--wait-idle", callback=_number, metavar="SECONDS", min=0, help="When other processes hold the GPUs, wait up to this long for them (the wait shows on the progress line and in `perfbisect status`); 0 refuses at once."),
]
WaitOpt = Annotated[
    bool,
    typer.Option("--wait", help="When another perfbisect holds this repository or the GPU node, wait for it instead of refusing."),
]
# The options several commands share, defined once (one spelling, one help text, one check).
RevArgs = Annotated[Optional[list[str]], typer.Argument(help="good=REV bad=REV", show_default=False)]
GoodOpt = Annotated[Optional[str], typer.Option("--good", help="Last commit known to be fast.")]
BadOpt = Annotated[Optional[str], typer.Option("--bad", help="A later commit known (or feared) to be slow.")]
FailOnRegressionOpt = Annotated[
    bool, typer.Option("--fail-on-regression", help="Exit 1 when a regression is found (for hooks and CI).")
]
ModesOpt = Annotated[Optional[list[str]], typer.Option("--mode", "-m", help="Mode(s) to measure (repeatable; default: every mode).")]
ModeOpt = Annotated[Optional[str], typer.Option("--mode", "-m", help="Mode (default: the metric's mode).")]
SessionsOpt = Annotated[int, typer.Option("--trials", "-n", callback=_number, min=1, help="Server sessions per build (A and B each).")]
LimitOpt = Annotated[int, typer.Option("--limit", callback=_number, min=1, help="How many to show.")]


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


def _exit_for(verdict: str, fail_on_regression: bool) -> int:
    """The documented exit code of a verdict (a ``Verdict`` or its value, as ``check`` reports it)."""
    if verdict == "inconclusive":
        return EXIT_INCONCLUSIVE
    if verdict == "regressed" and fail_on_regression:
        return EXIT_REGRESSION
    return EXIT_OK


def _show_bisection(result, json_out: bool, fail_on_regression: bool, broken: str | None = None,
                    report: tuple[Path, str] | None = None, spent: dict | None = None, fmt: str = "text") -> None:
    """Print a finished bisection (lines, or one JSON object) and exit with its documented code.

    ``broken``: no trial measured anything (the server never started, every run failed). That is
    a measurement that broke (4), not evidence too weak to decide (3). ``report``: the HTML report's
    path and the short line that ends the text output.
    """
    from .report.render import format_outcome, outcome_json

    from .engine.cost import spent_line

    if json_out:
        # "resumed": what `resume` reused and discarded (app.Resumed.as_json); null for a run that was not resumed
        print_json({**outcome_json(result), "report": str(report[0]) if report else None, "spent": spent,
                    "resumed": getattr(result, "resumed", None)})
    elif fmt == "markdown":
        from .report.markdown import bisection_markdown

        out_console.out(bisection_markdown(result, report[0] if report else None, spent), highlight=False)
    else:
        for line in format_outcome(result):
            out_console.print(show(line))
        if spent is not None:
            out_console.print(show(spent_line(spent, result.outcome.trials_used)))
        if report is not None:
            out_console.print(show(report[1]))
    if broken:
        print_error(_nothing_measured(broken))
        raise typer.Exit(code=EXIT_RUNTIME)
    raise typer.Exit(code=_exit_for(result.outcome.verdict, fail_on_regression))


def _nothing_measured(first_error: str) -> str:
    first = " ".join(first_error.split())[:600]
    return (
        f"No trial produced a measurement, so nothing was compared. The first trial failed with: {first} "
        f"Fix that (run `perfbisect doctor --launch` to try the server once) and run again."
    )


def _bisection_report(ws, result, progress) -> tuple[Path, str] | None:
    """The HTML report of a bisection just finished and its short line (None, with a warning, if it cannot be written)."""
    from .report.report import short_line

    def write() -> tuple[Path, str]:
        path, view = app.report(ws.store, str(result.bisection_id), config=ws.config)
        return path, short_line(view, path)

    return app.report_quietly(progress, write)


def _format(fmt: str, json_out: bool) -> str:
    if fmt not in ("text", "markdown"):
        raise UsageError(f"--format is {fmt!r}; use text or markdown (or --json for one JSON object).")
    if fmt == "markdown" and json_out:
        raise UsageError("--format markdown and --json both choose what stdout holds: pass one of them.")
    return fmt


def _spent(ws, bisection_id: int) -> dict:
    from .engine import cost

    gpus, unit = cost.hours_unit(ws.config)
    return cost.spent(ws.store.trials(bisection_id=bisection_id, status=None), gpus, unit)


def _confirm_budget(ws, good: str, bad: str, yes: bool) -> None:
    """Before a bisection starts: ask when its estimate exceeds [cost] budget_gpu_hours (never with --yes)."""
    from .engine import cost

    budget = ws.config.cost.budget_gpu_hours
    if not budget or yes:
        return
    est = app.plan_estimate(ws, app.plan(ws, good, bad, check_patches=False))
    if est.gpu_hours is None or est.gpu_hours <= budget:
        return
    over = (
        f"The estimate ({est.gpu_hours:.1f} {est.unit}, ~{est.trials} trials, {cost.format_duration(est.wall_s)}) "
        f"exceeds [cost] budget_gpu_hours = {budget:g}."
    )
    if not sys.stdin.isatty():
        raise UsageError(
            f"{over} stdin is not a terminal, so perfbisect cannot ask: pass --yes to start anyway, raise the "
            f"budget, or narrow good..bad (`perfbisect plan` shows the estimate)."
        )
    for line in est.lines():
        err_console.print(show(line))
    if not typer.confirm(f"{over} Start anyway?", default=False, err=True):
        print_error(f"{over} Not started (answered no); pass --yes to skip this question.")
        raise typer.Exit(code=EXIT_USAGE)


FormatOpt = Annotated[
    str, typer.Option("--format", help="text, or markdown: a summary for a CI job summary or a pull-request comment.")
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Start even when the estimate exceeds \\[cost] budget_gpu_hours (no question).")]


def _load(config: Path | None):
    from .config import load_config

    return load_config(_config_path(config))


DEMO_DIRS = ("demo", "demo-drift")  # under ./.perfbisect: where `perfbisect demo` builds, with and without --drift-only


def _reading_config(config: Path | None, db: str | None):
    """The config a command that only reads results (log, report) uses: -c, $PERFBISECT_CONFIG or
    ./perfbisect.toml; with none of those and no --db, the demo's of this directory (the newest, said on
    stderr), so `perfbisect log` right after `perfbisect demo` shows it; else None with --db."""
    if config is not None or _config_path(None).exists():
        return _load(config)
    if db is not None:
        return None
    demos = [Path.cwd() / ".perfbisect" / d for d in DEMO_DIRS]
    demos = [d for d in demos if (d / "perfbisect.toml").is_file() and (d / "results.sqlite").is_file()]
    if not demos:
        raise UsageError(
            f"No config file at {_config_path(None)} and no --db. Run this where perfbisect.toml is, or pass "
            f"-c CONFIG or --db PATH (after `perfbisect demo`: --db .perfbisect/demo/results.sqlite)."
        )
    newest = max(demos, key=lambda d: (d / "results.sqlite").stat().st_mtime)
    err_console.print(f"no perfbisect.toml here: reading the demo's results in {show(str(newest))} "
                      f"(-c CONFIG or --db PATH for others)")
    return _load(newest / "perfbisect.toml")


# ------------------------------------------------------------------------------------------------


@cli.command()
def run(
    revs: RevArgs = None,
    good: GoodOpt = None,
    bad: BadOpt = None,
    config: ConfigOpt = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    wait_idle: WaitIdleOpt = DEFAULT_WAIT_IDLE_S,
    wait: WaitOpt = False,
    fail_on_regression: FailOnRegressionOpt = False,
    yes: YesOpt = False,
    fmt: FormatOpt = "text",
) -> None:
    """Bisect good..bad and name the commit that changed performance beyond noise.

    Example:  perfbisect run good=bba2fc4 bad=HEAD
    Example:  perfbisect run --good v0.5.0 --bad origin/main --json
    Example:  perfbisect run good=v0.5.0 bad=HEAD --yes --format markdown >> "$GITHUB_STEP_SUMMARY"
    """

    g, b = parse_revs(revs or [], good, bad)
    fmt = _format(fmt, json_out)
    cfg = _load(config)
    progress = ConsoleProgress(quiet)
    with app.Workspace.open(cfg, db) as ws:
        _confirm_budget(ws, g, b, yes)
        # Slurm jobs take their own node's lock; the controller holds only the repository's.
        gpu = cfg.executor.kind == "local"
        with app.exclusive(ws, progress, wait=wait, gpu=gpu), interruptible(ws, resumable=True, options=resume_options(config, db), json_out=json_out):
            result = app.run_bisection(ws, g, b, progress, wait_idle_s=wait_idle)
            broken = app.measured_nothing(ws, result.bisection_id)
            report = _bisection_report(ws, result, progress)
            spent = _spent(ws, result.bisection_id)
    _show_bisection(result, json_out, fail_on_regression, broken, report, spent, fmt)


@cli.command()
def resume(
    bisection: Annotated[Optional[int], typer.Argument(help="Bisection id (default: the latest unfinished).")] = None,
    config: ConfigOpt = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    wait_idle: WaitIdleOpt = DEFAULT_WAIT_IDLE_S,
    wait: WaitOpt = False,
    fail_on_regression: FailOnRegressionOpt = False,
) -> None:
    """Continue an interrupted bisection without repeating any stored trial, as the search it started as.

    It decides with the settings it started with ([stats]: metric, budget, thresholds; a config changed
    since is named and not used) and from its stored observations, so it measures what the uninterrupted
    run would have. It says what it reused: the stored observations and their trials, a finished trial no
    observation holds yet (used, not measured again), and a trial the interruption cut short (discarded: a
    trial is one server session; its commit is measured again). --json has the same under "resumed".

    Example:  perfbisect resume
    Example:  perfbisect resume 3 --json
    """

    cfg = _load(config)
    progress = ConsoleProgress(quiet)
    with app.Workspace.open(cfg, db) as ws, app.exclusive(ws, progress, wait=wait, gpu=cfg.executor.kind == "local"):
        bid = bisection if bisection is not None else app.latest_unfinished(ws)
        with interruptible(ws, resume_id=bid, resumable=True, options=resume_options(config, db), json_out=json_out):
            result = app.run_bisection(ws, "", "", progress, wait_idle_s=wait_idle, resume_id=bid)
        broken = app.measured_nothing(ws, result.bisection_id)
        report = _bisection_report(ws, result, progress)
        spent = _spent(ws, result.bisection_id)
    _show_bisection(result, json_out, fail_on_regression, broken, report, spent)


@cli.command()
def demo(
    directory: Annotated[
        Optional[Path], typer.Option("--dir", help="Where to build the demo (default: ./.perfbisect/demo, or ./.perfbisect/demo-drift with --drift-only).")
    ] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    drift_only: Annotated[
        bool, typer.Option("--drift-only", help="Plant no code change, only session drift: nothing must be blamed.")
    ] = False,
    commits: Annotated[int, typer.Option("--commits", callback=_number, min=10, max=400, help="Length of the demo history.")] = 36,
    seed: Annotated[int, typer.Option("--seed", callback=_number, help="Seed of the emulator's noise.")] = 7,
    variant: Annotated[str, typer.Option(
        "--variant", help="What the planted commit slows: 'speculative' (EAGLE-3's verify cycle only) or 'target' "
                          "(the target model: both modes)."
    )] = "speculative",
    db: DbOpt = None,
    seeded: Annotated[
        bool, typer.Option("--seeded", help="Compute each trial's speed from the code with seeded noise instead of timing "
                           "the emulator: the same outcome on an idle and a busy machine (CI).")
    ] = False,
) -> None:
    """Build a throwaway SGLang-shaped repository with a planted slowdown and bisect it for real.

    Everything is the real pipeline (worktrees, patch stack, builds, server processes, HTTP
    streaming, SQLite, statistics, search); only the GPU server is replaced by perfbisect's
    SGLang emulator.

    Example:  perfbisect demo
    Example:  perfbisect demo --json --drift-only
    Example:  perfbisect demo --variant target
    Example:  perfbisect demo --seeded
    """
    from .demo.run import demo_pins, demo_report, run_demo
    from .demo.target import VARIANTS
    from .report.render import format_outcome, outcome_json

    if variant not in VARIANTS:
        raise UsageError(f"--variant is {variant!r}; use one of {', '.join(VARIANTS)} (what the planted commit slows).")

    try:
        progress = ConsoleProgress(quiet)
        result, target = run_demo(
            directory or Path.cwd() / ".perfbisect" / DEMO_DIRS[1 if drift_only else 0],
            progress,
            drift_only=drift_only,
            commits=commits,
            seed=seed,
            db=db,
            variant=variant,
            seeded=seeded,
        )
        report = app.report_quietly(progress, lambda: demo_report(target, result, db))
    except KeyboardInterrupt as exc:  # the demo's servers are already torn down; nothing to resume
        signum = getattr(exc, "signum", signal.SIGINT)
        say_interrupted(f"Interrupted by {signal_name(signum)}: the demo's servers were stopped.")
        raise typer.Exit(code=128 + signum) from None
    if json_out:
        data = outcome_json(result)
        data["planted"] = target.planted
        data["variant"] = target.variant
        data["pins"] = demo_pins(target, result, db)
        data["demo_dir"] = str(target.root)
        data["report"] = str(report) if report else None
        print_json(data)
    else:
        for line in format_outcome(result):
            out_console.print(show(line))
        planted = target.planted[:10] if target.planted else "nothing (drift only)"
        hit = (result.outcome.culprit == target.planted) if target.planted else result.outcome.culprit is None
        mark = "[green]✓[/green]" if hit else "[red]✗[/red]"
        out_console.print(f"{mark} planted: {show(planted)}")
        pins = demo_pins(target, result, db)
        if pins is not None:
            ok = pins["environments"] == 2 and pins["untestable_trials"] == 0
            out_console.print(f"{'[green]✓[/green]' if ok else '[red]✗[/red]'} {show(pins['line'])}")
            for line in pins["lines"]:
                out_console.print(show(line))
        print_report(report)
    raise typer.Exit(code=_exit_for(result.outcome.verdict, False))


@cli.command()
def plan(
    revs: RevArgs = None,
    good: GoodOpt = None,
    bad: BadOpt = None,
    config: ConfigOpt = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
    no_patch_check: Annotated[bool, typer.Option("--no-patch-check", help="Skip checking the patch stack at each commit.")] = False,
    effect: Annotated[Optional[float], typer.Option("--effect", callback=_number, metavar="PCT", help="The regression you saw, in percent (e.g. 15): the estimate simulates the search against it (default: the endpoints' stored trials, else 5 × stats.min_effect_pct).")] = None,
) -> None:
    """List good..bad: which commits would be measured, which not, and why, and what the bisection
    would cost (trials, wall time, GPU-hours, with a range). Builds and runs nothing.

    Example:  perfbisect plan good=bba2fc4 bad=HEAD --effect 15
    """
    from .report.render import format_plan, json_value

    g, b = parse_revs(revs or [], good, bad)
    cfg = _load(config)
    app.check_effect(cfg, effect)  # before the plan: bad input is said at once
    with app.Workspace.open(cfg, db) as ws:
        result = app.plan(ws, g, b, check_patches=not no_patch_check)
        estimate = app.plan_estimate(ws, result, effect)
    if json_out:
        print_json({**json_value(result), "estimate": estimate.as_dict()})
    else:
        print_lines(format_plan(result) + estimate.lines())
    conflict = app.endpoint_conflict(result)
    if conflict:  # `run` refuses this range: say so, and exit as it would
        print_error(conflict)
        raise typer.Exit(code=EXIT_USAGE)


@patches_app.command("check")
def patches_check(
    revs: RevArgs = None,
    good: GoodOpt = None,
    bad: BadOpt = None,
    config: ConfigOpt = None,
    db: DbOpt = None,
) -> None:
    """Show for every commit in good..bad whether the patch stack applies (and which variant).

    Nothing is built or run: see conflicts before spending GPU hours.

    Example:  perfbisect patches check good=bba2fc4 bad=HEAD
    """
    from .report.render import format_patch_checks

    g, b = parse_revs(revs or [], good, bad)
    with app.Workspace.open(_load(config), db) as ws:
        checks = app.patches_check(ws, g, b)
    print_lines(format_patch_checks(checks))


@cli.command()
def measure(
    rev: Annotated[str, typer.Argument(help="The commit to measure.")] = "HEAD",
    mode: ModesOpt = None,
    trials: Annotated[int, typer.Option("--trials", "-n", callback=_number, min=1, help="Server sessions per mode.")] = 1,
    config: ConfigOpt = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    wait_idle: WaitIdleOpt = DEFAULT_WAIT_IDLE_S,
    wait: WaitOpt = False,
) -> None:
    """Measure one commit (every mode, interleaved) and store the trials.

    With a baseline and a speculative mode it also prints the speculative health: accept length,
    verify-cycle time, the speculative/baseline ratio and the break-even accept length.

    Example:  perfbisect measure HEAD --trials 3
    Example:  perfbisect measure bba2fc4 --mode eagle3 -n 5
    """
    from .report.render import format_measure, trial_row

    cfg = _load(config)
    modes = mode or list(cfg.modes)
    progress = ConsoleProgress(quiet)
    with app.Workspace.open(cfg, db) as ws, app.exclusive(ws, progress, wait=wait), interruptible(ws, json_out=json_out):
        result = app.measure(ws, rev, modes, trials, progress, wait_idle_s=wait_idle)
    if json_out:
        from .metrics import describe_workload

        data = {"commit": result.commit.sha, "metric": describe_workload(cfg.workload).as_json(),
                "trials": {m: [trial_row(t) for t in ts] for m, ts in result.trials.items()}}
        print_json(data)
    else:
        print_lines(format_measure(result, cfg))
    broken = app.why_nothing_measured([t for ts in result.trials.values() for t in ts])
    if broken:
        print_error(_nothing_measured(broken))
        raise typer.Exit(code=EXIT_RUNTIME)


@cli.command("compare")
def compare_cmd(
    a: Annotated[str, typer.Argument(help="Reference commit (A).")],
    b: Annotated[str, typer.Argument(help="Commit to judge against A (B).")],
    mode: ModeOpt = None,
    trials: Annotated[Optional[int], typer.Option("--max-trials", callback=_number, min=2, help="Most trials per side (default: stats.max_trials_per_commit, or half of stats.max_trials_total when that is 0).")] = None,
    config: ConfigOpt = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    wait_idle: WaitIdleOpt = DEFAULT_WAIT_IDLE_S,
    wait: WaitOpt = False,
    fmt: FormatOpt = "text",
    fail_on_regression: FailOnRegressionOpt = False,
) -> None:
    """Compare two commits with interleaved trials (A B B A …) until the verdict is clear.

    The verdict uses trial summaries and the between-session noise, never the runs of one
    session as if they were independent; it says when today's numbers differ from stored numbers of
    the same build (system drift, not code).

    Example:  perfbisect compare bba2fc4 HEAD
    Example:  perfbisect compare HEAD~9 HEAD --mode baseline --max-trials 6
    Example:  perfbisect compare origin/main HEAD --fail-on-regression --format markdown
    """
    from .report.render import format_comparison, json_value

    fmt = _format(fmt, json_out)
    cfg = _load(config)
    progress = ConsoleProgress(quiet)
    with app.Workspace.open(cfg, db) as ws, app.exclusive(ws, progress, wait=wait), interruptible(ws, json_out=json_out):
        result = app.compare_commits(ws, a, b, mode or cfg.metric_modes[-1], progress, max_trials=trials, wait_idle_s=wait_idle)
        report = app.report_quietly(progress, lambda: app.report(ws.store, f"c{result.comparison_id}", config=cfg)[0])
    if json_out:
        data = {"a": result.a.sha, "b": result.b.sha, "mode": result.mode, "comparison_id": result.comparison_id,
                "metric": result.metric,
                **json_value(result.comparison), "history": result.history, "attribution": result.attribution,
                "report": str(report) if report else None}
        print_json(data)
    elif fmt == "markdown":
        from .report.markdown import comparison_markdown

        out_console.out(comparison_markdown(result, report), highlight=False)
    else:
        print_lines(format_comparison(result))
        print_report(report)
    raise typer.Exit(code=_exit_for(result.comparison.verdict, fail_on_regression))


@cli.command()
def calibrate(
    rev: Annotated[str, typer.Argument(help="The build to measure (A).")] = "HEAD",
    mode: ModeOpt = None,
    trials: SessionsOpt = 5,
    against: Annotated[Optional[str], typer.Option(
        "--against", metavar="REV2", help="The second build (B) whose sessions interleave with REV's (default: REV's first parent).",
    )] = None,
    spread_minutes: Annotated[float, typer.Option(
        "--spread-minutes", callback=_number, min=0.0, help="Spread the sessions over at least this many minutes, pausing between them (0: back to back).",
    )] = 0.0,
    config: ConfigOpt = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    wait_idle: WaitIdleOpt = DEFAULT_WAIT_IDLE_S,
    wait: WaitOpt = False,
) -> None:
    """Measure the noise a bisection on this machine meets: sessions of two builds, interleaved.

    N server sessions each of REV (A) and a second build (B: REV's first parent, or --against REV2),
    in the order A B B A A B …, each run as a bisection runs a trial (checkout, patch stack, build,
    server, warm-up, runs); --spread-minutes paces them over time, as a bisection's trials are spread
    over hours. σ_b is the spread within each build across sessions; it is stored with its dof.

    Prints σ_b, σ_w, how σ_b compares with what bisections on this host measured (F test), the
    figure the next bisection starts from and why (what bisections measured is preferred; the larger
    of the two when they disagree), the smallest regression a budget can detect, and how many runs
    per trial would be cheapest.

    Example:  perfbisect calibrate HEAD --trials 5
    Example:  perfbisect calibrate HEAD --trials 6 --spread-minutes 120
    Example:  perfbisect calibrate v0.5.6 --against v0.5.5 -m baseline
    """
    cfg = _load(config)
    progress = ConsoleProgress(quiet)
    with app.Workspace.open(cfg, db) as ws, app.exclusive(ws, progress, wait=wait), interruptible(ws, json_out=json_out):
        result = app.calibrate(ws, rev, mode or cfg.metric_modes[-1], trials, progress, against=against,
                               spread_minutes=spread_minutes, wait_idle_s=wait_idle)
        report = app.report_quietly(progress, lambda: app.calibration_report(ws, result))
    if json_out:
        start = result.start
        data = {"commit": result.commit.sha, "against": result.against.sha, "mode": result.mode,
                "trials": [t.id for t in result.trials], "sigma_b_pct": result.noise.sigma_b_pct, "dof": result.noise.dof,
                "sigma_w_pct": result.noise.sigma_w_pct, "spread_s": result.spread_s,
                "next_bisection": {"sigma_b_pct": start.figure.sigma_b_pct if start.figure else result.next_noise.sigma_b_pct,
                                   "dof": start.figure.dof if start.figure else result.next_noise.dof,
                                   "source": start.figure.source if start.figure else "prior", "why": start.why,
                                   "disagree": start.disagree,
                                   "p_value": start.agreement.p_value if start.agreement else None},
                "runs_per_trial": {"runs": result.runs.runs, "recommended": result.runs.recommended,
                                   "saving_pct": result.runs.saving_pct} if result.runs else None,
                "lines": result.lines, "report": str(report) if report else None}
        print_json(data)
        return
    print_lines(result.lines)
    print_report(report)


@cli.command("report")
def report_cmd(
    which: Annotated[str, typer.Argument(help="Bisection id (3 or b3), comparison id (c2), or latest.")] = "latest",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="HTML file to write (default: reports/ beside the database).")] = None,
    index: Annotated[Optional[Path], typer.Option("--index", metavar="DIR", help="Write a static site instead: every report plus an index with a history chart per mode.")] = None,
    config: ConfigOpt = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Render a stored bisection or comparison as one self-contained HTML file (opens offline).

    Verdict with effect, interval and noise; culprit; every trial over the range and over time with
    the machine's state; the search's reasoning; speculative health; evidence; environment; how to
    reproduce. Nothing is rerun: it is all read from the results database.

    Example:  perfbisect report latest -o regression.html
    Example:  perfbisect report c2 --db results.sqlite
    Example:  perfbisect report --index site/
    """
    from .report.report import verdict_line

    cfg = _reading_config(config, db)
    with app.stored_results(db, cfg) as store:
        if index is not None:
            written = app.report_index(store, index, cfg, ConsoleProgress(False))
            line = f"site: {written}"
            view = None
        else:
            written, view = app.report(store, which, output, cfg)
            line = verdict_line(view)
    if json_out:
        print_json({"report": str(written), "verdict": view["verdict"] if view else None})
        return
    out_console.print(show(line))
    print_report(written)


@cli.command()
def doctor(
    config: ConfigOpt = None,
    db: DbOpt = None,
    launch: Annotated[bool, typer.Option("--launch", help="Also start the server once and check the env reaches every worker.")] = False,
    json_out: JsonOpt = False,
    range_: Annotated[Optional[str], typer.Option("--range", metavar="GOOD..BAD", help="Check the pinned environments ([build] pinned_packages) of every commit of this range, not only HEAD's.")] = None,
) -> None:
    """Check config, target interpreter, pinned environments, GPU idleness, clocks and throttling, and
    what would add noise.

    Example:  perfbisect doctor
    Example:  perfbisect doctor --launch
    Example:  perfbisect doctor --range bba2fc4..HEAD
    Example:  perfbisect doctor --json
    """
    bounds = None
    if range_ is not None:
        good, sep, bad = range_.partition("..")
        if not sep or not good or not bad:
            raise UsageError(f"--range {range_!r} is not GOOD..BAD: give two revisions joined by '..', e.g. --range bba2fc4..HEAD.")
        bounds = (good, bad)
    findings = app.doctor(_config_path(config), db, launch=launch, range_=bounds)
    errors = any(f.state == "error" for f in findings)
    if json_out:
        print_json({"ok": not errors, "findings": [{"check": f.check, "state": f.state, "message": f.message}
                                                     for f in findings]})
        raise typer.Exit(code=EXIT_USAGE if errors else EXIT_OK)
    style = {"ok": "green", "warn": "yellow", "error": "bold red", "info": "dim"}
    for f in findings:
        out_console.print(f"[{style[f.state]}]{f.state:>5}[/] {show(f.check)}: {show(f.message)}")
    if any(f.state == "error" for f in findings):
        raise typer.Exit(code=EXIT_USAGE)


@cli.command()
def init(
    path: Annotated[Path, typer.Option("--path", help="Where to write perfbisect.toml.")] = Path("perfbisect.toml"),
    model: Annotated[str, typer.Option("--model", help="--model-path for the server.")] = "/models/Kimi-K2.5-INT4",
    draft: Annotated[str, typer.Option("--draft", help="EAGLE-3 draft model path.")] = "/models/Kimi-K2.5-EAGLE3",
    python: Annotated[Optional[str], typer.Option("--python", help="The interpreter SGLang runs under.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    command: Annotated[bool, typer.Option("--command", help="Any repository: a benchmark command that prints a JSON metric (no server).")] = False,
    openai: Annotated[bool, typer.Option("--openai", help="Any OpenAI-compatible server (vLLM, TGI, ...) launched per trial.")] = False,
) -> None:
    """Write a commented perfbisect.toml for an SGLang checkout (baseline + EAGLE-3, NCCL env, --tp 8),
    or, with --command / --openai, for any repository or any OpenAI-compatible server.

    Example:  cd ~/sglang && perfbisect init --model /models/Kimi-K2.5 --draft /models/eagle3
    Example:  cd ~/myproject && perfbisect init --command
    Example:  cd ~/vllm && perfbisect init --openai --model /models/Llama-3.1-8B
    """
    from .init_template import (
        find_target_python, nccl_settings, remote_code, render_sglang_config, render_template, site_dirs_of,
    )

    if path.exists() and not force:
        raise UsageError(f"{path} already exists. Pass --force to overwrite it, or --path to write elsewhere.")
    if command and openai:
        raise UsageError("--command and --openai pick different templates: give one of them.")
    if command or openai:
        kind = "command" if command else "openai"
        target = python or shutil.which("python3") or sys.executable
        path.write_text(render_template(kind, target, model))
        what = "workload.command and workload.metric" if command else "server.command, workload.model and the model path"
        out_console.print(f"wrote {show(str(path))}: edit {what}, then run `perfbisect doctor` and `perfbisect plan good=REV bad=REV`")
        return
    if python:
        target, imports, how = python, True, "--python"
    else:
        target, imports, how = find_target_python()
    environ = dict(os.environ)
    site_dirs = site_dirs_of(target, environ)
    path.write_text(render_sglang_config(target, model, draft, environ=environ, site_dirs=site_dirs))
    out_console.print(f"wrote {show(str(path))}: edit the model paths and the patch directory, then run `perfbisect doctor`")
    out_console.print(f"target.python = {show(target)} ({show(how)})")
    needed, why = remote_code(model)
    flag = {True: "on", False: "off", None: "commented out (uncomment if needed)"}[needed]
    out_console.print(f"--trust-remote-code: {flag}: {show(why)}")
    nccl = nccl_settings(environ, site_dirs)
    if nccl:
        out_console.print("NCCL variables from your environment: " + ", ".join(show(f"{s.name}={s.value} ({s.source})") for s in nccl))
    else:
        out_console.print("NCCL variables: none set in your shell or a sitecustomize.py; commented examples written")
    if not imports:
        err_console.print(
            f"[yellow]warning:[/yellow] no interpreter that imports sglang was found; {show(target)} was written. "
            f"Set target.python to the one SGLang runs under (or pass --python)."
        )


@cli.command()
def skip(
    revs: Annotated[Optional[list[str]], typer.Argument(help="Commits to mark untestable (none: list the marked ones).", show_default=False)] = None,
    undo: Annotated[bool, typer.Option("--undo", help="Unmark these commits: the search may measure them again.")] = False,
    reason: Annotated[str, typer.Option("--reason", help="Why (shown by plan and run).")] = "",
    config: ConfigOpt = None,
) -> None:
    """Mark commits untestable, as `git bisect skip` does: never measured, never blamed.

    A change next to a marked commit is reported as a set. Kept in <cache_dir>/skipped.json, so
    every later run, resume and plan sees them; \\[filters] skip in the config does the same.

    Example:  perfbisect skip 1a2b3c4 HEAD~7 --reason "broken build"
    Example:  perfbisect skip --undo 1a2b3c4
    Example:  perfbisect skip
    """
    if undo and not revs:
        raise UsageError("perfbisect skip --undo needs the commits to unmark, e.g. `perfbisect skip --undo 1a2b3c4`.")
    changed, marked = app.skip(_load(config), revs or [], undo=undo, reason=reason)
    lines = [f"{'unmarked' if undo else 'marked untestable'}: {c.short} {c.subject[:60]}" for c in changed]
    if undo and len(changed) < len(revs or []):
        lines.append(f"{len(revs or []) - len(changed)} of those were not marked by `perfbisect skip` ([filters] skip is edited in the config)")
    lines += [f"{s.commit.short}  {s.describe()}  {s.commit.subject[:60]}" for s in marked] or ["no commit is marked untestable"]
    print_lines(lines)


@cli.command()
def log(
    bisection: Annotated[Optional[str], typer.Argument(help="A bisection id: show that one in detail.")] = None,
    config: ConfigOpt = None,
    db: DbOpt = None,
    limit: LimitOpt = 20,
    json_out: JsonOpt = False,
) -> None:
    """List past bisections and comparisons with their verdicts; `log ID` shows one bisection in detail.

    Example:  perfbisect log --limit 5
    Example:  perfbisect log 3
    Example:  perfbisect log --json
    """
    from .report.render import format_log, log_json

    cfg = _reading_config(config, db)
    path = db or cfg.results_db
    if bisection is not None:
        from .report.logdetail import bisection_detail
        from .report.render import trial_row

        digits = bisection.strip().lstrip("b#")
        if not digits.isdigit():
            raise UsageError(f"Cannot read bisection id '{bisection}': give its number (see `perfbisect log`).")
        with app.stored_results(path, cfg) as store:
            bid = int(digits)
            if bid not in {b.id for b in store.bisections(1 << 30)}:
                raise UsageError(f"No bisection #{bid} in {store.path}. List the stored ones with `perfbisect log`.")
            if json_out:
                data = log_json([store.bisection(bid)], [], cfg)["bisections"][0]
                data["trials"] = [trial_row(t) for t in store.trials(bisection_id=bid, status=None)]
            else:
                lines = bisection_detail(store, bid, app.report_path(store.path, f"bisection-{bid}", cfg), cfg)
        if json_out:
            print_json(data)
        else:
            print_lines(lines)
        return
    # The store directly, not ``app.log``: importing the use cases would load the engine (scipy) too.
    from .store import locate, open_store

    where = locate(path)
    if not where.exists() and not (where.path is not None and where.path.exists()):  # listing never creates one;
        # a directory or other non-file goes on to open_store, which says what it is
        raise UsageError(f"No results database at {where}: pass --db PATH, or run `perfbisect run` first.")
    try:
        store = open_store(path)  # writable: what dead processes left running is marked first
    except StoreError as exc:
        if locate(path).shared:
            raise
        try:  # a read-only file or disk: listing needs no write
            store = open_store(path, recover=False, read_only=True)
        except StoreError:
            raise exc from None
    with store:
        bisections, comparisons = store.bisections(limit), store.comparisons(limit)
    if json_out:
        print_json(log_json(bisections, comparisons, cfg))
    else:
        print_lines(format_log(bisections, comparisons))


@cli.command()
def gc(
    config: ConfigOpt = None,
    db: DbOpt = None,
    build_cache: Annotated[bool, typer.Option("--build-cache", help="Also empty the build cache and remove the pinned environments.")] = False,
) -> None:
    """Remove perfbisect's worktrees (and optionally the build cache). Stored results are kept.

    Example:  perfbisect gc --build-cache
    """
    with app.Workspace.open(_load(config), db) as ws, app.exclusive(ws, gpu=False):
        removed = app.gc(ws, build_cache=build_cache)
    print_lines([f"removed {r}" for r in removed] or ["nothing to remove"])


# ------------------------------------------------------------------------------------------------
# The post-`git pull` hook: hook install/uninstall/status, check, status (logic in hook.py, check.py)

hook_app = typer.Typer(help="The post-`git pull` hook: every pull is checked, a regression bisected.", no_args_is_help=True)
cli.add_typer(hook_app, name="hook")
RepoOpt = Annotated[Optional[Path], typer.Option("--repo", help="The checkout whose pulls are checked (default: the config's target.repo).")]


@hook_app.command("install")
def hook_install(repo: RepoOpt = None, config: ConfigOpt = None) -> None:
    """Install the post-merge and post-rewrite hooks (chaining hooks already there, honouring core.hooksPath).

    Example:  perfbisect hook install
    Example:  perfbisect hook install --repo ~/sglang -c ~/sglang/perfbisect.toml
    """
    from .hook import hook

    target = repo or _load(config).target.repo
    print_lines(hook.install(target, _config_path(config)))


@hook_app.command("uninstall")
def hook_uninstall(repo: RepoOpt = None, config: ConfigOpt = None) -> None:
    """Remove perfbisect's hooks and restore, byte for byte, the ones they replaced.

    Example:  perfbisect hook uninstall --repo ~/sglang
    """
    from .hook import hook

    print_lines(hook.uninstall(repo or _load(config).target.repo))


@hook_app.command("status")
def hook_status(repo: RepoOpt = None, config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """What is installed, and whether it works (the perfbisect it calls runs, its config loads). Exit 4 when it would not.

    Example:  perfbisect hook status --repo ~/sglang
    """
    from .hook import hook

    data = hook.status(repo or _load(config).target.repo)
    if json_out:
        print_json(data)
    else:
        print_lines(hook.format_status(data))
    raise typer.Exit(code=EXIT_OK if data["works"] else EXIT_RUNTIME)


@cli.command("check")
def check_cmd(
    revs: Annotated[Optional[list[str]], typer.Argument(help="OLD NEW (the range a pull brought)", show_default=False)] = None,
    config: ConfigOpt = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    wait_idle: WaitIdleOpt = DEFAULT_WAIT_IDLE_S,
    wait: WaitOpt = False,
    action: Annotated[Optional[str], typer.Option("--action", help="check (answer only) or bisect (then find the culprit); default \\[hook] action.")] = None,
    enqueue: Annotated[bool, typer.Option("--enqueue", help="Queue OLD NEW for the background worker, as the hook does, and return.")] = False,
    drain: Annotated[bool, typer.Option("--drain", help="Be the background worker: check every queued pull, coalesced (the hook runs this).")] = False,
    fail_on_regression: FailOnRegressionOpt = False,
    fmt: FormatOpt = "text",
) -> None:
    """Did OLD..NEW make any configured mode slower beyond noise? Then (action bisect) find the commit.

    Example:  perfbisect check ORIG_HEAD HEAD
    Example:  perfbisect check --enqueue ORIG_HEAD HEAD
    """
    from .hook import check
    from .hook.checkqueue import CheckQueue, hook_dir

    words = revs or []
    fmt = _format(fmt, json_out)
    if drain:
        check.drain(_config_path(config))
        raise typer.Exit(code=EXIT_OK)
    if len(words) != 2:
        raise UsageError("Give the range as two revisions: `perfbisect check OLD NEW` (after a pull: ORIG_HEAD HEAD).")
    if action not in (None, "check", "bisect"):
        raise UsageError(f"--action is {action!r}; use check or bisect.")
    cfg = _load(config)
    if enqueue:
        with app.Workspace.open(cfg, db) as ws:
            old, new = (ws.repo.resolve(w).sha for w in words)
        log = check.enqueue(cfg, _config_path(config), old, new)
        print_lines([f"queued {old[:10]}..{new[:10]}; progress in {log}, `perfbisect status` shows it"])
        raise typer.Exit(code=EXIT_OK)
    progress = ConsoleProgress(quiet)
    with app.Workspace.open(cfg, db) as ws, app.exclusive(ws, progress, wait=wait), interruptible(ws, json_out=json_out):
        result = check.run_check(ws, words[0], words[1], progress, action=action, wait_idle_s=wait_idle)
    line = check.finish(cfg, CheckQueue(hook_dir(cfg.cache_dir)), result, app.Progress())
    if json_out:
        print_json({**result, "line": line})
    elif fmt == "markdown":
        from .report.markdown import check_markdown

        out_console.out(check_markdown(result, line), highlight=False)
    else:
        print_lines([line])
    raise typer.Exit(code=_exit_for(result["verdict"], fail_on_regression))


@cli.command("status")
def status_cmd(config: ConfigOpt = None, json_out: JsonOpt = False,
               limit: LimitOpt = 5) -> None:
    """The hook's checks: running, waiting (and why), queued, and the last results with their reports.

    Example:  perfbisect status --json
    """
    from .hook.checkqueue import format_status, status  # files only: no use cases, no database

    data = status(_load(config), limit=limit)
    if json_out:
        print_json(data)
    else:
        print_lines(format_status(data))


@cli.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        out_console.print(f"perfbisect {__version__}")
        raise typer.Exit()


def internal_error_message(exc: BaseException) -> str:
    """One paragraph for an exception no layer turned into a PerfbisectError (a bug, or an
    environment failure nobody anticipated)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return (
        f"perfbisect stopped on an unexpected {type(exc).__name__}{where}: {exc}. Results stored before "
        f"this point are kept. If the message points at the machine (disk full, permissions), fix that and "
        f"run again (`perfbisect resume` continues a bisection); otherwise it is a bug: report it with the "
        f"command line and the traceback that PERFBISECT_DEBUG=1 prints."
    )


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


def _stdout_failed(watched: _WatchedStdout) -> None:
    """Exit 4 saying why the result could not be printed; stdout is pointed at /dev/null first, so
    that the interpreter's last flush of what is still buffered cannot fail again (exit 120)."""
    exc = watched.failed
    assert exc is not None
    try:
        fd = watched._inner.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, AttributeError, ValueError):
        pass  # not a file descriptor (a test's StringIO): nothing is flushed at exit
    why = "the pipe's reader went away" if exc.errno == errno.EPIPE else "the disk or device it goes to refused it"
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
        if watched.failed is None:
            try:  # what is still buffered is part of the result: a write that fails now fails the command
                watched.flush()
            except OSError:
                pass
        if watched.failed is not None:
            _stdout_failed(watched)
        raise
    except KeyboardInterrupt as exc:
        _exit_interrupted(json_out, getattr(exc, "signum", None))
    except PerfbisectError as exc:  # what a command could not do: one paragraph, its documented exit status
        if os.environ.get("PERFBISECT_DEBUG"):
            traceback.print_exc()
        if watched.failed is not None:
            _stdout_failed(watched)
        if json_out:
            _json_error(str(exc), exc.exit_code, type(exc).__name__)
        print_error(str(exc))
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


if __name__ == "__main__":  # pragma: no cover
    main()
