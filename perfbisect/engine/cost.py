"""What a bisection costs: the estimate `plan` prints and `run` checks against `[cost] budget_gpu_hours`,
and what a finished one spent.

Trials: simulated. The REAL ``SearchPolicy`` (bisect.py) is run ``SIM_REPS`` times on synthetic
observations — the candidate count `plan` found, the noise model `run` would start from (learned on this
host, else A/A data, else ``stats.prior_sigma_pct``) as both the policy's prior and the simulated
noise, one level step at positions spread evenly over the range — and the estimate is the median count
with the 10th–90th percentile range. The step is the gap between the endpoints' stored trials on this
host when both have some, else the one the user states (``plan --effect PCT``), else an assumed
``DEFAULT_EFFECT_FACTOR`` × ``stats.min_effect_pct`` (a regression a few trials show clearly). What the
search costs depends on that step relative to the noise, which is why both are printed with the
estimate. Ranges longer than ``SIM_MAX_CANDIDATES`` are simulated at that length and extended by the
fitted growth below; past ``SIM_BUDGET_S`` CPU seconds (a slow machine) the simulations stop and the
fitted formula alone is used:

    trials ≈ 2 (one per endpoint) + 2 (the two-trials-each-side confirmation) + 1.2 × log2(candidates − 1)^1.5

(fitted to the demo and benchmarks/strategies.py; benchmarks/plan_estimate.py measures both against
real runs). With several metric modes (``ratio:``), each step runs one trial per mode.

Minutes per trial (``TrialTime``, read by the caller: the engine never opens the store): the median duration of
the trials stored on this host for the same mode and workload (``Workspace.noise_key``: start to finish, build and
server start included), else ``[cost] trial_minutes``, else unknown. GPU-hours = trial hours × ``[cost] gpus``.

Numbers and values only: where a figure comes from is a code with the numbers behind it (``TrialTime.source``,
``Effect.source``, ``Forecast.simulated_at``), and ``report/costs.py`` writes every sentence about them (issue #51).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..model import Observation, median
from ..settings import StatsConfig
from .stats import NoiseModel, log_of_pct, pct
from ..workload_kinds import kind_of

ENDPOINT_TRIALS = 2
CONFIRM_TRIALS = 2
SEARCH_COEF = 1.2  # trials ≈ ... + SEARCH_COEF × log2(candidates − 1) ** SEARCH_POWER
SEARCH_POWER = 1.5
# Simulated bisections behind one estimate, and the wall-clock budget `plan` gives them.
SIM_REPS = 11
SIM_BUDGET_S = 4.0  # CPU seconds; the demo's 4 and 20 candidates take about 0.1–1 s
NO_CHANGE_REPS = 5  # simulated bisections of a range with no change at all (the estimate's other outcome)
SIM_MAX_CANDIDATES = 32  # longer ranges: simulated at this length, extended by the fitted growth
# The regression assumed when neither stored endpoint trials nor the user say how big it is.
DEFAULT_EFFECT_FACTOR = 5.0
# A gap between two trials of one bisection longer than this (and than a median trial) is a pause
# (interrupted, resumed later): `spent` does not count it as wall time.
PAUSE_GAP_S = 300.0


def hours_unit(config) -> tuple[int, str]:
    """(factor, unit) of a target's hours: [cost] gpus and "GPU-hours" for a server target; 1 and
    "machine-hours" for a `command` workload, which starts no server and is given no GPU."""
    gpus = max(int(getattr(getattr(config, "cost", None), "gpus", 1) or 1), 1)
    if not kind_of(getattr(config, "workload", None)).serves and gpus == 1:
        return 1, "machine-hours"  # unless [cost] gpus says its trials hold GPUs (a command driving a GPU job)
    return gpus, "GPU-hours"


def expected_trials(candidates: int, max_total: int | None = None) -> int:
    """Trials a bisection over ``candidates`` measurable commits (endpoints included) is expected to take
    by the fitted formula (no simulation)."""
    out = int(round(_formula(candidates)))
    return min(out, max_total) if max_total else out


def _formula(candidates: int) -> float:
    n = max(candidates, 2)
    return ENDPOINT_TRIALS + CONFIRM_TRIALS + SEARCH_COEF * math.log2(n - 1) ** SEARCH_POWER


def simulate_trials(
    candidates: int,
    settings: StatsConfig,
    noise: NoiseModel,
    step_log: float,
    *,
    reps: int = SIM_REPS,
    budget_s: float = SIM_BUDGET_S,
    seed: int = 0,
) -> list[int]:
    """Trials the real SearchPolicy spends on ``reps`` simulated bisections of ``candidates`` commits.

    Each: i.i.d. normal trial noise, one level step of ``step_log`` at the k-th of ``reps`` positions
    spread evenly over the range, the policy started from ``noise``. A measured or learned ``noise`` is
    known to its degrees of freedom only, so each simulation draws its σ from that uncertainty
    (σ_b·√(dof/χ²_dof)); a pure prior (nothing measured) is taken as it is stated. Deterministic for a
    seed. Past ``budget_s`` seconds of CPU time the result is empty (the caller falls back to the
    fitted formula): all simulations or none, so the answer does not depend on the machine's load.
    """
    from .bisect import SearchPolicy  # the search itself (heavy: numpy/scipy posteriors)
    from .observations import Done

    n = max(int(candidates), 2)
    commits = [f"{i:040x}" for i in range(n)]
    deadline = time.process_time() + budget_s  # CPU seconds: a busy machine does not change the answer
    counts: list[int] = []
    for r in range(reps):
        at = 1 + min(int((r + 0.5) / reps * (n - 1)), n - 2)  # the first commit with the new level
        rng = np.random.default_rng([seed, r])
        sigma = noise.sigma_b
        if not noise.source.startswith("prior") and noise.dof > 0:
            sigma *= math.sqrt(noise.dof / max(float(rng.chisquare(noise.dof)), 1e-9))
        policy = SearchPolicy(commits, settings, noise)
        obs: list = []
        while True:
            if time.process_time() > deadline:
                return []  # all or none: a partial set would favour the short simulations
            action = policy.next(obs)
            if isinstance(action, Done):
                counts.append(action.outcome.trials_used)
                break
            i = policy.index[action.commit]
            value = (step_log if i >= at else 0.0) + float(rng.normal(0.0, sigma))
            obs.append(Observation(commit=action.commit, value=value, seq=len(obs)))
    return counts


def _percentile(sorted_counts: Sequence[int], q: float) -> int:
    """Nearest-rank percentile of sorted counts."""
    k = max(1, math.ceil(q * len(sorted_counts)))
    return int(sorted_counts[k - 1])


@dataclass(frozen=True)
class Effect:
    """The regression an estimate simulates, in percent (worse direction), and what says so: ``source`` "given"
    (`plan --effect`), "endpoints" (the endpoints' stored trials on this host: ``good_trials`` and ``bad_trials``
    of them, their medians ``gap_pct`` apart, signed) or "assumed" (``factor`` × stats.min_effect_pct,
    ``default_effect``). ``report.costs.effect_source`` words it."""

    pct: float
    source: str
    good_trials: int = 0
    bad_trials: int = 0
    gap_pct: float = 0.0
    factor: float = 0.0


@dataclass(frozen=True)
class Forecast:
    """Trials a bisection is expected to take: the median of simulated runs with its 10th–90th range."""

    trials: int
    low: int
    high: int
    runs: tuple[int, ...]  # simulated counts (empty: none finished within budget_s, the fitted formula's count)
    candidates: int  # the range's commits (at least 2)
    simulated_at: int  # the length the simulations ran at: candidates, or SIM_MAX_CANDIDATES for a longer range
    extended_by: float  # trials the fitted growth added to each simulated count for the longer range (else 0)
    budget_s: float  # CPU seconds the simulations were given
    effect: Effect  # the regression simulated
    noise_pct: float
    noise_source: str
    elapsed_s: float  # wall seconds the forecast took
    cpu_s: float  # CPU seconds (what the budget counts)
    no_change: int | None = None  # median trials when nothing changed at all (simulated), None: not simulated

    @property
    def effect_pct(self) -> float:
        return self.effect.pct


def forecast_trials(
    candidates: int,
    settings: StatsConfig,
    noise: NoiseModel,
    effect: Effect,
    *,
    higher_is_better: bool = True,
    budget_s: float = SIM_BUDGET_S,
    reps: int = SIM_REPS,
) -> Forecast:
    """Median and 10th–90th percentile of the trials the search spends (simulated; see the module doc)."""
    t0, c0 = time.monotonic(), time.process_time()
    n = max(int(candidates), 2)
    cap = settings.max_trials_total
    step = log_of_pct(-effect.pct if higher_is_better else effect.pct)
    sim_n = min(n, SIM_MAX_CANDIDATES)
    runs = simulate_trials(sim_n, settings, noise, step, reps=reps, budget_s=budget_s) if budget_s > 0 else []
    if runs:
        extra = _formula(n) - _formula(sim_n)
        counts = sorted(min(cap, int(round(c + extra))) for c in runs)
        trials, low, high = int(round(median(counts))), _percentile(counts, 0.1), _percentile(counts, 0.9)
    else:
        trials = expected_trials(n, cap)
        low = high = trials
        counts = []
        extra = 0.0
    # The other outcome a range can have: no regression at all (the endpoints decide it, or the tolerance
    # takes its trials to rule out). Simulated the same way, with no step, on what budget is left.
    left = budget_s - (time.process_time() - c0)
    flat = simulate_trials(sim_n, settings, noise, 0.0, reps=NO_CHANGE_REPS, budget_s=left) if left > 0 else []
    no_change = min(cap, int(round(median(flat)))) if flat else None
    return Forecast(
        trials=trials, low=low, high=high, runs=tuple(counts), candidates=n, simulated_at=sim_n, extended_by=extra,
        budget_s=budget_s, effect=effect,
        noise_pct=pct(noise.sigma_b), noise_source=noise.source,
        elapsed_s=time.monotonic() - t0, cpu_s=time.process_time() - c0, no_change=no_change,
    )


@dataclass(frozen=True)
class Estimate:
    """What bisecting a range would cost here: the forecast's trial steps and the hours and wall time they take at
    ``timing`` (``report.costs.estimate_lines`` and ``estimate_json`` say it)."""

    candidates: int
    trials: int  # trial steps (each one trial per metric mode): the forecast's median
    max_trials: int
    modes: int  # trials per step (metric modes)
    timing: TrialTime  # seconds per trial (one mode) and where that comes from
    gpus: int
    low: int = 0  # 10th percentile of the simulated counts (= trials for the formula)
    high: int = 0  # 90th percentile
    forecast: Forecast | None = None
    unit: str = "GPU-hours"  # "machine-hours" for a command target (cost.hours_unit)

    @property
    def trial_s(self) -> float | None:
        """Seconds per trial (one mode), None when unknown."""
        return self.timing.seconds

    @property
    def span(self) -> tuple[int, int]:
        """The 10th and 90th percentile of the simulated counts (both the median where none were kept)."""
        return self.low or self.trials, self.high or self.trials

    def hours(self, trials: int) -> float | None:
        """Hours (in ``unit``) of ``trials`` steps; None when a trial's time is unknown."""
        return None if self.trial_s is None else trials * self.modes * self.trial_s / 3600.0 * self.gpus

    def wall(self, trials: int) -> float | None:
        """Wall seconds of ``trials`` steps (one trial per metric mode each); None when a trial's time is unknown."""
        return None if self.trial_s is None else trials * self.modes * self.trial_s

    @property
    def wall_s(self) -> float | None:
        return self.wall(self.trials)

    @property
    def gpu_hours(self) -> float | None:
        return self.hours(self.trials)

    @property
    def max_gpu_hours(self) -> float | None:
        return self.hours(self.max_trials)


