"""The reference told "one change or two" (benchmarks/bayes_two.py, issue #35): its likelihood against a brute-force
marginal of the normal model, its step probabilities against a direct integral, its information gain against the
mutual information computed directly, and its search on seeded targets (no git, no servers)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bayes_two as B2  # noqa: E402
import strategies as S  # noqa: E402

DATA = {0: [0.01, -0.02, 0.03], 2: [-0.05], 3: [-0.09, -0.07], 4: [-0.12], 5: [-0.16, -0.14]}


def _filled(n: int, data: dict[int, list[float]], sigma: float | None, **kw) -> B2.TwoChangeBisection:
    b = B2.TwoChangeBisection(n, sigma=sigma, **kw)
    for j, ys in data.items():
        for y in ys:
            b.add(j, y)
    return b


def _brute(b: B2.TwoChangeBisection, data, sigma: float, tau0: float) -> np.ndarray:
    """log p(D | k1, k2) with μ0 ~ N(0, τ0²) and each step ~ N(0, gσ²): the trials are jointly normal."""
    js = np.array([j for j, ys in data.items() for _ in ys])
    y = np.array([v for ys in data.values() for v in ys])
    out = []
    for k1, k2 in zip(b.k1, b.k2):
        x = np.stack([np.ones(len(y)), (js >= k1).astype(float), (js >= k2).astype(float)], axis=1)
        prior = np.diag([tau0 ** 2, b.g * sigma ** 2, b.g * sigma ** 2])
        cov = sigma ** 2 * np.eye(len(y)) + x @ prior @ x.T
        out.append(stats.multivariate_normal(np.zeros(len(y)), cov).logpdf(y))
    return np.array(out)


def test_the_told_sigma_likelihood_is_the_flat_limit_of_a_normal_first_level_and_g_sigma2_steps():
    sigma = 0.03
    b = _filled(6, DATA, sigma)
    mine = b.log_likelihood()
    for tau0, tol in ((10.0, 1e-3), (100.0, 1e-5)):
        brute = _brute(b, DATA, sigma, tau0)
        np.testing.assert_allclose(mine - mine[0], brute - brute[0], atol=tol)
    # a one-change hypothesis (k2 = n) is the one-change model's value: the step no trial sees integrates out
    one = b.k2 == 6
    assert one.sum() == 5 and np.isfinite(mine[one]).all()


def test_the_learned_sigma_likelihood_integrates_sigma_against_its_prior():
    b = _filled(6, DATA, None)
    mine = b.log_likelihood()
    a0, b0 = b.nu0 / 2, b.nu0 * b.s0 ** 2 / 2

    def marginal(i: int) -> float:
        def f(sig2: float) -> float:
            told = _filled(6, DATA, math.sqrt(sig2))
            # the told-σ value drops σ's own factor (2πσ²)^{-(N-1)/2}: put it back before integrating σ² out
            ll = told.log_likelihood()[i] - 0.5 * (told.trials - 1) * math.log(2 * math.pi * sig2)
            return math.exp(ll) * stats.invgamma(a0, scale=b0).pdf(sig2)
        return math.log(integrate.quad(f, 0, 1.0, points=[1e-4, 1e-3, 1e-2], limit=200)[0])

    pick = [0, 3, 7, 11, 14]
    brute = np.array([marginal(i) for i in pick])
    np.testing.assert_allclose(mine[pick] - mine[pick[0]], brute - brute[0], atol=1e-6)


@pytest.mark.parametrize("sigma", [0.03, None])
def test_the_step_probabilities_are_the_bivariate_posterior_mass_outside_the_minimum_step(sigma):
    b = _filled(6, DATA, sigma, min_step=math.log1p(0.03))
    p1, p2, p12 = b.step_probabilities()
    a_inv, beta, _, s = b._fit()
    scale2, dof = b._scale2_dof(s)
    m = b.min_step
    for i in (2, 7, 12):  # two-change hypotheses
        cov = a_inv[i, 1:, 1:] * scale2[i]
        mean = beta[i, 1:]
        if dof is None:
            dist = stats.multivariate_normal(mean, cov)
        else:
            dist = stats.multivariate_t(mean, cov, df=dof)
        sd = np.sqrt(np.diag(cov))
        box = [(mean[0] - 12 * sd[0], mean[0] + 12 * sd[0]), (mean[1] - 12 * sd[1], mean[1] + 12 * sd[1])]

        def mass(lo1, hi1, lo2, hi2):
            if lo1 >= hi1 or lo2 >= hi2:
                return 0.0
            return integrate.dblquad(lambda d2, d1: dist.pdf([d1, d2]), lo1, hi1, lo2, hi2, epsabs=1e-7)[0]

        inner2 = mass(*box[0], max(box[1][0], -m), min(box[1][1], m))
        both = sum(mass(a, c, e, f) for a, c in ((box[0][0], -m), (m, box[0][1]))
                   for e, f in ((box[1][0], -m), (m, box[1][1])))
        assert p2[i] == pytest.approx(1 - inner2, abs=2e-3)
        assert p12[i] == pytest.approx(both, abs=2e-3)
        assert p12[i] <= min(p1[i], p2[i]) + 1e-12
    one = b.k2 == 6
    assert (p2[one] == 0).all() and (p12[one] == 0).all()


@pytest.mark.parametrize("sigma", [0.03, None])
def test_the_information_gain_is_the_mutual_information_of_the_hypothesis_and_the_next_trial(sigma):
    b = _filled(6, DATA, sigma)
    fit = b._fit()
    post = b.posterior(fit)
    gains = b.information_gains(post, fit)
    a_inv, beta, _, s = fit
    scale2, dof = b._scale2_dof(s)
    for j in (1, 3, 5):
        comps = []
        for i in range(len(post)):
            x = np.array([1.0, float(j >= b.k1[i]), float(j >= b.k2[i])])
            sd = math.sqrt(scale2[i] * (1 + x @ a_inv[i] @ x))
            mean = float(x @ beta[i])
            comps.append(stats.norm(mean, sd) if dof is None else stats.t(dof, mean, sd))

        def mix(y: float) -> float:
            return sum(w * c.pdf(y) for w, c in zip(post, comps))

        lo, hi = min(c.ppf(1e-9) for c in comps), max(c.ppf(1 - 1e-9) for c in comps)
        h_mix = integrate.quad(lambda y: -mix(y) * math.log(mix(y)) if mix(y) > 0 else 0.0, lo, hi, limit=400)[0]
        h_comp = sum(w * c.entropy() for w, c in zip(post, comps))
        assert gains[j] == pytest.approx(h_mix - h_comp, abs=3e-3)


def test_a_step_too_small_to_matter_is_no_answer_and_untestable_commits_join_the_next():
    # one clear −15% step at 3 and nothing else: the answer is (3,) unless a second step ≥ m is likely
    data = {j: ([0.0, 0.001] if j < 3 else [-0.15, -0.151]) for j in range(6)}
    b = _filled(6, data, 0.01, min_step=math.log1p(0.03))
    answers = b.answers(b.posterior())
    assert max(answers, key=answers.get) == (3,) and answers[(3,)] > 0.9
    assert sum(answers.values()) == pytest.approx(1.0, abs=1e-6)
    b.untestable = {3}
    moved = b.answers(b.posterior())
    assert (3,) not in moved and max(moved, key=moved.get) == (4,)


@pytest.mark.parametrize("scenario, truth", [("one", (-8.0,)), ("two", (-10.0, -6.0))])
def test_without_noise_it_names_one_change_or_both(scenario, truth):
    scn = S.Scenario("Z", "noise-free", 16, 1e-4, 1e-4, truth)
    for seed in range(3):
        t = S.make_target(scn, seed)
        res = B2.run(t, sigma=None, q=0.5)
        assert res["changes"] == t.changes and res["verdict"] == "regressed"
        assert (res["p_two"] > 0.99) == (len(truth) == 2)


@pytest.mark.parametrize("truth", [(-8.0,), (-10.0, -6.0)])
def test_on_seeded_noisy_ranges_it_names_one_change_or_both_and_rules_out_the_other(truth):
    """S2's and S5's noise on 16 commits: one change is named once a second that matters is below 1% of the
    posterior; two once both are located (the prior of two: perfbisect's 0.1)."""
    scn = S.Scenario("Z", "16 commits, σ_b 3%, σ_w 1%", 16, 3.0, 1.0, truth)
    right = 0
    for seed in range(5):
        t = S.make_target(scn, seed)
        res = B2.run(t, sigma=None, q=0.1)
        right += res["changes"] == t.changes
        assert set(res["changes"]) <= set(t.changes)  # never a commit that changed nothing
        assert (res["p_two"] >= 0.99) if len(truth) == 2 else (res["p_two"] <= 0.01)
    assert right == 5


def _counted(scn, seed, **kw):
    """A run of ``B2.run`` on a fresh target, and the commits it measured in order."""
    t = S.make_target(scn, seed)
    seen: list[int] = []
    measure = t.measure
    t.measure = lambda j: (seen.append(j), measure(j))[1]
    return B2.run(t, sigma=None, **kw), seen, t.changes


def test_the_floor_names_each_change_only_on_two_trials_of_it_and_of_its_parent():
    """``min_at_change`` (DESIGN.md's "never decide on fewer than two trials per side", as bayes_reference's floor):
    every commit it names, the first bad of one change or of both, rests on that many trials of it and of the commit
    before it; without the floor an S1 seed is named on one trial of one of them (916: a search that must also rule out
    a second step reaches 0.99 with most S1 seeds' pair measured twice already). A budget that ends with the floor
    still short names nothing."""
    short = []
    for seed in range(910, 920):
        res, seen, _ = _counted(S.SCENARIOS["S1"], seed, q=0.1, min_step_pct=13.5, min_at_change=2)
        assert res["verdict"] == "regressed" and len(res["changes"]) == 1
        k = res["changes"][0]
        assert seen.count(k) >= 2 and seen.count(k - 1) >= 2, (seed, k, seen)
        plain, seen, _ = _counted(S.SCENARIOS["S1"], seed, q=0.1, min_step_pct=13.5)
        k = plain["changes"][0]
        if min(seen.count(k), seen.count(k - 1)) < 2:
            short.append((seed, len(seen)))
    assert [seed for seed, _ in short] == [916]
    seed, spent = short[0]
    res, seen, _ = _counted(S.SCENARIOS["S1"], seed, q=0.1, min_step_pct=13.5, min_at_change=2, budget=spent)
    assert res["verdict"] == "inconclusive" and res["budget_exhausted"] and len(seen) == spent, (res, seen)
    two = S.Scenario("Z", "noise-free", 16, 1e-4, 1e-4, (-10.0, -6.0))
    res, seen, truth = _counted(two, 0, q=0.5, min_at_change=2)
    assert res["changes"] == truth
    assert all(seen.count(j) >= 2 for k in truth for j in (k, k - 1)), (truth, seen)


@pytest.mark.parametrize("sigma", [0.03, None])
def test_nothing_changed_is_a_hypothesis_of_its_own_prior_when_asked(sigma):
    """``p_none`` (perfbisect's no_change_prior): "no change" joins as (n, n) — one level, both steps unseen — with
    that prior, the others scaled by 1 − p_none; its likelihood is the brute-force marginal of a one-level model
    (told σ), and its mass goes to the answer "nothing changed", never to a commit."""
    b0 = _filled(6, DATA, sigma)
    b = _filled(6, DATA, sigma, p_none=0.5)
    assert len(b.k1) == len(b0.k1) + 1 and (b.k1[-1], b.k2[-1]) == (6, 6)
    np.testing.assert_allclose(np.exp(b.log_prior).sum(), 1.0)
    np.testing.assert_allclose(b.log_prior[:-1], b0.log_prior + math.log(0.5))
    np.testing.assert_allclose(b.log_likelihood()[:-1], b0.log_likelihood())
    if sigma is not None:
        mine, brute = b.log_likelihood(), _brute(b, DATA, sigma, 100.0)
        np.testing.assert_allclose(mine - mine[0], brute - brute[0], atol=1e-5)
    only_none = np.zeros(len(b.k1))
    only_none[-1] = 1.0
    assert b.answers(only_none) == {(): pytest.approx(1.0)}


def test_told_nothing_it_rules_out_no_change_before_naming_one_and_says_same_on_a_flat_range():
    flat = S.Scenario("Z", "16 commits, σ_b 3%, σ_w 1%, nothing changed", 16, 3.0, 1.0, ())
    res, seen, _ = _counted(flat, 0, q=0.1, p_none=0.5)
    assert res["verdict"] == "same" and res["changes"] == ()
    res, seen, truth = _counted(S.SCENARIOS["S1"], 910, q=0.1, min_step_pct=13.5, min_at_change=2, p_none=0.5)
    assert res["verdict"] == "regressed" and res["changes"] == truth


@pytest.mark.parametrize("sigma", [0.03, None])
def test_both_named_from_a_larger_step_is_the_bivariate_mass_beyond_it(sigma):
    """``both_from`` (``min_second``): P(both steps ≥ m2) is the posterior mass of the four corners beyond ±m2, by a
    direct 2-D quadrature, and never more than P(both ≥ m)."""
    b = _filled(6, DATA, sigma, min_step=math.log1p(0.03))
    m2 = math.log1p(0.05)
    _, _, p12 = b.step_probabilities()
    _, _, pb = b.step_probabilities(both_from=m2)
    a_inv, beta, _, s = b._fit()
    scale2, dof = b._scale2_dof(s)
    for i in (2, 12):
        cov = a_inv[i, 1:, 1:] * scale2[i]
        mean = beta[i, 1:]
        dist = stats.multivariate_normal(mean, cov) if dof is None else stats.multivariate_t(mean, cov, df=dof)
        sd = np.sqrt(np.diag(cov))
        box = [(mean[k] - 12 * sd[k], mean[k] + 12 * sd[k]) for k in (0, 1)]
        both = sum(integrate.dblquad(lambda d2, d1: dist.pdf([d1, d2]), a, c, e, f, epsabs=1e-7)[0]
                   for a, c in ((box[0][0], -m2), (m2, box[0][1])) for e, f in ((box[1][0], -m2), (m2, box[1][1]))
                   if a < c and e < f)
        assert pb[i] == pytest.approx(both, abs=2e-3)
    assert (pb <= p12 + 1e-12).all()


def test_a_second_step_below_min_second_leaves_the_larger_one_named_alone():
    """A clear −15% step at 3 and a clear −4% one at 5: both matter at 3%, so without ``min_second`` the answer is
    the pair; asked perfbisect's question (a second change named from 7.5%) the answer is the larger step alone.
    Either way the answers' masses add up to one."""
    data = {j: ([0.0, 0.001] if j < 3 else [-0.15, -0.151] if j < 5 else [-0.19, -0.191]) for j in range(6)}
    plain = _filled(6, data, 0.005, min_step=math.log1p(0.03))
    answers = plain.answers(plain.posterior())
    assert max(answers, key=answers.get) == (3, 5)
    asked = _filled(6, data, 0.005, min_step=math.log1p(0.03), min_second=math.log1p(0.075))
    answers = asked.answers(asked.posterior())
    assert max(answers, key=answers.get) == (3,) and answers[(3,)] > 0.9
    assert sum(answers.values()) == pytest.approx(1.0, abs=1e-6)
    assert asked.p_two(asked.posterior()) < 0.05 < plain.p_two(plain.posterior())


def test_the_told_nothing_reference_asks_perfbisects_question_and_answers_same_on_a_flat_range():
    """benchmarks' ``bayes-told-nothing``: a second change named from perfbisect's floor — max(5%, half the largest
    step, 1.5σ): 13.5% in S1, 7.5% in M1, 5% in S2 — with "no change" a hypothesis of prior 0.5; it names M1's change
    and ends M1's A/A twin `same`, each on two trials or more of the commits that decide."""
    floors = {c: S.second_change_floor_pct(S.make_target(S.SCENARIOS[c], 0)) for c in ("S1", "M1", "S2")}
    assert floors == pytest.approx({"S1": 13.5, "M1": 7.5, "S2": 5.0})
    run = S.STRATEGIES["bayes-told-nothing"]
    t = S.make_target(S.SCENARIOS["M1"], 100000)
    res = run(t)
    assert res["verdict"] == "regressed" and res["changes"] == t.changes
    t = S.make_target(S.SCENARIOS["M1-AA"], 100000)
    res = run(t)
    assert res["verdict"] == "same" and res["changes"] == () and t.trials >= 4


def test_a_second_step_between_the_minimum_and_min_second_may_be_named_or_left():
    """The indifference zone of ``min_second``: with S5's −10% and −6% (the second above perfbisect's 5% floor) both
    are named; with a −4% second step (below the floor, above 3%) one change alone is an acceptable answer and so is
    the pair — the search stops on either, and never names a commit that changed nothing."""
    for steps, ok in (((-10.0, -6.0), {"both"}), ((-10.0, -4.0), {"both", "first"})):
        scn = S.Scenario("Z", "noise-free", 16, 1e-4, 1e-4, steps)
        for seed in range(2):
            t = S.make_target(scn, seed)
            res = B2.run(t, sigma=None, q=0.1, p_none=0.5, min_at_change=2, min_second_pct=5.0)
            got = "both" if res["changes"] == t.changes else "first" if res["changes"] == t.changes[:1] else "other"
            assert res["verdict"] == "regressed" and got in ok, (steps, seed, res, t.changes)


@pytest.mark.parametrize("sigma", [0.02, None])
def test_a_floor_per_hypothesis_is_the_same_integral_at_each_hypothesis_s_own_size(sigma):
    """``both_from`` may be one size per hypothesis: each entry is what the scalar gives at that size; and
    ``own_floor`` with only its fixed part is ``min_second`` itself (the same masses, the same answer)."""
    b = _filled(6, DATA, sigma, min_step=math.log1p(0.03))
    sizes = np.linspace(math.log1p(0.03), math.log1p(0.12), len(b.k1))
    _, _, per = b.step_probabilities(both_from=sizes)
    for i in (0, 7, len(b.k1) - 3):
        _, _, one = b.step_probabilities(both_from=float(sizes[i]))
        assert per[i] == pytest.approx(one[i], abs=1e-12)
    told = _filled(6, DATA, sigma, min_step=math.log1p(0.03), min_second=math.log1p(0.05))
    own = _filled(6, DATA, sigma, min_step=math.log1p(0.03), own_floor=(math.log1p(0.05), 0.0, 0.0))
    post = told.posterior()
    assert own.answers(post) == pytest.approx(told.answers(post), abs=1e-12)
    assert own.best(post) == told.best(post) and own.p_two(post) == pytest.approx(told.p_two(post), abs=1e-12)


def test_its_own_floor_follows_the_larger_step_it_measured():
    """A −30% step at 3 and a −10% one at 5: told a 5% floor the pair is the answer; sizing the floor itself at half
    the larger step (15%) the −10% step is too small to rule out, and the larger step alone is acceptable."""
    data = {j: ([0.0, 0.001] if j < 3 else [-0.30, -0.301] if j < 5 else [-0.40, -0.401]) for j in range(6)}
    told = _filled(6, data, 0.005, min_step=math.log1p(0.03), min_second=math.log1p(0.05))
    assert told.best(told.posterior())[0] == (3, 5)
    own = _filled(6, data, 0.005, min_step=math.log1p(0.03), own_floor=(math.log1p(0.05), 0.5, 1.5))
    answers = own.answers(own.posterior())
    assert max(answers, key=answers.get) == (3,) and answers[(3,)] > 0.9
