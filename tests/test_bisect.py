"""The search policy on seeded simulated targets with known answers (no git, no servers)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from perfbisect.engine.bisect import SearchPolicy
from perfbisect.engine.observations import Measure
from perfbisect.settings import StatsConfig
from perfbisect.errors import UsageError
from perfbisect.model import Observation, Verdict
from perfbisect.engine.stats import NoiseModel
from perfbisect.report import words

# The simulated target (levels with planted steps, seeded noise) and the search loop are shared with the benchmarks.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from simulated_target import LOG82, SimulatedTarget, search  # noqa: E402


def commits(n: int) -> list[str]:
    return [f"{j:02d}" + "ab" * 19 for j in range(n)]


def drive(policy: SearchPolicy, target: SimulatedTarget, cs: list[str], limit: int = 400):
    return drive_with(policy, cs, lambda j, seq, commit: Observation(commit, target.trial(j, seq), seq=seq), limit)


def drive_with(pol: SearchPolicy, cs: list[str], observe, limit: int = 200):
    """Run the policy to the end; ``observe(j, seq, commit)`` makes each trial's Observation."""
    def measure(act, obs):
        assert isinstance(act, Measure) and words.measure_text(act)
        obs.append(observe(cs.index(act.commit), len(obs), act.commit))
    outcome, obs = search(pol, measure, limit)
    return words.explained(outcome), obs


def policy(cs, **kw) -> SearchPolicy:
    settings = StatsConfig(**kw)
    return SearchPolicy(cs, settings, NoiseModel.prior(settings.prior_sigma_pct))


def test_finds_a_planted_step():
    cs = commits(32)
    outcome, obs = drive(policy(cs), SimulatedTarget({19: -8.0}, 32, 2.0, seed=1), cs)
    assert outcome.verdict is Verdict.REGRESSED
    assert outcome.culprit == cs[19]
    assert outcome.culprit_comparison is not None and outcome.culprit_comparison.effect_pct < -3
    assert outcome.endpoint_comparison.effect_pct < -3
    assert outcome.trials_used == len(obs) < 60
    assert cs[19][:10] in outcome.explanation and "trials" in outcome.explanation
    # Far fewer trials than commits × 10: the search does not measure every commit.
    assert len({o.commit for o in obs}) < 20
    # No single session carries the verdict: the culprit and its parent were each measured twice or more.
    assert sum(o.commit == cs[19] for o in obs) >= 2 and sum(o.commit == cs[18] for o in obs) >= 2


def test_endpoints_are_measured_first():
    cs = commits(16)
    outcome, obs = drive(policy(cs), SimulatedTarget({5: -20.0}, 16, 1.0, seed=2), cs)
    assert [o.commit for o in obs[:2]] == [cs[0], cs[-1]]
    assert outcome.culprit == cs[5]


def test_the_search_starts_after_one_trial_per_end_and_sizes_the_change_with_every_trial():
    cs = commits(32)
    outcome, obs = drive(policy(cs), SimulatedTarget({11: -10.0}, 32, 1.5, seed=21), cs)
    # One trial of each end, then the search: midpoints carry the rest of the evidence.
    assert [o.commit for o in obs[:2]] == [cs[0], cs[-1]]
    assert obs[2].commit not in (cs[0], cs[-1])
    assert outcome.verdict is Verdict.REGRESSED and outcome.culprit == cs[11]
    # The step is sized from every trial before the culprit against every trial from it on.
    cmp = outcome.culprit_comparison
    before = sum(o.commit in cs[:11] for o in obs)
    after = sum(o.commit in cs[11:] for o in obs)
    assert (cmp.n_a, cmp.n_b) == (before, after)
    assert cmp.n_a > sum(o.commit == cs[10] for o in obs)
    assert cmp.ci_low_pct < -10 < cmp.ci_high_pct
    assert "no change at all" in outcome.explanation
    assert outcome.answer_probability >= 0.99 and not outcome.budget_exhausted


def test_a_smaller_second_change_on_the_bad_side_is_found():
    # −10% then a further −6% well after it: the side probes make the middle level visible.
    cs = commits(40)
    hits = 0
    for seed in range(3):
        outcome, _ = drive(policy(cs), SimulatedTarget({8: -10.0, 30: -6.0}, 40, 1.5, seed=30 + seed), cs)
        hits += outcome.culprit == cs[8] and outcome.extra_changes == (cs[30],)
    assert hits == 3


