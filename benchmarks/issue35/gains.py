"""Genuine gains (issue #35): the single-change cells with their step reversed, and what the engine says.

Run from the repository root:
    TV='{"improved_min_per_side": 2}' .venv/bin/python benchmarks/issue35/gains.py S1,S2,M1,R1-P5,R2,HS 300000 200
TV holds Tuning fields to replace (none: the engine's defaults). Prints, per cell, the verdicts and the mean trials.
"""
import sys, json, os
from dataclasses import replace
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks"))
import strategies as S
from perfbisect.engine.tuning import DEFAULT_TUNING
from multiprocessing import Pool
import numpy as np
TV = json.loads(os.environ.get("TV", "{}"))
def scn(name):
    src = S.SCENARIOS[name]
    return replace(src, name=name + "-up", steps_pct=tuple(-x for x in src.steps_pct))
def job(a):
    name, seed = a
    t = S.make_target(scn(name), seed); t.seed = seed
    res = S.run_perfbisect(t, tuning=replace(DEFAULT_TUNING, **TV))
    return name, res.get("verdict"), S.score(t, res)["trials"]
if __name__ == "__main__":
    names = sys.argv[1].split(","); base = int(sys.argv[2]); n = int(sys.argv[3])
    with Pool(2) as p:
        rows = p.map(job, [(c, base + i) for c in names for i in range(n)], chunksize=4)
    for c in names:
        rr = [r for r in rows if r[0] == c]
        v = {k: sum(r[1] == k for r in rr) for k in sorted({r[1] for r in rr})}
        print(c + "-up", TV, "verdicts", v, "mean trials", round(float(np.mean([r[2] for r in rr])), 2),
              "median", float(np.median([r[2] for r in rr])))