@dataclass(frozen=True)
class TrialTime:
    """Seconds one trial takes here (None: unknown), and where that figure comes from: ``source`` "stored" (the
    median of ``trials`` stored trials on this host), "configured" (``[cost] trial_minutes``) or "unknown"
    (``report.costs.trial_time_source`` words it)."""

    seconds: float | None
    source: str = "unknown"
    trials: int = 0  # "stored": how many stored trials the median is of


def trial_time(durations: Sequence[float], config) -> TrialTime:
    """From the durations of the trials stored on this host for the same modes and workload (the caller reads
    them: ``app.planning.trial_time``), else ``[cost] trial_minutes``, else unknown."""
    if durations:
        return TrialTime(median(list(durations)), "stored", trials=len(durations))
    if config.cost.trial_minutes > 0:
        return TrialTime(config.cost.trial_minutes * 60.0, "configured")
    return TrialTime(None, "unknown")


def default_effect(settings: StatsConfig) -> Effect:
    """The regression assumed when nothing says how big it is."""
    return Effect(DEFAULT_EFFECT_FACTOR * settings.min_effect_pct, "assumed", factor=DEFAULT_EFFECT_FACTOR)


def estimate(
    cfg,
    timing: TrialTime,
    candidates: int,
    noise: NoiseModel | None = None,
    effect: Effect | None = None,
    *,
    higher_is_better: bool = True,
    budget_s: float = SIM_BUDGET_S,
) -> Estimate:
    """Trials, wall time and GPU-hours of a bisection over ``candidates`` commits on this host (``timing``: what
one trial takes here, ``app.planning.trial_time``).

    ``noise``: the model `run` would start from (``app.calibration.noise_model``), else the configured prior;
    ``effect``: the regression to simulate (``Effect``), else ``default_effect``.
    """
    modes = cfg.metric_modes
    cap = cfg.stats.max_trials_total
    noise = noise or NoiseModel.prior(cfg.stats.prior_sigma_pct)
    f = forecast_trials(candidates, cfg.stats, noise, effect or default_effect(cfg.stats),
                        higher_is_better=higher_is_better, budget_s=budget_s)
    gpus, unit = hours_unit(cfg)
    return Estimate(
        candidates=candidates, trials=f.trials, max_trials=cap, modes=len(modes),
        timing=timing, gpus=gpus, low=f.low, high=f.high, forecast=f, unit=unit,
    )


