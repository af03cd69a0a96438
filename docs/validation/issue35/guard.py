"""Price of the second-change guard (issue #35): perfbisect with it on (default) and off, paired on held-out seeds.

Run from the repository root: .venv/bin/python docs/validation/issue35/guard.py S1,M1,... 150 100000 out.json
"Off": tuning.second_change_doubt 1.01 (never doubts one change), residual_confirm_z 0 (no gap re-measure),
stats.second_change_z 0 (no probe of either side)."""
import json, sys
from dataclasses import replace
import numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3] / "benchmarks"))
import strategies as S
from perfbisect.engine.tuning import DEFAULT_TUNING
from perfbisect.settings import StatsConfig
from multiprocessing import Pool

VARIANTS = {
    "default": ({}, {}),
    "guard-off": ({"second_change_doubt": 1.01, "residual_confirm_z": 0.0}, {"second_change_z": 0.0}),
}

def job(args):
    name, cell, seed = args
    tv, sv = VARIANTS[name]
    t = S.make_target(S.SCENARIOS[cell], seed); t.seed = seed
    r = S.score(t, S.run_perfbisect(t, settings=replace(StatsConfig(), **sv), tuning=replace(DEFAULT_TUNING, **tv)))
    return name, cell, r

if __name__ == "__main__":
    cells = sys.argv[1].split(","); reps = int(sys.argv[2]); base = int(sys.argv[3])
    jobs = [(v, c, base + i) for v in VARIANTS for c in cells for i in range(reps)]
    out = {}
    with Pool(2) as p:
        for name, cell, r in p.imap_unordered(job, jobs, chunksize=4):
            out.setdefault(f"{name}/{cell}", []).append(r)
    summ = {}
    for k, rows in sorted(out.items()):
        summ[k] = {"n": len(rows), "trials": float(np.mean([r["trials"] for r in rows])),
                   "acc": float(np.mean([r["correct"] for r in rows])),
                   "false": float(np.mean([r["false_blame"] for r in rows])),
                   "wrong_first": float(np.mean([r.get("wrong_first", 0) for r in rows]))}
        print(k, summ[k], flush=True)
    json.dump(summ, open(sys.argv[4], "w"), indent=1)
