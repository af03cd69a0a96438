"""Is the price an `inconclusive` A/A run states a forecast that holds? (issue #35, the A/A price row)

Run from the repository root:
    .venv/bin/python benchmarks/issue35/price_check.py R1-P10-AA:60,R2-AA:20,HS-AA 300 100000 out.json
(cells, each with how many of its first seeds' priced runs to re-run — all by default —, reps, seed base, output;
WORKERS=N processes, 2 by default; a line on standard error per re-run).

For every seed of each A/A twin, perfbisect runs with the default budget. A run that ends `inconclusive` with a
price states "ruling out the tolerance would take about K more trials; raise stats.max_trials_total": this takes
the advice — the same seed (the same measurements) again with max_trials_total = trials spent + K — and records
the verdict. A forecast of the typical case should see about half of those re-runs end `same`, or more (the
re-run keeps looking after every trial); far fewer means the price is too low, all of them at once with trials
to spare means it is too high. Beside it, (spent + K) over the trials the known-σ equivalence test needs: the
"Done when" row's ratio.
"""
import json
import math
import os
import sys
import time
from multiprocessing import get_context

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks"))
import strategies as S  # noqa: E402
from perfbisect.settings import StatsConfig  # noqa: E402

RERUN_CAP = 900  # the simulation's policy loop stops at 1,000 steps


def one(args):
    cell, seed, rerun = args
    t = S.make_target(S.SCENARIOS[cell], seed)
    t.seed = seed
    res = S.run_perfbisect(t)
    row = {"seed": seed, "verdict": res.get("verdict"), "trials": t.trials, "price": res.get("more_trials"),
           "equivalence_trials": S.equivalence_trials(t)}
    if rerun and row["verdict"] == "inconclusive" and row["price"] and t.trials + row["price"] <= RERUN_CAP:
        budget = t.trials + row["price"]
        t2 = S.make_target(S.SCENARIOS[cell], seed)
        t2.seed = seed
        res2 = S.run_perfbisect(t2, settings=StatsConfig(max_trials_total=budget))
        row.update(rerun_budget=budget, rerun_verdict=res2.get("verdict"), rerun_trials=t2.trials)
    return cell, row


def main():
    specs, reps, base, out = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    n_rerun = {c.split(":")[0]: int(c.split(":")[1]) if ":" in c else reps for c in specs}
    cells = list(n_rerun)
    # re-run the priced runs among each cell's first seeds (all seeds are run; the re-runs are the expensive part)
    jobs = [(c, base + i, i < n_rerun[c]) for c in cells for i in range(reps)]
    t0 = time.time()
    rows = []
    with get_context("fork").Pool(int(os.environ.get("WORKERS", "2"))) as pool:
        for cell, row in pool.imap_unordered(one, jobs, chunksize=1):
            rows.append((cell, row))
            if "rerun_verdict" in row:
                print(f"{time.time() - t0:.0f}s {cell} seed {row['seed']}: {row['trials']} + {row['price']} "
                      f"-> {row['rerun_verdict']} after {row['rerun_trials']}", file=sys.stderr, flush=True)
    summary = {}
    for c in cells:
        mine = [r for cc, r in rows if cc == c]
        priced = [r for r in mine if r["verdict"] == "inconclusive" and r["price"]]
        ratios = sorted((r["trials"] + r["price"]) / r["equivalence_trials"] for r in priced)
        re = [r for r in priced if "rerun_verdict" in r]
        summary[c] = {
            "runs": len(mine), "priced": len(priced),
            "price_ratio_median": ratios[len(ratios) // 2] if ratios else None,
            "price_ratio_q25_q75": (ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]) if ratios else None,
            "reruns": len(re),
            "rerun_same": sum(r["rerun_verdict"] == "same" for r in re),
            "rerun_false": sum(r["rerun_verdict"] in ("regressed", "improved") for r in re),
        }
        print(c, json.dumps(summary[c]), file=sys.stderr)
    json.dump({"cells": cells, "reps": reps, "seed_base": base, "summary": summary, "seconds": round(time.time() - t0),
               "rows": {c: [r for cc, r in rows if cc == c] for c in cells}}, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