def test_endpoints_equal_stop_with_no_culprit():
    cs = commits(9)
    outcome, obs = drive(policy(cs, max_trials_per_commit=30, max_trials_total=80), SimulatedTarget({}, 9, 0.5, seed=3), cs)
    assert outcome.verdict is Verdict.SAME
    assert outcome.culprit is None
    assert {o.commit for o in obs} == {cs[0], cs[-1]}
    assert "No regression" in outcome.explanation
    assert outcome.ruled_out_pct is not None and outcome.ruled_out_pct < 10


def test_session_drift_is_never_blamed():
    # Large between-session noise, no code change: over several seeded runs nothing is blamed.
    cs = commits(9)
    for seed in range(8):
        outcome, _ = drive(policy(cs), SimulatedTarget({}, 9, 7.0, seed=100 + seed), cs)
        assert outcome.culprit is None
        assert outcome.verdict is not Verdict.REGRESSED


def test_budget_exhaustion_is_inconclusive():
    cs = commits(9)
    outcome, obs = drive(policy(cs, max_trials_per_commit=3, max_trials_total=6), SimulatedTarget({4: -4.0}, 9, 3.0, seed=4), cs)
    assert outcome.verdict is Verdict.INCONCLUSIVE
    assert outcome.culprit is None
    assert len(obs) <= 6
    assert "budget" in outcome.explanation
    assert outcome.budget_exhausted


def test_untestable_commits_next_to_the_culprit_give_a_set():
    cs = commits(24)
    target = SimulatedTarget({12: -10.0}, 24, 1.5, seed=5, untestable=frozenset({10, 11, 17}))
    outcome, obs = drive(policy(cs), target, cs)
    assert outcome.verdict is Verdict.REGRESSED
    assert outcome.culprit == cs[12]
    assert set(outcome.culprit_set) == {cs[10], cs[11], cs[12]}
    assert set(outcome.skipped) <= {cs[10], cs[11], cs[17]}
    # Never measured again once found untestable.
    for bad in (10, 11, 17):
        assert sum(o.commit == cs[bad] for o in obs) <= 1


def test_untestable_endpoint_is_inconclusive():
    cs = commits(5)
    outcome, _ = drive(policy(cs), SimulatedTarget({2: -10.0}, 5, 1.0, seed=6, untestable=frozenset({0})), cs)
    assert outcome.verdict is Verdict.INCONCLUSIVE and "cannot be tested" in outcome.explanation


def test_two_changes_are_both_found():
    cs = commits(32)
    outcome, _ = drive(policy(cs), SimulatedTarget({9: -12.0, 22: -10.0}, 32, 1.5, seed=7), cs)
    assert outcome.verdict is Verdict.REGRESSED
    assert outcome.culprit == cs[9]
    assert outcome.extra_changes == (cs[22],)
    assert "A further regression" in outcome.explanation


