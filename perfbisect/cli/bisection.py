"""The commands of a bisection: `run`, `resume`, `plan`, `patches check`, and `demo` (a bisection of a
demo target built for it). Each parses, calls the use cases (``perfbisect.app``), prints the outcome and
exits with its documented code; the budget question before a run is asked here.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import EXIT_RUNTIME, EXIT_USAGE, UsageError
from ..executors.chosen import measures_here
from ..interrupts import interruptible, resume_options, say_interrupted, signal_name
from ..report.console import ConsoleProgress, err_console, out_console, print_error, print_json, print_lines, print_report, show
from ..settings import DEFAULT_WAIT_IDLE_S
from .options import (
    BadOpt, ConfigOpt, DEMO_DIRS, DbOpt, FailOnRegressionOpt, FormatOpt, GoodOpt, JsonOpt, QuietOpt, RevArgs,
    WaitIdleOpt, WaitOpt, YesOpt, app_bisection, app_housekeeping, app_planning, app_reports, app_resume,
    checked_number, exit_for, load, nothing_measured, output_format, parse_revs, try_once_hint, workspace,
)


def _show_bisection(result, finished, json_out: bool, fail_on_regression: bool, fmt: str = "text", *, hint: str) -> None:
    """Print a finished bisection (lines, or one JSON object) and exit with its documented code.

    ``finished`` (``app.bisection.FinishedBisection``): ``broken``, no trial measured anything (the server never
    started, every run failed): that is a measurement that broke (4), not evidence too weak to decide
    (3); ``report``, the HTML report's path and the short line that ends the text output; ``spent``.
    """
    from ..report.costs import spent_line
    from ..report.render import format_outcome, outcome_json

    report, spent = finished.report, finished.spent
    if finished.broken:
        # One message: nothing was measured, so there is no verdict to print, store or render.
        message = nothing_measured(finished.broken, hint)
        if json_out:
            print_json({"verdict": None, "error": message, "exit_code": EXIT_RUNTIME, "kind": "NothingMeasured",
                        "spent": spent})
        print_error(message)
        raise typer.Exit(code=EXIT_RUNTIME)
    if json_out:
        # "resumed": what `resume` reused and discarded (app.resume.Resumed.as_json); null for a run that was not resumed
        print_json({**outcome_json(result), "report": str(report[0]) if report else None, "spent": spent,
                    "resumed": getattr(result, "resumed", None)})
    elif fmt == "markdown":
        from ..report.markdown import bisection_markdown

        out_console.out(bisection_markdown(result, report[0] if report else None, spent), highlight=False)
    else:
        for line in format_outcome(result):
            out_console.print(show(line))
        if spent is not None:
            out_console.print(show(spent_line(spent, result.outcome.trials_used)))
        if report is not None:
            out_console.print(show(report[1]))
    raise typer.Exit(code=exit_for(result.outcome.verdict, fail_on_regression))


def _confirm_budget(ws, good: str, bad: str, yes: bool) -> None:
    """Before a bisection starts: ask when its estimate exceeds [cost] budget_gpu_hours (never with --yes)."""
    from ..report.costs import estimate_lines, format_duration

    if yes:
        return
    over = app_planning.over_budget(ws, good, bad)
    if over is None:
        return
    est = over.estimate
    sentence = (
        f"The estimate ({est.gpu_hours:.1f} {est.unit}, ~{est.trials} trials, {format_duration(est.wall_s)}) "
        f"exceeds [cost] budget_gpu_hours = {over.budget:g}."
    )
    if not sys.stdin.isatty():
        raise UsageError(
            f"{sentence} stdin is not a terminal, so perfbisect cannot ask: pass --yes to start anyway, raise the "
            f"budget, or narrow good..bad (`perfbisect plan` shows the estimate)."
        )
    for line in estimate_lines(est):
        err_console.print(show(line))
    if not typer.confirm(f"{sentence} Start anyway?", default=False, err=True):
        print_error(f"{sentence} Not started (answered no); pass --yes to skip this question.")
        raise typer.Exit(code=EXIT_USAGE)


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
    fmt = output_format(fmt, json_out)
    cfg = load(config)
    progress = ConsoleProgress(quiet)
    with workspace.Workspace.open(cfg, db) as ws:
        _confirm_budget(ws, g, b, yes)
        # Slurm jobs take their own node's lock; the controller holds only the repository's.
        gpu = measures_here(cfg)
        with ws.exclusive(progress, wait=wait, gpu=gpu), interruptible(ws, resumable=True, options=resume_options(config, db), json_out=json_out):
            result = app_bisection.run_bisection(ws, g, b, progress, wait_idle_s=wait_idle)
            finished = app_bisection.finished_bisection(ws, result, progress)
    _show_bisection(result, finished, json_out, fail_on_regression, fmt, hint=try_once_hint(cfg, g, b))


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

    It decides with the settings it started with (\\[stats]: metric, budget, thresholds; a config changed
    since is named and not used) and from its stored observations, so it measures what the uninterrupted
    run would have. It says what it reused: the stored observations and their trials, a finished trial no
    observation holds yet (used, not measured again), and a trial the interruption cut short (discarded: a
    trial is one server session, or one command run; its commit is measured again). --json has the same under "resumed".

    Example:  perfbisect resume
    Example:  perfbisect resume 3 --json
    """

    cfg = load(config)
    progress = ConsoleProgress(quiet)
    with workspace.Workspace.open(cfg, db) as ws, ws.exclusive(progress, wait=wait, gpu=measures_here(cfg)):
        bid = bisection if bisection is not None else app_resume.latest_unfinished(ws)
        with interruptible(ws, resume_id=bid, resumable=True, options=resume_options(config, db), json_out=json_out):
            result = app_bisection.run_bisection(ws, "", "", progress, wait_idle_s=wait_idle, resume_id=bid)
        finished = app_bisection.finished_bisection(ws, result, progress)
    _show_bisection(result, finished, json_out, fail_on_regression,
                    hint=try_once_hint(cfg, result.outcome.good[:10], result.outcome.bad[:10]))


