"""Every decision of perfbisect's search on seeded benchmark cells, as JSON: to show a refactor leaves them all
as they were. Run from a checkout's root with that checkout's python (it reads that checkout's benchmarks/strategies.py):

    .venv/bin/python tools/decisions_dump.py OUT.json [SEEDS]

Each entry: cell/seed -> [every action (commit, phase, reason, vary_layout, host) in order, the outcome fields].
Covers the one-at-a-time search (run_perfbisect) and the batched one of several nodes (run_perfbisect_nodes).
"""
import json, os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import strategies as S
from perfbisect.engine import bisect as B

CELLS = ["S0", "S1", "S2", "S4", "S5", "S5r", "S6", "D1", "D2", "D3", "D4", "M1", "R1", "R2", "R1-P5", "MC", "LY",
         "HS", "TE", "TE-R", "T1", "S2-AA", "R1-AA", "MC-AA", "LY-AA"]
seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
log = []
orig_decide = B.SearchPolicy._decide
def spy(self, observations, pending, host, memo=None):
    act = orig_decide(self, observations, pending, host, memo)
    if isinstance(act, B.Done):
        o = act.outcome
        log.append(["done", o.verdict.value, o.culprit, list(o.extra_changes), list(o.culprit_set), repr(o.effect_pct),
                    o.trials_used, repr(o.answer_probability) if hasattr(o, "answer_probability") else None])
    else:
        log.append([act.commit, act.phase, act.reason, act.vary_layout, act.host, len(observations), list(pending)])
    return act
B.SearchPolicy._decide = spy
out = {}
for c in CELLS:
    for seed in range(seeds):
        log.clear()
        t = S.make_target(S.SCENARIOS[c], 5000 + seed); t.seed = 5000 + seed
        r = S.run_perfbisect(t)
        out[f"{c}/{seed}"] = [list(log), t.trials, list(r["changes"]), list(r["set"]), r["verdict"], repr(r["effect_pct"])]
for c in ["S2", "S2-AA"]:
    for seed in range(2):
        log.clear()
        t = S.make_target(S.SCENARIOS[c], 7000 + seed); t.seed = 7000 + seed
        r = S.run_perfbisect_nodes(t, 3, 2.0)
        out[f"nodes3/{c}/{seed}"] = [list(log), t.trials, list(r["changes"]), r["verdict"], repr(r["effect_pct"])]
json.dump(out, open(sys.argv[1], "w"), indent=0, sort_keys=True, default=str)
print(len(out), "runs,", sum(len(v[0]) for v in out.values()), "decisions")
