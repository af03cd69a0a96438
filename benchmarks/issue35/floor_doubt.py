"""The engine's doubt of a second change asked at perfbisect's own floor, as `bayes-told-nothing` asks it (issue #35).

Run from the repository root:
    .venv/bin/python benchmarks/issue35/floor_doubt.py S5,S2,S1,HS,R1,MC 100 400000 out.json [VARIANT,...]
(WORKERS=N processes, 2 by default).

`bayes-told-nothing` names S5's two changes in 92.7% with S2 at 25.3 trials; the engine's guard 88.0% at 28.0, and
its posterior alone as the guard (`perfbisect-posterior-guard`) reaches 93% only by reading HS's noisy side and R1's
lumpy sessions as a second change. The reference differs in what its doubt is *about*: a second step from
max(5%, half the located step, 1.5σ) (`second_change_floor_pct`), not from `stats.min_effect_pct` (3%) — a 3% step
inside a side whose sessions spread 10% can never be ruled out, one of 1.5σ can.

Variants "floor-*": the density probe and the gap re-measure off (``stats.second_change_z = 0``); one change is not
accepted while the two-change hypotheses whose *both* steps reach that floor keep ``second_change_doubt`` of the
posterior — per hypothesis P(|δ1| ≥ F)·P(|δ2| ≥ F) over P(|δ1| ≥ 3%)·P(|δ2| ≥ 3%) (the weights already carry the 3%
truncation), δ normal with the hypothesis's own level step and standard error, F from the located step and σ of
the best one-change hypothesis — while the look-ahead's trial is expected to remove ``min_gain_bits``. This is an
exploration: each variant's policy runs ``FloorDoubt`` in place of its ``gates.SecondChangeDoubt`` (``policy.gates``
is the tuple the policy runs, the supported way to try a variant rule); nothing of the product changes, and no
engine name is patched. Seeds are paired: each variant sees the same targets.
"""
import json
import sys
from dataclasses import dataclass, replace

import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks"))
import strategies as S  # noqa: E402
from bayes_two import _outside  # noqa: E402
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import paired  # noqa: E402
from perfbisect.engine import gates  # noqa: E402
from perfbisect.engine.change_posterior import level_step  # noqa: E402
from perfbisect.engine.effects import located_step  # noqa: E402
from perfbisect.engine.observations import Done  # noqa: E402
from perfbisect.engine.pair_checks import SecondChange  # noqa: E402
from perfbisect.engine.stats import log_of_pct  # noqa: E402
from perfbisect.engine.tuning import DEFAULT_TUNING  # noqa: E402
from perfbisect.engine.view import Range, View  # noqa: E402
from perfbisect.settings import StatsConfig  # noqa: E402


def p_two_floor(post, floor: float, min_step: float, own: tuple[float, float, float] | None = None) -> float:
    """Mass of two changes whose steps both reach ``floor`` (log). ``own``: (floor's fixed part, share of the larger
    step, σ multiple) — each hypothesis's floor from its own larger step and σ instead (``floor`` unused)."""
    two = (post.b2 < post.n) & (post.b1 < post.n)
    if not two.any():
        return 0.0
    beta, cov, s2 = post.beta[two], post.cov[two], post.s2[two]
    d1, se1 = level_step(beta, cov, s2, 0, 1)
    d2, se2 = level_step(beta, cov, s2, 1, 2)
    if own is not None:
        fixed, share, sigmas = own
        floor = np.maximum(np.maximum(fixed, share * np.maximum(np.abs(d1), np.abs(d2))), sigmas * np.sqrt(s2))
    # P(|δ| ≥ floor) over P(|δ| ≥ min_step) for each step, δ normal (bayes_two's tail, df None)
    ratio = (_outside(d1, se1, None, floor) / np.maximum(_outside(d1, se1, None, min_step), 1e-300)
             * _outside(d2, se2, None, floor) / np.maximum(_outside(d2, se2, None, min_step), 1e-300))
    return float((post.w[two] * np.minimum(ratio, 1.0)).sum())