def demo(
    directory: Annotated[
        Optional[Path], typer.Option("--dir", help="Where to build the demo (default: ./.perfbisect/demo, or ./.perfbisect/demo-drift with --drift-only).")
    ] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    drift_only: Annotated[
        bool, typer.Option("--drift-only", help="Plant no code change, only session drift: nothing must be blamed.")
    ] = False,
    commits: Annotated[int, typer.Option("--commits", callback=checked_number, min=10, max=400, help="Length of the demo history.")] = 36,
    seed: Annotated[int, typer.Option("--seed", callback=checked_number, help="Seed of the emulator's noise.")] = 7,
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
    from ..demo.run import demo_environments, demo_report, run_demo
    from ..demo.target import VARIANTS
    from ..report.render import format_outcome, outcome_json

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
        report = app_reports.report_quietly(progress, lambda: demo_report(target, result, db))
    except KeyboardInterrupt as exc:  # the demo's servers are already torn down; nothing to resume
        signum = getattr(exc, "signum", signal.SIGINT)
        say_interrupted(f"Interrupted by {signal_name(signum)}: the demo's servers were stopped.")
        raise typer.Exit(code=128 + signum) from None
    if json_out:
        data = outcome_json(result)
        data["planted"] = target.planted
        data["variant"] = target.variant
        data["environments"] = demo_environments(target, result, db)
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
        envs = demo_environments(target, result, db)
        if envs is not None:
            ok = envs["environments"] == 3 and envs["untestable_trials"] == 0
            out_console.print(f"{'[green]✓[/green]' if ok else '[red]✗[/red]'} {show(envs['line'])}")
            for line in envs["lines"]:
                out_console.print(show(line))
        print_report(report)
    raise typer.Exit(code=exit_for(result.outcome.verdict, False))


def plan(
    revs: RevArgs = None,
    good: GoodOpt = None,
    bad: BadOpt = None,
    config: ConfigOpt = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
    no_patch_check: Annotated[bool, typer.Option("--no-patch-check", help="Skip checking the patch stack at each commit.")] = False,
    effect: Annotated[Optional[float], typer.Option("--effect", callback=checked_number, metavar="PCT", help="The regression you saw, in percent (e.g. 15): the estimate simulates the search against it (default: the endpoints' stored trials, else 5 × stats.min_effect_pct).")] = None,
    prepare: Annotated[bool, typer.Option("--prepare", help="Also install every environment of the range (\\[environment]: one per uv lock) now, before any GPU time is spent; each is verified against its lock.")] = False,
    quiet: QuietOpt = False,
) -> None:
    """List good..bad: which commits would be measured, which not, and why; the environments their
    requirements resolve to (uv, one per lock) and what moves between them; and what the bisection
    would cost (trials, wall time, GPU-hours, with a range). Builds and runs nothing unless --prepare.

    Example:  perfbisect plan good=bba2fc4 bad=HEAD --effect 15

    Example:  perfbisect plan good=bba2fc4 bad=v0.5.18 --prepare   # install every environment now
    """
    from ..report.costs import estimate_json, estimate_lines
    from ..report.render import format_environment_preparation, format_plan, json_value

    g, b = parse_revs(revs or [], good, bad)
    cfg = load(config)
    app_planning.check_effect(cfg, effect)  # before the plan: bad input is said at once
    progress = ConsoleProgress(quiet)
    prepared = None
    with workspace.Workspace.open(cfg, db) as ws:
        try:
            planned = app_planning.plan_and_estimate(ws, g, b, check_patches=not no_patch_check, effect_pct=effect,
                                                     progress=progress)
            if prepare:
                prepared = app_planning.prepare_environments(ws, planned.plan, progress)
        finally:
            progress.done()
    if json_out:
        data = {**json_value(planned.plan), "estimate": estimate_json(planned.estimate)}
        if prepared is not None:
            data["prepared"] = [{"commits": list(group.commits), "outcome": outcome} for group, outcome in prepared]
        print_json(data)
    else:
        print_lines(format_plan(planned.plan) + estimate_lines(planned.estimate)
                    + (format_environment_preparation(prepared) if prepared is not None else []))
    if planned.conflict:  # `run` refuses this range: say so, and exit as it would
        print_error(planned.conflict)
        raise typer.Exit(code=EXIT_USAGE)


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
    from ..report.render import format_patch_checks

    g, b = parse_revs(revs or [], good, bad)
    with workspace.Workspace.open(load(config), db) as ws:
        checks = app_housekeeping.patches_check(ws, g, b)
        differing = ws.stack.differing() if ws.stack is not None else {}
    print_lines(format_patch_checks(checks, differing))


def patches_carry(
    revs: RevArgs = None,
    good: GoodOpt = None,
    bad: BadOpt = None,
    resume: Annotated[bool, typer.Option("--continue", help="The boundary in progress is resolved: write its version of the patch and go on to the next.")] = False,
    abort: Annotated[bool, typer.Option("--abort", help="Drop the boundary in progress and its worktree (the versions written before it stay).")] = False,
    show_status: Annotated[bool, typer.Option("--status", help="Say which boundary is in progress, and where to resolve it.")] = False,
    review: Annotated[bool, typer.Option("--review", help="Stop at every boundary, even where git carries the patch by itself, to review it.")] = False,
    config: ConfigOpt = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Carry the patch stack over every commit of good..bad where it stops applying, as `git rebase` would.

    At each boundary (the first commit where a patch no longer applies) a worktree is prepared with the patches
    before it applied and the patch replayed by a three-way merge (rerere on). Where git resolves it and the new
    version adds and removes what the patch did, it is written at once; otherwise the conflicts are left in the
    worktree for you: resolve them with any tool, then --continue. Each new version goes to the patch directory's
    variants/ and an entry is appended to the config file's patches.variants. Exit 0 once the stack applies at
    every commit of the range, 3 while a boundary waits for you.

    Example:  perfbisect patches carry good=bba2fc4 bad=v0.5.18

    Example:  perfbisect patches carry --continue      # after resolving the conflicts it showed

    Example:  perfbisect patches carry --abort
    """
    from ..app import carrying
    from ..errors import EXIT_INCONCLUSIVE
    from ..report.render import format_carry, json_value

    if sum((resume, abort, show_status)) > 1:
        raise UsageError("--continue, --abort and --status each do one thing: give one of them.")
    cfg = load(config)
    progress = ConsoleProgress(quiet)
    with workspace.Workspace.open(cfg, db) as ws, ws.exclusive(progress, gpu=False):
        if abort:
            print_lines([carrying.abort(ws)])
            return
        if show_status:
            state = carrying.status(ws)
            print_lines(["no carry in progress" if state is None else
                         f"carrying {state.patch} over {state.boundary[:10]} (range {state.good[:10]}..{state.bad[:10]}): "
                         + ("git carried it; review it" if state.resolved_by_git else "resolve its conflicts")
                         + f" in {state.worktree}, then `perfbisect patches carry --continue` (or --abort)"])
            return
        try:
            if resume:
                report = carrying.resume(ws, progress, review=review)
            else:
                g, b = parse_revs(revs or [], good, bad)
                report = carrying.carry(ws, g, b, progress, review=review)
        finally:
            progress.done()
    if json_out:
        print_json(json_value(report))
    else:
        print_lines(format_carry(report))
    if not report.applies:
        raise typer.Exit(code=EXIT_INCONCLUSIVE)
