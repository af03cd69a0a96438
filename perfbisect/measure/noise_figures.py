"""Noise figures: what calibrations and bisections on this host measured, the one rule for which of
them a command starts from, and the noise model over them for one noise key.

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

Which noise a command decides with (its modes; a ratio metric's prior), which figure it keeps, and what
`perfbisect calibrate` says are the use cases' (``app.calibration``); this module holds what they share
with measurement's choice of runs per trial (``run_allocation``, which starts from the same figure).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

from ..model import NoiseKey, TrialResult, pct
from ..engine.stats import NoiseModel, variance_ratio_test
from ..store import NoiseEstimate, TrialPurpose

if TYPE_CHECKING:  # the workspace is only passed through
    from .trial_context import TrialContext

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


def noise_model_for_key(ws: "TrialContext", key: NoiseKey) -> tuple[NoiseModel, str | None]:
    """Between-trial noise under one noise key (a mode's, or one of its workload's siblings) — the stored
    figure the module's rule picks, pooled with stored A/A trials of identical builds, else the stated
    prior — and a note when the figures disagree or were measured on another host
    (``app.calibration.noise_model_and_note`` asks it for a command's mode)."""
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



__all__ = [
    "DISAGREE_ALPHA",
    "DISAGREE_SIGMA_RATIO",
    "LEARNED_DOF_CAP",
    "Agreement",
    "NoiseFigure",
    "StartingNoise",
    "disagreement_line",
    "noise_model_for_key",
    "run_logs",
    "starting_noise",
]
