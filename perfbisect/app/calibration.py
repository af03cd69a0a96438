"""The noise a command decides with and the noise it keeps, and `perfbisect calibrate`.

Which noise figure a search starts from is the use case's decision, not measurement's: a command
decides with ``noise_model_and_note`` over its modes (the stored figure ``measure.noise_figures``'s
rule picks for this host, pooled with stored A/A trials of identical builds; a ratio metric starts
from the configured prior), and ``keep_noise`` stores what a calibration or a finished bisection
measured, with its true dof, for the next command on this host.

``calibrate`` measures the noise a bisection on this machine meets, through the same trial path as a
bisection's (REV and a second build interleaved A B B A …, optionally paced), stores σ_b with its
true dof and says (``calibration_lines``) how it compares with what bisections on this host measured
and which figure the next bisection starts from.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ..engine.stats import PRIOR_DOF_CAP, NoiseModel, min_detectable_effect
from ..errors import UsageError
from ..measure.noise_figures import StartingNoise, disagreement_line, noise_model_for_key, run_logs, starting_noise
from ..measure.run_allocation import RunsAdvice, runs_advice
from ..measure.search_trials import interleaved
from ..measure.trials import TrialRunner
from ..runtime.progress import Progress
from ..measure.launch_checks import preflight
from .workspace import Workspace
from ..metrics import describe as describe_metric
from ..model import Commit, TrialResult, pct
from ..report.costs import format_duration
from ..report.render import attribution_line
from ..store import NoiseEstimate


# ------------------------------------------------------------------------------------------------
# The noise model a command decides with, and the noise it keeps


def starting_noise_for(ws: Workspace, mode_name: str) -> StartingNoise:
    """``starting_noise`` over the figures stored for ``mode_name`` on this host."""
    key = ws.noise_key(ws.config.mode(mode_name))
    return starting_noise(ws.store.noise_estimates(mode_name, key.workload_hash), key)


def noise_model_and_note(ws: Workspace, mode_names: Sequence[str]) -> tuple[NoiseModel, str | None]:
    """Between-trial noise for this host/mode/workload — the stored figure ``noise_figures``' rule picks,
    pooled with stored A/A trials of identical builds, else the stated prior — and a note when the
    figures disagree or were measured on another host."""
    if len(mode_names) != 1:
        # Ratio metrics: A/A data of the ratio itself is not pooled yet.
        return NoiseModel.prior(ws.config.stats.prior_sigma_pct), None
    return noise_model_for_key(ws, ws.noise_key(ws.config.mode(mode_names[0])))


def noise_model(ws: Workspace, mode_names: Sequence[str]) -> NoiseModel:
    """The noise model alone (``noise_model_and_note`` without its note)."""
    return noise_model_and_note(ws, mode_names)[0]


def keep_noise(ws: Workspace, mode_names: Sequence[str], sigma_pct: float | None, dof: float | None, source: str,
               sigma_w: float | None = None) -> None:
    """Store the noise a calibration or a finished bisection measured, with its true dof, for the next
    command on this host (which bounds its weight)."""
    if sigma_pct is None or not dof or dof < 2 or len(mode_names) != 1 or not math.isfinite(sigma_pct):
        return
    mode = ws.config.mode(mode_names[0])
    ws.store.add_noise_estimate(NoiseEstimate(
        **ws.noise_key(mode)._asdict(),
        sigma_b=math.log1p(sigma_pct / 100.0), dof=float(dof), sigma_w=sigma_w, source=source, created_at=time.time(),
    ))


# ------------------------------------------------------------------------------------------------
# `perfbisect calibrate`: what it measured and says


@dataclass(frozen=True)
class CalibrationNoise:
    """What one calibration measured on its own: σ_b within each build across its interleaved
    sessions (no prior pooled in), σ_w within sessions, and how many trials of each build counted."""

    sigma_b: float | None  # log scale; None with fewer than two usable trials of any build
    dof: int
    sigma_w: float | None
    trials: tuple[int, ...]  # usable trials per build

    @property
    def sigma_b_pct(self) -> float | None:
        return None if self.sigma_b is None else pct(self.sigma_b)

    @property
    def sigma_w_pct(self) -> float | None:
        return None if self.sigma_w is None else pct(self.sigma_w)


def calibration_noise(trials: Sequence[TrialResult]) -> CalibrationNoise:
    """σ_b pooled over each build's own spread (its level removed: two builds may differ), σ_w over
    every trial's runs."""
    groups: dict[tuple, list[float]] = {}
    for t in trials:
        if t.summary is not None:
            groups.setdefault(t.identity.build_key, []).append(t.summary)
    measured = NoiseModel.from_groups(list(groups.values()), within=run_logs(trials), prior=NoiseModel(0.0, 0.0, "none"))
    dof = sum(len(g) - 1 for g in groups.values())
    return CalibrationNoise(measured.sigma_b if dof else None, dof, measured.sigma_w, tuple(len(g) for g in groups.values()))


