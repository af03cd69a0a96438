"""Which of the engine's constants matter: each one changed on its own, every seeded simulated bisection run again.

Issue #51: a constant nobody exercises is either shown to matter (a benchmark cell that moves) or removed. For each
``Tuning`` field (perfbisect/engine/tuning.py) and each module constant a bisection reads while it runs, every
perturbation — a number halved and doubled (an int rounded half up, never below 1), and "off" (0) where 0 switches
its rule off (tuning.py's comment or the code that reads it says so) — reruns the seeded bisections of every cell of
benchmarks/strategies.py, recorded as decisions_dump.py records them, and compares each with the run at the default
values:

- moved: runs whose list of decisions differs (a trial asked for on another commit or phase, another expected gain
  or best answer, to the bit, or more or fewer of them);
- outcome: runs whose verdict or named commits changed;
- Δtrials: trials asked for, summed over the runs, minus the default's;
- cells: where decisions moved (``*``: the outcome changed too).

A Tuning field is changed only through the public API: ``SearchPolicy(..., tuning=replace(DEFAULT_TUNING,
field=value))`` (strategies.run_perfbisect). A module constant is set on every engine module that holds it
(``from .x import NAME`` copies included) for the run and put back after; one bound when its module was imported —
a default argument, an array built from it — cannot be changed that way and is listed as skipped, with why, as are
those no bisection reads (plan's estimate, the report's wording).

A run is a pure function of its constants, so the runs of one cell are made one after another and a posterior or a
look-ahead pick the default run already computed on the very same inputs is reused, not recomputed (``--no-memo``
recomputes everything; so does every run that changes a constant those two computations read themselves).

Some rules no default cell reaches: ``--under`` holds a constant or a Tuning field at another value for every run of
the command, ``--settings`` a StatsConfig field (locate_min_gain_bits acts only under a per-commit cap), and
``--cells`` may name the probe cells of PROBE_CELLS (an improvement, IM; a regression of min_effect_pct, under the
tolerance, SM), which join strategies.SCENARIOS in this process only; ``--fixed-layout`` keeps every trial on one layout
unless the search asks for another (LY's rotating layouts never make the layout re-check measure again).

    python benchmarks/constants_matter.py                                   # every Tuning field, 1 seed a cell
    python benchmarks/constants_matter.py --fields layout_keep,layout_extra_trials --cells LY,LY-AA --seeds 3
    python benchmarks/constants_matter.py --modules --fields none           # the module constants only
    python benchmarks/constants_matter.py --fields host_offset_prior_pct --nodes 2 --host-offset 3 --cells S2,S2-AA
    python benchmarks/constants_matter.py --fields EDGE_GRID --under SPARSE_ABOVE=32 --cells S2
    python benchmarks/constants_matter.py --fields change_trials_z --under pure_alpha=0 --cells R1,R2 --seeds 3
    python benchmarks/constants_matter.py --fields locate_min_gain_bits --settings max_trials_per_commit=6 --cells R1
    python benchmarks/constants_matter.py --fields improved_min_per_side --cells IM --seeds 3
    python benchmarks/constants_matter.py --fields layout_extra_trials --cells LY,LY-AA --seeds 4 --fixed-layout

The records hold exact floats, which depend on the BLAS thread count: docs/benchmarks.md's figures ("Constants: what
moves when each is changed") were made with OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import math
import sys
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import decisions_dump  # noqa: E402
import strategies  # noqa: E402
from perfbisect.engine.tuning import DEFAULT_TUNING, Tuning  # noqa: E402
from perfbisect.settings import StatsConfig  # noqa: E402

# Tuning fields whose rule is off at 0, and where that is said.
OFF_AT_ZERO = {
    "pure_look_power": "tuning.py: 0 = one look",
    "side_scale_alpha": "kernel.fit: refitted only when > 0",
    "small_step_sigmas": "gates.PairChecks: a step is small only when > 0",
    "pure_alpha": "pair_checks.PairConfirm.pure: ≤ 0 passes",
    "residual_gap_z": "pair_checks.SecondChange.need: looked at only when > 0",
    "suspected_change_z": "pair_checks.SecondChange.need: looked at only when > 0",
    "residual_confirm_z": "pair_checks.SecondChange.gap_pairs: ≤ 0 re-measures nothing",
    "futility_min_per_end": "endings.Endings: ≤ 0 no futility stop",
}
# Tuning fields that are probabilities: "×2" is min(2p, (1 + p)/2), halfway to 1 where doubling would reach it (a
# prior of 1 leaves the other answers none).
PROBABILITIES = {"no_change_prior", "two_change_prior", "no_change_doubt", "second_change_doubt", "same_no_change",
                 "same_alpha_share", "pure_alpha", "side_scale_alpha", "futility_sigma_q"}
# Tuning fields read only when the trials come from several nodes (kernel.Fit.host_ratio: changepoint.posterior
# models a node's offset only then): with one node they cannot move anything and are run only with --nodes.
NODES_ONLY = {"host_offset_prior_pct"}


def _scaled(v, k: float):
    return type(v)(x * k for x in v)


def _drift_mass(v, k: float):
    """RHO_PRIOR with the prior mass of drift (every ρ > 0) multiplied by k, shared as before."""
    off = 1.0 - v[0]
    return (1.0 - off * k, *(x * k for x in v[1:]))


def _log_spread(v, k: float):
    """SIGMA_SCALES with each multiplier's log scaled by k (k < 1: σ's prior narrower), weights kept."""
    return tuple((math.exp(math.log(m) * k), w) for m, w in v)


def _pending_z(samples: int):
    import numpy as np

    return np.random.default_rng(20261201).standard_normal((samples, 16))


# Cells no default set holds, for rules no cell of strategies.SCENARIOS reaches: ``--cells`` may name them (they join
# strategies.SCENARIOS in this process only, so decisions_dump's own dump is unchanged).
PROBE_CELLS = {
    "IM": strategies.Scenario("IM", "9 commits, a +8% step (the bad end faster: `improved`), σ_b 3%, σ_w 1%", 9, 3.0,
                              1.0, (8.0,)),
    "SM": strategies.Scenario("SM", "9 commits, a −3% step (min_effect_pct, under tolerance_pct 5: `same` by the "
                              "tolerance is at stake while no change stays uncertain), σ_b 1%, σ_w 1%", 9, 1.0, 1.0,
                              (-3.0,)),
}


# Module constants a bisection reads at call time: name → (module, [(label, value from the default)], note).
# A perturbation's value is a function of the default; "also" sets further constants with it (built from it at
# import, rebuilt here as the import would).
@dataclass(frozen=True)
class ModuleConstant:
    module: str
    name: str
    perturb: tuple[tuple[str, Callable[[Any], Any]], ...]
    note: str = ""
    nodes_only: bool = False
    also: Callable[[Any], dict[str, Any]] | None = None
    # False: read inside changepoint.posterior or lookahead.best_trial, whose answers the memo reuses (it is off
    # while this one is changed); RHO_GRID and RHO_PRIOR reach posterior as arguments, in the memo's key
    memo: bool = True


def _half_double(v):
    if isinstance(v, int) and not isinstance(v, bool):
        return (("×0.5", lambda x: max(1, int(x / 2 + 0.5))), ("×2", lambda x: 2 * x))
    return (("×0.5", lambda x: x / 2), ("×2", lambda x: x * 2))


MODULE_CONSTANTS = [
    ModuleConstant("changepoint", "RHO_GRID",
                   (("×0.5", lambda v: _scaled(v, 0.5)), ("×2", lambda v: _scaled(v, 2.0))),
                   "each drift scale ρ halved / doubled"),
    ModuleConstant("changepoint", "RHO_PRIOR", (("drift×0.5", lambda v: _drift_mass(v, 0.5)),
                                                ("drift×2", lambda v: _drift_mass(v, 2.0))),
                   "the prior mass of drift (ρ > 0, 0.15) halved / doubled"),
    ModuleConstant("changepoint", "SIGMA_SCALES", (("log×0.5", lambda v: _log_spread(v, 0.5)),
                                                   ("log×2", lambda v: _log_spread(v, 2.0)),
                                                   ("off", lambda v: ((1.0, 1.0),))),
                   "σ's prior mixture: each multiplier's log halved / doubled; off = the stated σ alone", memo=False),
    ModuleConstant("changepoint", "SPARSE_ABOVE", (("×0.5", lambda v: v // 2), ("×2", lambda v: v * 2),
                                                   ("=32", lambda v: 32)),
                   "=32: the 64-commit cells scored on bins", memo=False),
    ModuleConstant("changepoint", "EDGE_QUANTILES", _half_double(48), "sparse posterior only (n > SPARSE_ABOVE)",
                   memo=False),
    ModuleConstant("changepoint", "EDGE_GRID", _half_double(32), "sparse posterior only (n > SPARSE_ABOVE)",
                   memo=False),
    ModuleConstant("covariates", "COVARIATE_MIN_OFF_MODE", _half_double(3)),
    ModuleConstant("covariates", "EXOGENOUS_COVARIATES", (
        ("off", lambda v: ()),
        ("+mediators", lambda v: (*v, "sm_clock_mean_mhz", "power_mean_w", "utilization_pct", "temperature_mean_c",
                                  "throttled_fraction"))),
                   "off: nothing adjusted; +mediators: the mediators adjusted for too"),
    ModuleConstant("covariates", "MEDIATOR_COVARIATES", (("off", lambda v: ()),), "off: no mediator attributed"),
    ModuleConstant("covariates", "EXOGENOUS_SLOWER", (("off", lambda v: {}),
                                                      ("flipped", lambda v: {k: -s for k, s in v.items()})),
                   "off: no sign check of an adjustment; flipped: the implausible sign expected"),
    ModuleConstant("endings", "PRICE_LIMIT", _half_double(100_000)),
    ModuleConstant("lookahead", "MAX_HYPOTHESES", _half_double(160), memo=False),
    ModuleConstant("lookahead", "LOOKAHEAD_GRID", _half_double(128), memo=False),
    ModuleConstant("lookahead", "PENDING_SAMPLES", _half_double(16), "with _PENDING_Z redrawn at its size",
                   nodes_only=True, also=lambda v: {"_PENDING_Z": _pending_z(v)}, memo=False),
    ModuleConstant("lookahead", "PENDING_HYPOTHESES", _half_double(96), nodes_only=True, memo=False),
    ModuleConstant("stats", "PRIOR_DOF_CAP", _half_double(1.0)),
]
# Module constants not changed here, and why.
SKIPPED = {
    "changepoint.OUTLIER_SHARE": "bound at import: outlier_scale's default argument (kernel.fit passes none)",
    "changepoint.OUTLIER_VARIANCE": "bound at import: outlier_scale's default argument (kernel.fit passes none)",
    "stats.PRIOR_DOF": "bound at import: NoiseModel.prior's default argument (strategies._policy passes none)",
    "lookahead._PENDING_Z": "built at import from a fixed seed (normals, not a tuning value; redrawn with "
                            "PENDING_SAMPLES)",
    "stats.LOOK_ALPHA_SHARE": "bound at import as Tuning.same_alpha_share's default (that field is changed instead); "
                              "its own reader, stats.compare_sequential, is the measure path's, not a bisection's",
    "lookahead.CHUNK_FLOATS": "memory only: how many floats one chunk of conditional_gain holds",
    "changepoint.SPARSE_BYTES_PER_HYPOTHESIS": "not read by a bisection: plan's memory estimate (sparse_footprint)",
    "cost.*": "not read by a bisection: plan's estimate (ENDPOINT_TRIALS, CONFIRM_TRIALS, SEARCH_COEF, SEARCH_POWER, "
              "SIM_REPS, SIM_BUDGET_S, NO_CHANGE_REPS, SIM_MAX_CANDIDATES, DEFAULT_EFFECT_FACTOR, PAUSE_GAP_S)",
    "report.*": "not read by a bisection: wording and the report's replay (words.OPEN_CHECK_NOTE, "
                "regressed_path.COLUMNS, replay.MAX_REPLAY_STEPS, REPLAY_WORK, INDEX_REPLAY_WORK, REPLAY_CPU_CAP_S)",
}
ENGINE = "perfbisect.engine"


# ------------------------------------------------------------------------------------------------------------
# perturbations


@dataclass(frozen=True)
class Perturbation:
    name: str  # the Tuning field, or module.NAME
    label: str  # ×0.5, ×2, off, …
    default: Any
    value: Any
    tuning: Tuning | None = None  # a Tuning field's perturbation
    patch: dict[str, Any] | None = None  # a module constant's: module.NAME → value
    memo: bool = True

    def shown(self, v) -> str:
        if isinstance(v, float):
            return f"{v:g}"
        if isinstance(v, tuple) and v and isinstance(v[0], float):
            return "(" + ", ".join(f"{x:.3g}" for x in v) + ")"
        if isinstance(v, tuple) and v and isinstance(v[0], tuple):
            return "(" + ", ".join("(" + ", ".join(f"{x:.3g}" for x in p) + ")" for p in v) + ")"
        text = repr(v)
        return text if len(text) <= 40 else text[:37] + "…"


def tuning_perturbations(name: str) -> list[Perturbation]:
    default = getattr(DEFAULT_TUNING, name)
    if isinstance(default, int) and not isinstance(default, bool):
        values = [("×0.5", max(1, int(default / 2 + 0.5))), ("×2", default * 2)]
    elif name in PROBABILITIES:
        values = [("×0.5", default / 2), ("×2", min(default * 2, (1 + default) / 2))]
    else:
        values = [("×0.5", default / 2), ("×2", default * 2)]
    if name in OFF_AT_ZERO:
        values.append(("off", type(default)(0)))
    return [Perturbation(name, label, default, v, tuning=replace(DEFAULT_TUNING, **{name: v}))
            for label, v in values if v != default]


def module_perturbations(c: ModuleConstant) -> list[Perturbation]:
    mod = importlib.import_module(f"{ENGINE}.{c.module}")
    default = getattr(mod, c.name)
    out = []
    for label, f in c.perturb:
        v = f(default)
        patch = {f"{c.module}.{c.name}": v}
        if c.also is not None:
            patch.update({f"{c.module}.{k}": x for k, x in c.also(v).items()})
        out.append(Perturbation(f"{c.module}.{c.name}", label, default, v, patch=patch,
                                memo=c.memo))
    return out


class Patched:
    """Module constants set for a block: on every engine module whose global of that name is the constant (its own
    module's, and each ``from .x import NAME`` copy), put back after."""

    def __init__(self, patch: dict[str, Any] | None):
        self.patch = patch or {}
        self.saved: list[tuple[Any, str, Any]] = []

    def __enter__(self):
        for key, value in self.patch.items():
            module, name = key.rsplit(".", 1)
            home = importlib.import_module(f"{ENGINE}.{module}")
            original = getattr(home, name)
            for mod in list(sys.modules.values()):
                if getattr(mod, "__name__", "").startswith("perfbisect.") and getattr(mod, name, None) is original:
                    self.saved.append((mod, name, original))
                    setattr(mod, name, value)
        return self

    def __exit__(self, *exc):
        for mod, name, original in reversed(self.saved):
            setattr(mod, name, original)
        self.saved.clear()


# ------------------------------------------------------------------------------------------------------------
# the memo: a cell's runs share the posteriors and look-ahead picks their default run computed on the same inputs


def _array_key(a) -> tuple | None:
    return None if a is None else (a.dtype.str, a.shape, a.tobytes())


class Memo:
    """While the default run of a cell records, every ``changepoint.posterior`` (as kernel.py calls it) and every
    ``lookahead.best_trial`` (as gates.py calls it) is kept under its whole input; while a perturbed run replays, an
    identical input gets the kept answer (the same object) instead of a recomputation. Both are pure functions of
    their arguments and of their own modules' constants, which are never changed while the memo is on."""

    def __init__(self):
        self.kernel = importlib.import_module(f"{ENGINE}.kernel")
        self.gates = importlib.import_module(f"{ENGINE}.gates")
        self.posterior, self.best_trial = self.kernel.posterior, self.gates.best_trial
        self.posts: dict = {}
        self.picks: dict = {}
        self.recording = False
        self.hits = self.misses = 0

    def _post_key(self, ev, kw) -> tuple:
        return (_array_key(ev.commit), _array_key(ev.time), _array_key(ev.value), ev.n, _array_key(ev.next_testable),
                _array_key(ev.host), _array_key(ev.scale), tuple(sorted(kw.items())))

    def _posterior(self, ev, **kw):
        key = self._post_key(ev, kw)
        hit = self.posts.get(key)
        if hit is not None:
            self.hits += 1
            return hit
        self.misses += 1
        post = self.posterior(ev, **kw)
        if self.recording:
            self.posts[key] = post
        return post

    def _best_trial(self, post, candidates, t_new, host=None, pending=None, groups=None):
        if groups is not None:  # a variant look-ahead: not the default run's picks
            return self.best_trial(post, candidates, t_new, host=host, pending=pending, groups=groups)
        key = (id(post), tuple(candidates), t_new, host, repr(pending))
        hit = self.picks.get(key)
        if hit is not None and hit[0] is post:
            self.hits += 1
            return hit[1]
        self.misses += 1
        pick = self.best_trial(post, candidates, t_new, host=host, pending=pending)
        if self.recording:
            self.picks[key] = (post, pick)
        return pick

    def on(self):
        self.kernel.posterior, self.gates.best_trial = self._posterior, self._best_trial

    def off(self):
        self.kernel.posterior, self.gates.best_trial = self.posterior, self.best_trial

    def clear(self):
        self.posts.clear()
        self.picks.clear()


# ------------------------------------------------------------------------------------------------------------
# running and comparing


def _named(rec: dict) -> tuple:
    o = rec["outcome"]
    return o["verdict"], tuple(o["changes"])


def run_cell(cell: str, seeds: int, seed_base: int, perturbations: list[Perturbation], *, nodes: int,
             offset_pct: float, under: dict[str, Any], base_tuning: Tuning, settings, fixed_layout: bool,
             memo: Memo | None) -> tuple[dict, dict[int, dict]]:
    """The default runs of one cell and each perturbation's, as decisions_dump.dump records them. ``under``: module
    constants held for all of them; ``base_tuning``: the Tuning each perturbation changes one field of."""
    def one(p: Perturbation | None) -> dict:
        tuning = base_tuning
        if p is not None and p.tuning is not None:
            tuning = replace(base_tuning, **{p.name: p.value})
        with Patched(under), Patched(p.patch if p else None):
            return decisions_dump.dump(seeds, seed_base, [cell], tuning=tuning, settings=settings, nodes=nodes,
                                       offset_pct=offset_pct, fixed_layout=fixed_layout)

    if memo is not None:
        memo.clear()
        memo.recording = True
        memo.on()
    try:
        base = one(None)
        out: dict[int, dict] = {}
        if memo is not None:
            memo.recording = False
        for k, p in enumerate(perturbations):
            if memo is not None:
                memo.on() if p.memo else memo.off()
            try:
                out[k] = one(p)
            except Exception as e:  # a value the engine cannot run with: said in the row, the rest go on
                out[k] = {"error": f"{type(e).__name__}: {e}"}
    finally:
        if memo is not None:
            memo.off()
            memo.clear()
    return base, out


def compare(base: dict, runs: dict) -> dict:
    moved, changed, cells, detail = 0, 0, {}, []
    dtrials = 0
    for key, rec in runs.items():
        b = base[key]
        dtrials += len(rec["decisions"]) - len(b["decisions"])
        if rec["decisions"] == b["decisions"] and _named(rec) == _named(b):
            continue
        cell = key.split("/")[0]
        is_moved = rec["decisions"] != b["decisions"]
        is_changed = _named(rec) != _named(b)
        moved += is_moved
        changed += is_changed
        cells.setdefault(cell, [0, 0])
        cells[cell][0] += is_moved
        cells[cell][1] += is_changed
        first = next((i for i, (x, y) in enumerate(zip(b["decisions"], rec["decisions"])) if x != y),
                     min(len(b["decisions"]), len(rec["decisions"])))
        detail.append({"run": key, "first_moved_decision": first + 1, "trials": [len(b["decisions"]),
                       len(rec["decisions"])], "outcome": [list(_named(b)), list(_named(rec))]})
    return {"runs": len(runs), "moved": moved, "outcome_changed": changed, "delta_trials": dtrials,
            "cells": cells, "detail": detail}


def cells_text(cells: dict) -> str:
    parts = []
    for cell, (m, c) in cells.items():
        n = max(m, c)
        parts.append(f"{cell}{'' if n == 1 else f'×{n}'}{'*' if c else ''}")
    return " ".join(parts) or "—"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fields", default=None, metavar="A,B",
                    help="Tuning fields and/or module constants (NAME or module.NAME) to change; 'none': no Tuning "
                         "field (default: every Tuning field)")
    ap.add_argument("--modules", action="store_true", help="also every module constant a bisection reads at call time")
    ap.add_argument("--seeds", type=int, default=1, help="runs per cell (default 1)")
    ap.add_argument("--seed-base", type=int, default=0)
    ap.add_argument("--cells", default=None, metavar="A,B", help="only these cells (default: every one)")
    ap.add_argument("--nodes", type=int, default=1,
                    help="K > 1: every run on K nodes at once through next_batch (strategies.run_perfbisect_nodes)")
    ap.add_argument("--host-offset", type=float, default=0.0, metavar="PCT",
                    help="with --nodes: each node's level offset, +PCT, −PCT, … (default 0)")
    ap.add_argument("--under", action="append", default=[], metavar="NAME=VALUE",
                    help="hold a module constant or a Tuning field at VALUE (a Python literal) for the default runs "
                         "and every perturbation, e.g. SPARSE_ABOVE=32 or pure_alpha=0 (repeatable)")
    ap.add_argument("--settings", action="append", default=[], metavar="KEY=VALUE",
                    help="a StatsConfig field for every run, e.g. max_trials_per_commit=6 (repeatable)")
    ap.add_argument("--fixed-layout", action="store_true",
                    help="every trial on layout 0 unless the search asks for another (the layout re-check's "
                         "re-measure)")
    ap.add_argument("--no-memo", action="store_true", help="recompute every posterior and look-ahead pick")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    ap.add_argument("--show", type=Path, metavar="JSON", help="print the table of an earlier --json document and stop")
    args = ap.parse_args(argv)
    if args.show:
        print_table(json.loads(args.show.read_text()))
        return 0

    tuning_names = [f.name for f in fields(Tuning)]
    by_name = {c.name: c for c in MODULE_CONSTANTS} | {f"{c.module}.{c.name}": c for c in MODULE_CONSTANTS}
    wanted = tuning_names if args.fields is None else [x for x in args.fields.split(",") if x and x != "none"]
    consts = list(MODULE_CONSTANTS) if args.modules else []
    perturbations: list[Perturbation] = []
    not_run: list[tuple[str, str]] = []
    for name in wanted:
        if name in tuning_names:
            if name in NODES_ONLY and args.nodes < 2:
                not_run.append((name, "read only when trials come from several nodes: run with --nodes K"))
                continue
            perturbations += tuning_perturbations(name)
        elif name in by_name:
            if by_name[name] not in consts:
                consts.append(by_name[name])
        else:
            ap.error(f"{name}: neither a Tuning field nor a module constant changed here "
                     f"({', '.join(sorted(by_name))}; skipped: {', '.join(SKIPPED)})")
    for c in consts:
        if c.nodes_only and args.nodes < 2:
            not_run.append((f"{c.module}.{c.name}", "read only with trials in flight: run with --nodes K"))
            continue
        perturbations += module_perturbations(c)
    under: dict[str, Any] = {}
    under_tuning: dict[str, Any] = {}
    for item in args.under:
        name, _, value = item.partition("=")
        if name in tuning_names:
            under_tuning[name] = ast.literal_eval(value)
            continue
        c = by_name.get(name)
        if c is None:
            ap.error(f"--under {item}: neither a Tuning field nor a module constant changed here")
        under[f"{c.module}.{c.name}"] = ast.literal_eval(value)
    base_tuning = replace(DEFAULT_TUNING, **under_tuning)
    stats = {}
    for item in args.settings:
        key, _, value = item.partition("=")
        stats[key] = ast.literal_eval(value)
    settings = StatsConfig(**stats) if stats else None
    cells = [c for c in args.cells.split(",") if c] if args.cells else list(strategies.SCENARIOS)
    for c in cells:
        if c in PROBE_CELLS and c not in strategies.SCENARIOS:
            strategies.SCENARIOS[c] = PROBE_CELLS[c]
    unknown = [c for c in cells if c not in strategies.SCENARIOS]
    if unknown:
        ap.error(f"unknown cells {unknown}; known: {', '.join([*strategies.SCENARIOS, *PROBE_CELLS])}")

    memo = None if args.no_memo else Memo()
    start = time.process_time()
    base_all: dict = {}
    runs_all: dict[int, dict] = {k: {} for k in range(len(perturbations))}
    errors: dict[int, str] = {}
    for cell in cells:
        t0 = time.process_time()
        base, runs = run_cell(cell, args.seeds, args.seed_base, perturbations, nodes=args.nodes,
                              offset_pct=args.host_offset, under=under, base_tuning=base_tuning, settings=settings,
                              fixed_layout=args.fixed_layout, memo=memo)
        base_all.update(base)
        for k, r in runs.items():
            if "error" in r:
                errors.setdefault(k, f"{cell}: {r['error']}")
            else:
                runs_all[k].update(r)
        print(f"  {cell}: {len(perturbations) + 1} × {args.seeds} runs, {time.process_time() - t0:.1f} s CPU",
              file=sys.stderr, flush=True)
    rows = []
    for k, p in enumerate(perturbations):
        rows.append({"constant": p.name, "change": p.label, "default": p.shown(p.default), "value": p.shown(p.value),
                     **compare(base_all, runs_all[k]), "error": errors.get(k)})
    cpu = time.process_time() - start
    doc = {
        "command": "python benchmarks/constants_matter.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "cells": cells, "seeds": args.seeds, "seed_base": args.seed_base, "nodes": args.nodes,
        "host_offset_pct": args.host_offset,
        "under": {k: repr(v) for k, v in (under | under_tuning).items()},
        "settings": {k: repr(v) for k, v in stats.items()},
        "fixed_layout": args.fixed_layout,
        "runs_per_perturbation": len(base_all), "default_trials": sum(len(v["decisions"]) for v in base_all.values()),
        "default_digest": decisions_dump.digest(base_all), "cpu_s": round(cpu, 1),
        "memo": None if memo is None else {"hits": memo.hits, "misses": memo.misses},
        "rows": rows, "not_run": dict(not_run), "modules": bool(consts), "skipped": SKIPPED,
    }
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print_table(doc)
    return 0


