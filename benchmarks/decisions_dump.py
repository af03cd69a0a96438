"""Every decision the engine makes on seeded simulated bisections, written as JSON with one digest: a change to the
engine that must not move a decision (wording, restructuring) is checked by dumping before and after and comparing.

Each cell of ``strategies.SCENARIOS`` is bisected ``--seeds`` times from ``--seed-base``; for each run the dump holds
every ``Measure`` the search asked for (commit, phase, the trial as the budget counts it, the node, whether it wanted
another layout, the expected gain, the best answer and its probability — exact floats) and the outcome's verdict,
culprits, effect, trials and answer probability; and the batched search of several nodes (``next_batch``, the
cells of ``NODE_CELLS``), batch by batch. Reasons (English) are left out: they are the report's to word.

    python benchmarks/decisions_dump.py --out /tmp/before.json          # before the change
    python benchmarks/decisions_dump.py --check /tmp/before.json        # after: exit 1 at the first decision that moved
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import strategies  # noqa: E402

# The batched search (next_batch on several nodes, an event-driven clock) on these cells, seeds 0-1: 3 nodes, ±2%.
NODE_CELLS = ("S2", "S2-AA", "S5", "LY")


def _decision(act) -> list:
    if isinstance(act.best, str):  # an engine from before report.words
        best = act.best
    else:
        from perfbisect.report import words

        best = words.best_text(act)
    return [act.commit, act.phase, act.trial, act.host, bool(act.vary_layout), repr(float(act.gain_bits)), best,
            None if act.p is None else repr(float(act.p))]


def _exact(value):
    """Floats as repr (every bit), containers element by element."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return [_exact(v) for v in value]
    return value


def _outcome(res: dict) -> dict:
    """The outcome as the benchmarks score it: verdict, named changes and set, effect and interval, improvements,
    whether the budget ended it, the answer's probability, the price of settling it."""
    return {k: _exact(v) for k, v in res.items()}


def dump(seeds: int, seed_base: int, cells: list[str] | None = None, *, tuning=None, settings=None, nodes: int = 1,
         offset_pct: float = 0.0, fixed_layout: bool = False) -> dict:
    """Every decision and the outcome of ``seeds`` runs of each cell (``cells``: only these), keyed "CELL/SEED".

    ``tuning``, ``settings``: the policy's constants and its StatsConfig (the defaults unless given). ``nodes`` > 1:
    each run goes through ``strategies.run_perfbisect_nodes`` (that many nodes at once through ``next_batch``, each
    offset ±``offset_pct``, the target's seed naming the nodes' noise streams as ``strategies.run_cell`` does); a
    decision is then one trial of a batch, in the order the batches asked for them. ``fixed_layout``: every trial keeps
    layout 0 unless the search asks for another (strategies.run_perfbisect_fixed_layout: the layout re-check's
    re-measure runs only then in LY)."""
    out: dict = {}
    for name, scn in strategies.SCENARIOS.items():
        if cells and name not in cells:
            continue
        for seed in range(seed_base, seed_base + seeds):
            target = strategies.make_target(scn, seed)
            target.randomize_layout = not fixed_layout
            decisions: list = []
            record = lambda act: decisions.append(_decision(act))  # noqa: E731
            if nodes > 1:
                target.seed = seed
                res = strategies.run_perfbisect_nodes(target, nodes, offset_pct, settings=settings, tuning=tuning,
                                                     on_measure=record)
            else:
                res = strategies.run_perfbisect(target, settings=settings, tuning=tuning, on_measure=record)
            out[f"{name}/{seed}"] = {"decisions": decisions, "outcome": _outcome(res)}
    for name in NODE_CELLS:
        if cells and name not in cells:
            continue
        for seed in range(2):
            target = strategies.make_target(strategies.SCENARIOS[name], seed)
            target.seed = seed
            target.randomize_layout = not fixed_layout
            batches: list = []
            res = strategies.run_perfbisect_nodes(target, 3, 2.0, settings=settings, tuning=tuning,
                                                  on_batch=lambda acts: batches.append([_decision(a) for a in acts]))
            out[f"nodes:{name}/{seed}"] = {"decisions": batches, "outcome": _outcome(res)}
    return out


def digest(data: dict) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def first_difference(before: dict, after: dict) -> str | None:
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if a == b:
            continue
        if a is None or b is None:
            return f"{key}: only in {'after' if a is None else 'before'}"
        for i, (x, y) in enumerate(zip(a["decisions"], b["decisions"])):
            if x != y:
                return f"{key}: decision {i + 1} was {x}, is {y}"
        if len(a["decisions"]) != len(b["decisions"]):
            return f"{key}: {len(a['decisions'])} decisions before, {len(b['decisions'])} after"
        return f"{key}: outcome was {a['outcome']}, is {b['outcome']}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=4, help="runs per cell (default 4)")
    ap.add_argument("--seed-base", type=int, default=0)
    ap.add_argument("--cells", nargs="*", help="only these cells (default: every one)")
    ap.add_argument("--out", type=Path, help="write the dump here")
    ap.add_argument("--check", type=Path, help="compare with this dump; exit 1 where a decision moved")
    args = ap.parse_args()
    start = time.perf_counter()
    data = dump(args.seeds, args.seed_base, args.cells)
    runs, decisions = len(data), sum(len(v["decisions"]) for v in data.values())
    print(f"{runs} runs, {decisions} decisions, digest {digest(data)}, {time.perf_counter() - start:.1f}s")
    if args.out:
        args.out.write_text(json.dumps(data, sort_keys=True, indent=0))
    if args.check:
        moved = first_difference(json.loads(args.check.read_text()), data)
        if moved:
            print(f"MOVED: {moved}")
            return 1
        print(f"identical to {args.check}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
