"""Is perfbisect's second-change guard the engine's price or the problem's? (issue #35)

The reference told "one change or two" (benchmarks/bayes_two.py) pays for ruling out a second step as any search
must; its cost on a one-change cell against its hit rate on S5 (both changes named), as the prior of two changes
``q`` and the step that matters ``m`` vary, is the frontier a guard can reach. Printed beside it: perfbisect and
the single-change learner on the same seeds (pass them as variants "perfbisect" and "bayes-learner").

Run from the repository root:
    .venv/bin/python benchmarks/issue35/two_changes.py S1,S2,S5,S5r 100 100000 out.json q0.1-m3,q0.5-m3
(WORKERS=N for N processes, 2 by default). A variant is q<Q>-m<M> (prior of two changes, the step in percent that
matters; g, the steps' prior variance in σ², is 10 unless -g<G> follows; -f<F>: DESIGN.md's floor, each named commit
and its parent F trials; -n<P>: "nothing changed" a hypothesis of prior P;
-s: told σ, the true sd of a trial summary; -x<M2>: two changes named only when both steps are ≥ M2 percent,
the larger alone otherwise; -o: that floor not told but sized per hypothesis as perfbisect sizes it — max(5%, half
the larger step, 1.5σ) from the hypothesis's own posterior means and σ) or a strategy of benchmarks/strategies.py.
Seeds are paired: every variant sees the same targets."""
import json
import math
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one BLAS thread per worker: WORKERS processes share the cores
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import re
import sys
from multiprocessing import Pool
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bayes_two  # noqa: E402
import strategies as S  # noqa: E402
from perfbisect.settings import StatsConfig  # noqa: E402

# -o: perfbisect's own floor (tuning.second_change_pct, second_change_share, second_change_sigmas)
OWN_FLOOR = (S.DEFAULT_TUNING.second_change_pct, S.DEFAULT_TUNING.second_change_share,
             S.DEFAULT_TUNING.second_change_sigmas)
VARIANT = re.compile(r"q(?P<q>[0-9.]+)-m(?P<m>[0-9.]+)(?:-g(?P<g>[0-9.]+))?(?:-f(?P<f>[0-9]+))?(?:-n(?P<n>[0-9.]+))?(?P<told>-s)?(?:-x(?P<x>[0-9.]+))?(?P<own>-o)?$")


def job(args):
    name, cell, seed = args
    t = S.make_target(S.SCENARIOS[cell], seed)
    t.seed = seed
    found = VARIANT.match(name)
    if found:
        settings = StatsConfig()
        res = bayes_two.run(t, sigma=t.sigma_total if found["told"] else None, q=float(found["q"]), g=float(found["g"] or 10.0),
                            min_step_pct=float(found["m"]), confidence=settings.confidence,
                            budget=settings.max_trials_total, min_at_change=int(found["f"] or 0),
                            p_none=float(found["n"] or 0.0),
                            min_second_pct=float(found["x"]) if found["x"] else None,
                            own_floor=OWN_FLOOR if found["own"] else None)
    else:
        if name in S.ONE_CHANGE_ONLY and len(t.changes) > 1:
            return name, cell, None  # told "exactly one change": not asked on a two-change cell
        res = S.STRATEGIES[name](t)
    row = S.score(t, res)
    row["p_two"] = res.get("p_two", math.nan)
    return name, cell, row


def main(argv: list[str]) -> None:
    cells = argv[0].split(",")
    reps, base = int(argv[1]), int(argv[2])
    names = argv[4].split(",")
    for name in names:
        if not VARIANT.match(name) and name not in S.STRATEGIES:
            raise SystemExit(f"unknown variant {name!r}: q<Q>-m<M>[-g<G>][-f<F>][-n<P>][-s][-x<M2>][-o] or one of {', '.join(S.STRATEGIES)}")
    jobs = [(v, c, base + i) for v in names for c in cells for i in range(reps)]
    out: dict[str, list[dict]] = {}
    with Pool(int(os.environ.get("WORKERS", "2"))) as pool:
        for done, (name, cell, row) in enumerate(pool.imap_unordered(job, jobs, chunksize=2), 1):
            if row is not None:
                out.setdefault(f"{name}/{cell}", []).append(row)
            if done % 50 == 0:
                print(f"  {done}/{len(jobs)}", file=sys.stderr, flush=True)
    summary = {}
    for key in (f"{v}/{c}" for v in names for c in cells):
        rows = out.get(key, [])
        if not rows:
            continue
        hits = [bool(r["correct"]) for r in rows]
        falses = [bool(r["false_blame"]) for r in rows]
        summary[key] = {
            "n": len(rows), "trials": float(np.mean([r["trials"] for r in rows])),
            "acc": float(np.mean(hits)), "acc_ci": S._rate_ci(hits),  # exact (Clopper-Pearson) 95%
            "false": float(np.mean(falses)), "false_ci": S._rate_ci(falses),
            "wrong_first": float(np.mean([r["wrong_first"] for r in rows])),
            "budget_exhausted": float(np.nanmean([float(r["budget_exhausted"]) for r in rows])),
        }
        s = summary[key]
        print(f"{key:28s} n={s['n']:4d} trials {s['trials']:6.2f}  acc {s['acc']:.3f} "
              f"[{s['acc_ci'][0]:.3f}, {s['acc_ci'][1]:.3f}]  false {s['false']:.3f}  "
              f"wrong-first {s['wrong_first']:.3f}  budget-out {s['budget_exhausted']:.3f}", flush=True)
    Path(argv[3]).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