def pauses(trials) -> list[tuple[float, float]]:
    """When nothing ran, as (from, to) times: gaps between trials longer than ``PAUSE_GAP_S`` and than a
    median trial, as when a bisection was interrupted and resumed later."""
    timed = sorted((t for t in trials if t.started_at and t.finished_at), key=lambda t: t.started_at)
    if not timed:
        return []
    typical = median([max(t.finished_at - t.started_at, 0.0) for t in timed]) or 0.0
    limit = max(PAUSE_GAP_S, typical)
    gaps = []
    seg_end = timed[0].finished_at
    for t in timed[1:]:
        if t.started_at - seg_end > limit:  # nothing ran in between: it was paused
            gaps.append((seg_end, t.started_at))
        seg_end = max(seg_end, t.finished_at)
    return gaps


def spent(trials, gpus: int, unit: str = "GPU-hours") -> dict:
    """What a bisection spent: its trials, the wall time it ran (first start to last finish, less the
    pauses: gaps between trials longer than ``PAUSE_GAP_S`` and than a median trial, as when it was
    interrupted and resumed later), and GPU-hours (each trial's duration × gpus)."""
    timed = sorted((t for t in trials if t.started_at and t.finished_at), key=lambda t: t.started_at)
    busy = sum(max(t.finished_at - t.started_at, 0.0) for t in timed)
    gaps = pauses(timed)
    paused = sum(b - a for a, b in gaps)
    wall = (max(t.finished_at for t in timed) - timed[0].started_at - paused) if timed else 0.0
    return {"trials": len(trials), "wall_s": wall, "paused_s": paused, "gpu_hours": busy / 3600.0 * gpus, "gpus": gpus,
            "hours_unit": unit}


