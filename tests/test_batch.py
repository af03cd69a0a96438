"""Parallel search: SearchPolicy.next_batch with several nodes, trials in flight and host offsets.

Seeded simulated targets (no git, no servers); every assertion is about decisions and verdicts.
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from perfbisect.engine.bisect import SearchPolicy
from perfbisect.engine.observations import Done, Measure
from perfbisect.errors import UsageError
from perfbisect.model import Observation, Verdict
from perfbisect.settings import StatsConfig
from perfbisect.engine.stats import NoiseModel
from perfbisect.report import words

from .test_bisect import commits

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from simulated_target import LOG82, SimulatedTarget, search_on_nodes  # noqa: E402


def policy(n: int) -> SearchPolicy:
    settings = StatsConfig()
    return SearchPolicy(commits(n), settings, NoiseModel.prior(settings.prior_sigma_pct))


def run_nodes(pol: SearchPolicy, cs: list[str], levels: np.ndarray, offsets: list[float], sigma: float, seed: int,
              durations: list[float] | None = None, limit: int = 400, initial: list[Observation] = ()):
    """An event-driven cluster: node k has level offset ``offsets[k]`` (log) and takes ``durations[k]``
    per trial, so results come back out of the order they were started in. Returns (outcome, obs)."""
    rng = np.random.default_rng(seed)
    names = [f"node{k}" for k in range(len(offsets))]
    durations = durations or [1.0 + 0.37 * k for k in range(len(offsets))]

    def run(k: int, m, now: float):
        value = float(levels[cs.index(m.commit)] + offsets[k] + rng.normal(0.0, sigma))
        return now + durations[k], [{"commit": m.commit, "value": value}]

    outcome, obs, _ = search_on_nodes(pol, names, run, limit=limit, initial=initial)
    return outcome, obs


def step_observations(n: int, at: int, pct: float, per_end: int = 2, seed: int = 0) -> list[Observation]:
    """Both endpoints measured ``per_end`` times (interleaved) around a step at ``at``."""
    target = SimulatedTarget({at: pct}, n, 2.0, seed)
    obs = []
    for r in range(per_end):
        for j in ((0, n - 1) if r % 2 == 0 else (n - 1, 0)):
            obs.append(Observation(commits(n)[j], target.trial(j, len(obs)), seq=len(obs)))
    return obs


def test_k1_without_pending_is_next_decision_for_decision():
    n = 24
    cs = commits(n)
    pol = policy(n)
    target = SimulatedTarget({9: -8.0}, n, 2.5, seed=5)
    obs: list[Observation] = []
    for _ in range(200):
        one = pol.next(obs)
        batch = pol.next_batch(obs, 1)
        if isinstance(one, Done):
            assert isinstance(batch, Done) and batch.outcome == one.outcome
            break
        assert batch == [one]
        obs.append(Observation(one.commit, target.trial(cs.index(one.commit), len(obs)), seq=len(obs)))
    else:
        raise AssertionError("did not finish")
    assert one.outcome.verdict is Verdict.REGRESSED and one.outcome.culprit == cs[9]


def test_a_batch_holds_distinct_useful_commits_spread_over_the_range():
    n = 64
    pol = policy(n)
    obs = step_observations(n, 40, -8.0)
    batch = pol.next_batch(obs, 4)
    assert isinstance(batch, list) and len(batch) == 4
    picked = [pol.index[m.commit] for m in batch]
    assert len(set(picked)) == 4, picked
    assert all(0 < j < n - 1 for j in picked), picked  # the endpoints are settled: midpoints only
    assert all(m.phase == "locating" and m.gain_bits > 0 for m in batch)
    # several sub-ranges at once: the picks cut the range into pieces no bigger than half of it
    cuts = sorted({0, n - 1, *picked})
    assert max(b - a for a, b in zip(cuts, cuts[1:])) <= n // 2
    # the first pick is the one `next` makes
    assert batch[0] == pol.next(obs)


def test_pending_trials_are_not_proposed_again_while_better_ones_exist():
    n = 64
    pol = policy(n)
    obs = step_observations(n, 40, -8.0)
    first = pol.next(obs)
    batch = pol.next_batch(obs, 3, pending=[first.commit])
    assert isinstance(batch, list) and len(batch) == 3
    assert first.commit not in [m.commit for m in batch]


def test_the_same_observations_and_pending_give_the_same_batch():
    n = 64
    pol = policy(n)
    obs = step_observations(n, 21, -8.0, seed=3)
    pending = [Measure(commits(n)[30], "r", host="a"), (commits(n)[12], "b"), commits(n)[30]]
    one = pol.next_batch(obs, 2, pending=pending, hosts=["c", "d"])
    again = SearchPolicy(commits(n), StatsConfig(), NoiseModel.prior(StatsConfig().prior_sigma_pct)).next_batch(
        list(obs), 2, pending=list(pending), hosts=["c", "d"])
    assert one == again
    assert [m.host for m in one] == ["c", "d"]


def test_the_order_observations_are_stored_in_does_not_matter_only_their_seq():
    n = 32
    cs = commits(n)
    pol = policy(n)
    outcome, obs = run_nodes(pol, cs, np.where(np.arange(n) >= 13, LOG82 + math.log(0.92), LOG82),
                             [0.0, 0.0, 0.0], 0.02, seed=11)
    assert outcome.verdict is Verdict.REGRESSED and outcome.culprit == cs[13]
    rng = random.Random(4)
    for cut in (6, 11, len(obs)):
        shuffled = obs[:cut]
        rng.shuffle(shuffled)
        assert pol.next_batch(shuffled, 3, pending=[cs[5]], hosts=["node0", "node1", "node2"]) == pol.next_batch(
            obs[:cut], 3, pending=[cs[5]], hosts=["node0", "node1", "node2"])
    final = list(obs)
    rng.shuffle(final)
    again = pol.next_batch(final, 3)
    assert isinstance(again, Done) and again.outcome == outcome


def test_done_waits_for_trials_in_flight():
    n = 16
    cs = commits(n)
    pol = policy(n)
    outcome, obs = run_nodes(pol, cs, np.where(np.arange(n) >= 6, LOG82 + math.log(0.85), LOG82), [0.0, 0.0], 0.015,
                             seed=2)
    assert isinstance(pol.next_batch(obs, 2), Done)
    # the same evidence with a trial still running: wait for it rather than state the verdict without it
    assert pol.next_batch(obs, 2, pending=[cs[3]]) == []


def test_each_node_measures_the_endpoint_it_lacks_while_the_endpoints_are_compared():
    n = 16
    cs = commits(n)
    pol = policy(n)
    first = pol.next_batch([], 4, hosts=["a", "b", "c", "d"])
    assert [(m.commit, m.host) for m in first] == [(cs[0], "a"), (cs[-1], "b"), (cs[-1], "c"), (cs[0], "d")]
    obs = [Observation(m.commit, LOG82 + 0.01 * i, seq=i, host=m.host) for i, m in enumerate(first)]
    second = pol.next_batch(obs, 4, hosts=["a", "b", "c", "d"])
    # no change is likeliest: the endpoints again, each node the one it has not measured
    assert [(m.commit, m.host) for m in second] == [(cs[-1], "a"), (cs[0], "b"), (cs[0], "c"), (cs[-1], "d")]


def confounded_start(n: int, cs: list[str], offsets: list[float], sigma: float, seed: int) -> list[Observation]:
    """No change anywhere, but the slow node measured every late commit and the fast one every early
    one; both measured the endpoints twice (their references)."""
    rng = np.random.default_rng(seed)
    obs: list[Observation] = []

    def add(j: int, k: int) -> None:
        obs.append(Observation(cs[j], float(LOG82 + offsets[k] + rng.normal(0.0, sigma)), seq=len(obs), host=f"node{k}"))

    for _ in range(2):
        for k in (0, 1):
            add(0, k)
            add(n - 1, k)
    for j in range(1, n - 1):
        add(j, 0 if j < n // 2 else 1)
    return obs


@pytest.mark.parametrize("seed", [1, 2])
def test_a_slow_node_is_never_a_slow_commit(seed):
    """A/A on two nodes 12% apart, the slow one having measured every late commit: the node offsets are
    modelled, so nothing is blamed — the same trials with the nodes left out point at the middle commit."""
    n = 16
    cs = commits(n)
    offsets = [math.log(1.06), math.log(0.94)]
    start = confounded_start(n, cs, offsets, 0.015, seed)
    blind = policy(n).next([Observation(o.commit, o.value, seq=o.seq) for o in start])
    # what a model without nodes makes of these trials: the middle commit is its best answer
    assert isinstance(blind, Measure) and words.best_text(blind) == cs[n // 2][:10]
    outcome, obs = run_nodes(policy(n), cs, np.full(n, LOG82), offsets, 0.015, seed=seed, initial=start)
    assert outcome.culprit is None and outcome.verdict in (Verdict.SAME, Verdict.INCONCLUSIVE), words.explain(outcome)
    assert outcome.verdict is Verdict.SAME or outcome.budget_exhausted


def test_four_nodes_with_offsets_and_no_change_blame_nothing():
    n = 24
    cs = commits(n)
    offsets = [math.log(1.06), math.log(0.94), math.log(1.06), math.log(0.94)]
    outcome, obs = run_nodes(policy(n), cs, np.full(n, LOG82), offsets, 0.025, seed=1)
    assert outcome.culprit is None and outcome.verdict is not Verdict.REGRESSED, words.explain(outcome)
    assert len({o.host for o in obs}) == 4


def test_a_step_is_found_across_nodes_with_offsets():
    n = 24
    cs = commits(n)
    pol = policy(n)
    offsets = [math.log(1.05), math.log(0.95), math.log(1.05), math.log(0.95)]
    levels = np.where(np.arange(n) >= 15, LOG82 + math.log(0.92), LOG82)
    outcome, _ = run_nodes(pol, cs, levels, offsets, 0.025, seed=3)
    assert outcome.verdict is Verdict.REGRESSED and outcome.culprit == cs[15]


def test_batch_inputs_are_checked():
    pol = policy(8)
    with pytest.raises(UsageError, match="pending trial names commit"):
        pol.next_batch([], 2, pending=["deadbeef"])
    assert pol.next_batch([], 0) == []
    # at most one trial per free node
    assert len(pol.next_batch([], 4, hosts=["only"])) == 1