def detectable_lines(noise: NoiseModel, budget_trials: int = 10, alpha: float = 0.01) -> list[str]:
    """The smallest regression a few trial counts can detect at ``noise`` (power 80%)."""
    per_side = max(budget_trials // 2, 1)
    return [
        f"smallest regression detectable with {n} vs {n} trials (alpha {alpha:g}, power 80%): "
        f"{min_detectable_effect(noise, n, n, alpha):.1f}%"
        for n in sorted({2, 3, 5, per_side}) if n <= max(per_side, 2)
    ]


def calibration_lines(measured: CalibrationNoise, start: StartingNoise, next_noise: NoiseModel,
                      budget_trials: int = 10, alpha: float = 0.01) -> list[str]:
    """`perfbisect calibrate`'s verdict on the noise: what it measured, how that compares with what
    bisections on this host measured, which figure the next bisection starts from and why, and what
    that noise lets a budget detect."""
    lines = []
    if measured.sigma_b_pct is None:
        lines.append(
            "between-session noise σ_b: not measured (fewer than two usable trials of either build); "
            "nothing was stored"
        )
    else:
        per_build = "+".join(str(n) for n in measured.trials)
        lines.append(
            f"between-session noise σ_b: {measured.sigma_b_pct:.2f}% ({measured.dof} dof from {per_build} trials: "
            f"the spread within each build across interleaved sessions); stored with its {measured.dof} dof"
        )
    if measured.sigma_w_pct is not None:
        lines.append(f"within-session noise σ_w: {measured.sigma_w_pct:.2f}% per run (runs of one session; not independent evidence)")
    else:
        lines.append("within-session noise σ_w: not measured")
    if start.disagree:
        lines.append(disagreement_line(start))
    elif start.bisection is not None and start.calibration is not None and start.agreement is not None:
        lines.append(
            f"bisections on this host measured {start.bisection.describe()}; this calibration agrees "
            f"({start.agreement.describe()})"
        )
    if not start.disagree:
        if start.figure is None:
            lines.append(f"the next bisection on this host starts from the {next_noise.sigma_b_pct:.1f}% prior ({start.why})")
        else:
            lines.append(f"the next bisection on this host starts from {start.figure.describe()}: {start.why}")
    lines.append(f"noise the next bisection decides with, pooled with stored A/A trials: {next_noise.describe()}; "
                 f"a bisection counts it as a prior worth at most {PRIOR_DOF_CAP:g} trial{'' if PRIOR_DOF_CAP == 1 else 's'} "
                 f"of its own (`compare` and `check`: only when it is not under the pair's own spread), never a licence")
    lines.extend(detectable_lines(next_noise, budget_trials, alpha))
    return lines


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
    if ws.environments is not None:  # both builds resolve as of one date: the later one's
        ws.environments.anchor(a if ws.repo.is_ancestor(b.sha, a.sha) else b)
    preflight(ws.config)
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
            progress.info(f"pausing {format_duration(pause)} before session {n + 1} of {len(schedule)} (--spread-minutes {spread_minutes:g})")
            sleep(pause)
        done.append(runner.trial(commit, mode, purpose="calibrate"))
    spread_s = time.monotonic() - began
    measured = calibration_noise(done)
    if measured.sigma_b_pct is not None:
        keep_noise(
            ws, [mode], measured.sigma_b_pct, measured.dof,
            f"calibrate: {'+'.join(map(str, measured.trials))} trials of {a.short} and {b.short} interleaved over "
            f"{format_duration(spread_s)}",
            sigma_w=measured.sigma_w,
        )
    start = starting_noise_for(ws, mode)
    next_noise = noise_model(ws, [mode])
    cfg = ws.config
    lines = [
        f"{a.short} (A) and {b.short} (B) [{mode}]: {len(done)} sessions interleaved A B B A over "
        f"{format_duration(spread_s)}, each a bisection's trial (checkout, patch stack, build, server, "
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
