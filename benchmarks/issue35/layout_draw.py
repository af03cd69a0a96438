"""LY's wrong names under the two layout draws (issue #35): which seeds, and what the named commit really moved.

Run from the repository root:
    .venv/bin/python benchmarks/issue35/layout_draw.py CELL SEED_BASE REPS rotate|uniform [per-trial]

``rotate`` is perfbisect's slot draw since 2026-12-06 (a commit's trials go through the layouts in turn from a start
of its own); ``uniform`` the draw before (each trial picks one independently). ``per-trial`` gives every trial its own
layout id, as the real pipeline records them (slot, padding and hash seed: ids never repeat), instead of the
simulator's one id per layout. For each run that names a commit the truth does not have, it prints the commit's true
level shift at each of the 8 layouts (percent) and their mean — the shift a randomised benchmark sees on average.
Seeds are the benchmark's: ``strategies.py --scenarios CELL --seed-base SEED_BASE --reps REPS`` runs the same targets.
"""
import sys
from multiprocessing import Pool
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import strategies as S  # noqa: E402

CELL, BASE, REPS, DRAW = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
S.LAYOUT_DRAW = DRAW
if len(sys.argv) > 5 and sys.argv[5] == "per-trial":
    S._layout_id = lambda tr: f"L{tr.layout}-{tr.seq}" if tr.layout is not None else f"u{tr.seq}"


def job(seed: int) -> dict:
    t = S.make_target(S.SCENARIOS[CELL], seed)
    t.seed = seed
    res = S.run_perfbisect(t)
    r = S.score(t, res)
    wrong = [c for c in (*res["changes"], *res.get("improvements", ())) if c not in t.changes]
    shifts = {}
    for c in wrong:
        d = np.expm1(t.layout_offsets[t.epoch[c]]) - np.expm1(t.layout_offsets[t.epoch[c - 1]])
        shifts[c] = [round(float(x) * 100, 1) for x in d]
    return {"seed": seed, "false": r["false_blame"], "correct": r["correct"], "trials": r["trials"],
            "verdict": r["verdict"], "named": list(res["changes"]), "improvements": list(res.get("improvements", ())),
            "layout_commits": list(t.layout_commits), "shifts": shifts}


if __name__ == "__main__":
    with Pool(2) as pool:
        rows = pool.map(job, range(BASE, BASE + REPS), chunksize=8)
    n = len(rows)
    verdicts = {v: sum(r["verdict"] == v for r in rows) for v in sorted({r["verdict"] for r in rows})}
    print(f"{CELL} draw={DRAW} ids={'per-trial' if len(sys.argv) > 5 else 'per-layout'} reps={n}: "
          f"right {sum(r['correct'] for r in rows) / n:.1%}, wrong names {sum(r['false'] for r in rows)}, "
          f"mean trials {np.mean([r['trials'] for r in rows]):.2f}, verdicts {verdicts}")
    for r in rows:
        if r["false"]:
            bits = "; ".join(f"c{c:03d}: per layout {s}, mean {np.mean(s):+.1f}%" for c, s in r["shifts"].items())
            print(f"  seed {r['seed']}: {r['verdict']} named {r['named']} improvements {r['improvements']} "
                  f"(layout commits {r['layout_commits']}, {r['trials']} trials) {bits}")
