"""How often `regressed_path.decide` names the right path, says "unclear", or names the wrong one.

Synthetic trials as the demo emulator makes them (baseline 500 tok/s; EAGLE-3 600 tok/s at accept
length 2.4), with between-trial noise σ on every trial summary, for the two planted changes:
  speculative  EAGLE-3's verify cycle 4.0 → 4.7 ms (EAGLE-3 −15%, baseline unchanged)
  target       the target forward 20% slower (both modes −16.7%)
and, as `app.bisection.which_path` does, n trials a side first and n more when that is unclear.

Usage: python benchmarks/which_path.py [--reps 400] [--n 3]
Prints, per σ and planted change: right / unclear / wrong, in percent of the repetitions.
"""

from __future__ import annotations

import argparse
import math
import random
import time

from perfbisect.model import RunResult, TrialIdentity, TrialResult, TrialStatus
from perfbisect.engine.regressed_path import decide
from perfbisect.settings import StatsConfig
from perfbisect.engine.stats import NoiseModel

PARENT, CULPRIT = "a" * 40, "b" * 40
MODES = [("baseline", False), ("eagle3", True)]


def trial(commit: str, mode: str, tok_s: float, accept: float | None) -> TrialResult:
    verify = round(257 / accept) if accept else None
    runs = tuple(RunResult(index=i, warmup=False, requested_tokens=257, output_tokens=257, decode_tok_s=tok_s,
                           spec_verify_ct=verify) for i in range(3))
    ident = TrialIdentity(commit, "p", "b", mode, mode, "w", "h")
    return TrialResult(identity=ident, status=TrialStatus.OK, runs=runs, started_at=1.0, finished_at=2.0)


def one(rng: random.Random, change: str, sigma: float, n: int) -> str:
    base = {PARENT: 500.0, CULPRIT: 500.0 / 1.2 if change == "target" else 500.0}
    spec = {PARENT: 600.0, CULPRIT: 600.0 / 1.2 if change == "target" else 600.0 * 4.0 / 4.7}
    trials: list[TrialResult] = []
    noise = NoiseModel.prior(100 * sigma, dof=10)  # the bisection's own measured noise, roughly
    for target in (n, 2 * n):
        while len([t for t in trials if t.identity.mode == "baseline"]) < 2 * target:
            for sha in (PARENT, CULPRIT):
                trials.append(trial(sha, "baseline", base[sha] * math.exp(rng.gauss(0, sigma)), None))
                trials.append(trial(sha, "eagle3", spec[sha] * math.exp(rng.gauss(0, sigma)), 2.4))
        rp = decide(trials, spec_mode="eagle3", modes=MODES, before=PARENT, after=CULPRIT, noise=noise,
                    settings=StatsConfig())
        if rp.path != "unclear":
            break
    if rp.path == "unclear":
        return "unclear"
    return "right" if rp.path == change else "wrong"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=400)
    p.add_argument("--n", type=int, default=3)
    args = p.parse_args()
    rng = random.Random(20)
    t0 = time.perf_counter()
    print(f"n = {args.n} trials a side (then {2 * args.n} when unclear), {args.reps} repetitions each")
    print(f"{'sigma':>6}  {'change':<12} {'right':>6} {'unclear':>8} {'wrong':>6}")
    for sigma in (0.01, 0.02, 0.04, 0.08):
        for change in ("speculative", "target"):
            counts = {"right": 0, "unclear": 0, "wrong": 0}
            for _ in range(args.reps):
                counts[one(rng, change, sigma, args.n)] += 1
            pct = {k: 100.0 * v / args.reps for k, v in counts.items()}
            print(f"{100 * sigma:5.0f}%  {change:<12} {pct['right']:5.1f}% {pct['unclear']:7.1f}% {pct['wrong']:5.1f}%")
    print(f"({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
