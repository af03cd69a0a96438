"""Noise figures: what calibrations and bisections on this host measured, which one a command starts
from, and what `perfbisect calibrate` says about them.

DESIGN.md §5, "noise figures are assumptions, not facts": a σ measured in back-to-back sessions of
one build is often several times smaller than what a bisection meets (a busy 2-core host: 2.4–5.9%
from calibrate, 9–41% between a bisection's trials), and a verdict that trusts the small one is a
false verdict. So every stored figure says how it was measured (``source``: "bisection #N: …" or
"calibrate: …") and with how many degrees of freedom, and a command starts from

- what the latest bisection on this host measured, when there is one: its trials met what the next
  bisection's will (many builds, worktree switches, hours of drift);
- else what the latest calibration measured;
- and when both exist but disagree beyond chance (two-sided F test on the variances,
  ``stats.variance_ratio_test``), from the larger of the two: a σ too small makes false verdicts, one
  too large only costs trials.

Trials that `calibrate` ran enter the noise model through its stored figure (under that rule, counted
with at most ``LEARNED_DOF_CAP`` dof), not again as raw A/A data beside it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

from ..model import NoiseKey, TrialResult
from ..engine.stats import PRIOR_DOF_CAP, NoiseModel, min_detectable_effect, pct, variance_ratio_test
from ..store import NoiseEstimate, TrialPurpose

if TYPE_CHECKING:  # the workspace is only passed through
    from .workspace import Workspace

# A learned noise level counts as this many pseudo-observations at most: it stays a prior that
# today's own trials can overrule when the machine has changed.
LEARNED_DOF_CAP = 30.0
# Two figures disagree when the F test rejects one variance at this level *and* their σ differ by
# at least this factor (with hundreds of dof a 5% difference is significant and irrelevant).
DISAGREE_ALPHA = 0.05
DISAGREE_SIGMA_RATIO = 1.25


def run_logs(trials: Iterable[TrialResult]) -> list[list[float]]:
    """Per trial, the log values of its usable runs (for the within-trial noise σ_w)."""
    return [[math.log(r.value) for r in t.usable_runs if r.value] for t in trials]


@dataclass(frozen=True)
class NoiseFigure:
    """One stored noise estimate (between-trial σ_b, log scale) as a command reads it."""

    sigma_b: float
    dof: float
    sigma_w: float | None
    source: str  # "bisection #3: residual noise of …" or "calibrate: 5+5 trials of …"
    created_at: float

    @classmethod
    def of(cls, estimate: NoiseEstimate) -> "NoiseFigure":
        return cls(estimate.sigma_b, estimate.dof, estimate.sigma_w, estimate.source, estimate.created_at)

    @property
    def by_bisection(self) -> bool:
        return self.source.startswith("bisection")

    @property
    def origin(self) -> str:
        """Who measured it: "bisection #3", "calibrate"."""
        return self.source.split(":")[0].strip()

    @property
    def sigma_b_pct(self) -> float:
        return pct(self.sigma_b)

    def describe(self) -> str:
        """"9.1% (bisection #3, 14 dof)"."""
        return f"{self.sigma_b_pct:.1f}% ({self.origin}, {self.dof:g} dof)"


@dataclass(frozen=True)
class Agreement:
    """Whether a calibration's σ_b and a bisection's measure one variance (two-sided F test)."""

    variance_ratio: float  # calibration / bisection
    p_value: float

    @property
    def disagree(self) -> bool:
        if not math.isfinite(self.p_value):
            return False
        far = max(self.variance_ratio, 1.0 / self.variance_ratio) >= DISAGREE_SIGMA_RATIO**2
        return self.p_value < DISAGREE_ALPHA and far

    def describe(self) -> str:
        return f"variance ratio {self.variance_ratio:.2f}, F test p = {self.p_value:.2g}"


@dataclass(frozen=True)
class StartingNoise:
    """Which stored figure a command on this host starts from (None: the configured prior), and why."""

    figure: NoiseFigure | None
    why: str
    bisection: NoiseFigure | None = None  # the latest bisection's figure on this host
    calibration: NoiseFigure | None = None  # the latest calibration's
    agreement: Agreement | None = None

    @property
    def disagree(self) -> bool:
        return self.agreement is not None and self.agreement.disagree

    def source(self) -> str:
        """The noise model's source (no ':' in it: ``NoiseModel.from_groups`` cuts there)."""
        f = self.figure
        if f is None:
            return "prior"
        verb = "learned on this host by" if f.by_bisection else "measured on this host by"
        return f"{verb} {f.origin} ({f.sigma_b_pct:.1f}%, {f.dof:g} dof)"

    def note(self) -> str | None:
        """One line for a command that decides with it, when the two figures disagree."""
        if not self.disagree or self.figure is None:
            return None
        return disagreement_line(self)