@dataclass(frozen=True)
class FloorDoubt:
    """``gates.SecondChangeDoubt`` asked about two changes beyond the floor: the probe's size (``SecondChange.sizes``),
    or each hypothesis's own (``own``: floor's fixed part, share of the larger step, σ multiple). Runs where the
    engine's gate runs, with its look-ahead (``search``), its doubt and its ``min_gain_bits``."""

    doubt_gate: gates.SecondChangeDoubt  # the engine's gate this one stands in for
    second: SecondChange  # the probe's sizes (the policy's own, from its OneChange gate)
    range: Range
    min_step: float  # log of stats.min_effect_pct: the truncation the posterior's weights carry
    own: tuple[float, float, float] | None = None

    def check(self, view: View):
        if len(view.top_key) != 1:
            return None
        b = view.top_key[0]
        st = located_step(view.post, view.top_key, b, self.range.parent(b, view.data), list(view.counts))
        _, floor = self.second.sizes(view.post, st)
        p_two = p_two_floor(view.post, floor, self.min_step, self.own)
        g = self.doubt_gate
        if p_two >= g.doubt:
            step = g.search.step(view, "second-change check")
            if isinstance(step, Done) or step.gain_bits >= g.min_gain_bits:
                return step
            return replace(view, doubt=p_two)  # the doubt is kept: the verdict says it
        return None


def floor_doubt(policy, own_floor: bool = False) -> None:
    """Run ``FloorDoubt`` in ``policy`` in place of its ``gates.SecondChangeDoubt`` (the rest of its gates as they are)."""
    second = next(g for g in policy.gates if isinstance(g, gates.OneChange)).second
    own = (log_of_pct(second.floor_pct), second.share, second.floor_sigmas) if own_floor else None
    min_step = log_of_pct(policy.settings.min_effect_pct)
    policy.gates = tuple(FloorDoubt(g, second, policy.range, min_step, own) if isinstance(g, gates.SecondChangeDoubt)
                         else g for g in policy.gates)


def variant_of(name: str):
    """What ``run_perfbisect`` does to a fresh policy for variant ``name`` (None: the engine as it is)."""
    floor = VARIANTS[name][0]
    if not floor:
        return None
    own = floor == "own"
    return lambda policy: floor_doubt(policy, own_floor=own)


PROBE_OFF = {"second_change_z": 0.0}
# name: (floor doubt? — "own": each two-change hypothesis's floor from its own steps, Tuning fields, StatsConfig fields)
VARIANTS = {
    "default": (False, {}, {}),
    "floor-0.1-d.01-g.01": (True, {"second_change_doubt": 0.01, "min_gain_bits": 0.01}, PROBE_OFF),
    "floor-0.3-d.01-g.01": (True, {"two_change_prior": 0.3, "second_change_doubt": 0.01, "min_gain_bits": 0.01},
                            PROBE_OFF),
    "floor-0.1-d.01-g.001": (True, {"second_change_doubt": 0.01, "min_gain_bits": 0.001}, PROBE_OFF),
    "floor-0.1-d.04-g.01": (True, {"min_gain_bits": 0.01}, PROBE_OFF),
    "own-0.1-d.01-g.01": ("own", {"second_change_doubt": 0.01, "min_gain_bits": 0.01}, PROBE_OFF),
    "own-0.2-d.01-g.01": ("own", {"two_change_prior": 0.2, "second_change_doubt": 0.01, "min_gain_bits": 0.01},
                          PROBE_OFF),
    # the floor doubt beside the engine's probe and gap re-measure
    "floor-0.1-d.01-g.01-probe": (True, {"second_change_doubt": 0.01, "min_gain_bits": 0.01}, {}),
}


def one(args):
    variant, cell, seed = args
    _, tv, sv = VARIANTS[variant]
    t = S.make_target(S.SCENARIOS[cell], seed)
    t.seed = seed
    row = S.score(t, S.run_perfbisect(t, settings=replace(StatsConfig(), **sv), tuning=replace(DEFAULT_TUNING, **tv),
                                      variant=variant_of(variant)))
    return variant, cell, {k: row[k] for k in ("correct", "false_blame", "trials", "wrong_first", "extra_named",
                                               "budget_exhausted")}


def main():
    summary, _base, out, seconds = paired.run(one, list(VARIANTS), sys.argv[1:])
    print(f"{seconds} s", flush=True)
    with open(out, "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
