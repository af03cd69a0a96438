"""The exploration driver benchmarks/issue35/floor_doubt.py (issue #35): the mass of two changes whose steps
both reach a floor, read from the engine's own posterior — equal to the two-change mass at the 3% the weights are
truncated at, falling as the floor rises, and a variant run as a gate object in its own policy's gates while the
engine's own policies keep theirs (no git, no servers)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "issue35"))
import floor_doubt as F  # noqa: E402
from perfbisect.engine import gates  # noqa: E402
from perfbisect.engine.stats import log_of_pct  # noqa: E402
from perfbisect.model import Observation  # noqa: E402

M = log_of_pct(3.0)


def _posterior(values: dict[int, list[float]], n: int = 9):
    """The engine's posterior over ``n`` commits with these log trials (the policy's own fit)."""
    commits, _, policy = F.S._policy(F.S.make_target(F.S.SCENARIOS["M1"], 0))
    obs = [Observation(commits[j], y, seq=k) for k, (j, y) in enumerate((j, y) for j, ys in values.items() for y in ys)]
    return policy.posterior(obs)


# two clear steps (−10% at c3, −8% more at c6) and σ ≈ 1%
TWO = {0: [0.00, 0.01, -0.01], 1: [0.0], 2: [0.005, -0.005], 3: [-0.10, -0.11], 4: [-0.105], 5: [-0.10, -0.095],
       6: [-0.18, -0.185], 7: [-0.18], 8: [-0.175, -0.185, -0.18]}


def test_at_the_truncation_the_floor_mass_is_the_two_change_mass():
    post = _posterior(TWO)
    assert post.p_two > 0.5
    assert F.p_two_floor(post, M, M) == pytest.approx(post.p_two, rel=1e-6)


def test_the_floor_mass_falls_as_the_floor_rises_and_vanishes_beyond_both_steps():
    post = _posterior(TWO)
    masses = [F.p_two_floor(post, log_of_pct(f), M) for f in (3.0, 5.0, 7.0, 9.0, 30.0)]
    assert all(a >= b for a, b in zip(masses, masses[1:]))
    assert masses[2] > 0.5  # both steps (10%, 8%) are well beyond 7%
    assert masses[-1] < 1e-6


def test_each_hypothesis_s_own_floor_uses_its_larger_step():
    post = _posterior(TWO)
    # half the larger step (~10%) is ~5%: the 8% step still counts; at 90% of the larger step it no longer does
    assert F.p_two_floor(post, math.inf, M, own=(M, 0.5, 0.0)) > 0.5
    assert F.p_two_floor(post, math.inf, M, own=(M, 0.9, 0.0)) < F.p_two_floor(post, math.inf, M, own=(M, 0.5, 0.0))


def test_a_variant_runs_and_the_default_is_the_engine_s_own_rule():
    # a variant's policy runs FloorDoubt where the engine runs SecondChangeDoubt, every other gate its own
    _, _, engine = F.S._policy(F.S.make_target(F.S.SCENARIOS["S1"], 7))
    _, _, policy = F.S._policy(F.S.make_target(F.S.SCENARIOS["S1"], 7))
    F.variant_of("floor-0.1-d.01-g.01")(policy)
    swapped = [k for k, (a, b) in enumerate(zip(engine.gates, policy.gates)) if a is not b and a != b]
    assert len(policy.gates) == len(engine.gates) and len(swapped) == 1
    k = swapped[0]
    assert isinstance(engine.gates[k], gates.SecondChangeDoubt) and isinstance(policy.gates[k], F.FloorDoubt)
    assert policy.gates[k].doubt_gate == engine.gates[k] and policy.gates[k].own is None
    own = F.S._policy(F.S.make_target(F.S.SCENARIOS["S1"], 7))[2]
    F.variant_of("own-0.1-d.01-g.01")(own)
    assert any(isinstance(g, F.FloorDoubt) and g.own is not None for g in own.gates)
    # the default is the engine as it is: nothing done to its policy
    assert F.variant_of("default") is None
    variant, cell, row = F.one(("floor-0.1-d.01-g.01", "S1", 7))
    assert (variant, cell) == ("floor-0.1-d.01-g.01", "S1") and row["trials"] > 0
    F.one(("default", "S1", 7))
    # running a variant changed no engine name: a fresh policy runs the engine's own gate
    fresh = F.S._policy(F.S.make_target(F.S.SCENARIOS["S1"], 7))[2]
    assert any(type(g) is gates.SecondChangeDoubt for g in fresh.gates)
    assert not any(isinstance(g, F.FloorDoubt) for g in fresh.gates)