def print_table(doc: dict) -> None:
    """The table of one run's document (``--json``'s, or ``--show``'s file)."""
    rows, seeds, nodes = doc["rows"], doc["seeds"], doc["nodes"]
    where = f", {nodes} nodes ±{doc['host_offset_pct']:g}%" if nodes > 1 else ""
    if doc.get("fixed_layout"):
        where += ", fixed layout"
    if doc["under"] or doc.get("settings"):
        where += ", under " + ", ".join(f"{k}={v}" for k, v in (doc["under"] | doc.get("settings", {})).items())
    print(f"{doc['runs_per_perturbation']} runs per perturbation ({len(doc['cells'])} cells × {seeds} "
          f"seed{'s' if seeds > 1 else ''} from {doc['seed_base']}{where}); the defaults ask {doc['default_trials']} "
          f"trials, digest {doc['default_digest']}; {doc['cpu_s']:.0f} s CPU")
    w = max([len(r["constant"]) for r in rows] + [8])
    print(f"{'constant':{w}}  {'change':>10}  {'value':>12}  {'moved':>5}  {'outcome':>7}  {'Δtrials':>7}  cells")
    for r in rows:
        print(f"{r['constant']:{w}}  {r['change']:>10}  {r['value'][:12]:>12}  {r['moved']:>5}  "
              f"{r['outcome_changed']:>7}  {r['delta_trials']:>+7}  {cells_text(r['cells'])}"
              f"{'' if r['error'] is None else '  error: ' + r['error']}")
    for name, why in doc["not_run"].items():
        print(f"not run: {name}: {why}")
    if doc["modules"]:
        for name, why in doc["skipped"].items():
            print(f"skipped: {name}: {why}")


if __name__ == "__main__":
    raise SystemExit(main())
