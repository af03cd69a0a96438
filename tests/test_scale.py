"""Long ranges (issue #23): the sparse posterior is the full model's, coarsely resolved; a search over
thousands of commits stays correct and holds a bounded number of hypotheses; `plan` warns and says what
the run will hold. Seeded throughout; nothing here asserts a duration."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from perfbisect.engine import changepoint
from perfbisect.engine.bisect import SearchPolicy
from perfbisect.engine.pair_checks import weakest_split, weakest_split_lifted
from perfbisect.engine.observations import Done
from perfbisect.model import Observation
from perfbisect.engine.change_posterior import Evidence
from perfbisect.engine.kernel import fit, regroup
from perfbisect.engine.changepoint import SPARSE_ABOVE, posterior, sparse_footprint
from perfbisect.settings import StatsConfig
from perfbisect.engine.stats import NoiseModel
from tests.repo_factory import fast_history
from tests.cli_runner import run_command

PRIOR = dict(sigma0=0.02, dof0=10, level_ratio=25.0, min_step=math.log(1.01), no_change_prior=0.5,
             two_change_prior=0.1)


def _evidence(n: int, commits: list[int], step_at: int, seed: int, untestable: tuple[int, ...] = ()) -> Evidence:
    rng = np.random.default_rng(seed)
    c = np.asarray(commits)
    values = np.where(c >= step_at, -0.1, 0.0) + rng.normal(0.0, 0.01, len(c))
    nt = np.arange(n)
    nxt = n - 1
    for k in range(n - 1, -1, -1):
        if k not in untestable:
            nxt = k
        nt[k] = nxt
    return Evidence(c, np.arange(len(c), dtype=float), values, n, nt)


@pytest.mark.parametrize("seed", [3, 11])
def test_the_sparse_posterior_is_the_full_models_posterior(monkeypatch, seed):
    """Scored on bins, the same evidence gives the full model's masses of none / one / two changes and of
    every commit (hypotheses between the same measured commits share one likelihood)."""
    n = 120
    ev = _evidence(n, [0, 0, 119, 119, 60, 60, 90, 30, 75, 75, 72], step_at=70, seed=seed)
    full = posterior(ev, **PRIOR)
    monkeypatch.setattr(changepoint, "SPARSE_ABOVE", 50)
    sparse = posterior(ev, **PRIOR)
    assert not full.sparse and sparse.sparse
    assert len(sparse.w) < len(full.w) / 4
    for a, b in ((full.p_none, sparse.p_none), (full.p_one, sparse.p_one), (full.p_two, sparse.p_two)):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(sparse.change_mass(), full.change_mass(), rtol=1e-9, atol=1e-12)
    assert sparse.answer()[0] == full.answer()[0]
    assert sparse.answer()[1] == pytest.approx(full.answer()[1], rel=1e-9)
    # every measured commit is a bin edge, and so a candidate of the look-ahead
    assert set(ev.commit.tolist()) <= set(sparse.edges.tolist())


def test_short_ranges_keep_the_full_model():
    ev = _evidence(SPARSE_ABOVE, [0, SPARSE_ABOVE - 1, 100], step_at=90, seed=1)
    post = posterior(ev, **PRIOR)
    assert not post.sparse
    assert len(post.w) == len(changepoint.RHO_GRID) * (SPARSE_ABOVE - 1 + (SPARSE_ABOVE - 1) * (SPARSE_ABOVE - 2) // 2 + 1)


def _search(n: int, culprit: int | None, seed: int, step: float = 0.8):
    commits = [f"{i:040x}" for i in range(n)]
    policy = SearchPolicy(commits, StatsConfig(), NoiseModel(0.02, 10, "prior"))
    sizes = []
    rng = np.random.default_rng(seed)
    obs: list[Observation] = []
    while True:
        if len(obs) < 2:  # the endpoints first: no posterior is fitted before both are in
            action = policy.next(obs)
        else:
            action, post = policy.next_and_posterior(obs)  # the posterior this decision was made on
            sizes.append((len(post.w), post.sparse, len(obs)))
        if isinstance(action, Done):
            return policy, action.outcome, sizes
        i = policy.index[action.commit]
        level = math.log(100.0 * (step if culprit is not None and i >= culprit else 1.0))
        obs.append(Observation(action.commit, level + rng.normal(0.0, 0.01), seq=len(obs)))


@pytest.mark.parametrize("n,culprit,seed", [(5000, 3187, 1), (2000, 1, 2), (2000, 1999, 3)])
def test_a_long_range_names_the_planted_commit_with_bounded_hypotheses(n, culprit, seed):
    policy, outcome, sizes = _search(n, culprit, seed)
    assert outcome.verdict.value == "regressed", outcome.explanation
    assert outcome.culprit == policy.commits[culprit]
    assert outcome.trials_used <= 40
    # the search held a sparse posterior throughout, never more hypotheses than `plan` announces
    assert sizes and all(sparse for _, sparse, _ in sizes)
    for size, _, trials in sizes:
        assert size <= sparse_footprint(n, trials)[1]
    assert max(size for size, _, _ in sizes) < 200_000  # the full model: 4 × n²/2 = 50 million at 5,000


def test_a_long_range_without_a_change_blames_nothing():
    policy, outcome, _ = _search(3000, None, seed=5)
    assert outcome.verdict.value == "same", outcome.explanation
    assert outcome.culprit is None


def test_the_lifted_weakest_split_is_the_one_by_one_computation():
    rng = np.random.default_rng(0)
    for _ in range(300):
        m = int(rng.integers(2, 60))
        c = rng.integers(0, 9, m).astype(float)
        one_by_one = np.array([weakest_split(row) for row in c[None, :] + np.eye(m)])
        assert np.array_equal(weakest_split_lifted(c), one_by_one)


def _config(tmp_path: Path, repo: Path) -> Path:
    cfg = tmp_path / "perfbisect.toml"
    cfg.write_text(
        f'[target]\nrepo = "{repo}"\npython = "{sys.executable}"\ncache_dir = "{tmp_path / "cache"}"\n\n'
        f'[workload]\nkind = "command"\ncommand = ["{{python}}", "bench.py"]\nmetric = "ops_per_s"\n\n'
        f'[stats]\nmetric = "baseline"\n'
    )
    return cfg


def _plan(tmp_path: Path, cfg: Path, good: str, bad: str) -> subprocess.CompletedProcess:
    return run_command("plan", f"good={good}", f"bad={bad}", "-c", str(cfg), "--db", str(tmp_path / "r.sqlite"),
                       "--no-patch-check", timeout=600)


def test_plan_warns_when_the_range_is_long_and_says_what_the_run_holds(tmp_path):
    shas = fast_history(tmp_path / "repo", SPARSE_ABOVE + 60)
    cfg = _config(tmp_path, tmp_path / "repo")
    proc = _plan(tmp_path, cfg, shas[0], shas[-1])
    assert proc.returncode == 0, proc.stderr
    n = SPARSE_ABOVE + 60
    edges, hypotheses, size = sparse_footprint(n, StatsConfig().max_trials_total)
    warning = [line for line in proc.stdout.splitlines() if line.startswith("warning: Long range")]
    assert len(warning) == 1, proc.stdout[-3000:]
    assert f"{n:,} candidate commits" in warning[0]
    assert f"{edges} bin edges and {hypotheses:,} hypotheses (about {size / 1e6:.0f} MB" in warning[0]
    assert "stats.max_trials_total" in warning[0]
    # a short range of the same repository: no warning
    short = _plan(tmp_path, cfg, shas[0], shas[40])
    assert short.returncode == 0, short.stderr
    assert "Long range" not in short.stdout


def test_a_batch_on_a_long_range_spreads_and_resolves_the_trials_in_flight():
    """Several nodes on a long range: distinct commits per batch, and the trials still in flight are bin
    edges of the posterior the next batch is chosen with (their predictions are exact there)."""
    n = 4000
    commits = [f"{i:040x}" for i in range(n)]
    policy = SearchPolicy(commits, StatsConfig(), NoiseModel(0.02, 10, "prior"))
    rng = np.random.default_rng(4)
    obs = [Observation(commits[i], math.log(100.0 * (0.8 if i >= 2500 else 1.0)) + rng.normal(0.0, 0.01), seq=s)
           for s, i in enumerate([0, n - 1, 0, n - 1, 2000, 3000])]
    first = policy.next_batch(obs, 3)
    assert isinstance(first, list) and len({m.commit for m in first}) == 3
    second = policy.next_batch(obs, 2, pending=first)
    assert isinstance(second, list) and len(second) == 2
    # the posterior the second batch decided on: the kernel's fit with the first batch in flight
    data = replace(regroup(obs, policy.index, alpha=policy.settings.alpha, higher_is_better=True),
                   pending=[(policy.index[m.commit], None) for m in first])
    seen = [fit(data, policy.fit_params)]
    assert seen[0].sparse
    assert {policy.index[m.commit] for m in first} <= set(seen[0].edges.tolist())


def test_answers_are_summed_as_one_by_one():
    """The full model's answers and their masses: the vectorised sum is the loop's, bit for bit and in order."""
    from perfbisect.engine.changepoint import _answers, _hypotheses
    rng = np.random.default_rng(0)
    for n in (5, 17, 60):
        hb1, hb2 = _hypotheses(n, True)
        w = rng.random(len(hb1) * 3)
        w /= w.sum()
        untestable = set(rng.choice(np.arange(1, n - 1), n // 4, replace=False).tolist())
        nt = _evidence(n, [0, n - 1], n // 2, 0, tuple(untestable)).next_testable
        keys, groups = [], {}
        for x1, x2, wi in zip(np.tile(hb1, 3).tolist(), np.tile(hb2, 3).tolist(), w.tolist()):
            k1 = int(nt[min(x1, n - 1)])
            key = () if x1 == n else (k1,) if x2 == n or int(nt[x2]) == k1 else (k1, int(nt[x2]))
            keys.append(key)
            groups[key] = groups.get(key, 0.0) + wi
        got_keys, got_groups = _answers(hb1, hb2, 3, w, nt.tolist(), n)
        assert got_keys == keys
        assert list(got_groups.items()) == list(groups.items())