@dataclass(frozen=True)
class SearchStatus:
    """Where a bisection stands before its next trial: what the progress display and heartbeat show (worded by
    ``report.costs.search_status_line`` and ``search_status_compact``)."""

    bisection_id: int
    trial: int  # the trial about to run, 1-based, as the budget counts them (untestable commits are not trials)
    max_trials: int  # stats.max_trials_total
    expected: int  # the estimate's trials (the estimate's own count: it may lie behind the trial by now)
    phase: str  # endpoints | locating | second-change check | confirming
    commit: str  # short sha about to be measured
    best: str  # best answer so far ("" before the search has one)
    p: float | None  # its probability given that something changed
    elapsed_s: float
    trial_s: float | None  # seconds per trial step: this run's own so far, else the estimate's
    untestable: int = 0  # observations that were not trials of the budget (untestable commits tried or marked)
    p_none: float | None = None  # the probability of no change at all
    check: str = ""  # what a check phase is checking ("that a second step on either side of the change would show")
    needs: int | None = None  # about how many more trials that check needs
    again: str = ""  # why the phase stepped back ("the newest trials moved the answer"), when it did

    @property
    def ahead(self) -> bool:
        """Whether the estimate still lies ahead: a total expected past the trial about to run."""
        return self.expected > self.trial

    @property
    def eta_s(self) -> float | None:
        """Seconds to the end as the estimate has it (this trial included); None when unknown or when the
        estimate's count is behind us (nothing says how far past it the search goes)."""
        if self.trial_s is None or self.expected < self.trial:
            return None
        return (self.expected - self.trial + 1) * self.trial_s

    @property
    def eta_is_lower_bound(self) -> bool:
        """In a phase that adds trials the estimate did not foresee (confirming a change, checking for a second
        one), or at its last trial: the ETA is at least this, not about this."""
        return self.trial >= self.expected or self.phase in ("confirming", "second-change check")

    @property
    def no_change_likeliest(self) -> bool:
        """Whether "no change at all" outweighs the best commit (whose ``p`` is given that something changed)."""
        return self.p_none is not None and self.p is not None and self.p_none >= self.p * (1.0 - self.p_none)
