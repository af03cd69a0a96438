"""`perfbisect calibrate`: the noise a bisection on this machine meets, measured through the same trial
path as a bisection's (``calibrate``: REV and a second build interleaved A B B A …, optionally paced),
stored with its true dof, and what it says about which figure the next bisection starts from.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

from ..engine import cost
from ..engine.stats import NoiseModel
from ..errors import UsageError
from ..measure.calibration import (
    CalibrationNoise, StartingNoise, calibration_lines, calibration_noise, keep_noise, noise_model, starting_noise_for,
)
from ..measure.run_allocation import RunsAdvice, runs_advice
from ..measure.trials import TrialRunner, interleaved
from ..measure.workspace import Progress, Workspace, preflight
from ..metrics import describe as describe_metric
from ..model import Commit, TrialResult
from ..report.render import attribution_line


@dataclass
class CalibrateResult:
    commit: Commit  # REV
    against: Commit  # the build whose sessions interleaved with REV's (its first parent by default)
    mode: str
    noise: CalibrationNoise  # what this calibration alone measured (stored with its dof)
    trials: list[TrialResult]  # in the order they ran
    lines: list[str]
    start: StartingNoise  # the figure the next bisection on this host starts from, and why
    next_noise: NoiseModel  # what it decides with (that figure pooled with stored A/A trials)
    spread_s: float = 0.0  # from the first session's start to the last one's end
    spread_minutes: float = 0.0  # what was asked for (--spread-minutes)
    runs: RunsAdvice | None = None  # how many runs per trial this host's noise and timings make cheapest


def calibrate(
    ws: Workspace, rev: str, mode: str, trials: int, progress: Progress | None = None, *,
    against: str | None = None, spread_minutes: float = 0.0, wait_idle_s: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> CalibrateResult:
    """Measure the noise a bisection on this machine meets: ``trials`` sessions each of REV and a
    second build (``against``, else REV's first parent) interleaved A B B A …, through the same
    trial path as a bisection (checkout, patch stack, build, server, warm-up, runs), optionally
    paced over ``spread_minutes``. Stores σ_b with its true dof and says how it compares with what
    bisections on this host measured and which figure the next bisection starts from.
    """
    if trials < 2:
        raise UsageError(
            "calibrate needs at least 2 trials per build (--trials 2) to see any between-session noise; 5–10 is better."
        )
    if spread_minutes < 0 or not math.isfinite(spread_minutes):
        raise UsageError(f"--spread-minutes is the time to spread the sessions over, 0 or more; got {spread_minutes:g}.")
    progress = progress or Progress()
    ws.config.mode(mode)
    a = ws.repo.resolve(rev)
    b = _calibration_partner(ws, a, rev, against)
    preflight(ws)
    runner = TrialRunner(ws, progress, wait_idle_s=wait_idle_s, client_rev=a.sha)
    schedule = [c for i in range(trials) for c in interleaved([a, b], i)]
    progress.info(
        f"calibrate [{mode}]: {trials} sessions each of {a.short} (A) and {b.short} (B{', its first parent' if against is None else ''}), "
        f"interleaved A B B A" + (f", spread over {spread_minutes:g} min" if spread_minutes else "")
    )
    done: list[TrialResult] = []
    began = time.monotonic()
    for n, commit in enumerate(schedule):
        due = began + n * spread_minutes * 60.0 / max(len(schedule) - 1, 1)
        pause = due - time.monotonic()
        if pause > 0:
            progress.info(f"pausing {cost.format_duration(pause)} before session {n + 1} of {len(schedule)} (--spread-minutes {spread_minutes:g})")
            sleep(pause)
        done.append(runner.trial(commit, mode, purpose="calibrate"))
    spread_s = time.monotonic() - began
    measured = calibration_noise(done)
    if measured.sigma_b_pct is not None:
        keep_noise(
            ws, [mode], measured.sigma_b_pct, measured.dof,
            f"calibrate: {'+'.join(map(str, measured.trials))} trials of {a.short} and {b.short} interleaved over "
            f"{cost.format_duration(spread_s)}",
            sigma_w=measured.sigma_w,
        )
    start = starting_noise_for(ws, mode)
    next_noise = noise_model(ws, [mode])
    cfg = ws.config
    lines = [
        f"{a.short} (A) and {b.short} (B) [{mode}]: {len(done)} sessions interleaved A B B A over "
        f"{cost.format_duration(spread_s)}, each a bisection's trial (checkout, patch stack, build, server, "
        f"{cfg.workload.warmup} warm-up, runs)"
    ]
    lines += calibration_lines(measured, start, next_noise, budget_trials=cfg.stats.max_trials_per_commit or cfg.stats.max_trials_total // 2, alpha=cfg.stats.alpha)
    attribution = attribution_line(done, higher_is_better=describe_metric(cfg).higher_is_better)
    if attribution:
        lines.append(attribution)
    advice = runs_advice(ws, mode)
    lines.append(advice.line())
    return CalibrateResult(a, b, mode, measured, done, lines, start, next_noise, spread_s, spread_minutes, advice)


def _calibration_partner(ws: Workspace, a: Commit, rev: str, against: str | None) -> Commit:
    """The build whose sessions interleave with REV's: ``against``, else REV's first parent."""
    if against is None:
        if not a.parents:
            raise UsageError(
                f"{rev} ({a.short}) has no parent to interleave its sessions with: pass --against REV2 (any other "
                f"build; only the spread within each build is counted)."
            )
        b = ws.repo.resolve(a.parents[0])
        what = f"{rev}'s first parent {b.short}"
    else:
        b = ws.repo.resolve(against)
        what = f"--against {against} ({b.short})"
        if b.sha == a.sha:
            raise UsageError(
                f"--against {against} is {rev} itself ({a.short}): sessions of one build back to back measure less "
                f"noise than a bisection meets. Pass another build, or leave --against out for {rev}'s first parent."
            )
    if ws.stack is not None:
        check = ws.stack.check_at(b)
        if not check.ok:
            raise UsageError(
                f"The patch stack does not apply at {what}: {check.conflict.describe()}. Pass --against REV2 "
                f"where it applies (see `perfbisect patches check`)."
            )
    return b