def test_next_is_deterministic_and_replays_from_observations():
    cs = commits(20)
    target = SimulatedTarget({7: -8.0}, 20, 2.0, seed=8)
    _, obs = drive(policy(cs), target, cs)
    for cut in (0, 3, 9, len(obs) // 2, len(obs) - 1):
        a = policy(cs).next(obs[:cut])
        b = policy(cs).next(list(obs[:cut]))
        assert a == b
    # Order of the list does not matter, only seq does.
    shuffled = list(reversed(obs[:10]))
    assert policy(cs).next(shuffled) == policy(cs).next(obs[:10])


def test_a_shift_of_the_whole_machine_during_the_search_is_modelled_not_blamed():
    cs = commits(16)
    # Everything slows by 15% after the 6th trial, during the search. The drift model sees that
    # repeated trials of one commit disagree across the move and still names the real change.
    target = SimulatedTarget({6: -10.0}, 16, 0.7, seed=9, shift_good_after=6)
    outcome, _ = drive(policy(cs), target, cs)
    assert outcome.drift_note is not None and "drifted" in outcome.drift_note
    assert outcome.culprit == cs[6]
    assert outcome.culprit_comparison.ci_low_pct < -10 < outcome.culprit_comparison.ci_high_pct


@pytest.mark.parametrize("seed", [9, 10, 11])
def test_drift_only_with_a_mid_run_shift_blames_nothing(seed):
    cs = commits(16)
    # the machine slows by 15% from the 5th trial on, while the endpoints are still being compared;
    # tolerance 0: `same` only once no change at all is certain, so the search runs well past the shift
    target = SimulatedTarget({}, 16, 0.7, seed=seed, shift_good_after=4)
    outcome, _ = drive(policy(cs, tolerance_pct=0.0), target, cs)
    assert outcome.culprit is None and outcome.verdict is not Verdict.REGRESSED
    assert outcome.drift_note is not None and "drifted" in outcome.drift_note
    # and with the default tolerance the same history ends `same`, nothing blamed
    again, _ = drive(policy(cs), SimulatedTarget({}, 16, 0.7, seed=seed, shift_good_after=4), cs)
    assert again.verdict is Verdict.SAME and again.culprit is None


def test_an_improvement_before_the_regression_is_reported_as_such():
    cs = commits(32)
    # +8% at commit 6 (faster), then −18% at commit 20: the endpoints differ by about −11%.
    outcome, _ = drive(policy(cs), SimulatedTarget({6: +8.0, 20: -18.0}, 32, 1.5, seed=13), cs)
    assert outcome.verdict is Verdict.REGRESSED
    assert outcome.culprit == cs[20]
    assert outcome.improvements == (cs[6],)
    assert "improvement" in outcome.explanation and "not the culprit" in outcome.explanation
    assert outcome.culprit_comparison.effect_pct < -10


def test_flagged_trials_are_excluded_and_said_so():
    cs = commits(12)
    target = SimulatedTarget({5: -15.0}, 12, 1.0, seed=14)

    def observe(j, seq, commit):
        spoiled = seq % 3 == 2
        y = target.trial(j, seq) + (math.log(0.7) if spoiled else 0.0)
        return Observation(commit, y, seq=seq, flag="throttled: HwSlowdown" if spoiled else None)

    outcome, obs = drive_with(policy(cs), cs, observe)
    assert outcome.culprit == cs[5]
    n_flagged = sum(o.flag is not None for o in obs)
    assert n_flagged > 0 and len(outcome.excluded) == n_flagged
    assert "Excluded" in outcome.explanation and "HwSlowdown" in outcome.explanation
    # Flagged trials count against the budget: they ran.
    assert outcome.trials_used == len(obs)


def test_a_regression_already_ruled_out_can_end_the_search():
    cs = commits(9)
    settings = StatsConfig(stop_when_ruled_out_pct=7.0)
    pol = SearchPolicy(cs, settings, NoiseModel.prior(settings.prior_sigma_pct))
    outcome, obs = drive(pol, SimulatedTarget({}, 9, 1.0, seed=15), cs)
    assert outcome.verdict is Verdict.SAME
    assert outcome.ruled_out_pct is not None and outcome.ruled_out_pct <= 7.0
    assert "No regression ≥" in outcome.explanation
    full, obs_full = drive(policy(cs), SimulatedTarget({}, 9, 1.0, seed=15), cs)
    assert len(obs) <= len(obs_full)


def test_a_mediator_cannot_explain_the_change_away():
    # The regression also lowers power (a slower kernel draws less): power tracks the summaries
    # within builds, but adjusting for it across builds would inflate the effect. It is shown only.
    cs = commits(12)
    rng = np.random.default_rng(16)
    levels = np.full(12, LOG82)
    levels[7:] += math.log(0.85)

    def observe(j, seq, commit):
        session = rng.normal(0, 0.05)
        power = (650.0 if j < 7 else 560.0) + 600.0 * session + rng.normal(0, 3)
        return Observation(commit, float(levels[j] + session + rng.normal(0, 0.005)), {"power_mean_w": power}, seq=seq)

    outcome, _ = drive_with(policy(cs), cs, observe)
    assert outcome.culprit == cs[7]
    cmp = outcome.culprit_comparison
    assert abs(cmp.effect_pct - (-15.0)) < 5.0
    assert cmp.ci_low_pct < -15.0 < cmp.ci_high_pct
    assert "mean power" in outcome.explanation and "not adjusted" in outcome.explanation


def test_history_of_a_lucky_number_is_a_note_not_evidence():
    cs = commits(9)
    settings = StatsConfig(max_trials_per_commit=30, tolerance_pct=0.0)
    noise = NoiseModel.prior(settings.prior_sigma_pct)
    history = [Observation(cs[0], LOG82 + math.log(1.07), day="11-28")]
    pol = SearchPolicy(cs, settings, noise, history=history)
    outcome, _ = drive(pol, SimulatedTarget({}, 9, 0.5, seed=10), cs)
    assert outcome.culprit is None
    assert outcome.drift_note is not None and "on 11-28" in outcome.drift_note
    assert "system state, not code" in outcome.drift_note


def test_lower_is_better_metric():
    cs = commits(12)
    # Latency goes UP by 15% at commit 4: a regression for a lower-is-better metric.
    target = SimulatedTarget({4: +15.0}, 12, 1.5, seed=11)
    settings = StatsConfig()
    pol = SearchPolicy(cs, settings, NoiseModel.prior(settings.prior_sigma_pct), higher_is_better=False)
    outcome, _ = drive(pol, target, cs)
    assert outcome.verdict is Verdict.REGRESSED and outcome.culprit == cs[4]


def test_exogenous_load_adjusts_the_summaries():
    cs = commits(16)
    rng = np.random.default_rng(12)
    levels = np.full(16, LOG82)
    levels[9:] += math.log(0.92)

    def observe(j, seq, commit):
        busy = rng.random() < 0.4
        load = (1.0 if busy else 0.0) + rng.normal(0, 0.02)
        return Observation(commit, levels[j] + (math.log(0.90) if busy else 0.0) + rng.normal(0, 0.01),
                           {"other_load": load}, seq=seq)

    outcome, _ = drive_with(policy(cs), cs, observe)
    assert outcome.culprit == cs[9]
    assert "the CPU load when the trial started" in outcome.explanation and "; adjusted" in outcome.explanation
    # the same note as a field (--json's state_notes), its size per the load's own spread within builds
    assert len(outcome.state_notes) == 1 and outcome.state_notes[0] in outcome.explanation
    assert "of load average (its spread between repeats of one build)" in outcome.state_notes[0]
    from perfbisect.store import codec
    assert codec.load(type(outcome), codec.encode(outcome)).state_notes == outcome.state_notes


def test_bad_inputs_raise_usage_errors():
    with pytest.raises(UsageError, match="good and a bad"):
        policy(commits(1))
    with pytest.raises(UsageError, match="repeats"):
        policy(["a", "b", "a"])
    with pytest.raises(UsageError, match="not in this bisection"):
        policy(commits(3)).next([Observation("zzz", 1.0)])


def test_a_change_that_passed_its_checks_is_named_when_a_later_one_cannot_be_settled():
    """Two changes, the earlier one clear: the budget runs out while the later, smaller one is still being
    confirmed. The earlier one passed every check of its own, so it is the first bad commit whatever the later one
    turns out to be — named, with the later one said beside it and not named (a public history's −16% and −7.5%
    steps once ended `inconclusive` naming neither, best answer both at p 0.999). Seeded: S5 (−10% then −6%, 3%
    session noise), 40 trials."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import strategies

    target = strategies.make_target(strategies.SCENARIOS["S5"], 5000)
    seen = []
    res = strategies.run_perfbisect(target, settings=StatsConfig(max_trials_total=40), on_outcome=seen.append)
    first, later = target.changes
    outcome = words.explained(seen[0])
    assert outcome.verdict is Verdict.REGRESSED and res["changes"] == (first,), outcome.explanation
    assert outcome.extra_changes == () and outcome.reason.code == "regressed"
    (commits, step_pct), = outcome.reason["unsettled"]
    assert commits == (f"c{later:03d}",) and step_pct < 0
    assert f"A later change was also located, c{later:03d}" in outcome.explanation
    assert "is not named" in outcome.explanation and "the first bad commit stands" in outcome.explanation


def test_the_trials_each_side_of_a_change_carries_grow_as_its_step_shrinks_against_the_noise_up_to_a_cap():
    """tuning.max_trials_at_change binds only for a step under σ·change_trials_z/√8 (about 1.06 σ): no simulated
    cell locates one that small (benchmarks/constants_matter.py moves nothing with it), so this pins what it does."""
    from types import SimpleNamespace

    from perfbisect.engine.effects import Step
    from perfbisect.engine.pair_checks import trials_at_change
    from perfbisect.engine.tuning import DEFAULT_TUNING as T

    post = SimpleNamespace(sigma_top=0.03)

    def need(step: float) -> int:
        st = Step(at=5, parent=4, step=step, se=0.01, dof=20.0, n_before=6, n_after=6, sigma=0.03)
        return trials_at_change(post, st, T.change_trials_z, T.min_trials_at_change, T.max_trials_at_change)

    assert need(-0.20) == T.min_trials_at_change  # a big step: two trials a side
    assert need(-0.06) == 3  # (3 · 0.03 / 0.06)² = 2.25, rounded up
    assert need(-0.035) == 7  # (3 · 0.03 / 0.035)² = 6.6
    assert need(-0.02) == need(-0.005) == T.max_trials_at_change == 8  # 20.25 and 324, capped
