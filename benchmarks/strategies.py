"""Benchmark of bisection strategies on simulated noisy targets, driving the REAL SearchPolicy.

Cost model (the user's node, DESIGN.md §1/§6): a trial is a 5.5 min server start plus
(2 warm-up + 5 measured runs) × 25 s; building a commit (Python-only) costs 0.5 min the first time
it is measured, and an untestable commit costs that build attempt and no trial.

A trial summary = level(commit) + session drift N(0, σ_b) + median of 5 runs of N(0, σ_w)
(+ a throttle penalty in S6, recorded as the SM-clock covariate).

Usage:
    python benchmarks/strategies.py --json                    # every scenario, 1,000 reps per cell
    python benchmarks/strategies.py --reps 100 --scenarios S2,S3
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfbisect.bisect import Done, Observation, SearchPolicy  # noqa: E402
from perfbisect.config import StatsConfig  # noqa: E402
from perfbisect.stats import NoiseModel  # noqa: E402

TRIAL_MIN = 5.5 + (2 + 5) * 25 / 60
BUILD_MIN = 0.5
RUNS = 5
CLOCK_MHZ = 1980.0


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


SCENARIOS = {
    "S0": Scenario("S0", "drift only: 9 commits, no change, σ_w 0.8%, σ_b 3%, history +7%", 9, 3.0, 0.8,
                   history_good_pct=7.0),
    "S1": Scenario("S1", "user's case: 9 commits, speculative mode −27%, σ_w 8%, σ_b 3%", 9, 3.0, 8.0, (-27.0,)),
    "S2": Scenario("S2", "64 commits, one −8% step, σ_b 3%, σ_w 1%", 64, 3.0, 1.0, (-8.0,)),
    "S3": Scenario("S3", "64 commits, one −4% step, σ_b 1.5%, σ_w 1%", 64, 1.5, 1.0, (-4.0,)),
    "S4": Scenario("S4", "S2 with 15% untestable commits, some next to the culprit", 64, 3.0, 1.0, (-8.0,),
                   untestable_frac=0.15),
    "S5": Scenario("S5", "64 commits, −10% at one commit and −6% at a later one", 64, 3.0, 1.0, (-10.0, -6.0)),
    "S6": Scenario("S6", "S2 with a third of trials throttled (clock −10%, −6%), clock recorded", 64, 3.0, 1.0,
                   (-8.0,), throttle_frac=1 / 3),
}


@dataclass
class Target:
    """One simulated bisection problem: true levels, change positions, untestable commits."""

    scn: Scenario
    levels: np.ndarray  # log scale
    changes: tuple[int, ...]
    untestable: frozenset[int]
    rng: np.random.Generator
    trials: int = 0
    built: set | None = None

    def __post_init__(self):
        self.built = set()

    def trial(self, j: int) -> tuple[float, np.ndarray, dict[str, float]]:
        """One server session: (summary, log run values, covariates)."""
        scn, rng = self.scn, self.rng
        self.trials += 1
        self.built.add(j)
        session = self.levels[j] + rng.normal(0.0, math.log1p(scn.sigma_b_pct / 100))
        cov = {}
        if scn.throttle_frac:
            throttled = rng.random() < scn.throttle_frac
            clock = CLOCK_MHZ * (0.9 if throttled else 1.0) + rng.normal(0.0, 5.0)
            session += math.log(0.94) if throttled else 0.0
            cov = {"sm_clock_mean_mhz": clock}
        runs = session + rng.normal(0.0, math.log1p(scn.sigma_w_pct / 100), RUNS)
        return float(np.median(runs)), runs, cov

    def try_build(self, j: int) -> bool:
        self.built.add(j)
        return j not in self.untestable

    @property
    def gpu_hours(self) -> float:
        return (self.trials * TRIAL_MIN + len(self.built) * BUILD_MIN) / 60.0

    @property
    def sigma_total(self) -> float:
        """sd of a trial summary (what the oracle knows): σ_b and the median of 5 runs."""
        sb = math.log1p(self.scn.sigma_b_pct / 100)
        sw = math.log1p(self.scn.sigma_w_pct / 100)
        return math.sqrt(sb * sb + 1.4338 * sw * sw / RUNS)


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
    levels = np.full(n, math.log(82.0))
    for k, step in zip(changes, scn.steps_pct):
        levels[k:] += math.log1p(step / 100)
    untestable: set[int] = set()
    if scn.untestable_frac:
        pool = [j for j in range(1, n - 1) if j not in changes]
        count = int(round(scn.untestable_frac * n))
        near = [j for j in (changes[0] - 1, changes[0] + 1) if j in pool and rng.random() < 0.5]
        untestable.update(near)
        rest = [j for j in pool if j not in untestable]
        untestable.update(rng.choice(rest, size=max(count - len(untestable), 0), replace=False).tolist())
    return Target(scn, levels, changes, frozenset(untestable), np.random.default_rng([seed, 2]))


# --------------------------------------------------------------------------------------------
# strategies: each returns {"changes": tuple of named first-bad indices, "set": tuple}


def run_perfbisect(t: Target) -> dict:
    n = t.scn.n
    commits = [f"c{j:03d}" for j in range(n)]
    settings = StatsConfig()
    history = ()
    if t.scn.history_good_pct is not None:
        history = (Observation(commits[0], t.levels[0] + math.log1p(t.scn.history_good_pct / 100), day="11-28"),)
    policy = SearchPolicy(commits, settings, NoiseModel.prior(settings.prior_sigma_pct), history=history)
    obs: list[Observation] = []
    for _ in range(1000):
        act = policy.next(obs)
        if isinstance(act, Done):
            o = act.outcome
            named = ()
            if o.culprit is not None:
                named = (int(o.culprit[1:]), *(int(c[1:]) for c in o.extra_changes))
            cset = tuple(int(c[1:]) for c in o.culprit_set) or named[:1]
            return {"changes": named, "set": cset, "verdict": o.verdict.value}
        j = int(act.commit[1:])
        if not t.try_build(j):
            obs.append(Observation(act.commit, None, seq=len(obs)))
            continue
        y, _, cov = t.trial(j)
        obs.append(Observation(act.commit, y, cov, seq=len(obs)))
    raise RuntimeError("policy did not finish in 1000 steps")


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
    """Knows the true levels and σ: SPRT (α = β = 1%) at each midpoint, no endpoint trials."""
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
                y, _, cov = t.trial(j)
                if cov and cov["sm_clock_mean_mhz"] < 0.95 * CLOCK_MHZ:
                    y -= math.log(0.94)  # the oracle knows the throttle penalty
                llr += ((y - mu_g) ** 2 - (y - mu_b) ** 2) / (2 * sigma * sigma)
            return llr >= bound

        culprit, s = _bisect_with(t, lo, t.scn.n - 1, bad)
        named.append(culprit)
        cset = cset or s
        lo = culprit
    return {"changes": tuple(named), "set": cset}


STRATEGIES = {
    "perfbisect": run_perfbisect,
    "git-bisect-1-trial": run_git_bisect,
    "1-trial-5-runs-ttest": run_runs_ttest,
    "10-trials-mannwhitney": run_ten_trials,
    "oracle-sprt": run_oracle,
}


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
    return {
        "correct": correct,
        "false_blame": false_blame,
        "trials": t.trials,
        "gpu_hours": t.gpu_hours,
        "set_size": len(res["set"]) if res["set"] else len(named[:1]),
    }


def run_cell(args) -> list[dict]:
    scn_name, strat, seeds = args
    scn = SCENARIOS[scn_name]
    out = []
    for seed in seeds:
        t = make_target(scn, seed)
        out.append(score(t, STRATEGIES[strat](t)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000, help="simulated bisections per cell (default 1000)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated, e.g. S2,S3")
    ap.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated strategy names")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    args = ap.parse_args(argv)
    scns = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    strats = [s.strip() for s in args.strategies.split(",") if s.strip()]
    chunk = 25
    jobs = []
    for s in scns:
        for st in strats:
            for start in range(0, args.reps, chunk):
                jobs.append((s, st, list(range(start, min(start + chunk, args.reps)))))
    t0 = time.time()
    with mp.get_context("fork").Pool(args.workers) as pool:
        results = pool.map(run_cell, jobs, chunksize=1)
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
                "mean_trials": float(np.mean([r["trials"] for r in rows])),
                "mean_gpu_hours": float(np.mean([r["gpu_hours"] for r in rows])),
                "mean_set_size": float(np.mean([r["set_size"] for r in rows])),
            })
    doc = {
        "cost_model": {"trial_min": TRIAL_MIN, "build_min": BUILD_MIN, "runs_per_trial": RUNS},
        "scenarios": {s: SCENARIOS[s].title for s in scns},
        "results": table,
        "seconds": round(time.time() - t0, 1),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"{'scn':4} {'strategy':24} {'acc':>6} {'false':>6} {'trials':>7} {'GPU-h':>6}")
        for r in table:
            print(f"{r['scenario']:4} {r['strategy']:24} {r['accuracy']:6.3f} {r['false_blame']:6.3f} "
                  f"{r['mean_trials']:7.1f} {r['mean_gpu_hours']:6.2f}")
        print(f"({doc['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
