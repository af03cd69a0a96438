"""What a bisection costs: the estimate `plan` prints and `run` checks against `[cost] budget_gpu_hours`,
and what a finished one spent.

Trials: a model of the search's own behaviour, fitted to what the real ``SearchPolicy`` spent:

    trials ≈ 2 (one per endpoint) + 2 (the two-trials-each-side confirmation) + 1.2 × log2(candidates − 1)^1.5

Each halving costs more trials the longer the search (levels learned from fewer trials each, drift
between far-apart trials), hence the power 1.5 rather than a constant per bit. Fitted points, mean
trials: the 4-candidate demo 6.7 over six runs (6–9; model 6.4), simulated 9-commit ranges 10.2 (S1;
model 10.2), the 20-candidate demo 11.5 over eight runs (8–17; model 14.2), simulated 64-commit
ranges 23.6 (model 21.5). One bisection's count spreads about ±35% around such means. A range
with no change costs about as much (S0 21.0, D1-AA 17.2, D2-AA 21.0). ``stats.max_trials_total``
caps it. With several metric modes (``ratio:``), each step runs one trial per mode. It does not yet
use the host's learned noise (a noisier host needs more trials per halving).

Minutes per trial: the median duration of the trials stored on this host for the same mode and
workload (``Workspace.noise_key``: start to finish, build and server start included), else
``[cost] trial_minutes``, else unknown. GPU-hours = trial hours × ``[cost] gpus``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .model import median

ENDPOINT_TRIALS = 2
CONFIRM_TRIALS = 2
SEARCH_COEF = 1.2  # trials ≈ ... + SEARCH_COEF × log2(candidates − 1) ** SEARCH_POWER
SEARCH_POWER = 1.5


def expected_trials(candidates: int, max_total: int | None = None) -> int:
    """Trials a bisection over ``candidates`` measurable commits (endpoints included) is expected to take."""
    n = max(candidates, 2)
    trials = ENDPOINT_TRIALS + CONFIRM_TRIALS + SEARCH_COEF * math.log2(n - 1) ** SEARCH_POWER
    out = int(round(trials))
    return min(out, max_total) if max_total else out


@dataclass(frozen=True)
class Estimate:
    candidates: int
    trials: int  # trial steps (each one trial per metric mode)
    max_trials: int
    modes: int  # trials per step (metric modes)
    trial_s: float | None  # seconds per trial (one mode), None when unknown
    source: str  # where trial_s comes from
    gpus: int

    @property
    def wall_s(self) -> float | None:
        return None if self.trial_s is None else self.trials * self.modes * self.trial_s

    @property
    def gpu_hours(self) -> float | None:
        return None if self.wall_s is None else self.wall_s / 3600.0 * self.gpus

    @property
    def max_gpu_hours(self) -> float | None:
        return None if self.trial_s is None else self.max_trials * self.modes * self.trial_s / 3600.0 * self.gpus

    def line(self) -> str:
        head = f"estimate: ~{self.trials} trials" + (f" × {self.modes} modes" if self.modes > 1 else "")
        head += f" (at most {self.max_trials}, stats.max_trials_total; model: endpoints + confirmation + 1.2 × log2({self.candidates - 1})^1.5, fitted to the demo and benchmarks/strategies.py)"
        if self.trial_s is None:
            return head + "; time unknown: no trial stored on this host yet — set [cost] trial_minutes"
        return (
            f"{head}; {format_duration(self.wall_s)} wall, {self.gpu_hours:.2f} GPU-hours "
            f"(at most {self.max_gpu_hours:.2f}) at {format_duration(self.trial_s)} per trial ({self.source}) × {self.gpus} GPU"
            + ("s" if self.gpus != 1 else "")
        )


def trial_seconds(ws, mode_names: Sequence[str]) -> tuple[float | None, str]:
    """Seconds one trial takes here: stored trials of this host/mode/workload, else the config."""
    durations: list[float] = []
    for name in mode_names:
        key = ws.noise_key(ws.config.mode(name))
        durations += [
            t.finished_at - t.started_at for t in ws.store.trials(noise_key=key, status=None)
            if t.finished_at and t.started_at and t.finished_at > t.started_at
        ]
    if durations:
        return median(durations), f"median of {len(durations)} stored trial{'s' if len(durations) != 1 else ''} on this host"
    if ws.config.cost.trial_minutes > 0:
        return ws.config.cost.trial_minutes * 60.0, "[cost] trial_minutes"
    return None, "unknown"


def estimate(ws, candidates: int) -> Estimate:
    cfg = ws.config
    modes = cfg.metric_modes
    trial_s, source = trial_seconds(ws, modes)
    cap = cfg.stats.max_trials_total
    return Estimate(
        candidates=candidates, trials=expected_trials(candidates, cap), max_trials=cap, modes=len(modes),
        trial_s=trial_s, source=source, gpus=cfg.cost.gpus,
    )


def spent(trials, gpus: int) -> dict:
    """What a bisection spent: its trials, the wall time from the first start to the last finish,
    and GPU-hours (each trial's duration × gpus)."""
    timed = [t for t in trials if t.started_at and t.finished_at]
    busy = sum(max(t.finished_at - t.started_at, 0.0) for t in timed)
    wall = (max(t.finished_at for t in timed) - min(t.started_at for t in timed)) if timed else 0.0
    return {"trials": len(trials), "wall_s": wall, "gpu_hours": busy / 3600.0 * gpus, "gpus": gpus}


def spent_line(s: dict) -> str:
    return (
        f"spent: {s['trials']} trials, {format_duration(s['wall_s'])} wall, {s['gpu_hours']:.2f} GPU-hours "
        f"(trial time × {s['gpus']} GPU{'s' if s['gpus'] != 1 else ''}, [cost] gpus)"
    )


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


@dataclass(frozen=True)
class SearchStatus:
    """Where a bisection stands before its next trial: what the progress display and heartbeat show."""

    bisection_id: int
    trial: int  # the trial about to run, 1-based
    max_trials: int  # stats.max_trials_total
    expected: int  # the estimate's trials
    phase: str  # endpoints | locating | second-change check | confirming
    commit: str  # short sha about to be measured
    best: str  # best answer so far ("" before the search has one)
    p: float | None
    elapsed_s: float
    trial_s: float | None  # seconds per trial step: this run's own so far, else the estimate's

    @property
    def eta_s(self) -> float | None:
        if self.trial_s is None:
            return None
        return max(self.expected - self.trial + 1, 1) * self.trial_s

    def line(self) -> str:
        best = f" · best: {self.best} p={self.p:.2f}" if self.best and self.p is not None else ""
        eta = format_duration(self.eta_s) if self.eta_s is not None else "?"
        return (
            f"bisection #{self.bisection_id}: trial {self.trial} of at most {self.max_trials} (~{self.expected} expected)"
            f" · {self.phase} · {self.commit}{best} · {format_duration(self.elapsed_s)} elapsed · ETA ~{eta}"
        )
