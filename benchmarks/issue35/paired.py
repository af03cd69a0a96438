"""The paired-seed runner the issue-35 exploration drivers share (pair_lookahead.py, floor_doubt.py).

``run(one, variants, argv)``: argv is CELLS REPS SEED_BASE OUT [VARIANT,...]; ``one((variant, cell, seed))`` returns
(variant, cell, row) with the score's fields; every variant sees the same seeds. Returns the summary per
"variant/cell" (n and the mean of each field a row has: acc, false, trials, wrong_first, extra_named, budget_out),
the seed base, the output path and the seconds it took.
"""
import os
import sys
import time
from multiprocessing import get_context

import numpy as np

FIELDS = (("acc", "correct"), ("false", "false_blame"), ("trials", "trials"), ("wrong_first", "wrong_first"),
          ("extra_named", "extra_named"), ("budget_out", "budget_exhausted"))


def run(one, variants: list[str], argv: list[str]) -> tuple[dict, int, str, int]:
    cells, reps, base, out = argv[0].split(","), int(argv[1]), int(argv[2]), argv[3]
    names = argv[4].split(",") if len(argv) > 4 else variants
    jobs = [(v, c, base + i) for c in cells for v in names for i in range(reps)]
    t0 = time.time()
    with get_context("fork").Pool(int(os.environ.get("WORKERS", "2"))) as pool:
        rows = pool.map(one, jobs, chunksize=2)
    summary = {}
    for v in names:
        for c in cells:
            rs = [r for vv, cc, r in rows if vv == v and cc == c]
            summary[f"{v}/{c}"] = {"n": len(rs), **{name: float(np.nanmean([float(r[k]) for r in rs]))
                                                     for name, k in FIELDS if k in rs[0]}}
            print(f"{v}/{c}", summary[f"{v}/{c}"], file=sys.stderr, flush=True)
    return summary, base, out, round(time.time() - t0)
