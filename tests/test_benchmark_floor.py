"""The floors of benchmarks/strategies.py: the A/A floor (the known-σ equivalence test perfbisect's `same` is
measured against) knows the sd each endpoint's trials are really drawn with, and the learned-levels SPRT (the
oracle's test without being told the levels) pays exactly its endpoint trials when noise is negligible (no git,
no servers, seeded)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import strategies as S  # noqa: E402


def _drawn_sd(t: S.Target, j: int, n: int = 4000) -> float:
    return float(np.std([t.raw_trial(j).value for _ in range(n)], ddof=1))


def test_one_noise_for_the_range_keeps_the_floor_it_had():
    t = S.make_target(S.SCENARIOS["S0"], 3)
    assert t.trial_sd(0) == t.trial_sd(t.scn.n - 1) == t.sigma_total
    tol = math.log1p(5.0 / 100)
    per_side = 2.0 * ((S._Z_ALPHA + S._Z_POWER) * t.sigma_total / tol) ** 2  # the formula before per-end sds
    assert S.equivalence_trials(t) == 2 * max(2, math.ceil(per_side)) == 20


@pytest.mark.parametrize("seed", [0, 7])
def test_a_randomised_layout_adds_its_spread_to_the_trials_after_a_layout_commit(seed):
    t = S.make_target(S.SCENARIOS["LY-AA"], seed)
    last = t.scn.n - 1
    assert t.trial_sd(0) == pytest.approx(t.sigma_total)  # before any layout commit: the plain noise
    spread = float(np.var(t.layout_offsets[t.epoch[last]]))
    assert t.trial_sd(last) ** 2 == pytest.approx(t.sigma_total ** 2 + spread)
    assert t.trial_sd(last) > 1.5 * t.sigma_total  # ±7% at 2 of 8 layouts dominates 2% sessions
    # ...and it is what the simulator draws (4,000 seeded trials: the sd's own error is ~1.1%)
    assert _drawn_sd(t, last) == pytest.approx(t.trial_sd(last), rel=0.06)
    assert S.equivalence_trials(t) > 2 * 5  # 10 trials was the floor that ignored the layout


def test_a_commits_simulated_trials_rotate_through_the_layouts_as_perfbisect_draws_its_slots():
    t = S.make_target(S.SCENARIOS["LY"], 5)
    pool = t.layout_offsets.shape[1]
    for j in (0, 9, t.scn.n - 1):
        seen = [t.raw_trial(j).layout for _ in range(2 * pool)]
        assert sorted(seen[:pool]) == sorted(seen[pool:]) == list(range(pool))  # each layout once in every pool's worth
        assert all((b - a) % pool == 1 for a, b in zip(seen, seen[1:]))
    starts = {S.make_target(S.SCENARIOS["LY"], seed).raw_trial(3).layout for seed in range(12)}
    assert len(starts) > 1  # where a commit's rotation starts is drawn, not always layout 0


def test_a_heteroscedastic_twin_charges_each_side_its_own_session_sd():
    t = S.make_target(S.SCENARIOS["HS-AA"], 4)
    last = t.scn.n - 1
    assert t.noise_switch <= last
    quiet = math.sqrt(math.log1p(0.01) ** 2 + t.sigma_total ** 2 - math.log1p(0.10) ** 2)
    assert t.trial_sd(last) == pytest.approx(quiet) and t.trial_sd(0) == pytest.approx(t.sigma_total)
    assert _drawn_sd(t, last) == pytest.approx(quiet, rel=0.06)
    assert _drawn_sd(t, 0) == pytest.approx(t.sigma_total, rel=0.06)
    tol = math.log1p(5.0 / 100)
    z2 = ((S._Z_ALPHA + S._Z_POWER) / tol) ** 2
    assert S.equivalence_trials(t) == 2 * math.ceil((t.trial_sd(0) ** 2 + quiet ** 2) * z2)
    assert S.equivalence_trials(t) < 0.6 * 2 * math.ceil(2 * t.sigma_total ** 2 * z2)  # both sides at 10%: ~twice as many


def test_the_learned_levels_ratio_is_that_of_the_trials_sharing_an_uncertain_level():
    from scipy.stats import multivariate_normal

    y = np.array([0.03, -0.01, 0.02, 0.05])
    bad, good, sigma2 = [0.04, 0.06, 0.01], [-0.02, 0.0], 0.02 ** 2

    def full(side):  # all four trials at once, the side's level uncertain by σ²/n and shared by them
        cov = sigma2 * np.eye(4) + sigma2 / len(side) * np.ones((4, 4))
        return multivariate_normal(np.full(4, np.mean(side)), cov).logpdf(y)

    assert S._learned_levels_llr(y, bad, good, sigma2) == pytest.approx(full(bad) - full(good))


@pytest.mark.parametrize("ends", [1, 3])
def test_the_learned_levels_floor_pays_its_endpoint_trials_over_the_oracle_when_noise_is_negligible(ends):
    quiet = S.Scenario("Q", "64 commits, −8%, 0.01% noise", 64, 0.01, 0.01, (-8.0,))
    oracle, floor = S.make_target(quiet, 5), S.make_target(quiet, 5)
    assert S.run_oracle(oracle)["changes"] == oracle.changes
    assert S.run_sprt_learned_levels(floor, ends=ends)["changes"] == floor.changes
    # every commit is settled by one trial either way: the floor's extra trials are exactly its endpoints'
    assert floor.trials == oracle.trials + 2 * ends


def test_the_learned_levels_floor_names_the_change_under_the_noise_of_the_user_case():
    named = [S.run_sprt_learned_levels(S.make_target(S.SCENARIOS["S1"], seed))["changes"]
             == S.make_target(S.SCENARIOS["S1"], seed).changes for seed in range(20)]
    assert all(named)  # seeded (300 seeds: 100%, docs/archive/benchmarks-notebook.md)
