"""Runs per trial: how many measured runs one server session should hold (``workload.runs``).

A trial costs a fixed part T_start — server start, readiness, warm-up, teardown, everything but its
measured runs — plus R runs of T_run each. Its summary, the median of R log run values, varies by

    Var(R) = σ_b² + c(R) · σ_w² / R

where σ_b is the spread between sessions (restart, placement, clocks, heat), σ_w the spread of runs
within one session, and c(R) the variance of the median of R normal values relative to their mean's
(``median_efficiency``: 1 for R ≤ 2, 1.35 at R = 3, 1.43 at R = 5, π/2 as R grows; even R do better
than their odd neighbours because their median averages the two middle values). Runs inside a
session never average σ_b away, so extra runs pay only against σ_w, while each extra session pays
T_start again. A bisection needs a given total information Σ 1/Var over its trials; with R runs per
trial one unit of it costs

    f(R) = (T_start + R · T_run) · (σ_b² + c · σ_w² / R).

At constant c, df/dR = T_run · σ_b² − T_start · c · σ_w² / R² = 0 gives the optimum

    R* = sqrt(T_start · c · σ_w² / (T_run · σ_b²)),

e.g. σ_b 3%, σ_w 8%, T_start 5.5 min, T_run 25 s, c = 1.43: R* = 11.6. ``optimal_runs`` minimises
f(R) itself over the integers ``MIN_RUNS``..``MAX_RUNS`` with c = c(R), which lands within one run of
the formula. The σ_b used is the noise model's between-trial figure; measured from trial summaries it
also holds the runs' own share c·σ_w²/R₀, so R* from it leans towards fewer runs and more sessions
(the safer side: sessions also average the session-level state runs cannot).

T_start and T_run are read from stored trials of this host and mode whose workload differs at most in
its run count (``trial_timings``: a trial's duration from its begin to its end minus its measured runs,
each run the median gap between consecutive runs' landing times); σ_w from those trials' runs, σ_b from
the noise model a bisection would start from (that of the trials' key when the configured one has
none yet). ``workload.runs = 0`` (auto) applies R* (``FALLBACK_RUNS`` until timings and σ_w are
measured); ``calibrate`` and ``doctor`` print the advice either way.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

from .noise_figures import noise_model_for_key, run_logs
from ..model import NoiseKey, TrialResult, TrialStatus, pct
from ..workload_kinds import kind_of

if TYPE_CHECKING:  # the workspace is only passed through
    from .trial_context import TrialContext

MIN_RUNS, MAX_RUNS = 3, 30  # what auto may choose: fewer leaves no median, more is one session's luck
FALLBACK_RUNS = 5  # auto's choice before anything is measured on this host (the user's protocol)
RECENT_TRIALS = 50  # timings and σ_w come from this many most recent trials

# c(R) = R · Var(median of R standard normal values), R = 1..30: exact (order-statistic integrals,
# scipy.integrate, rounded). Beyond 30 the asymptote π/2.
_MEDIAN_EFFICIENCY = (
    1.0, 1.0, 1.346, 1.193, 1.434, 1.288, 1.473, 1.345, 1.495, 1.383,
    1.509, 1.410, 1.518, 1.430, 1.525, 1.446, 1.531, 1.459, 1.535, 1.469,
    1.538, 1.477, 1.541, 1.484, 1.544, 1.491, 1.546, 1.496, 1.547, 1.501,
)


def median_efficiency(runs: int) -> float:
    """c(R): the variance of the median of R runs over that of their mean (1 for the mean itself)."""
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    return _MEDIAN_EFFICIENCY[runs - 1] if runs <= len(_MEDIAN_EFFICIENCY) else math.pi / 2


def cost_per_information(runs: int, start_s: float, run_s: float, sigma_b: float, sigma_w: float) -> float:
    """f(R) = (T_start + R·T_run)·(σ_b² + c(R)·σ_w²/R): seconds per unit of 1/variance (σ on the log scale)."""
    return (start_s + runs * run_s) * (sigma_b**2 + median_efficiency(runs) * sigma_w**2 / runs)


def closed_form_runs(start_s: float, run_s: float, sigma_b: float, sigma_w: float, c: float = 1.43) -> float:
    """R* = sqrt(T_start·c·σ_w² / (T_run·σ_b²)): the optimum at constant c (the module docstring)."""
    if run_s <= 0 or sigma_b <= 0:
        return math.inf
    return math.sqrt(start_s * c * sigma_w**2 / (run_s * sigma_b**2))


def optimal_runs(start_s: float, run_s: float, sigma_b: float, sigma_w: float,
                 lo: int = MIN_RUNS, hi: int = MAX_RUNS) -> int:
    """The run count in lo..hi with the least cost per unit of information (ties: fewer runs)."""
    return min(range(lo, hi + 1), key=lambda r: (cost_per_information(r, start_s, run_s, sigma_b, sigma_w), r))


@dataclass(frozen=True)
class TrialTimings:
    """What stored trials of this host took: the fixed part of a trial and one measured run."""

    start_s: float  # median over trials of (end − begin) − measured runs × run_s
    run_s: float  # median over trials of the median gap between consecutive runs' landing times
    trials: int  # how many stored trials they come from


def trial_timings(trials: Sequence[TrialResult]) -> TrialTimings | None:
    """Timings from finished trials whose runs carry their landing times (None when none do)."""
    starts: list[float] = []
    runs: list[float] = []
    for t in trials:
        stamps = [r.recorded_at for r in t.runs if r.recorded_at is not None]
        measured = sum(1 for r in t.runs if not r.warmup)
        if t.status is not TrialStatus.OK or t.finished_at <= t.started_at or len(stamps) < 2 or not measured:
            continue
        gaps = [b - a for a, b in zip(stamps, stamps[1:]) if b > a]
        if not gaps:
            continue
        run_s = statistics.median(gaps)
        runs.append(run_s)
        starts.append(max(t.finished_at - t.started_at - measured * run_s, 0.0))
    if not runs:
        return None
    return TrialTimings(statistics.median(starts), statistics.median(runs), len(runs))


def within_sigma(trials: Sequence[TrialResult]) -> float | None:
    """σ_w: the pooled spread of log run values inside each trial (None without two runs in one)."""
    ss, dof = 0.0, 0
    for logs in run_logs(trials):
        if len(logs) >= 2:
            mean = sum(logs) / len(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            dof += len(logs) - 1
    return math.sqrt(ss / dof) if dof else None


@dataclass(frozen=True)
class RunsAdvice:
    """How many runs per trial, from this host's measured noise and timings."""

    configured: int  # workload.runs (0 = auto)
    runs: int  # what a trial runs: the configured count, or auto's choice
    recommended: int | None  # the cheapest count; None when nothing measured recommends one
    sigma_b: float | None = None  # log scale
    sigma_b_assumed: bool = False  # σ_b is the configured prior, not a measurement
    sigma_w: float | None = None
    timings: TrialTimings | None = None
    missing: str | None = None  # why there is no recommendation
    nothing_to_choose: str | None = None  # the workload holds one measured result per trial, whatever runs says

    @property
    def saving_pct(self) -> float | None:
        """How much less a unit of information costs at the recommended count than at ``runs``."""
        if self.recommended is None or self.timings is None or self.sigma_b is None or self.sigma_w is None:
            return None
        args = (self.timings.start_s, self.timings.run_s, self.sigma_b, self.sigma_w)
        return 100.0 * (1.0 - cost_per_information(self.recommended, *args) / cost_per_information(self.runs, *args))

    def basis(self) -> str:
        """"σ_b 3.0%, σ_w 8.0%, start 5.5 min, run 25 s; 14 stored trials"."""
        assert self.sigma_b is not None and self.sigma_w is not None and self.timings is not None
        assumed = " (the prior: assumed, not measured)" if self.sigma_b_assumed else ""
        t = self.timings
        return (f"σ_b {pct(self.sigma_b):.1f}%{assumed}, σ_w {pct(self.sigma_w):.1f}%, start {_seconds(t.start_s)}, "
                f"run {_seconds(t.run_s)}; {t.trials} stored trial{'s' if t.trials != 1 else ''}")

    def line(self) -> str:
        """One line for calibrate, doctor and auto's choice."""
        if self.nothing_to_choose is not None:
            return f"runs per trial: nothing to choose ({self.nothing_to_choose})"
        if self.missing is not None:
            if self.configured == 0:
                return f"runs per trial: auto → {self.runs} until this host's noise and timings are measured ({self.missing})"
            return f"runs per trial: {self.runs} now; no recommendation yet ({self.missing})"
        assert self.recommended is not None
        if self.configured == 0:
            return f"runs per trial: auto → {self.recommended}, the cheapest per unit of information at {self.basis()}"
        if self.recommended == self.runs:
            return f"runs per trial: {self.runs} now, the cheapest per unit of information at {self.basis()}"
        return (
            f"runs per trial: {self.runs} now; {self.recommended} would reach the same precision for "
            f"{self.saving_pct:.0f}% less time at {self.basis()} (workload.runs = {self.recommended}, or 0 for auto)"
        )