def starting_noise(estimates: Sequence[NoiseEstimate], key: NoiseKey) -> StartingNoise:
    """The figure the next bisection (or comparison) under ``key`` starts from, by the module's rule.

    ``estimates`` newest first (``Store.noise_estimates``); only those measured under ``key`` (this
    host, mode and workload) count.
    """
    here = [NoiseFigure.of(e) for e in estimates if e.noise_key == key]
    bisection = next((f for f in here if f.by_bisection), None)
    calibration = next((f for f in here if f.origin.startswith("calibrate")), None)
    if bisection is None and calibration is None:
        return StartingNoise(None, "no noise measured on this host yet")
    if calibration is None:
        return StartingNoise(bisection, "what the latest bisection on this host measured", bisection)
    if bisection is None:
        return StartingNoise(
            calibration, "no bisection on this host has measured its noise yet", None, calibration,
        )
    ratio, p = variance_ratio_test(calibration.sigma_b, calibration.dof, bisection.sigma_b, bisection.dof)
    agreement = Agreement(ratio, p)
    if not agreement.disagree:
        why = "what bisections measured is preferred: their trials meet what the next one's will (many builds, hours of drift)"
        return StartingNoise(bisection, why, bisection, calibration, agreement)
    if bisection.sigma_b >= calibration.sigma_b:
        why = "what bisections measured is preferred, and it is the larger"
        return StartingNoise(bisection, why, bisection, calibration, agreement)
    why = ("in doubt, the larger: the calibration measured more than the bisection did, and a σ too small makes "
           "false verdicts where one too large only costs trials")
    return StartingNoise(calibration, why, bisection, calibration, agreement)


def disagreement_line(start: StartingNoise) -> str:
    """Both figures with their dof, the test, and which one is used and why."""
    cal, bis, chosen = start.calibration, start.bisection, start.figure
    assert cal is not None and bis is not None and chosen is not None and start.agreement is not None
    return (
        f"calibrate measured σ_b {cal.describe()}, bisections on this host measured {bis.describe()}: they disagree "
        f"({start.agreement.describe()}). The next bisection starts from {chosen.sigma_b_pct:.1f}% ({chosen.origin}): "
        f"{start.why}."
    )


# ------------------------------------------------------------------------------------------------
# The noise model a command decides with


def starting_noise_for(ws: "Workspace", mode_name: str) -> StartingNoise:
    """``starting_noise`` over the figures stored for ``mode_name`` on this host."""
    key = ws.noise_key(ws.config.mode(mode_name))
    return starting_noise(ws.store.noise_estimates(mode_name, key.workload_hash), key)


def noise_model_and_note(ws: "Workspace", mode_names: Sequence[str]) -> tuple[NoiseModel, str | None]:
    """Between-trial noise for this host/mode/workload — the stored figure the module's rule picks,
    pooled with stored A/A trials of identical builds, else the stated prior — and a note when the
    figures disagree or were measured on another host."""
    if len(mode_names) != 1:
        # Ratio metrics: A/A data of the ratio itself is not pooled yet.
        return NoiseModel.prior(ws.config.stats.prior_sigma_pct), None
    return noise_model_for_key(ws, ws.noise_key(ws.config.mode(mode_names[0])))


def noise_model_for_key(ws: "Workspace", key: NoiseKey) -> tuple[NoiseModel, str | None]:
    """``noise_model_and_note`` for one noise key (a mode's, or one of its workload's siblings)."""
    cfg = ws.config
    prior = NoiseModel.prior(cfg.stats.prior_sigma_pct)
    estimates = ws.store.noise_estimates(key.mode, key.workload_hash)
    start = starting_noise(estimates, key)
    note = start.note()
    if start.figure is not None:
        f = start.figure
        prior = NoiseModel(sigma_b=f.sigma_b, dof=min(f.dof, LEARNED_DOF_CAP), source=start.source(), sigma_w=f.sigma_w)
    elif estimates:
        note = (
            f"the noise was learned on another host ({estimates[0].host}); this host ({ws.host}) differs "
            f"(GPU, count or driver), so the search starts from the {cfg.stats.prior_sigma_pct:g}% prior"
        )
    calibrated = {t.id for t in ws.store.trials(noise_key=key, purpose=TrialPurpose.CALIBRATE)}
    groups = [[t for t in g if t.id not in calibrated] for g in ws.store.identical_build_groups(key)]
    groups = [g for g in groups if len(g) >= 2]
    summaries = [[t.summary for t in g if t.summary is not None] for g in groups]
    within = run_logs(t for g in groups for t in g)
    return NoiseModel.from_groups([s for s in summaries if s], within=within, prior=prior), note


def noise_model(ws: "Workspace", mode_names: Sequence[str]) -> NoiseModel:
    """The noise model alone (``noise_model_and_note`` without its note)."""
    return noise_model_and_note(ws, mode_names)[0]


def keep_noise(ws: "Workspace", mode_names: Sequence[str], sigma_pct: float | None, dof: float | None, source: str,
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
# What `perfbisect calibrate` measured and says


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


__all__ = [
    "DISAGREE_ALPHA",
    "DISAGREE_SIGMA_RATIO",
    "LEARNED_DOF_CAP",
    "Agreement",
    "CalibrationNoise",
    "NoiseFigure",
    "StartingNoise",
    "calibration_lines",
    "calibration_noise",
    "detectable_lines",
    "disagreement_line",
    "keep_noise",
    "noise_model",
    "noise_model_and_note",
    "noise_model_for_key",
    "run_logs",
    "starting_noise",
    "starting_noise_for",
]
