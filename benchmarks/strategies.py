"""Benchmark of bisection strategies on simulated noisy targets, driving the REAL SearchPolicy.

Cost model (the user's node, DESIGN.md §1/§6): a trial is a 5.5 min server start plus
(2 warm-up + 5 measured runs) × 25 s; building a commit (Python-only) costs 0.5 min the first time
it is measured, and an untestable commit costs that build attempt and no trial. A simulated wall
clock advances by those costs, so every trial has a run position (``seq``) and a start time (``at``).

A trial summary = level(commit) + session effect + median of 5 runs of N(0, σ_w). The session effect
comes from the scenario's noise process, evaluated at the trial's position in run order:
  iid     N(0, σ_b) (S0–S6; in HS σ_b differs before and from the first change: a host-bound fast side)
  ar1     AR(1) drift over trial order (phi, stationary sd) plus an iid N(0, σ_b) part
  shift   iid N(0, σ_b) plus one ±shift of the whole machine from a trial drawn in a window onwards
  t3      Student-t, 3 dof, scaled so its sd is σ_b (heavy tails)
  bursts  iid N(0, σ_b) plus bursts of other CPU load (−10…−15% while they last), recorded as the
          exogenous covariate ``other_load``
  replay  bootstrap of recorded per-session summaries of one build, centred on their mean
On top: throttled trials (S6: clock recorded; S6c: the external clock cap recorded too; T1: the runner
flags them and re-runs them) and, in M1, mediators (power, utilisation, temperature) that the code
change itself moves and that track the session effect within a build.

Usage:
    python benchmarks/strategies.py --json                    # every scenario, 1,000 reps per cell
    python benchmarks/strategies.py --reps 100 --scenarios S2,S3
    python benchmarks/strategies.py --reps 40 --scenarios S2,D2,D2-AA,M1 --strategies perfbisect,oracle-sprt
    python benchmarks/strategies.py --quick                   # 40 reps of S2, D1, D2, M1 and twins, A/A compare
    python benchmarks/strategies.py --aa-only --aa-reps 2000  # only the A/A repeated-look table
    # the oracle's SPRT without being told the levels (single-change cells; PB_SPRT_ENDS, PB_SPRT_CAP)
    python benchmarks/strategies.py --reps 300 --scenarios S1,S2,R1,R2 --strategies sprt-learned-levels,oracle-sprt
    # the Bayesian references (issue #35) on seeds the engine was never tuned on (it was tuned on 0-299)
    python benchmarks/strategies.py --reps 300 --seed-base 100000 --scenarios S2,R1 --strategies perfbisect,bayes-learner
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfbisect.engine.bisect import SearchPolicy  # noqa: E402
from perfbisect.model import Observation  # noqa: E402
from perfbisect.settings import StatsConfig  # noqa: E402
from perfbisect.engine.stats import NoiseModel, compare  # noqa: E402
from perfbisect.engine.tuning import DEFAULT_TUNING, Tuning  # noqa: E402

import bayes_reference  # noqa: E402  (benchmarks/, beside this file)
import bayes_two  # noqa: E402
from simulated_target import LOG82, search, search_on_nodes, step_levels  # noqa: E402  (shared with the tests)

START_MIN = 5.5 + 2 * 25 / 60  # a session's fixed part: start, readiness, 2 warm-up runs
RUN_MIN = 25 / 60  # one measured run
RUNS = 5  # measured runs per trial (--runs; "auto": the cheapest count per unit of information, per scenario)
SUMMARY = "median"  # a trial's summary of its runs' log values (--summary: median, mean, hl)
# how a trial with layouts randomised picks its layout (--layout-draw): "rotate" as perfbisect's layout.choose does
# (a commit's trials go through the pool in turn from a start of its own), "uniform" as it did before (each trial
# draws one independently)
LAYOUT_DRAW = "rotate"
BUILD_MIN = 0.5
CLOCK_MHZ = 1980.0
CLOCK_CAP_MHZ = 1780.0  # the external cap a throttled trial runs under
MAX_RERUNS = 3  # the runner re-runs a flagged trial at most this often, then keeps the last one
T0_UNIX = 1_796_083_200.0  # 2026-12-01 00:00 UTC: the simulated clock's start

# Per-session summaries of one build (same commit, same mode), used by the replay scenarios.
# H200: mean decode tok/s of four server sessions of one build (DESIGN.md §1; σ_w 6.2% inside a session).
H200_SESSIONS = (39.4, 43.5, 44.0, 39.8)
H200_SIGMA_W_PCT = 6.2
# Dev machine (2 cores, shared: a 2-worker run of this benchmark was going at the same time), recorded
# 2026-11-30 18:28 UTC: 20 separate `python3 -c` processes, each timing a pure-Python loop
# (sum(i*i % 7), 300k iterations) 2 warm-up + 7 measured times; per process the median rate, calls/s.
# sd of the session summaries 16.4% (log), pooled within-process σ_w 21.4%.
DEV_SESSIONS = (17.95, 20.97, 23.16, 16.95, 21.02, 20.49, 21.06, 19.12, 20.80, 21.12,
                21.69, 20.47, 20.28, 20.06, 21.04, 15.51, 15.09, 12.59, 14.02, 18.13)
DEV_SIGMA_W_PCT = 21.4

# Mediator scenario (M1): power at the good build's level, and how strongly power, utilisation and
# throughput move together (log power = POWER_ELASTICITY × log throughput change): −15% throughput
# takes 650 W to 560 W.
POWER_W = 650.0
POWER_ELASTICITY = math.log(560.0 / 650.0) / math.log(0.85)
POWER_NOISE_W = 20.0  # power noise not shared with throughput: within a build r(throughput, power) ≈ 0.7
UTIL_PCT = 97.0
UTIL_ELASTICITY = 0.6


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    n: int
    sigma_b_pct: float
    sigma_w_pct: float
    steps_pct: tuple[float, ...] = ()  # one entry per change, applied in order of position
    untestable_frac: float = 0.0
    throttle_frac: float = 0.0  # share of trials that run throttled (clock −10%, throughput −6%)
    history_good_pct: float | None = None  # a stored earlier trial of the good commit, this much higher
    # session-noise process (see the module docstring)
    noise: str = "iid"  # iid | ar1 | shift | t3 | bursts | replay
    ar_phi: float = 0.9
    ar_sd_pct: float = 0.0
    shift_pct: float = 0.0  # ± this (sign drawn per target), from a trial drawn uniformly in shift_window
    shift_window: tuple[int, int] = (6, 25)  # 1-based trial numbers
    burst_start_prob: float = 0.0  # per trial, outside a burst
    burst_len: tuple[int, int] = (3, 6)  # trials, inclusive
    burst_pct: tuple[float, float] = (10.0, 15.0)  # throughput lost during a burst
    replay: tuple[float, ...] = ()  # per-session summaries of one build, resampled and centred
    # what the runner records / flags
    flag_throttled: bool = False  # throttled trials come back flagged (and are re-run)
    clock_cap: bool = False  # record the exogenous clock_cap_mhz next to the mediator sm_clock_mean_mhz
    mediator: bool = False  # record power / utilisation / temperature that the code change moves
    twin_of: str | None = None  # A/A twin: the same noise as this scenario, no change
    # miscalibrated noise: perfbisect starts from a stored σ that is the true one divided by U(lo, hi)
    # (what a calibration of quiet back-to-back sessions reports), with this many dof
    stored_sigma_ratio: tuple[float, float] | None = None
    stored_dof: float = 20.0
    # layout: commits that change only the code layout; from each on, the level moves ±layout_pct at
    # layout_shifted of layout_pool layouts (the fixed one, layout 0, among them) and ~N(0, 1%) at the rest
    layout_commits: int = 0
    layout_pct: float = 7.0
    layout_pool: int = 8
    layout_shifted: int = 2
    # the regression a `same` verdict would wrongly wave through (tolerance-edge scenarios)
    edge: bool = False
    # heteroscedastic sessions: from the first change on (a random commit in an A/A twin) the session sd is
    # this instead of sigma_b_pct (the H200 host: host-bound and spread 10.9% before the planted slowdown,
    # GPU-bound at 0.8% after it)
    sigma_b_after_pct: float | None = None


def _aa(s: Scenario) -> Scenario:
    # the twin keeps the layout commits (they are not changes) and the miscalibration
    return replace(s, name=f"{s.name}-AA", title=f"A/A twin of {s.name}: same noise, no change, {s.n} commits",
                   steps_pct=(), twin_of=s.name)


_BASE = [
    Scenario("S0", "drift only: 9 commits, no change, σ_w 0.8%, σ_b 3%, history +7%", 9, 3.0, 0.8,
             history_good_pct=7.0),
    Scenario("S1", "user's case: 9 commits, speculative mode −27%, σ_w 8%, σ_b 3%", 9, 3.0, 8.0, (-27.0,)),
    Scenario("S2", "64 commits, one −8% step, σ_b 3%, σ_w 1%", 64, 3.0, 1.0, (-8.0,)),
    Scenario("S3", "64 commits, one −4% step, σ_b 1.5%, σ_w 1%", 64, 1.5, 1.0, (-4.0,)),
    Scenario("S4", "S2 with 15% untestable commits, some next to the culprit", 64, 3.0, 1.0, (-8.0,),
             untestable_frac=0.15),
    Scenario("S5", "64 commits, −10% at one commit and −6% at a later one", 64, 3.0, 1.0, (-10.0, -6.0)),
    # issue #35: the smaller change first — a search that finds only the larger one names a commit after the first
    # bad one (a false "first bad commit" that the culprit-in-truth score of S5 does not count: see wrong_first)
    Scenario("S5r", "64 commits, −6% at one commit and −10% at a later one", 64, 3.0, 1.0, (-6.0, -10.0)),
    Scenario("S6", "S2 with a third of trials throttled (clock −10%, −6%), clock recorded", 64, 3.0, 1.0,
             (-8.0,), throttle_frac=1 / 3),
    Scenario("S6c", "S6 with the external clock cap (exogenous clock_cap_mhz) recorded too", 64, 3.0, 1.0,
             (-8.0,), throttle_frac=1 / 3, clock_cap=True),
]
_WITH_TWINS = [
    Scenario("D1", "64 commits, −8%; AR(1) drift over trial order (phi 0.9, sd 3%) + iid σ_b 1.5%, σ_w 1%",
             64, 1.5, 1.0, (-8.0,), noise="ar1", ar_phi=0.9, ar_sd_pct=3.0),
    Scenario("D2", "S2 (64 commits, −8%, σ_b 3%, σ_w 1%) + one ±7% machine shift from a trial in 6..25",
             64, 3.0, 1.0, (-8.0,), noise="shift", shift_pct=7.0),
    Scenario("D3", "64 commits, −8%; heavy-tailed session effects: Student-t 3 dof with sd 3%, σ_w 1%",
             64, 3.0, 1.0, (-8.0,), noise="t3"),
    Scenario("D4", "S2 + CPU-load bursts (p 0.08/trial, 3–6 trials, −10…−15%), other_load recorded",
             64, 3.0, 1.0, (-8.0,), noise="bursts", burst_start_prob=0.08),
    Scenario("M1", "9 commits, −15% that also takes power 650→560 W and utilisation 97→88%; σ_b 3%, σ_w 1%",
             9, 3.0, 1.0, (-15.0,), mediator=True),
    Scenario("T1", "S2 with a third of trials throttled (−6%), flagged by the runner and re-run",
             64, 3.0, 1.0, (-8.0,), throttle_frac=1 / 3, flag_throttled=True),
    Scenario("R1", "9 commits, −8%; session effects replayed from 4 H200 sessions (sd ≈5%), σ_w 6.2%",
             9, 0.0, H200_SIGMA_W_PCT, (-8.0,), noise="replay", replay=H200_SESSIONS),
    Scenario("R2", "9 commits, −27%; session effects replayed from 20 dev-machine processes (sd 16%), σ_w 21%",
             9, 0.0, DEV_SIGMA_W_PCT, (-27.0,), noise="replay", replay=DEV_SESSIONS),
]
# issue #35: R1's replay has four values (lumpy, bounded); its parametric twins draw normal sessions instead
_WITH_TWINS += [
    Scenario("R1-P5", "9 commits, −8%; normal session effects, sd 5% (R1's replay, parametric), σ_w 6.2%",
             9, 5.0, H200_SIGMA_W_PCT, (-8.0,)),
    Scenario("R1-P10", "9 commits, −8%; normal session effects, sd 10% (twice R1's), σ_w 6.2%",
             9, 10.0, H200_SIGMA_W_PCT, (-8.0,)),
]
# issue #19: noise a stored figure underestimates, layout bias, and the edge of the tolerance
_WITH_TWINS += [
    Scenario("MC", "64 commits, −8%; session noise σ_b 4%, σ_w 1%; perfbisect starts from a stored σ 2–4× too small (20 dof)",
             64, 4.0, 1.0, (-8.0,), stored_sigma_ratio=(2.0, 4.0)),
    Scenario("LY", "32 commits, −8%; 2 commits shift the level ±7% through code layout at 2 of 8 layouts, σ_b 2%, σ_w 1%",
             32, 2.0, 1.0, (-8.0,), layout_commits=2),
    Scenario("HS", "16 commits, −13%; sessions spread 10% before the change and 1% from it on (the H200 host, round 3), σ_w 1%",
             16, 10.0, 1.0, (-13.0,), sigma_b_after_pct=1.0),
]
_EDGE = [
    Scenario("TE", "tolerance edge: 9 commits, a −5% step (= stats.tolerance_pct), σ_b 3%, σ_w 1%; `same` would be false",
             9, 3.0, 1.0, (-5.0,), edge=True),
    Scenario("TE-R", "tolerance edge under the H200 replay: 9 commits, −5%, R1's session noise; `same` would be false",
             9, 0.0, H200_SIGMA_W_PCT, (-5.0,), noise="replay", replay=H200_SESSIONS, edge=True),
]
_BASE += _EDGE
SCENARIOS: dict[str, Scenario] = {s.name: s for s in _BASE}
for _s in _WITH_TWINS:
    SCENARIOS[_s.name] = _s
    SCENARIOS[f"{_s.name}-AA"] = _aa(_s)
# S2's A/A twin (no change, S2's noise): the host-offset check of --nodes runs on it.
SCENARIOS["S2-AA"] = _aa(SCENARIOS["S2"])
# The default set (every scenario); S6c is S6 with one more covariate and S2-AA a twin for the node
# runs, so they are left out unless named.
DEFAULT_SCENARIOS = [k for k in SCENARIOS if k not in ("S6c", "S2-AA")]
# --quick: one plain case, the two drift cases and the mediator case, each with its A/A twin.
QUICK_SCENARIOS = ["S2", "D1", "D1-AA", "D2", "D2-AA", "M1", "M1-AA"]


@dataclass
class Trial:
    """One server session as the runner reports it."""

    value: float  # log summary (median of the runs)
    runs: np.ndarray
    cov: dict[str, float]
    flag: str | None
    seq: int  # trial number on this target, flagged trials included
    at: float  # wall-clock start (unix seconds, simulated)
    known: float = 0.0  # the part of the session effect the oracle knows and removes (throttle, burst)
    layout: int | None = None  # the layout it ran under (layout scenarios only)


def hodges_lehmann(x: np.ndarray) -> float:
    """The median of the Walsh averages (x_i + x_j)/2, i ≤ j: 95% as efficient as the mean on normal runs,
    robust to 29% of them wild (the median of 5 is 70% as efficient)."""
    i, j = np.triu_indices(len(x))
    return float(np.median((x[i] + x[j]) / 2))


SUMMARIES: dict[str, Callable[[np.ndarray], float]] = {
    "median": lambda x: float(np.median(x)),
    "mean": lambda x: float(np.mean(x)),
    "hl": hodges_lehmann,
}
_EFFICIENCY_CACHE: dict[tuple[str, int], float] = {}


def summary_efficiency(summary: str, runs: int) -> float:
    """c: the variance of the summary of ``runs`` normal values over that of their mean (exact for the median and
    the mean; the Hodges–Lehmann estimator's from 200,000 seeded draws)."""
    from perfbisect.measure.run_allocation import median_efficiency

    if summary == "mean" or runs <= 2:
        return 1.0
    if summary == "median":
        return median_efficiency(runs)
    key = (summary, runs)
    if key not in _EFFICIENCY_CACHE:
        x = np.random.default_rng([35, runs]).normal(size=(200_000, runs))
        i, j = np.triu_indices(runs)
        est = np.median((x[:, i] + x[:, j]) / 2, axis=1)
        _EFFICIENCY_CACHE[key] = float(np.var(est) * runs)
    return _EFFICIENCY_CACHE[key]


def runs_for(session_sd: float, sigma_w: float) -> int:
    """RUNS, or with RUNS = "auto" the count in 1..30 with the least (START + R·RUN)·(σ_b² + c(R)·σ_w²/R)
    (perfbisect.measure.run_allocation's cost, with this benchmark's summary and told the true σ_b, σ_w)."""
    if RUNS != "auto":
        return int(RUNS)
    return min(range(1, 31), key=lambda r: ((START_MIN + r * RUN_MIN)
                                             * (session_sd ** 2 + summary_efficiency(SUMMARY, r) * sigma_w ** 2 / r), r))


class SessionNoise:
    """The session effect (log) of the k-th trial in run order, drawn in order from its own stream.

    ``draw`` must be called with k = 0, 1, 2, ...; the sequence depends only on the seed, so every
    strategy on one seed meets the same machine history (except iid, which keeps S0–S6's stream).
    """

    def __init__(self, scn: Scenario, rng: np.random.Generator):
        self.scn, self.rng = scn, rng
        self.k = 0
        self.sb = math.log1p(scn.sigma_b_pct / 100)
        self.ar = 0.0
        if scn.noise == "ar1":
            self.ar_sd = math.log1p(scn.ar_sd_pct / 100)
            self.ar = float(rng.normal(0.0, self.ar_sd))  # stationary start
        if scn.noise == "shift":
            lo, hi = scn.shift_window
            self.shift_at = int(rng.integers(lo - 1, hi))  # 0-based trial index
            sign = 1.0 if rng.random() < 0.5 else -1.0
            self.shift = math.log1p(sign * scn.shift_pct / 100)
        if scn.noise == "bursts":
            self.burst_left = 0
            self.burst_pen = 0.0
        if scn.noise == "replay":
            logs = np.log(np.asarray(scn.replay, dtype=float))
            self.replay = logs - logs.mean()

    @property
    def sd(self) -> float:
        """Marginal sd of the part of the session effect the oracle does not know."""
        s = self.scn
        if s.noise == "ar1":
            return math.hypot(self.sb, math.log1p(s.ar_sd_pct / 100))
        if s.noise == "replay":
            logs = np.log(np.asarray(s.replay, dtype=float))
            return float(logs.std())
        return self.sb

    def draw(self, k: int) -> tuple[float, dict[str, float], float]:
        """(session effect, covariates it records, known part) for trial number k."""
        assert k == self.k, "session noise must be drawn in run order"
        self.k += 1
        s, rng = self.scn, self.rng
        if s.noise == "ar1":
            if k > 0:
                self.ar = s.ar_phi * self.ar + float(rng.normal(0.0, self.ar_sd * math.sqrt(1 - s.ar_phi**2)))
            return self.ar + float(rng.normal(0.0, self.sb)), {}, 0.0
        if s.noise == "shift":
            return float(rng.normal(0.0, self.sb)) + (self.shift if k >= self.shift_at else 0.0), {}, 0.0
        if s.noise == "t3":
            return self.sb / math.sqrt(3.0) * float(rng.standard_t(3)), {}, 0.0
        if s.noise == "bursts":
            if self.burst_left == 0 and rng.random() < s.burst_start_prob:
                self.burst_left = int(rng.integers(s.burst_len[0], s.burst_len[1] + 1))
                self.burst_pen = math.log1p(-float(rng.uniform(*s.burst_pct)) / 100)
            z = float(rng.normal(0.0, self.sb))
            if self.burst_left > 0:
                self.burst_left -= 1
                load = float(np.clip(rng.normal(0.95, 0.03), 0.0, 1.0))
                return z + self.burst_pen, {"other_load": load}, self.burst_pen
            return z, {"other_load": float(abs(rng.normal(0.0, 0.03)))}, 0.0
        if s.noise == "replay":
            return float(rng.choice(self.replay)), {}, 0.0
        raise ValueError(f"unknown noise process {s.noise!r}")


@dataclass
class Target:
    """One simulated bisection problem: true levels, change positions, untestable commits, a clock."""

    scn: Scenario
    levels: np.ndarray  # log scale
    changes: tuple[int, ...]
    untestable: frozenset[int]
    rng: np.random.Generator
    noise: SessionNoise | None = None
    trials: int = 0
    built: set | None = None
    clock: float = T0_UNIX
    # layout scenarios: per commit its layout epoch (0 = the original layout), per epoch × layout the
    # level offset (log), and whether each trial draws its layout (perfbisect's default) or keeps layout 0
    epoch: np.ndarray | None = None
    layout_offsets: np.ndarray | None = None
    layout_commits: tuple[int, ...] = ()
    layout_rng: np.random.Generator | None = None
    layout_start: np.ndarray | None = None  # LAYOUT_DRAW "rotate": per commit where its rotation starts,
    layout_count: np.ndarray | None = None  # and its trials so far
    randomize_layout: bool = True
    vary_layout: bool = False  # the next trial was asked to run under another layout (Measure.vary_layout)
    noise_switch: int = 0  # heteroscedastic scenarios: the first commit whose sessions use sigma_b_after_pct
    runs: int = 0  # measured runs per trial (0: RUNS, or auto's choice for this scenario's noise)

    def __post_init__(self):
        self.built = set()
        if not self.runs:
            sb = self.noise.sd if self.noise is not None else math.log1p(self.scn.sigma_b_pct / 100)
            self.runs = runs_for(sb, math.log1p(self.scn.sigma_w_pct / 100))

    @property
    def trial_min(self) -> float:
        return START_MIN + self.runs * RUN_MIN

    def _build(self, j: int) -> None:
        if j not in self.built:
            self.built.add(j)
            self.clock += BUILD_MIN * 60

    def raw_trial(self, j: int) -> Trial:
        """One server session exactly as the runner sees it (flagged trials included)."""
        scn, rng = self.scn, self.rng
        self._build(j)
        k, at = self.trials, self.clock
        self.trials += 1
        self.clock += self.trial_min * 60
        if scn.noise == "iid":  # S0–S6's exact random stream
            z, cov, known = float(rng.normal(0.0, math.log1p(self.session_sd_pct(j) / 100))), {}, 0.0
        else:
            z, cov, known = self.noise.draw(k)
            cov = dict(cov)
        session = self.levels[j] + z
        layout = None
        if self.layout_offsets is not None:
            pool = self.layout_offsets.shape[1]
            if self.randomize_layout and LAYOUT_DRAW == "rotate":
                layout = int((self.layout_start[j] + self.layout_count[j]) % pool)
                self.layout_count[j] += 1
            elif self.randomize_layout:
                layout = int(self.layout_rng.integers(pool))
            else:  # fixed layout 0, unless the search asked for another one (a layout re-check)
                layout = int(self.layout_rng.integers(1, pool)) if self.vary_layout else 0
            session += self.layout_offsets[self.epoch[j], layout]
        flag = None
        if scn.throttle_frac:
            throttled = rng.random() < scn.throttle_frac
            clock = CLOCK_MHZ * (0.9 if throttled else 1.0) + rng.normal(0.0, 5.0)
            session += math.log(0.94) if throttled else 0.0
            known += math.log(0.94) if throttled else 0.0
            cov["sm_clock_mean_mhz"] = float(clock)
            if scn.clock_cap:
                cov["clock_cap_mhz"] = CLOCK_CAP_MHZ if throttled else CLOCK_MHZ
            if throttled and scn.flag_throttled:
                flag = "throttled: HW slowdown"
        if scn.mediator:
            # the code change moves power and utilisation (mediators); within a build they track
            # the session effect: a session that runs faster draws more power
            code = float(self.levels[j] - self.levels[0])
            power = POWER_W * math.exp(POWER_ELASTICITY * (code + z)) + rng.normal(0.0, POWER_NOISE_W)
            util = min(100.0, UTIL_PCT * math.exp(UTIL_ELASTICITY * (code + z)) + rng.normal(0.0, 1.0))
            cov["power_mean_w"] = float(power)
            cov["utilization_pct"] = float(util)
            cov["temperature_mean_c"] = float(35.0 + 0.07 * power + rng.normal(0.0, 1.0))
            cov["sm_clock_mean_mhz"] = float(CLOCK_MHZ + rng.normal(0.0, 5.0))
        runs = session + rng.normal(0.0, math.log1p(scn.sigma_w_pct / 100), self.runs)
        return Trial(SUMMARIES[SUMMARY](runs), runs, cov, flag, k, at, known, layout)

    def measure(self, j: int) -> Trial:
        """A trial as a strategy gets it from the runner: flagged trials re-run (each costs a trial)."""
        for _ in range(MAX_RERUNS):
            tr = self.raw_trial(j)
            if tr.flag is None:
                return tr
        return self.raw_trial(j)

    def trial(self, j: int) -> tuple[float, np.ndarray, dict[str, float]]:
        """One usable server session: (summary, log run values, covariates)."""
        tr = self.measure(j)
        return tr.value, tr.runs, tr.cov

    def try_build(self, j: int) -> bool:
        self._build(j)
        return j not in self.untestable

    @property
    def gpu_hours(self) -> float:
        return (self.trials * self.trial_min + len(self.built) * BUILD_MIN) / 60.0

    @property
    def sigma_total(self) -> float:
        """sd of a trial summary (what the oracle knows): session sd and the summary of the runs (median of 5)."""
        sb = self.noise.sd if self.noise is not None else math.log1p(self.scn.sigma_b_pct / 100)
        sw = math.log1p(self.scn.sigma_w_pct / 100)
        return math.sqrt(sb * sb + summary_efficiency(SUMMARY, self.runs) * sw * sw / self.runs)

    def session_sd_pct(self, j: int) -> float:
        """The sd of commit j's iid session effects: sigma_b_pct, or sigma_b_after_pct from the switch on."""
        scn = self.scn
        return scn.sigma_b_pct if scn.sigma_b_after_pct is None or j < self.noise_switch else scn.sigma_b_after_pct

    def trial_sd(self, j: int) -> float:
        """sd of a trial summary of commit j as it is drawn: ``sigma_total`` with this commit's own session sd
        (a heteroscedastic scenario's quiet side) and, where each trial draws its layout, the spread of
        this commit's level over the layouts — the known-σ equivalence test must know what its trials carry."""
        var = self.sigma_total ** 2
        if self.session_sd_pct(j) != self.scn.sigma_b_pct:
            var += math.log1p(self.session_sd_pct(j) / 100) ** 2 - math.log1p(self.scn.sigma_b_pct / 100) ** 2
        if self.layout_offsets is not None and self.randomize_layout:
            var += float(np.var(self.layout_offsets[self.epoch[j]]))
        return math.sqrt(var)


def make_target(scn: Scenario, seed: int) -> Target:
    rng = np.random.default_rng([seed, 1])
    n = scn.n
    if len(scn.steps_pct) == 2:
        k1, k2 = sorted(rng.choice(np.arange(1, n), size=2, replace=False).tolist())
        changes = (k1, k2)
    elif scn.steps_pct:
        changes = (int(rng.integers(1, n)),)
    else:
        changes = ()
    levels = step_levels(n, zip(changes, scn.steps_pct), LOG82)
    untestable: set[int] = set()
    if scn.untestable_frac:
        pool = [j for j in range(1, n - 1) if j not in changes]
        count = int(round(scn.untestable_frac * n))
        near = [j for j in (changes[0] - 1, changes[0] + 1) if j in pool and rng.random() < 0.5]
        untestable.update(near)
        rest = [j for j in pool if j not in untestable]
        untestable.update(rng.choice(rest, size=max(count - len(untestable), 0), replace=False).tolist())
    noise = SessionNoise(scn, np.random.default_rng([seed, 3]))
    t = Target(scn, levels, changes, frozenset(untestable), np.random.default_rng([seed, 2]), noise)
    if scn.sigma_b_after_pct is not None:
        t.noise_switch = changes[0] if changes else int(np.random.default_rng([seed, 6]).integers(1, n))
    if scn.layout_commits:
        lrng = np.random.default_rng([seed, 4])
        pool = [j for j in range(1, n) if j not in changes]
        shifters = tuple(sorted(lrng.choice(pool, size=scn.layout_commits, replace=False).tolist()))
        offsets = np.zeros((len(shifters) + 1, scn.layout_pool))
        for e in range(1, len(shifters) + 1):
            offsets[e] = lrng.normal(0.0, math.log1p(0.01), scn.layout_pool)
            hit = [0] + lrng.choice(np.arange(1, scn.layout_pool), size=scn.layout_shifted - 1, replace=False).tolist()
            for h in hit:
                offsets[e, h] = math.log1p((scn.layout_pct if lrng.random() < 0.5 else -scn.layout_pct) / 100)
        t.epoch = np.searchsorted(np.asarray(shifters), np.arange(n), side="right")
        t.layout_offsets = offsets
        t.layout_commits = shifters
        t.layout_rng = np.random.default_rng([seed, 5])
        t.layout_start = np.random.default_rng([seed, 7]).integers(scn.layout_pool, size=n)
        t.layout_count = np.zeros(n, dtype=int)
    return t


# --------------------------------------------------------------------------------------------
# strategies: each returns {"changes": tuple of named first-bad indices, "set": tuple, ...}


def _outcome_fields(o, settings: StatsConfig) -> dict:
    """What the score needs from a BisectOutcome; new attributes read with getattr (old engines lack them)."""
    cc = o.culprit_comparison
    eff = o.effect_pct if o.effect_pct is not None else (cc.effect_pct if cc is not None else None)
    budget = getattr(o, "budget_exhausted", None)
    if budget is None:  # engines before `budget_exhausted`: the total trial budget was reached
        budget = o.trials_used >= settings.max_trials_total
    ap = getattr(o, "answer_probability", None)
    return {
        "verdict": o.verdict.value,
        "effect_pct": math.nan if eff is None else float(eff),
        "ci": (float(cc.ci_low_pct), float(cc.ci_high_pct)) if cc is not None else (math.nan, math.nan),
        "improvements": tuple(int(c[1:]) for c in (getattr(o, "improvements", ()) or ())),
        "budget_exhausted": bool(budget),
        "answer_probability": math.nan if ap is None else float(ap),
        # an inconclusive end's price: the further trials it says settling would take (None: none stated)
        "more_trials": getattr(o, "more_trials", None),
    }


def run_perfbisect_learned(t: Target) -> dict:
    """perfbisect on a host where an earlier bisection already measured the noise (20 dof)."""
    rng = np.random.default_rng([getattr(t, "seed", 0), 7])
    learned = t.sigma_total * math.sqrt(rng.chisquare(20) / 20)
    return run_perfbisect(t, NoiseModel(learned, 20.0, "learned by an earlier bisection (simulated, 20 dof)"))


def run_perfbisect_thorough(t: Target) -> dict:
    """perfbisect with stats.second_change_z = 3: looks harder for a second change (costs trials)."""
    return run_perfbisect(t, settings=StatsConfig(second_change_z=3.0))


# The posterior as the only guard of a second change (issue #35, measured and not adopted): (Tuning fields, StatsConfig
# fields) — no density probe or gap re-measure (``stats.second_change_z = 0``), a prior of 0.3 of two changes, and a
# doubt given up only once no trial is expected to remove 0.01 bits (docs/archive/benchmarks-notebook.md). rules.py's sweep reads it too.
POSTERIOR_GUARD = ({"two_change_prior": 0.3, "min_gain_bits": 0.01}, {"second_change_z": 0.0})


def run_perfbisect_posterior_guard(t: Target) -> dict:
    """perfbisect with ``POSTERIOR_GUARD``'s constants."""
    tv, sv = POSTERIOR_GUARD
    return run_perfbisect(t, settings=StatsConfig(**sv), tuning=replace(DEFAULT_TUNING, **tv))


def _policy(t: Target, settings: StatsConfig | None = None, noise: NoiseModel | None = None,
            tuning: Tuning | None = None):
    """The candidate names, settings and a fresh SearchPolicy for target ``t`` (its history, if any); ``tuning``:
    the policy's constants (``DEFAULT_TUNING`` unless given)."""
    commits = [f"c{j:03d}" for j in range(t.scn.n)]
    settings = settings or StatsConfig()
    history = ()
    if t.scn.history_good_pct is not None:
        history = (Observation(commits[0], t.levels[0] + math.log1p(t.scn.history_good_pct / 100), day="11-28",
                               at=T0_UNIX - 3 * 86400.0),)
    policy = SearchPolicy(commits, settings, noise or NoiseModel.prior(settings.prior_sigma_pct), history=history,
                          tuning=tuning or DEFAULT_TUNING)
    return commits, settings, policy


def stored_noise(t: Target) -> NoiseModel | None:
    """The noise figure a miscalibrated scenario hands perfbisect: the truth divided by U(lo, hi)."""
    if t.scn.stored_sigma_ratio is None:
        return None
    lo, hi = t.scn.stored_sigma_ratio
    k = float(np.random.default_rng([getattr(t, "seed", 0), 8]).uniform(lo, hi))
    return NoiseModel(t.sigma_total / k, t.scn.stored_dof,
                      f"calibrate: quiet back-to-back sessions (simulated, {k:.1f}× too small)", n_trials=int(t.scn.stored_dof) + 1)


def _named(o) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The commit indices an outcome names (the culprit, then any further change) and its culprit set."""
    named: tuple[int, ...] = ()
    if o.culprit is not None:
        named = (int(o.culprit[1:]), *(int(c[1:]) for c in o.extra_changes))
    return named, tuple(int(c[1:]) for c in o.culprit_set) or named[:1]


def run_perfbisect(t: Target, noise: NoiseModel | None = None, settings: StatsConfig | None = None,
                   tuning: Tuning | None = None, on_measure: Callable[[Any], None] | None = None,
                   on_outcome: Callable[[Any], None] | None = None,
                   variant: Callable[[SearchPolicy], None] | None = None) -> dict:
    """One bisection of ``t`` by the engine; ``on_measure`` sees each decision to measure before it is carried out,
    ``on_outcome`` the engine's outcome (its ``reason`` included) before it is scored. ``variant`` is handed the fresh
    policy before its first decision, to try a variant rule the supported way: by replacing a gate object in
    ``policy.gates`` (e.g. benchmarks/issue35/floor_doubt.py)."""
    commits, settings, policy = _policy(t, settings, noise or stored_noise(t), tuning)
    if variant is not None:
        variant(policy)

    def measure(act, obs: list[Observation]) -> None:
        if on_measure is not None:
            on_measure(act)
        j = int(act.commit[1:])
        t.vary_layout = act.vary_layout
        if not t.try_build(j):
            obs.append(Observation(act.commit, None, seq=len(obs), at=t.clock))
            return
        # the runner re-runs a flagged trial; the policy sees the flagged one too (and must exclude it)
        for _ in range(MAX_RERUNS + 1):
            tr = t.raw_trial(j)
            obs.append(Observation(act.commit, tr.value, tr.cov, seq=len(obs), at=tr.at, flag=tr.flag,
                                   layout=_layout_id(tr)))
            if tr.flag is None:
                break

    o, _ = search(policy, measure, 1000)
    if on_outcome is not None:
        on_outcome(o)
    named, cset = _named(o)
    return {"changes": named, "set": cset, **_outcome_fields(o, settings)}


def _layout_id(tr: Trial) -> str:
    """The layout a trial reports: its layout in layout scenarios, else a fresh one per trial — the real
    pipeline draws a worktree slot, env padding and hash seed per trial, which have no effect here."""
    return f"L{tr.layout}" if tr.layout is not None else f"u{tr.seq}"


def run_perfbisect_fixed_layout(t: Target) -> dict:
    """perfbisect with layout randomisation off: every trial keeps layout 0 (perfbisect before #19)."""
    t.randomize_layout = False
    return run_perfbisect(t)


# z quantiles of the known-σ equivalence test: one-sided alpha 1%, 90% power at no change
_Z_ALPHA, _Z_POWER = 2.3263478740408408, 1.2815515655446004


def equivalence_trials(t: Target, settings: StatsConfig | None = None) -> int:
    """Trials (both endpoints) the fixed-sample known-σ test of "no regression ≥ tolerance" needs.

    One-sided at alpha, 90% power when nothing changed, the same claim `same` makes; at least
    tuning.min_trials_per_side per side (no verdict rests on fewer). σ is each endpoint's true sd of a
    trial summary (``Target.trial_sd``: what the oracle knows, and the layout spread a randomised layout adds).
    """

    settings = settings or StatsConfig()
    tol = math.log1p(settings.tolerance_pct / 100)
    var = t.trial_sd(0) ** 2 + t.trial_sd(t.scn.n - 1) ** 2
    per_side = var * ((_Z_ALPHA + _Z_POWER) / tol) ** 2
    return 2 * max(DEFAULT_TUNING.min_trials_per_side, math.ceil(per_side))


def run_known_sigma_equivalence(t: Target) -> dict:
    """The A/A floor: that many interleaved endpoint trials, then `same` if the known-σ bound is inside tolerance."""
    settings = StatsConfig()
    total = equivalence_trials(t, settings)
    g: list[float] = []
    b: list[float] = []
    for k in range(total // 2):
        for side in ((0, t.scn.n - 1) if k % 2 == 0 else (t.scn.n - 1, 0)):
            (g if side == 0 else b).append(t.measure(side).value)
    d = float(np.mean(b) - np.mean(g))
    se = math.sqrt(t.trial_sd(0) ** 2 / len(g) + t.trial_sd(t.scn.n - 1) ** 2 / len(b))
    bound = -d + _Z_ALPHA * se  # regression (log) ruled out above this
    verdict = "same" if bound < math.log1p(settings.tolerance_pct / 100) else "inconclusive"
    return {"changes": (), "set": (), "verdict": verdict}


def node_offsets(nodes: int, offset_pct: float) -> list[float]:
    """Each simulated node's fixed level offset (log): +PCT, −PCT, +PCT, … (0 for a lone node)."""
    if nodes == 1:
        return [0.0]
    return [math.log1p((offset_pct if k % 2 == 0 else -offset_pct) / 100) for k in range(nodes)]


def run_perfbisect_nodes(t: Target, nodes: int, offset_pct: float = 0.0, settings: StatsConfig | None = None,
                         blind: bool = False, on_batch: Callable[[Any], None] | None = None, tuning: Tuning | None = None,
                         on_measure: Callable[[Any], None] | None = None) -> dict:
    """perfbisect on ``nodes`` nodes at once: an event-driven clock, SearchPolicy.next_batch per free slot.

    Each node has its own fixed level offset (``node_offsets``), its own session-noise stream and its
    own build of each commit it measures. When a node frees, its result is stored (``seq`` = completion
    order) and the policy is asked for every free node given the trials still in flight; an empty batch
    leaves the node idle until the next result. Wall time ends at the verdict; GPU-hours sum every
    node's trials and builds. ``blind``: the stored observations do not say which node ran them (the
    model cannot see the offsets: what perfbisect did before host offsets were modelled). ``on_batch`` sees each
    batch the policy asked for (a list of Measures, maybe empty) before it is started, ``on_measure`` each trial of
    it before it is carried out; ``tuning``: the policy's constants (``DEFAULT_TUNING`` unless given).
    """
    commits, settings, policy = _policy(t, settings, tuning=tuning)
    seed = getattr(t, "seed", 0)
    offsets = node_offsets(nodes, offset_pct)
    names = [f"node{k}" for k in range(nodes)]
    sims = [Target(t.scn, t.levels, t.changes, t.untestable, np.random.default_rng([seed, 2, 1000 + k]),
                   SessionNoise(t.scn, np.random.default_rng([seed, 3, 1000 + k]))) for k in range(nodes)]

    def run(k: int, m, now: float) -> tuple[float, list[dict]]:
        if on_measure is not None:
            on_measure(m)
        x = sims[k]
        x.clock = now
        j = int(m.commit[1:])
        if not x.try_build(j):
            return x.clock, [{"commit": m.commit, "value": None, "at": x.clock}]
        rows = []
        for _ in range(MAX_RERUNS + 1):
            tr = x.raw_trial(j)
            rows.append({"commit": m.commit, "value": tr.value + offsets[k], "covariates": tr.cov, "at": tr.at,
                         "flag": tr.flag})
            if tr.flag is None:
                break
        return x.clock, rows

    o, _, now = search_on_nodes(policy, names, run, start=T0_UNIX, limit=4000, named=not blind, on_batch=on_batch)
    named, cset = _named(o)
    return {"changes": named, "set": cset, **_outcome_fields(o, settings),
            "trials": sum(x.trials for x in sims), "gpu_hours": sum(x.gpu_hours for x in sims),
            "wall_hours": (now - T0_UNIX) / 3600.0}


def _bisect_with(t: Target, lo: int, hi: int, is_bad) -> tuple[int, tuple[int, ...]]:
    """git-bisect over (lo, hi] with skip handling; returns (first bad, set incl. skipped)."""
    skipped: set[int] = set()
    while True:
        inside = [j for j in range(lo + 1, hi) if j not in skipped]
        if not inside:
            cset = tuple(sorted(j for j in range(lo + 1, hi) if j in skipped)) + (hi,)
            return hi, cset
        mid = (lo + hi) // 2
        # git bisect skip moves to a nearby commit; alternate outwards from the midpoint
        order = sorted(inside, key=lambda j: (abs(j - mid), j))
        j = order[0]
        if not t.try_build(j):
            skipped.add(j)
            continue
        if is_bad(j):
            hi = j
        else:
            lo = j


def run_git_bisect(t: Target) -> dict:
    g, _, _ = t.trial(0)
    b, _, _ = t.trial(t.scn.n - 1)
    thr = 0.5 * (g + b)
    culprit, cset = _bisect_with(t, 0, t.scn.n - 1, lambda j: t.trial(j)[0] < thr)
    return {"changes": (culprit,), "set": cset}


def run_runs_ttest(t: Target) -> dict:
    _, gr, _ = t.trial(0)
    _, br, _ = t.trial(t.scn.n - 1)
    p = sps.ttest_ind(gr, br).pvalue
    if not (p < 0.01 and br.mean() < gr.mean()):
        return {"changes": (), "set": ()}

    def bad(j):
        _, r, _ = t.trial(j)
        return bool(sps.ttest_ind(gr, r, alternative="greater").pvalue < 0.01)

    culprit, cset = _bisect_with(t, 0, t.scn.n - 1, bad)
    return {"changes": (culprit,), "set": cset}


def run_ten_trials(t: Target) -> dict:
    good = np.array([t.trial(0)[0] for _ in range(10)])
    badv = np.array([t.trial(t.scn.n - 1)[0] for _ in range(10)])
    if not (sps.mannwhitneyu(good, badv, alternative="greater").pvalue < 0.005):
        return {"changes": (), "set": ()}

    def bad(j):
        vals = np.array([t.trial(j)[0] for _ in range(10)])
        return bool(sps.mannwhitneyu(good, vals, alternative="greater").pvalue < 0.01)

    culprit, cset = _bisect_with(t, 0, t.scn.n - 1, bad)
    return {"changes": (culprit,), "set": cset}


def run_oracle(t: Target) -> dict:
    """Knows the true levels and the session sd: SPRT (α = β = 1%) at each midpoint, no endpoint trials.

    It also knows the penalties the runner records (throttle, CPU burst) and removes them; it does not
    know a drift's path or a machine shift.
    """
    if not t.changes:
        return {"changes": (), "set": ()}
    sigma = t.sigma_total
    bound = math.log(0.99 / 0.01)
    distinct = sorted(set(np.round(t.levels, 12).tolist()), reverse=True)
    named = []
    cset: tuple[int, ...] = ()
    lo = 0
    for step in range(len(t.changes)):
        mu_g, mu_b = distinct[step], distinct[step + 1]

        def bad(j, mu_g=mu_g, mu_b=mu_b):
            llr = 0.0
            while -bound < llr < bound:
                tr = t.measure(j)
                y = tr.value - tr.known
                llr += ((y - mu_g) ** 2 - (y - mu_b) ** 2) / (2 * sigma * sigma)
            return llr >= bound

        culprit, s = _bisect_with(t, lo, t.scn.n - 1, bad)
        named.append(culprit)
        cset = cset or s
        lo = culprit
    return {"changes": tuple(named), "set": cset}


def run_sprt_learned_levels(t: Target, ends: int | None = None, per_commit: int | None = None) -> dict:
    """The oracle's SPRT with the levels learned instead of known: a floor for any search that must measure them.

    Like ``run_oracle`` it knows σ, that the range holds one change, and the penalties the runner records;
    unlike it, it starts from ``ends`` trials of each endpoint (``PB_SPRT_ENDS``, default 4) and takes each side's
    level as the mean of the trials of the commits it has placed on that side (uncertain by σ²/n, an
    uncertainty a commit's trials share); a commit whose walk has not crossed a bound after ``per_commit`` trials
    (``PB_SPRT_CAP``, default 10) goes to the side its likelihood ratio leans to (a level estimate off by chance
    would stall it). No confirmation, no second-change search, no drift or outlier model: what it costs beyond
    the oracle is the price of not being told the levels (docs/archive/benchmarks-notebook.md, round 9: 4 and 10 are its best
    on S2–S4). Single-change scenarios only.
    """
    if not t.changes:
        return {"changes": (), "set": ()}
    if len(t.changes) != 1:
        raise ValueError("sprt-learned-levels handles single-change scenarios only")
    ends = ends or int(os.environ.get("PB_SPRT_ENDS", "4"))
    per_commit = per_commit or int(os.environ.get("PB_SPRT_CAP", "10"))
    sigma2 = t.sigma_total ** 2
    bound = math.log(0.99 / 0.01)
    sides: dict[bool, list[float]] = {False: [], True: []}  # placed on the bad side?
    for _ in range(ends):
        for j, is_bad in ((0, False), (t.scn.n - 1, True)):
            tr = t.measure(j)
            sides[is_bad].append(tr.value - tr.known)

    def bad(j: int) -> bool:
        mine: list[float] = []
        llr = 0.0
        while -bound < llr < bound and len(mine) < per_commit:  # at the cap: a level off by chance stalls the walk
            tr = t.measure(j)
            mine.append(tr.value - tr.known)
            llr = _learned_levels_llr(np.asarray(mine), sides[True], sides[False], sigma2)
        verdict = llr > 0  # past a bound, or the sign at the cap
        sides[verdict].extend(mine)
        return verdict

    culprit, cset = _bisect_with(t, 0, t.scn.n - 1, bad)
    return {"changes": (culprit,), "set": cset}


def _learned_levels_llr(y: np.ndarray, bad_side: list[float], good_side: list[float], sigma2: float) -> float:
    """log p(y | bad level) − log p(y | good level) for a commit's trials y = μ + e (e ~ N(0, σ²)), each level the
    mean of its side's trials, N(mean, σ²/n_side) around the truth. The level is shared by y's trials, so their
    mean carries all of it: ȳ ~ N(side mean, σ²/n_side + σ²/len(y)); the spread about ȳ is the same under both."""
    ybar, k = float(np.mean(y)), len(y)
    return float(sps.norm.logpdf(ybar, np.mean(bad_side), math.sqrt(sigma2 / len(bad_side) + sigma2 / k))
                 - sps.norm.logpdf(ybar, np.mean(good_side), math.sqrt(sigma2 / len(good_side) + sigma2 / k)))


def run_bayes_told_sigma(t: Target) -> dict:
    """Bayesian bisection told σ and that one change exists, the levels learned (benchmarks/bayes_reference.py)."""
    return bayes_reference.run(t, sigma=t.sigma_total)


def run_bayes_learner(t: Target) -> dict:
    """Bayesian bisection told that one change exists; levels and σ learned (σ's prior: perfbisect's own)."""
    settings = StatsConfig()
    return bayes_reference.run(t, sigma=None, confidence=settings.confidence, budget=settings.max_trials_total)


def run_bayes_learner_floor(t: Target) -> dict:
    """``bayes-learner`` held to DESIGN.md's floor: the named commit and its parent carry two trials each (the
    engine's ``min_trials_at_change``) before an answer is named — what that one rule costs any search."""
    settings = StatsConfig()
    return bayes_reference.run(t, sigma=None, confidence=settings.confidence, budget=settings.max_trials_total,
                               min_at_change=DEFAULT_TUNING.min_trials_at_change)


def run_bayes_learner_two(t: Target) -> dict:
    """Bayesian bisection told "one change or two" (prior 0.1 of two, perfbisect's ``two_change_prior``), levels,
    steps and σ learned; a step matters from ``min_effect_pct`` (benchmarks/bayes_two.py): what ruling out a second
    change costs a search that does it by the posterior alone."""
    settings = StatsConfig()
    return bayes_two.run(t, sigma=None, q=DEFAULT_TUNING.two_change_prior, min_step_pct=settings.min_effect_pct,
                         confidence=settings.confidence, budget=settings.max_trials_total)


def second_change_floor_pct(t: Target) -> float:
    """The second step perfbisect's guard rules out, from the truth: max(``second_change_pct``, ``second_change_share``
    of the largest step, ``second_change_sigmas`` × the sd of a trial summary) in percent — the engine computes it
    from the step it located and the σ it learned."""
    tu = DEFAULT_TUNING
    largest = max((abs(x) for x in t.scn.steps_pct), default=0.0)
    return max(tu.second_change_pct, tu.second_change_share * largest,
               tu.second_change_sigmas * math.expm1(t.sigma_total) * 100)


def run_bayes_told_nothing(t: Target) -> dict:
    """Bayesian bisection asked perfbisect's own question (benchmarks/bayes_two.py): told nothing — "no change" a
    hypothesis of perfbisect's ``no_change_prior``, one change or two at its ``two_change_prior`` — a step matters
    from ``min_effect_pct``, a second change is ruled out from perfbisect's floor (``second_change_floor_pct``), and
    no answer rests on fewer than ``min_trials_at_change`` trials of a named commit and of its parent."""
    settings, tu = StatsConfig(), DEFAULT_TUNING
    return bayes_two.run(t, sigma=None, q=tu.two_change_prior, min_step_pct=settings.min_effect_pct,
                         confidence=settings.confidence, budget=settings.max_trials_total,
                         min_at_change=tu.min_trials_at_change, p_none=tu.no_change_prior,
                         min_second_pct=second_change_floor_pct(t))


STRATEGIES = {
    "perfbisect": run_perfbisect,
    "perfbisect-learned-noise": run_perfbisect_learned,
    "perfbisect-thorough": run_perfbisect_thorough,
    "perfbisect-posterior-guard": run_perfbisect_posterior_guard,
    "git-bisect-1-trial": run_git_bisect,
    "1-trial-5-runs-ttest": run_runs_ttest,
    "10-trials-mannwhitney": run_ten_trials,
    "oracle-sprt": run_oracle,
    "sprt-learned-levels": run_sprt_learned_levels,
    "bayes-told-sigma": run_bayes_told_sigma,
    "bayes-learner": run_bayes_learner,
    "bayes-learner-floor": run_bayes_learner_floor,
    "bayes-learner-2": run_bayes_learner_two,
    "bayes-told-nothing": run_bayes_told_nothing,
    "known-sigma-equivalence": run_known_sigma_equivalence,
    "perfbisect-fixed-layout": run_perfbisect_fixed_layout,
}
# Strategies told that the range holds exactly one change: they refuse a two-change scenario (S5, S5r).
ONE_CHANGE_ONLY = frozenset({"sprt-learned-levels", "bayes-told-sigma", "bayes-learner", "bayes-learner-floor"})


def score(t: Target, res: dict) -> dict:
    named = tuple(res["changes"])
    truth = t.changes
    if not truth:
        correct = not named
        false_blame = bool(named)
    elif t.scn.untestable_frac:
        cset = set(res["set"]) or set(named[:1])
        correct = truth[0] in cset
        false_blame = bool(named) and not correct
    elif len(truth) == 2:
        correct = len(named) >= 2 and set(named[:2]) == set(truth)
        false_blame = any(c not in truth for c in named)
    else:
        correct = named[:1] == truth
        false_blame = bool(named) and not correct
    # effect and interval against the true step: single-change scenarios, runs with the right culprit
    effect_err = effect_bias = covered = math.nan
    eff = res.get("effect_pct", math.nan)
    if len(truth) == 1 and correct and named and math.isfinite(eff):
        true_pct = t.scn.steps_pct[0]
        effect_err = abs(eff - true_pct)
        effect_bias = eff - true_pct
        lo, hi = res.get("ci", (math.nan, math.nan))
        if math.isfinite(lo) and math.isfinite(hi):
            covered = float(lo <= true_pct <= hi)
    verdict = res.get("verdict")
    # every simulated scenario is a slowdown or nothing: an `improved` verdict is as false as a wrong culprit
    false_blame = false_blame or verdict == "improved" or bool(res.get("improvements", ()))
    return {
        "correct": correct,
        "false_blame": false_blame,
        # a regression at the tolerance called `same` (tolerance-edge scenarios), or any change called `same`
        "false_same": bool(truth) and verdict == "same",
        "equivalence_trials": equivalence_trials(t) if not truth else math.nan,
        "trials": res.get("trials", t.trials),
        "runs": t.runs,
        "gpu_hours": res.get("gpu_hours", t.gpu_hours),
        # one node runs one thing at a time: its wall time is its clock
        "wall_hours": res.get("wall_hours", (t.clock - T0_UNIX) / 3600.0),
        "set_size": len(res["set"]) if res["set"] else len(named[:1]),
        # every simulated scenario is a slowdown (or nothing): any named improvement is a false one
        "false_improvement": bool(res.get("improvements", ())),
        # the first commit named is not the first change (a real change, but a later one, called "first bad")
        "wrong_first": bool(named) and bool(truth) and named[0] != min(truth) and not (
            t.scn.untestable_frac and min(truth) in set(res["set"])),
        # a single-change scenario with a further change named beside the culprit (a regression the truth does not
        # have: the score above reads only the first named commit, so it would go uncounted)
        "extra_named": len(truth) == 1 and any(c not in truth for c in named[1:]),
        "budget_exhausted": res.get("budget_exhausted", math.nan),
        "effect_err": effect_err,
        "effect_bias": effect_bias,
        "covered": covered,
        "answer_probability": res.get("answer_probability", math.nan),
        "verdict": res.get("verdict"),
        # A/A twins ending inconclusive with a price: the trials it says the answer takes in all (spent + price),
        # over those the known-σ equivalence test needs
        "price_ratio": ((res.get("trials", t.trials) + res["more_trials"]) / equivalence_trials(t)
                        if not truth and res.get("verdict") == "inconclusive" and res.get("more_trials") else math.nan),
    }


def run_cell(args) -> list[dict]:
    scn_name, strat, seeds = args
    scn = SCENARIOS[scn_name]
    out = []
    for seed in seeds:
        t = make_target(scn, seed)
        t.seed = seed  # the learned-noise strategy draws its earlier estimate from it
        out.append(score(t, STRATEGIES[strat](t)))
    return out


# --------------------------------------------------------------------------------------------
# A/A check of `compare` under repeated looks: interleaved A B B A trials of one level, a rule
# consulted after every pair, stop at the first verdict that is not "inconclusive".

Rule = Callable[[list[float], list[float], int], str]


def _current_compare_rule(min_trials: int = 2, single_look_at: int | None = None) -> Rule:
    """perfbisect.engine.stats.compare as `perfbisect compare` runs it today (empty database: prior noise)."""
    settings = StatsConfig()
    noise = NoiseModel.prior(settings.prior_sigma_pct)

    def decide(a: list[float], b: list[float], look: int) -> str:
        if len(a) < min_trials or len(b) < min_trials:
            return "inconclusive"
        if single_look_at is not None and min(len(a), len(b)) < single_look_at:
            return "inconclusive"
        return compare(a, b, noise, settings).verdict.value

    return decide


# Named rules for run_aa_compare. To try a new stopping rule, add an entry, e.g.
#   AA_RULES["sequential"] = lambda a, b, look: SequentialCompare(...).verdict(a, b).value
def _sequential_rule(min_trials: int = 2, spending: bool = False, stored_pct: float | None = None) -> Rule:
    """`perfbisect compare` as it runs now: a look after every pair, each at a tenth of alpha (a constant
    per-look level); ``spending``: as it ran before issue #19, Lan–DeMets power-family spending;
    ``stored_pct``: starting from a stored σ of that many percent with 20 dof (a calibration of quiet
    back-to-back sessions) instead of the prior."""
    from perfbisect.engine.stats import compare_sequential, spent_alpha

    settings = StatsConfig()
    noise = (NoiseModel.prior(settings.prior_sigma_pct) if stored_pct is None else
             NoiseModel(math.log1p(stored_pct / 100), 20.0, f"calibrate: {stored_pct:g}% (simulated)", n_trials=21))
    max_per_side = settings.max_trials_per_commit or settings.max_trials_total // 2
    max_looks = AA_MAX_PER_SIDE - min_trials + 1

    def decide(a: list[float], b: list[float], look: int) -> str:
        if len(a) < min_trials or len(b) < min_trials:
            return "inconclusive"
        k = min(len(a), len(b)) - min_trials + 1
        if spending:
            return compare(a, b, noise, settings, alpha=spent_alpha(settings.alpha, k, max_looks)).verdict.value
        return compare_sequential(a, b, noise, settings, look=k, max_looks=max_per_side).verdict.value

    return decide


# compare's A/A table runs every rule to this many trials per side (the pre-#19 per-commit budget)
AA_MAX_PER_SIDE = 10
AA_RULES: dict[str, Rule] = {
    "fixed alpha, look every pair (#5)": _current_compare_rule(),
    "Lan–DeMets spending, every pair (#8)": _sequential_rule(spending=True),
    "a tenth of alpha per look (now)": _sequential_rule(),
    # issue #19: a calibration on quiet back-to-back sessions said 1% (3× too small for S2's noise, ~7× for the
    # H200 replay's); a stored σ weighs as one trial of the pair's own
    "now, from a stored 1% σ (20 dof)": _sequential_rule(stored_pct=1.0),
    "one look at 10+10": _current_compare_rule(single_look_at=10),
}
# Noise processes for the A/A compare table: the session noise of these scenarios, one level.
AA_NOISE = {"iid 3% (S2)": "S2", "AR(1) drift (D1)": "D1", "±7% shift (D2)": "D2", "t3 (D3)": "D3",
            "CPU bursts (D4)": "D4", "throttle flagged (T1)": "T1", "H200 replay (R1)": "R1",
            "dev replay (R2)": "R2"}


def run_aa_compare(noise_process: Scenario | str, reps: int, rules: dict[str, Rule] | None = None,
                   max_per_side: int | None = None, seed0: int = 10_000) -> dict[str, dict]:
    """A/A pairs (A and B the same level) under the scenario's session noise; per rule the verdict shares.

    Each rep: rounds of interleaved trials (A B, then B A, ...); flagged trials are re-run by the runner
    and never reach the rule; after each round ``decide(a_values, b_values, look_index)``; stop at the
    first verdict other than "inconclusive", or when each side has ``max_per_side`` trials.
    Every rule sees the same machine history for a given rep.
    """
    scn = SCENARIOS[noise_process] if isinstance(noise_process, str) else noise_process
    scn = replace(scn, n=2, steps_pct=(), untestable_frac=0.0, history_good_pct=None)
    rules = AA_RULES if rules is None else rules
    max_per_side = max_per_side or AA_MAX_PER_SIDE
    out = {}
    for name, decide in rules.items():
        counts: dict[str, int] = {}
        trials = 0
        for rep in range(reps):
            t = make_target(scn, seed0 + rep)
            a: list[float] = []
            b: list[float] = []
            verdict = "inconclusive"
            for look in range(max_per_side):
                for side in ((0, 1) if look % 2 == 0 else (1, 0)):
                    (a if side == 0 else b).append(t.measure(side).value)
                verdict = decide(a, b, look)
                if verdict != "inconclusive":
                    break
            counts[verdict] = counts.get(verdict, 0) + 1
            trials += t.trials
        share = {v: c / reps for v, c in counts.items()}
        out[name] = {
            "reps": reps,
            "false_verdict": share.get("regressed", 0.0) + share.get("improved", 0.0),
            "regressed": share.get("regressed", 0.0),
            "improved": share.get("improved", 0.0),
            "same": share.get("same", 0.0),
            "inconclusive": share.get("inconclusive", 0.0),
            "mean_trials": trials / reps,
        }
    return out


def _aa_job(args) -> tuple[str, dict]:
    label, scn_name, reps, seed0 = args
    return label, run_aa_compare(scn_name, reps, seed0=seed0)


def _rate_ci(hits: list[bool]) -> tuple[float, float]:
    """Exact (Clopper–Pearson) 95% interval of a rate from its outcomes."""
    ci = sps.binomtest(int(sum(bool(h) for h in hits)), len(hits)).proportion_ci(0.95, method="exact")
    return (float(ci.low), float(ci.high))


def _mean(rows: list[dict], key: str) -> float:
    vals = [float(r[key]) for r in rows if r.get(key) is not None and math.isfinite(float(r[key]))]
    return float(np.mean(vals)) if vals else math.nan


def _median(rows: list[dict], key: str) -> float:
    vals = [float(r[key]) for r in rows if r.get(key) is not None and math.isfinite(float(r[key]))]
    return float(np.median(vals)) if vals else math.nan


def _fmt(x: float, width: int, digits: int = 3) -> str:
    return f"{x:{width}.{digits}f}" if math.isfinite(x) else f"{'-':>{width}}"


def _nan_to_none(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=None, help="simulated bisections per cell (default 1000; 40 with --quick)")
    ap.add_argument("--scenarios", default=None,
                    help="comma-separated, e.g. S2,D2,D2-AA (default: all but S6c; with --quick: "
                    + ",".join(QUICK_SCENARIOS) + ")")
    ap.add_argument("--strategies", default=None,
                    help="comma-separated strategy names (default all; perfbisect,oracle-sprt with --quick)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true",
                    help="40 reps of the quick scenarios, perfbisect + oracle only, and the A/A compare table "
                    "with 300 reps (~3 min on 2 cores)")
    ap.add_argument("--aa-reps", type=int, default=None,
                    help="A/A compare pairs per noise process and rule (default 1000; 300 with --quick; 0 = skip)")
    ap.add_argument("--aa-noise", default=None, help="comma-separated labels or scenario names for the A/A table")
    ap.add_argument("--aa-only", action="store_true", help="only the A/A compare table")
    ap.add_argument("--seed-base", type=int, default=0, metavar="N",
                    help="seeds N..N+reps-1 for every cell (default 0; the engine was tuned on 0-299, so report "
                    "its targets on held-out seeds, e.g. --seed-base 100000); the A/A compare table starts at "
                    "N+10000")
    ap.add_argument("--runs", default="5", metavar="R|auto",
                    help="measured runs per trial (default 5, the user's protocol; auto: the cheapest per unit of "
                    "information for each scenario's σ_b and σ_w, 1-30); a trial costs 5.5 min + (2 + R) × 25 s")
    ap.add_argument("--layout-draw", default="rotate", choices=("rotate", "uniform"),
                    help="layout scenarios (LY): a commit's trials rotate through the layouts as perfbisect draws its "
                         "worktree slots (default), or each draws one independently (perfbisect before 2026-12-06)")
    ap.add_argument("--summary", default="median", choices=sorted(SUMMARIES),
                    help="a trial's summary of its runs (default median; hl: Hodges–Lehmann; mean)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--nodes", type=int, default=1,
                    help="K > 1 adds the strategy perfbisect-K-nodes: K nodes at once through next_batch, "
                    "an event-driven clock; its rows show wall time next to GPU-hours")
    ap.add_argument("--host-offset", type=float, default=0.0, metavar="PCT",
                    help="with --nodes: each node's fixed level offset, +PCT, −PCT, +PCT, … (default 0)")
    ap.add_argument("--blind-hosts", action="store_true",
                    help="with --nodes: the stored trials do not name their node, so offsets are not modelled "
                    "(the comparison for the host-offset model)")
    args = ap.parse_args(argv)
    global RUNS, SUMMARY, LAYOUT_DRAW
    if args.runs != "auto" and not (args.runs.isdigit() and int(args.runs) >= 1):
        ap.error(f"--runs must be a positive count or auto, got {args.runs!r}")
    RUNS = args.runs if args.runs == "auto" else int(args.runs)  # read by every Target the workers make (fork)
    SUMMARY = args.summary
    LAYOUT_DRAW = args.layout_draw
    if args.nodes > 1:
        label = (f"perfbisect-{args.nodes}-nodes" + (f"±{args.host_offset:g}%" if args.host_offset else "")
                 + ("-blind" if args.blind_hosts else ""))
        STRATEGIES[label] = partial(run_perfbisect_nodes, nodes=args.nodes, offset_pct=args.host_offset,
                                    blind=args.blind_hosts)
    reps = args.reps if args.reps is not None else (40 if args.quick else 1000)
    default_scns = QUICK_SCENARIOS if args.quick else DEFAULT_SCENARIOS
    scns = [s.strip() for s in (args.scenarios or ",".join(default_scns)).split(",") if s.strip()]
    strats_arg = args.strategies or ("perfbisect,oracle-sprt" if args.quick else ",".join(STRATEGIES))
    strats = [s.strip() for s in strats_arg.split(",") if s.strip()]
    if args.nodes > 1 and label not in strats:
        strats.append(label)
    for s in scns:
        if s not in SCENARIOS:
            ap.error(f"unknown scenario {s!r}; known: {', '.join(SCENARIOS)}")
    for s in strats:
        if s not in STRATEGIES:
            ap.error(f"unknown strategy {s!r}; known: {', '.join(STRATEGIES)}")
    aa_reps = args.aa_reps if args.aa_reps is not None else (300 if args.quick else 1000)
    if args.aa_only:
        scns = []
    # the A/A compare table runs by default only for --quick, --aa-only or an explicit --aa-reps/--aa-noise
    want_aa = aa_reps > 0 and (args.quick or args.aa_only or args.aa_reps is not None or args.aa_noise is not None)
    aa_noise = dict(AA_NOISE)
    if args.aa_noise:
        picked = {}
        for lab in (x.strip() for x in args.aa_noise.split(",") if x.strip()):
            if lab in aa_noise:
                picked[lab] = aa_noise[lab]
            elif lab in SCENARIOS:
                picked[lab] = lab
            else:
                ap.error(f"unknown A/A noise {lab!r}; use a scenario name or one of: {', '.join(AA_NOISE)}")
        aa_noise = picked

    chunk = 25 if reps >= 100 else 10
    jobs = []
    for s in scns:
        for st in strats:
            for start in range(0, reps, chunk):
                jobs.append((s, st, list(range(args.seed_base + start, args.seed_base + min(start + chunk, reps)))))
    aa_jobs = [(lab, sc, aa_reps, args.seed_base + 10_000) for lab, sc in aa_noise.items()] if want_aa else []
    t0 = time.time()
    with mp.get_context("fork").Pool(args.workers) as pool:
        aa_async = pool.map_async(_aa_job, aa_jobs, chunksize=1) if aa_jobs else None
        results = pool.map(run_cell, jobs, chunksize=1)
        aa_results = aa_async.get() if aa_async is not None else []
    cells: dict[tuple[str, str], list[dict]] = {}
    for (s, st, _), res in zip(jobs, results):
        cells.setdefault((s, st), []).extend(res)
    table = []
    for s in scns:
        for st in strats:
            rows = cells[(s, st)]
            table.append({
                "scenario": s,
                "strategy": st,
                "reps": len(rows),
                "accuracy": float(np.mean([r["correct"] for r in rows])),
                "false_blame": float(np.mean([r["false_blame"] for r in rows])),
                # its exact 95% interval (Clopper–Pearson): a "≤ 1%" claim needs the reps to back it
                "false_blame_ci95": _rate_ci([r["false_blame"] for r in rows]),
                "mean_trials": float(np.mean([r["trials"] for r in rows])),
                "median_trials": float(np.median([r["trials"] for r in rows])),
                "false_same": float(np.mean([r["false_same"] for r in rows])),
                "same_share": float(np.mean([r["verdict"] == "same" for r in rows])),
                # A/A twins: trials the fixed-sample known-σ test of "no regression ≥ tolerance" needs
                "equivalence_trials": _median(rows, "equivalence_trials"),
                "mean_gpu_hours": float(np.mean([r["gpu_hours"] for r in rows])),
                "runs_per_trial": float(np.mean([r["runs"] for r in rows])),
                "mean_wall_hours": float(np.mean([r["wall_hours"] for r in rows])),
                "mean_set_size": float(np.mean([r["set_size"] for r in rows])),
                "false_improvement": float(np.mean([r["false_improvement"] for r in rows])),
                "wrong_first": float(np.mean([r["wrong_first"] for r in rows])),
                "extra_named": float(np.mean([r["extra_named"] for r in rows])),
                "budget_exhausted": _mean(rows, "budget_exhausted"),
                # over runs with the right culprit (single-change scenarios, strategies that report an effect)
                "effect_err_pts": _mean(rows, "effect_err"),
                "effect_bias_pts": _mean(rows, "effect_bias"),
                "ci_coverage": _mean(rows, "covered"),
                "effect_n": int(sum(1 for r in rows if math.isfinite(r["effect_err"]))),
                "mean_answer_probability": _mean(rows, "answer_probability"),
                # A/A twins: median of (trials + stated price) / the known-σ test's trials, over inconclusive ends
                "price_ratio_median": _median(rows, "price_ratio"),
                "price_ratio_n": int(sum(1 for r in rows if math.isfinite(r["price_ratio"]))),
                # perfbisect's own verdicts (regressed / same / inconclusive ...): share of runs
                "verdicts": {v: sum(1 for r in rows if r["verdict"] == v) / len(rows)
                             for v in sorted({r["verdict"] for r in rows if r["verdict"]})},
            })
    aa_table = []
    for label, by_rule in aa_results:
        for rule, r in by_rule.items():
            aa_table.append({"noise": label, "scenario": aa_noise[label], "rule": rule, **r})
    doc = {
        "cost_model": {"trial_min": START_MIN + RUNS * RUN_MIN if RUNS != "auto" else None,
                       "start_min": START_MIN, "run_min": RUN_MIN, "build_min": BUILD_MIN, "runs_per_trial": RUNS,
                       "summary": SUMMARY, "layout_draw": LAYOUT_DRAW,
                       "max_reruns_of_flagged": MAX_RERUNS},
        "scenarios": {s: SCENARIOS[s].title for s in scns},
        "results": [{k: _nan_to_none(v) for k, v in r.items()} for r in table],
        "aa_compare": aa_table,
        "seed_base": args.seed_base,
        "seconds": round(time.time() - t0, 1),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    if table:
        print(f"{'scn':6} {'strategy':24} {'acc':>6} {'false':>6} {'≤95%':>6} {'trials':>7} {'med':>5} {'GPU-h':>6} {'wall-h':>6} "
              f"{'budget':>6} {'same':>5} {'fSame':>5} {'wFirst':>6} {'eqRef':>5} {'effErr':>6} {'bias':>6} {'cover':>6}")
        for r in table:
            print(f"{r['scenario']:6} {r['strategy']:24} {r['accuracy']:6.3f} {r['false_blame']:6.3f} "
                  f"{r['false_blame_ci95'][1]:6.3f} "
                  f"{r['mean_trials']:7.1f} {r['median_trials']:5.0f} {r['mean_gpu_hours']:6.2f} {r['mean_wall_hours']:6.2f} {_fmt(r['budget_exhausted'], 6)} "
                  f"{r['same_share']:5.2f} {r['false_same']:5.2f} {r['wrong_first']:6.3f} {_fmt(r['equivalence_trials'], 5, 0)} "
                  f"{_fmt(r['effect_err_pts'], 6, 2)} {_fmt(r['effect_bias_pts'], 6, 2)} {_fmt(r['ci_coverage'], 6)}")
        print("acc: exact culprit (in the set for S4; both for S5; nothing named for A/A twins) · false: a named"
              " culprit that is wrong, any in an A/A twin, or an `improved` verdict · same: share ending `same` ·"
              " fSame: `same` where something changed · wFirst: the first commit named is a real change but not the first ·"
              " eqRef: trials the known-σ equivalence test needs (A/A) ·"
              " budget: share ending with the trial budget spent ·"
              " effErr: mean |effect − true step| in points, bias: mean (effect − true step)"
              " and cover: share of culprit intervals holding the true step, both over runs with the right culprit")
    if aa_table:
        print()
        print(f"A/A compare, repeated looks (A B B A pairs of one level, stop at the first verdict, "
              f"≤ {AA_MAX_PER_SIDE} per side)")
        print(f"{'noise':24} {'rule':38} {'false':>6} {'regr':>6} {'impr':>6} {'same':>6} {'incon':>6} {'trials':>6}")
        for r in aa_table:
            print(f"{r['noise']:24} {r['rule']:38} {r['false_verdict']:6.3f} {r['regressed']:6.3f} "
                  f"{r['improved']:6.3f} {r['same']:6.3f} {r['inconclusive']:6.3f} {r['mean_trials']:6.1f}")
    print(f"({doc['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