def _seconds(s: float) -> str:
    if s >= 90:
        return f"{s / 60:.1f} min"
    return f"{s:.0f} s" if s >= 10 else f"{s:.2g} s"


def sibling_keys(ws: "TrialContext", mode_name: str) -> dict[str, NoiseKey]:
    """Workload hash -> noise key, for this host and mode and the configured workload at every run
    count auto may choose (and the configured one): trials that differ only in how many runs they held."""
    cfg = ws.config
    mode = cfg.mode(mode_name)
    key = ws.noise_key(mode)
    counts = {0, cfg.workload.runs, *range(1, MAX_RUNS + 1)}
    keys = {key.workload_hash: key}
    for n in sorted(counts):
        h = replace(cfg.workload, runs=n).config_hash()
        keys.setdefault(h, key._replace(workload_hash=h))
    return keys


def runs_advice(ws: "TrialContext", mode_name: str) -> RunsAdvice:
    """The run count a trial of ``mode_name`` runs (auto resolved) and the cheapest one, with its basis."""
    cfg = ws.config
    w = cfg.workload
    configured = w.runs
    fallback = configured or FALLBACK_RUNS
    single = kind_of(w).single_invocation
    if single:
        return RunsAdvice(configured, fallback, None, nothing_to_choose=single)
    keys = sibling_keys(ws, mode_name)
    host = ws.host
    stored = [t for t in ws.store.trials(mode=mode_name) if t.identity.host == host and t.identity.workload_hash in keys]
    recent = stored[-RECENT_TRIALS:]
    timings = trial_timings(recent)
    sigma_w = within_sigma(recent)
    # σ_b from the configured key's noise model, else from the first sibling key (most trials first)
    # that measured or learned one: switching to auto must not forget what runs = 5 measured.
    by_count: dict[str, int] = {}
    for t in stored:
        by_count[t.identity.workload_hash] = by_count.get(t.identity.workload_hash, 0) + 1
    own = ws.noise_key(cfg.mode(mode_name))
    order = [own] + sorted((k for h, k in keys.items() if h != own.workload_hash), key=lambda k: -by_count.get(k.workload_hash, 0))
    noise = noise_model_for_key(ws, own)[0]
    for key in order[1:]:
        if not noise.source.startswith("prior"):
            break
        candidate = noise_model_for_key(ws, key)[0]
        if not candidate.source.startswith("prior"):
            noise = candidate
    assumed = noise.source.startswith("prior")
    if timings is None or sigma_w is None:
        why = "no stored trial of this mode on this host yet" if not recent else "its stored trials carry no run times or too few runs"
        return RunsAdvice(configured, fallback, None, noise.sigma_b, assumed, sigma_w, timings, missing=why)
    best = optimal_runs(timings.start_s, timings.run_s, noise.sigma_b, sigma_w)
    return RunsAdvice(configured, configured or best, best, noise.sigma_b, assumed, sigma_w, timings)


__all__ = [
    "FALLBACK_RUNS",
    "MAX_RUNS",
    "MIN_RUNS",
    "RunsAdvice",
    "TrialTimings",
    "closed_form_runs",
    "cost_per_information",
    "median_efficiency",
    "optimal_runs",
    "runs_advice",
    "sibling_keys",
    "trial_timings",
    "within_sigma",
]
