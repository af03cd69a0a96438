"""A resumed bisection costs what the uninterrupted one costs (issue #34): given the same observations it
makes the same decisions, so it measures the same commits in the same order and reaches the same verdict
after the same number of trials; and `resume` says what it reused and what it threw away.

Real demo repositories, real SQLite, real trials (the seeded `command` workload as a subprocess per run),
`perfbisect resume` through the CLI's own entry point (tests/cli_runner.py). Measured with the seeded
workload (perfbisect/demo/seeded.py): a trial's value is a function of the code, the mode and how many times
that commit and mode were measured before (counters under PERFBISECT_SEEDED_STATE, per demo directory), so
two demo directories built alike give the same value to the same trial. The one input a search reads that is
not seeded is the machine's state at each trial's start (the CPU load here, a GPU's temperature elsewhere): an
exogenous state the search may adjust for. The sampler is given a steady machine (``steady_machine``), so
two searches over the same values see the same state. The interruption is a KeyboardInterrupt raised at a
chosen point (right after the k-th observation is stored, or after the first run of a trial is stored), where
`perfbisect run` gets Ctrl-C: the same unwinding, with no race between a signal and a trial.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from perfbisect.app.bisection import run_bisection
from perfbisect.config import load_config
from perfbisect.demo.target import make_demo_target
from perfbisect.engine.search_start import observations_of, policy_for
from perfbisect.report.replay import decision_json, stored_start
from perfbisect.measure.sysstate import collectors
from perfbisect.measure.sysstate.readings import CpuReading
from perfbisect.app.workspace import Workspace
from perfbisect.store import open_store
from tests.cli_runner import run_cli

pytestmark = pytest.mark.slow


class SteadyCpu(collectors.ProcCollector):
    """The machine at rest: the same CPU load at every sample, no GPU collector."""

    def available(self) -> bool:
        return True

    def collect(self) -> CpuReading:
        return CpuReading(load_avg_1m=1.0, cpu_mhz=None)


@pytest.fixture
def steady_machine(monkeypatch):
    monkeypatch.setattr(collectors, "default_collectors", lambda: [SteadyCpu()])


def resume_cli(config: Path, db: Path):
    return run_cli("resume", "-c", str(config), "--db", str(db), "--json", env={"COLUMNS": "300"})


def stored(db: Path) -> list[tuple]:
    """Every observation of bisection 1 as (seq, commit, value, decision): what the search measured and why."""
    with open_store(db, recover=False, read_only=True) as store:
        return [(o.seq, o.commit, o.value, dict(o.decision) if o.decision else None) for o in store.observations(1)]


def bisect_in_process(config, db: Path, good: str, bad: str, *, stop_after_observations: int | None = None,
                      stop_at_run_of_trial: int | None = None):
    """`run_bisection` in this process; stopped (as Ctrl-C stops `perfbisect run`) right after its
    ``stop_after_observations``-th observation is stored, or right after the first run of its
    ``stop_at_run_of_trial``-th trial is stored. Returns the result, or None when it was stopped."""
    with Workspace.open(config, db) as ws:
        store = ws.store
        seen = {"observations": 0, "trials": 0}
        add_observation, begin_trial, add_run = store.add_observation, store.begin_trial, store.add_run

        def observed(*args, **kwargs):
            add_observation(*args, **kwargs)
            seen["observations"] += 1
            if seen["observations"] == stop_after_observations:
                raise KeyboardInterrupt("stopped after an observation")

        def began(*args, **kwargs):
            seen["trials"] += 1
            return begin_trial(*args, **kwargs)

        def ran(*args, **kwargs):
            add_run(*args, **kwargs)
            if seen["trials"] == stop_at_run_of_trial:
                raise KeyboardInterrupt("stopped inside a trial")

        store.add_observation, store.begin_trial, store.add_run = observed, began, ran
        try:
            return run_bisection(ws, good, bad)
        except KeyboardInterrupt:
            store.release_own()  # what `perfbisect run` does on Ctrl-C (interrupts.interruptible)
            return None


def test_a_resumed_bisection_decides_as_the_uninterrupted_one_with_the_settings_it_started_with(tmp_path, steady_machine):
    """A bisection started with [stats] other than the config file's — the post-pull check bisects the mode
    that regressed (stats.metric = that mode), a user edits the config between Ctrl-C and resume — is resumed
    with the settings it started with. Before, `resume` took today's config: it measured another mode (here
    eagle3, ~20% faster than baseline) on top of the stored baseline observations, a 'drift' the search had
    to fit and trials it had to spend, and its decisions were no longer those of the search that started."""
    runs = {}
    for name, stop in (("fresh", None), ("resumed", 4)):
        target = make_demo_target(tmp_path / name, commits=12, seeded=True, variant="target")
        cfg = load_config(target.config)
        assert cfg.stats.metric == "eagle3"
        started = replace(cfg, stats=replace(cfg.stats, metric="baseline"))  # as hook/check.py bisects a mode
        db = tmp_path / f"{name}.sqlite"
        result = bisect_in_process(started, db, target.good, target.bad, stop_after_observations=stop)
        runs[name] = (target, db, result)
    target, fresh_db, fresh = runs["fresh"]
    assert fresh is not None and fresh.outcome.culprit == target.planted
    _, db, stopped = runs["resumed"]
    assert stopped is None and len(stored(db)) == 4

    proc = resume_cli(runs["resumed"][0].config, db)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # The next decision is the uninterrupted search's at the same point, and every later one too: the same
    # commits, values and reasons, the same verdict after the same number of trials.
    a, b = stored(fresh_db), stored(db)
    assert (b[4][1], b[4][3]["phase"]) == (a[4][1], a[4][3]["phase"])
    assert out["trials_used"] == fresh.outcome.trials_used
    assert b == a
    assert out["verdict"] == fresh.outcome.verdict.value and out["culprit"] == target.planted
    assert "[stats] metric = 'baseline' (the config now: 'eagle3')" in proc.stderr  # it says it keeps the started one
    assert "resuming bisection #1: 4 stored observations (4 trials) reused" in proc.stderr, proc.stderr
    assert out["resumed"]["observations"] == 4 and out["resumed"]["trials"] == 4
    assert out["resumed"]["settings_kept"] == {"metric": {"config": "eagle3", "bisection": "baseline"}}
    assert out["resumed"]["discarded"] == [] and out["resumed"]["reused"] == []
    with open_store(db, recover=False, read_only=True) as store:
        assert {t.identity.mode for t in store.trials(bisection_id=1, purpose="bisect")} == {"baseline"}
        assert {tuple(o.covariates.items()) for o in store.observations(1)} == {(("other_load", 1.0),)}


def test_resume_says_which_stored_trials_it_reuses_and_which_interrupted_one_it_measures_again(tmp_path, steady_machine):
    """A ratio metric measures two modes per commit. Stopped inside the second mode's trial: the first
    mode's finished trial is used by the resumed search, the cut-short one is discarded (a trial is one
    server session; its stored run is kept, never completed) and its commit measured again. `resume` says
    both, in its progress and in --json, and its decisions are what a search over the same observations
    decides (the replay from the stored start agrees with every live decision)."""
    target = make_demo_target(tmp_path / "demo", commits=12, seeded=True)
    config = target.config
    config.write_text(config.read_text().replace('metric = "eagle3"', 'metric = "ratio:eagle3/baseline"'))
    cfg = load_config(config)
    db = tmp_path / "r.sqlite"
    # 3 observations of 2 trials each, then trial 7 (the 4th commit's first mode) finishes and trial 8 stops
    assert bisect_in_process(cfg, db, target.good, target.bad, stop_at_run_of_trial=8) is None
    with open_store(db, recover=False, read_only=True) as store:
        trials = {t.id: t for t in store.trials(bisection_id=1, status=None)}
        assert len(store.observations(1)) == 3
    assert trials[7].status.value == "ok" and trials[8].status.value == "failed"
    assert trials[8].error.startswith("interrupted") and len(trials[8].runs) == 1
    commit = trials[8].identity.commit

    proc = resume_cli(config, db)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("resuming bisection #1"))
    assert "3 stored observations (6 trials) reused" in line
    assert f"trial #7 ({commit[:10]} [{trials[7].identity.mode}])" in line and "used, not measured again" in line
    assert f"trial #8 ({commit[:10]} [{trials[8].identity.mode}], 1 warm-up run stored)" in line and "discarded" in line
    assert "a trial is one command run" in line  # the seeded demo measures with a command, not a server
    resumed = out["resumed"]
    assert resumed["observations"] == 3 and resumed["trials"] == 6
    assert [t["trial"] for t in resumed["reused"]] == [7]
    assert [(t["trial"], t["commit"], t["runs"], t["measured_runs"]) for t in resumed["discarded"]] == [(8, commit, 1, 0)]
    assert resumed["discarded"][0]["why"].startswith("interrupted")
    with open_store(db, recover=False, read_only=True) as store:
        record, obs = store.bisection(1), store.observations(1)
    assert 7 in obs[3].trial_ids and 8 not in {t for o in obs for t in o.trial_ids}  # 7 used, 8 measured again
    policy = policy_for(record, stored_start(record)[0])
    seen = observations_of(obs)
    for k in range(1, len(obs)):
        assert dict(obs[k].decision) == {**decision_json(policy.next(seen[:k])), "after": k, "pending": [], "host": None}, k
