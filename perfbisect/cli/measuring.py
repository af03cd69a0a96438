"""The commands that measure commits outside a bisection: `measure` (one commit, every mode), `compare`
(two commits, interleaved, until the verdict is clear) and `calibrate` (the noise two builds meet on
this machine). Each parses, calls one use case, prints and exits with its documented code.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..errors import EXIT_RUNTIME
from ..interrupts import interruptible
from ..report.console import ConsoleProgress, out_console, print_error, print_json, print_lines, print_report
from ..settings import DEFAULT_WAIT_IDLE_S
from .options import (
    ConfigOpt, DbOpt, FailOnRegressionOpt, FormatOpt, JsonOpt, ModeOpt, ModesOpt, QuietOpt, SessionsOpt, WaitIdleOpt,
    WaitOpt, app_calibration, app_measuring, app_reports, checked_number, exit_for, load, nothing_measured, try_once_hint,
    output_format, workspace,
)

def measure(
    rev: Annotated[str, typer.Argument(help="The commit to measure.")] = "HEAD",
    mode: ModesOpt = None,
    trials: Annotated[int, typer.Option("--trials", "-n", callback=checked_number, min=1, help="Server sessions per mode.")] = 1,
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
    from ..report.render import format_measure, trial_row

    cfg = load(config)
    modes = mode or list(cfg.modes)
    progress = ConsoleProgress(quiet)
    with workspace.Workspace.open(cfg, db) as ws, ws.exclusive(progress, wait=wait), interruptible(ws, json_out=json_out):
        result = app_measuring.measure(ws, rev, modes, trials, progress, wait_idle_s=wait_idle)
    if json_out:
        from ..metrics import describe_workload

        data = {"commit": result.commit.sha, "metric": describe_workload(cfg.workload).as_json(),
                "trials": {m: [trial_row(t) for t in ts] for m, ts in result.trials.items()}}
        print_json(data)
    else:
        print_lines(format_measure(result, cfg))
    broken = app_measuring.why_nothing_measured([t for ts in result.trials.values() for t in ts])
    if broken:
        print_error(nothing_measured(broken, try_once_hint(cfg)))
        raise typer.Exit(code=EXIT_RUNTIME)



def compare_cmd(
    a: Annotated[str, typer.Argument(help="Reference commit (A).")],
    b: Annotated[str, typer.Argument(help="Commit to judge against A (B).")],
    mode: ModeOpt = None,
    trials: Annotated[Optional[int], typer.Option("--max-trials", callback=checked_number, min=2, help="Most trials per side (default: stats.max_trials_per_commit, or half of stats.max_trials_total when that is 0).")] = None,
    config: ConfigOpt = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    wait_idle: WaitIdleOpt = DEFAULT_WAIT_IDLE_S,
    wait: WaitOpt = False,
    fmt: FormatOpt = "text",
    fail_on_regression: FailOnRegressionOpt = False,
    env_from: Annotated[Optional[str], typer.Option(
        "--env-from", metavar="REV", help="Run both commits in REV's environment (\\[environment]): what differs is then the code alone (the culprit against its parent in the parent's environment splits code from environment).",
    )] = None,
) -> None:
    """Compare two commits with interleaved trials (A B B A …) until the verdict is clear.

    The verdict uses trial summaries and the between-session noise, never the runs of one
    session as if they were independent; it says when today's numbers differ from stored numbers of
    the same build (system drift, not code).

    Example:  perfbisect compare bba2fc4 HEAD
    Example:  perfbisect compare HEAD~9 HEAD --mode baseline --max-trials 6
    Example:  perfbisect compare origin/main HEAD --fail-on-regression --format markdown

    Example:  perfbisect compare CULPRIT~1 CULPRIT --env-from CULPRIT~1   # the code alone, in the parent's environment
    """
    from ..report.render import format_comparison, json_value

    fmt = output_format(fmt, json_out)
    cfg = load(config)
    progress = ConsoleProgress(quiet)
    with workspace.Workspace.open(cfg, db) as ws, ws.exclusive(progress, wait=wait), interruptible(ws, json_out=json_out):
        result = app_measuring.compare_commits(ws, a, b, mode or cfg.metric_modes[-1], progress, max_trials=trials,
                                               wait_idle_s=wait_idle, env_from=env_from)
        report = app_reports.report_quietly(progress, lambda: app_reports.report(ws.store, f"c{result.comparison_id}", config=cfg)[0])
    if json_out:
        data = {"a": result.a.sha, "b": result.b.sha, "mode": result.mode, "comparison_id": result.comparison_id,
                "metric": result.metric,
                **json_value(result.comparison), "history": result.history, "attribution": result.attribution,
                "report": str(report) if report else None}
        print_json(data)
    elif fmt == "markdown":
        from ..report.markdown import comparison_markdown

        out_console.out(comparison_markdown(result, report), highlight=False)
    else:
        print_lines(format_comparison(result))
        print_report(report)
    raise typer.Exit(code=exit_for(result.comparison.verdict, fail_on_regression))



def calibrate(
    rev: Annotated[str, typer.Argument(help="The build to measure (A).")] = "HEAD",
    mode: ModeOpt = None,
    trials: SessionsOpt = 5,
    against: Annotated[Optional[str], typer.Option(
        "--against", metavar="REV2", help="The second build (B) whose sessions interleave with REV's (default: REV's first parent).",
    )] = None,
    spread_minutes: Annotated[float, typer.Option(
        "--spread-minutes", callback=checked_number, min=0.0, help="Spread the sessions over at least this many minutes, pausing between them (0: back to back).",
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
    cfg = load(config)
    progress = ConsoleProgress(quiet)
    with workspace.Workspace.open(cfg, db) as ws, ws.exclusive(progress, wait=wait), interruptible(ws, json_out=json_out):
        result = app_calibration.calibrate(ws, rev, mode or cfg.metric_modes[-1], trials, progress, against=against,
                               spread_minutes=spread_minutes, wait_idle_s=wait_idle)
        report = app_reports.report_quietly(progress, lambda: app_reports.calibration_report(ws, result))
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

