"""The results store on real SQLite files: migrations, round-trips, crash safety, concurrency."""

from __future__ import annotations

import dataclasses
import json
import math
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from perfbisect.settings import StatsConfig
from perfbisect.errors import StoreError
from perfbisect.model import (
    BisectOutcome,
    Comparison,
    EnvCheck,
    RunResult,
    SystemSummary,
    TrialIdentity,
    TrialResult,
    TrialStatus,
    Verdict,
)
from perfbisect.runtime.liveness import owner_alive, process_owner
from perfbisect.store import (
    INTERRUPTED_ERROR,
    TrialPurpose,
    codec,
    default_db_path,
    is_unfinished,
    open_store,
)
from perfbisect.store.migrations import head_revision, schema_diffs

REPO_ROOT = Path(__file__).resolve().parents[1]


def identity(
    commit: str = "a" * 40, build: str = "build-a", mode: str = "baseline", host: str = "h200x1"
) -> TrialIdentity:
    return TrialIdentity(
        commit=commit,
        patch_hash="patch-1",
        build_hash=build,
        mode=mode,
        mode_hash=f"{mode}-hash",
        workload_hash="wl-1",
        host=host,
    )


def run(index: int, tok_s: float, *, warmup: bool = False, output_tokens: int = 2048) -> RunResult:
    return RunResult(
        index=index,
        warmup=warmup,
        requested_tokens=2048,
        output_tokens=output_tokens,
        prompt_tokens=30,
        ttft_s=0.05,
        decode_tok_s=tok_s,
        e2e_tok_s=tok_s * 0.98,
    )


def every_field_run(index: int) -> RunResult:
    """A run with every RunResult field set to a non-default value (new fields must be stored too)."""
    values = {}
    for number, f in enumerate(dataclasses.fields(RunResult)):
        if f.name == "index":
            values[f.name] = index
        elif f.name == "warmup":
            values[f.name] = False
        elif f.name == "error":
            values[f.name] = "stream cut"
        elif f.type in (bool, "bool"):
            values[f.name] = True  # detected_warmup: every bool but warmup is off by default
        elif "int" in str(f.type) and "float" not in str(f.type):
            values[f.name] = 1000 + number
        else:
            values[f.name] = 1.0 / 3.0 + number  # not exactly representable in decimal
    return RunResult(**values)


def store_trial(store, trial: TrialResult, purpose=TrialPurpose.MEASURE, bisection_id=None) -> int:
    trial_id = store.begin_trial(
        trial.identity, purpose, bisection_id, trial.log_path, started_at=trial.started_at
    )
    for r in trial.runs:
        store.add_run(trial_id, r)
    store.finish_trial(
        trial_id,
        trial.status,
        trial.system,
        None,
        trial.env_checks,
        trial.server_info,
        trial.versions,
        trial.error,
        finished_at=trial.finished_at,
    )
    return trial_id


def ok_trial(ident: TrialIdentity, values, started_at: float = 1000.0) -> TrialResult:
    return TrialResult(
        identity=ident,
        status=TrialStatus.OK,
        runs=tuple(run(i, v) for i, v in enumerate(values)),
        started_at=started_at,
        finished_at=started_at + 60.0,
    )


def comparison(verdict=Verdict.REGRESSED, effect=-7.25) -> Comparison:
    return Comparison(
        verdict=verdict,
        effect_pct=effect,
        ci_low_pct=effect - 2.125,
        ci_high_pct=effect + 2.125,
        sigma_b_pct=3.1,
        sigma_source="measured (12 trials, dof 8)",
        n_a=4,
        n_b=5,
        p_value=0.0031,
        min_effect_pct=2.0,
        explanation="B is 7.25% slower than A (95% CI −9.4 … −5.1)",
        covariate_note=None,
    )


def sqlite_rows(db: Path, sql: str, params=()) -> list[tuple]:
    """Read through a plain sqlite3 connection: a second, independent reader of the file."""
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, params).fetchall()


def run_in_child(code: str, db: Path) -> subprocess.CompletedProcess:
    """Run store code in a separate Python process that then dies by SIGKILL (no cleanup at all)."""
    script = (
        textwrap.dedent(
            """
        import os, signal, sys
        from pathlib import Path
        from perfbisect.store import open_store
        from perfbisect.model import RunResult, TrialIdentity
        store = open_store(Path(sys.argv[1]))
        """
        )
        + textwrap.dedent(code)
        + "\nos.kill(os.getpid(), signal.SIGKILL)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script, str(db)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "repo" / ".git" / "perfbisect" / "results.sqlite"


@pytest.fixture
def store(db: Path):
    with open_store(db) as s:
        yield s


# --- schema and migrations ---------------------------------------------------------------------


def test_migrations_from_empty_create_exactly_the_declared_schema(db: Path):
    assert not db.parent.exists()
    with open_store(db) as store:
        assert schema_diffs(store.engine) == []
    assert db.is_file()  # parent directories were created
    tables = {
        name for (name,) in sqlite_rows(db, "SELECT name FROM sqlite_master WHERE type='table'")
    }
    assert tables == {
        "alembic_version",
        "trials",
        "runs",
        "bisections",
        "observations",
        "comparisons",
        "noise_estimates",
        "jobs",
    }
    assert sqlite_rows(db, "SELECT version_num FROM alembic_version") == [(head_revision(),)]
    assert sqlite_rows(db, "PRAGMA journal_mode") == [("wal",)]
    indexes = {
        name for (name,) in sqlite_rows(db, "SELECT name FROM sqlite_master WHERE type='index'")
    }
    assert {
        "ix_trials_commit_sha_mode",
        "ix_trials_host_mode_mode_hash_workload_hash_status",
    } <= indexes


def test_reopening_a_database_at_head_changes_nothing(db: Path):
    with open_store(db) as store:
        trial_id = store_trial(store, ok_trial(identity(), [82.1, 82.3, 82.2]))
    schema_before = sqlite_rows(db, "SELECT type, name, sql FROM sqlite_master ORDER BY name")
    version_before = sqlite_rows(db, "PRAGMA schema_version")
    with open_store(db) as store:
        assert store.recovered == ([], [])
        assert [r.decode_tok_s for r in store.trial(trial_id).runs] == [82.1, 82.3, 82.2]
    assert (
        sqlite_rows(db, "SELECT type, name, sql FROM sqlite_master ORDER BY name") == schema_before
    )
    assert sqlite_rows(db, "PRAGMA schema_version") == version_before
    assert sqlite_rows(db, "SELECT version_num FROM alembic_version") == [(head_revision(),)]


def test_a_file_that_is_not_sqlite_gives_a_clear_error(tmp_path: Path):
    bogus = tmp_path / "results.sqlite"
    bogus.write_text("this is a CSV export, not a database\n")
    with pytest.raises(StoreError) as err:
        open_store(bogus)
    message = str(err.value)
    assert str(bogus) in message and "not a SQLite database" in message and "--db" in message
    assert bogus.read_text() == "this is a CSV export, not a database\n"  # left untouched


def test_a_sqlite_file_of_another_application_is_refused(tmp_path: Path):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    with pytest.raises(StoreError, match="not a perfbisect results database") as err:
        open_store(other)
    assert "notes" in str(err.value)
    assert sqlite_rows(other, "SELECT name FROM sqlite_master WHERE type='table'") == [("notes",)]


def test_a_database_from_a_newer_schema_is_refused(db: Path):
    open_store(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(StoreError, match="newer perfbisect") as err:
        open_store(db)
    assert str(db) in str(err.value) and "9999" in str(err.value)


def test_a_directory_path_is_refused(tmp_path: Path):
    with pytest.raises(StoreError, match="is a directory"):
        open_store(tmp_path)


def test_default_db_path_sits_in_the_git_dir_also_for_linked_worktrees(tmp_path: Path):
    repo = tmp_path / "sglang"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "root"], check=True)
    subprocess.run(git + ["worktree", "add", "-q", str(tmp_path / "wt"), "HEAD"], check=True)
    assert default_db_path(repo) == repo / ".git" / "perfbisect" / "results.sqlite"
    linked = default_db_path(tmp_path / "wt")
    assert linked.parent.parent.parent.parent == (repo / ".git").resolve()  # .git/worktrees/wt/...
    assert linked.name == "results.sqlite"


# --- trials and runs ---------------------------------------------------------------------------


def test_a_trial_with_runs_round_trips_to_an_equal_trial_result(store):
    trial = TrialResult(
        identity=identity(),
        status=TrialStatus.OK,
        runs=(
            run(0, 60.0, warmup=True),
            run(1, 60.5, warmup=True),
            run(0, 82.4),
            run(1, 82.5),
            run(2, 82.5),
            run(3, 84.0, output_tokens=1687),  # early EOS: flagged, kept, not averaged in
            every_field_run(4),  # an errored run with every field set
            run(5, 82.6),
        ),
        started_at=1764500000.125,
        finished_at=1764500510.875,
        system=SystemSummary(
            samples=512,
            sm_clock_mean_mhz=1410.5,
            sm_clock_min_mhz=1245.0,
            sm_clock_max_mhz=1575.0,
            temperature_mean_c=61.2,
            temperature_max_c=67.0,
            power_mean_w=598.4,
            throttled_fraction=0.8125,
            throttle_reasons_seen=0x4 | 0x1,
            load_avg_1m=1.5,
            other_gpu_processes=(4242, 4343),
            notes=("SW power cap on GPU 0",),
        ),
        env_checks=(
            EnvCheck(pid=100, cmdline="python -m sglang.launch_server"),
            EnvCheck(
                pid=101,
                cmdline="sglang::scheduler_TP0",
                missing=("NCCL_PROTO",),
                mismatched=(
                    ("NCCL_ALGO", "Ring", "Tree"),
                    ("NCCL_BUFFSIZE", "16777216", "4194304"),
                ),
            ),
        ),
        server_info={"internal_states": [{"avg_spec_accept_length": 2.03}], "version": "0.5.6"},
        versions={"torch": "2.11.0", "sglang": "0.5.6", "nccl": "2.27.3"},
        error=None,
        log_path="/tmp/logs/trial-1.log",
    )
    trial_id = store_trial(store, trial)
    loaded = store.trial(trial_id)
    assert loaded == dataclasses.replace(trial, id=trial_id)
    assert [r.index for r in loaded.runs] == [0, 1, 0, 1, 2, 3, 4, 5]  # insertion order kept
    assert [r.output_tokens for r in loaded.flagged_runs] == [
        1687,
        every_field_run(4).output_tokens,
    ]
    assert loaded.summary == trial.summary == pytest.approx(math.log(82.5))
    stored_summary = sqlite_rows(store.path, "SELECT summary FROM trials WHERE id = ?", (trial_id,))
    assert stored_summary == [(trial.summary,)]


def test_add_run_is_committed_before_it_returns(store, db: Path):
    trial_id = store.begin_trial(identity(), "bisect")
    store.add_run(trial_id, run(0, 81.0, warmup=True))
    store.add_run(trial_id, run(0, 82.0))
    # A second, independent reader (plain sqlite3) and a second store both see the runs now.
    rows = sqlite_rows(
        db, "SELECT idx, warmup, decode_tok_s FROM runs WHERE trial_id = ? ORDER BY id", (trial_id,)
    )
    assert rows == [(0, 1, 81.0), (0, 0, 82.0)]
    with open_store(db) as other:
        seen = other.trials(status=None)
        assert [t.id for t in seen] == [trial_id]
        assert is_unfinished(seen[0]) and [r.decode_tok_s for r in seen[0].runs] == [81.0, 82.0]
        # The trial belongs to this live process: another open must not "recover" it.
        assert other.recovered == ([], [])
    assert sqlite_rows(db, "SELECT status, finished_at FROM trials") == [("running", None)]


def test_a_failed_finish_trial_keeps_the_runs_and_can_be_retried(tmp_path: Path):
    db = tmp_path / "results.sqlite"
    store = open_store(db, busy_timeout_s=0.2)
    trial_id = store.begin_trial(identity(), "measure")
    for i, v in enumerate([82.1, 82.2, 82.3]):
        store.add_run(trial_id, run(i, v))

    with pytest.raises(StoreError, match="server_info cannot be stored"):
        store.finish_trial(trial_id, TrialStatus.OK, server_info={"started": object()})
    # A real write failure: another connection holds the write lock past the busy timeout.
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="locked") as err:
            store.finish_trial(trial_id, TrialStatus.OK)
        assert str(db) in str(err.value) and "kept" in str(err.value)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()

    assert sqlite_rows(db, "SELECT COUNT(*) FROM runs WHERE trial_id = ?", (trial_id,)) == [(3,)]
    assert is_unfinished(store.trial(trial_id))
    finished = store.finish_trial(trial_id, TrialStatus.OK, versions={"sglang": "0.5.6"})
    assert finished.status is TrialStatus.OK and finished.summary == pytest.approx(math.log(82.2))
    with pytest.raises(StoreError, match="already finished"):
        store.add_run(trial_id, run(3, 82.0))
    with pytest.raises(StoreError, match="already finished"):
        store.finish_trial(trial_id, TrialStatus.FAILED)
    store.close()


def test_trials_killed_mid_run_are_shown_as_unfinished_then_recovered_with_their_runs(db: Path):
    open_store(db).close()
    child = run_in_child(
        """
        ident = TrialIdentity("c" * 40, "p", "b", "eagle3", "m", "w", "h")
        trial_id = store.begin_trial(ident, "bisect")
        store.add_run(trial_id, RunResult(0, True, 2048, 2048, decode_tok_s=55.0))
        store.add_run(trial_id, RunResult(0, False, 2048, 2048, decode_tok_s=53.6))
        print(trial_id, flush=True)
        """,
        db,
    )
    assert child.returncode == -9, child.stderr
    trial_id = int(child.stdout.split()[0])

    with open_store(db, recover=False) as store:
        (unfinished,) = store.unfinished_trials()
        assert unfinished.id == trial_id and is_unfinished(unfinished)
        assert unfinished.finished_at == 0.0 and len(unfinished.runs) == 2
        assert store.trials() == []  # never counted as evidence

    with open_store(db) as store:
        assert store.recovered == ([trial_id], [])
        recovered = store.trial(trial_id)
        assert recovered.status is TrialStatus.FAILED and recovered.error == INTERRUPTED_ERROR
        assert not is_unfinished(recovered) and recovered.summary is None
        assert [r.decode_tok_s for r in recovered.runs] == [55.0, 53.6]
        last_run_at = sqlite_rows(
            db, "SELECT MAX(recorded_at) FROM runs WHERE trial_id = ?", (trial_id,)
        )
        assert recovered.finished_at == last_run_at[0][0]
        assert store.unfinished_trials() == []
        assert [t.id for t in store.trials(status=TrialStatus.FAILED)] == [trial_id]


def test_recovery_leaves_a_live_process_trial_alone_unless_forced(store, db: Path):
    trial_id = store.begin_trial(identity(), "measure")
    assert store.recover_interrupted() == ([], [])
    assert store.recover_interrupted(force=True) == ([trial_id], [])
    assert store.trial(trial_id).error == INTERRUPTED_ERROR


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_owner_alive_tells_live_processes_from_dead_zombie_and_reused_ones():
    host = socket.gethostname()
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        start = Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[19]
        assert owner_alive(f"{host}:{child.pid}:{start}")
        assert not owner_alive(f"{host}:{child.pid}:{int(start) + 1}")  # same pid, another process
        assert not owner_alive(f"another-host:{child.pid}:{start}")
        child.stdin.close()
        for _ in range(200):  # exited but not reaped: a zombie still answers kill(pid, 0)
            if Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                break
            time.sleep(0.01)
        assert not owner_alive(f"{host}:{child.pid}:{start}")
    finally:
        child.wait(timeout=10)
    assert not owner_alive(f"{host}:{child.pid}:{start}")
    assert owner_alive(process_owner())


def test_trial_filters(store):
    a, b = "a" * 40, "b" * 40
    store_trial(store, ok_trial(identity(a), [80.0], started_at=100.0))
    store_trial(store, ok_trial(identity(a, mode="eagle3"), [60.0], started_at=200.0))
    store_trial(store, ok_trial(identity(b), [81.0], started_at=300.0), purpose="calibrate")
    failed = dataclasses.replace(
        ok_trial(identity(b), [70.0], started_at=400.0),
        status=TrialStatus.FAILED,
        error="server died",
    )
    store_trial(store, failed)
    skipped = dataclasses.replace(
        ok_trial(identity(b), [], started_at=500.0),
        status=TrialStatus.SKIPPED,
        error="patch conflict",
    )
    store_trial(store, skipped)

    def starts(trials):
        return [t.started_at for t in trials]

    assert starts(store.trials()) == [100.0, 200.0, 300.0]
    assert starts(store.trials(commit="aaaa")) == [100.0, 200.0]
    assert starts(store.trials(commit=b, status=None)) == [300.0, 400.0, 500.0]
    assert starts(store.trials(mode="eagle3")) == [200.0]
    assert starts(store.trials(noise_key=identity().noise_key)) == [100.0, 300.0]
    assert starts(store.trials(since=250.0)) == [300.0]
    assert starts(store.trials(status=TrialStatus.SKIPPED)) == [500.0]
    assert starts(store.trials(purpose=TrialPurpose.CALIBRATE)) == [300.0]
    assert store.trials(status=TrialStatus.FAILED)[0].error == "server died"
    with pytest.raises(StoreError, match="at least 4"):
        store.trials(commit="ab")
    with pytest.raises(StoreError, match="Unknown trial purpose 'benchmark'"):
        store.begin_trial(identity(), "benchmark")
    with pytest.raises(StoreError, match="no trial 999"):
        store.trial(999)


def test_identical_build_groups_are_the_a_a_data_of_one_noise_key(store):
    old, new = identity(build="build-old"), identity(commit="d" * 40, build="build-new")
    other_host = identity(build="build-old", host="rtx6000x8")
    ids_old = [store_trial(store, ok_trial(old, [82.0 + i])) for i in range(3)]
    ids_new = [store_trial(store, ok_trial(new, [88.8])), store_trial(store, ok_trial(new, [82.7]))]
    store_trial(store, ok_trial(identity(commit="e" * 40, build="build-once"), [80.0]))  # alone
    store_trial(store, ok_trial(other_host, [70.0]))
    store_trial(store, ok_trial(other_host, [71.0]))
    store_trial(store, dataclasses.replace(ok_trial(old, [10.0]), status=TrialStatus.FAILED))

    groups = store.identical_build_groups(old.noise_key)
    assert [[t.id for t in g] for g in groups] == [ids_old, ids_new]
    assert all(len({t.identity.build_key for t in g}) == 1 for g in groups)
    assert [len(g) for g in store.identical_build_groups(old.noise_key, min_size=1)] == [3, 2, 1]
    assert [len(g) for g in store.identical_build_groups(other_host.noise_key)] == [2]


def test_system_samples_are_stored_apart_and_loaded_on_request(store):
    trial_id = store.begin_trial(identity(), "measure")
    samples = {"t": [0.0, 1.0, 2.0], "gpus": {"0": {"sm_clock_mhz": [1980, 1245, 1575]}}}
    store.finish_trial(trial_id, TrialStatus.OK, SystemSummary(samples=3), samples)
    assert store.trial_samples(trial_id) == samples
    assert store.trial(trial_id).system == SystemSummary(samples=3)


# --- bisections, observations, comparisons ----------------------------------------------------


def outcome() -> BisectOutcome:
    return BisectOutcome(
        verdict=Verdict.REGRESSED,
        good="a" * 40,
        bad="f" * 40,
        culprit="c" * 40,
        culprit_set=("c" * 40, "d" * 40),
        effect_pct=-27.5,
        endpoint_comparison=comparison(),
        culprit_comparison=comparison(Verdict.REGRESSED, -26.0),
        extra_changes=("e" * 40,),
        skipped=("b" * 40,),
        trials_used=23,
        drift_note="bba2fc4 gave 88.8 on 11-28 and 82.7 today: same code, different state",
        explanation="culprit c… is 26% slower than its parent",
    )


def test_bisection_and_observations_round_trip_in_replay_order(store):
    commits = [c * 40 for c in "abcdef"]
    bisection_id = store.begin_bisection(
        commits[0],
        commits[-1],
        commits,
        "decode_tok_s",
        settings={"alpha": 0.01, "modes": ["baseline", "eagle3"]},
        target="/src/sglang",
        config_hash="cfg-1",
    )
    trial_ids = [
        store_trial(store, ok_trial(identity(c), [80.0]), "bisect", bisection_id)
        for c in commits[:3]
    ]
    steps = [
        (0, commits[0], math.log(82.4), [trial_ids[0]], {"sm_clock_mean_mhz": 1410.5}),
        (1, commits[-1], math.log(60.1), [trial_ids[1]], {}),
        (2, commits[2], None, [], {}),  # untestable: patch conflict
        (3, commits[3], math.log(81.9), [trial_ids[2]], {"temperature_mean_c": 61.0}),
    ]
    for seq, commit, value, tids, cov in reversed(steps):  # stored out of order on purpose
        store.add_observation(bisection_id, seq, commit, value, tids, cov)

    replay = store.observations(bisection_id)
    assert [(o.seq, o.commit, o.value, list(o.trial_ids), dict(o.covariates)) for o in replay] == [
        (seq, commit, value, tids, cov) for seq, commit, value, tids, cov in steps
    ]
    with pytest.raises(StoreError, match="already has observation #2"):
        store.add_observation(bisection_id, 2, commits[4], 1.0)

    record = store.bisection(bisection_id)
    assert (
        record.status == "running" and record.commits == tuple(commits) and record.outcome is None
    )
    assert record.settings == {"alpha": 0.01, "modes": ["baseline", "eagle3"]}
    assert record.target == "/src/sglang" and record.config_hash == "cfg-1"
    assert record.trial_count == 3 and record.observation_count == 4
    assert [t.id for t in store.trials(bisection_id=bisection_id)] == trial_ids
    # Running and owned by this live process: nothing to resume.
    assert store.latest_unfinished_bisection() is None

    done = store.finish_bisection(bisection_id, outcome())
    assert done.status == "done" and done.finished
    assert (
        done.outcome == outcome() and done.verdict is Verdict.REGRESSED and done.outcome.culprit == "c" * 40
    )
    # The answer is a set (c or d): the stored culprit names neither, so no listing blames c alone.
    assert done.culprit is None and done.outcome.culprit_is_set and done.outcome.named_culprit is None
    assert sqlite3.connect(store.path).execute("select culprit from bisections").fetchall() == [(None,)]
    assert store.bisections(limit=5)[0] == done


def test_bisection_settings_may_be_a_config_dataclass(store):
    stats = StatsConfig(metric="ratio:eagle3/baseline", min_effect_pct=2.5)
    first = store.bisection(
        store.begin_bisection("a" * 40, "b" * 40, ["a" * 40, "b" * 40], "ratio", settings=stats)
    )
    assert codec.load(StatsConfig, first.settings) == stats
    same = store.bisection(
        store.begin_bisection("a" * 40, "b" * 40, ["a" * 40, "b" * 40], "ratio", settings=stats)
    )
    other = store.bisection(
        store.begin_bisection(
            "a" * 40, "b" * 40, ["a" * 40, "b" * 40], "ratio", settings=StatsConfig()
        )
    )
    assert first.config_hash == same.config_hash != other.config_hash


def test_an_interrupted_bisection_is_found_and_resumed(db: Path):
    with open_store(db) as store:
        finished_id = store.begin_bisection(
            "a" * 40, "b" * 40, ["a" * 40, "b" * 40], "decode_tok_s"
        )
        store.finish_bisection(
            finished_id, dataclasses.replace(outcome(), verdict=Verdict.SAME, culprit=None)
        )
    child = run_in_child(
        """
        commits = [c * 40 for c in "abcd"]
        bid = store.begin_bisection(good=commits[0], bad=commits[-1], commits=commits, metric="decode_tok_s")
        tid = store.begin_trial(TrialIdentity(commits[0], "p", "b", "baseline", "m", "w", "h"), "bisect", bid)
        store.add_run(tid, RunResult(0, False, 2048, 2048, decode_tok_s=82.0))
        store.add_observation(bid, 0, commits[0], 4.40)
        store.add_observation(bid, 1, commits[-1], 4.10)
        print(bid, tid, flush=True)
        """,
        db,
    )
    assert child.returncode == -9, child.stderr
    bisection_id, trial_id = map(int, child.stdout.split())

    with open_store(db) as store:
        assert store.recovered == ([trial_id], [bisection_id])
        pending = store.latest_unfinished_bisection()
        assert (
            pending is not None and pending.id == bisection_id and pending.status == "interrupted"
        )
        assert [o.value for o in store.observations(bisection_id)] == [4.40, 4.10]
        resumed = store.resume_bisection(bisection_id)
        assert resumed.status == "running" and resumed.observation_count == 2
        assert store.latest_unfinished_bisection() is None  # now ours, and we are alive
        with pytest.raises(StoreError, match="already done"):
            store.resume_bisection(finished_id)
        assert [b.id for b in store.bisections(limit=1)] == [bisection_id]


def test_comparisons_are_recorded_newest_first(store):
    first = store.record_comparison(
        "a" * 40,
        "b" * 40,
        "baseline",
        comparison(Verdict.SAME, 0.4),
        trial_ids_a=[1, 2],
        trial_ids_b=[3],
    )
    second = store.record_comparison("a" * 40, "b" * 40, "eagle3", comparison(), metric="ratio")
    records = store.comparisons(limit=10)
    assert [r.id for r in records] == [second, first]
    assert records[1].comparison == comparison(Verdict.SAME, 0.4)
    assert records[1].trial_ids_a == (1, 2) and records[1].trial_ids_b == (3,)
    assert records[0].metric == "ratio" and records[0].mode == "eagle3"
    assert sqlite_rows(
        store.path, "SELECT verdict, effect_pct FROM comparisons WHERE id = ?", (second,)
    ) == [("regressed", -7.25)]


# --- JSON codec --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        SystemSummary(
            samples=3,
            sm_clock_mean_mhz=1410.123456789,
            throttle_reasons_seen=5,
            other_gpu_processes=(1, 2),
            notes=("a", "b"),
        ),
        EnvCheck(pid=7, cmdline="w", missing=("X",), mismatched=(("A", "1", "2"),)),
        comparison(),
        dataclasses.replace(
            comparison(Verdict.INCONCLUSIVE),
            p_value=None,
            ci_high_pct=math.inf,
            covariate_note="clock",
        ),
        outcome(),
        BisectOutcome(verdict=Verdict.SKIPPED, good="a", bad="b"),
        Verdict.IMPROVED,
        TrialStatus.SKIPPED,
    ],
    ids=lambda v: type(v).__name__,
)
def test_model_values_survive_a_json_round_trip_exactly(value):
    text = json.dumps(codec.encode(value), allow_nan=False)  # strict JSON, readable anywhere
    back = codec.decode(type(value), json.loads(text))
    assert back == value and type(back) is type(value)
    if isinstance(value, BisectOutcome) and value.endpoint_comparison is not None:
        assert type(back.endpoint_comparison) is Comparison
        assert back.endpoint_comparison.verdict is Verdict.REGRESSED
        assert isinstance(back.culprit_set, tuple)


def test_json_from_an_older_model_loads_with_defaults_and_ignores_removed_keys():
    stored = codec.encode(comparison())
    del stored["covariate_note"]
    stored["retired_field"] = 1
    assert codec.load(Comparison, stored) == comparison()


# --- concurrency -------------------------------------------------------------------------------


def test_two_stores_on_one_file_both_work(db: Path):
    first, second = open_store(db), open_store(db)
    try:
        ids = {}
        errors = []

        def write(name, store, commit):
            try:
                trial_id = store.begin_trial(identity(commit), "measure")
                for i in range(40):
                    store.add_run(trial_id, run(i, 80.0 + i / 10))
                store.finish_trial(trial_id, TrialStatus.OK)
                ids[name] = trial_id
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [
            threading.Thread(target=write, args=("first", first, "a" * 40)),
            threading.Thread(target=write, args=("second", second, "b" * 40)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert errors == []
        # Each store sees what the other wrote.
        assert len(first.trial(ids["second"]).runs) == 40
        assert len(second.trial(ids["first"]).runs) == 40
        assert {t.identity.commit[0] for t in first.trials()} == {"a", "b"}
        assert sqlite_rows(db, "PRAGMA journal_mode") == [("wal",)]
    finally:
        first.close()
        second.close()


def test_a_damaged_database_is_refused_by_quick_check(db: Path):
    with open_store(db) as store:
        for i in range(40):  # enough rows for several pages
            store_trial(store, ok_trial(identity(), [80.0 + i, 81.0, 82.0]))
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = sqlite_rows(db, "PRAGMA page_size")[0][0]
    data = bytearray(db.read_bytes())
    assert len(data) > 4 * page
    data[2 * page : 4 * page] = bytes((i * 37 + 11) % 256 for i in range(2 * page))  # tear two pages
    db.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="is damaged") as err:
        open_store(db)
    assert str(db) in str(err.value) and "--db" in str(err.value)
    assert db.read_bytes() == bytes(data)  # nothing written into it


def test_a_database_on_a_read_only_file_system_says_so(tmp_path: Path):
    """A real read-only mount (a tmpfs in a private mount namespace): the message says read-only."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    code = (
        "import sys\n"
        "from perfbisect.store import open_store\n"
        "from perfbisect.errors import StoreError\n"
        "if sys.argv[1] == 'create':\n"
        "    open_store(sys.argv[2]).close()\n"
        "else:\n"
        "    try:\n"
        "        open_store(sys.argv[2]).close()\n"
        "    except StoreError as exc:\n"
        "        print(exc)\n"
    )
    db = mnt / "results.sqlite"
    script = (
        f"mount -t tmpfs tmpfs {mnt} && "
        f"{sys.executable} -c \"$0\" create {db} && "
        f"mount -o remount,ro {mnt} && "
        f"{sys.executable} -c \"$0\" open {db}"
    )
    try:
        proc = subprocess.run(["unshare", "-rm", "sh", "-c", script, code], capture_output=True, text=True,
                              timeout=60, cwd=REPO_ROOT)
    except FileNotFoundError:
        pytest.skip("no unshare(1) here")
    if proc.returncode != 0 and ("unshare" in proc.stderr or "mount" in proc.stderr):
        pytest.skip(f"cannot make a private read-only mount here: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr
    assert "read-only file system" in proc.stdout and "--db PATH" in proc.stdout, proc.stdout + proc.stderr


def test_a_full_disk_while_storing_is_a_runtime_error_not_a_usage_error(tmp_path: Path):
    """A real full file system (a small tmpfs in a private mount namespace) under an open store."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    code = (
        "import sys\n"
        "from perfbisect.store import open_store\n"
        "from perfbisect.errors import StoreError\n"
        "from perfbisect.model import TrialIdentity\n"
        "store = open_store(sys.argv[1] + '/results.sqlite')\n"
        "try:\n"
        "    with open(sys.argv[1] + '/filler', 'wb') as fh:\n"
        "        while True:\n"
        "            fh.write(b'x' * 65536)\n"
        "            fh.flush()\n"
        "except OSError:\n"
        "    pass\n"
        "try:\n"
        "    for i in range(10000):\n"
        "        store.begin_trial(TrialIdentity('c' * 40, 'p' * 200, 'b', 'baseline', 'm', 'w', 'h'), 'measure')\n"
        "    print('no error')\n"
        "except StoreError as exc:\n"
        "    print(type(exc).__name__, exc.exit_code, 'is full or failing' in str(exc))\n"
    )
    script = f"mount -t tmpfs -o size=2m tmpfs {mnt} && {sys.executable} -c \"$0\" {mnt}"
    try:
        proc = subprocess.run(["unshare", "-rm", "sh", "-c", script, code], capture_output=True, text=True,
                              timeout=120, cwd=REPO_ROOT)
    except FileNotFoundError:
        pytest.skip("no unshare(1) here")
    if proc.returncode != 0 and ("unshare" in proc.stderr or "mount" in proc.stderr):
        pytest.skip(f"cannot make a private tmpfs here: {proc.stderr.strip()[:200]}")
    assert proc.stdout.split() == ["StoreWriteError", "4", "True"], proc.stdout + proc.stderr


# --- layouts (migration 0004) ------------------------------------------------------------------


def test_a_database_at_0003_upgrades_and_its_trials_and_observations_have_no_layout(db: Path):
    """Rows stored before layouts were recorded come back with layout None; new ones keep theirs."""
    from alembic import command
    from sqlalchemy import create_engine

    from perfbisect.layout import Layout
    from perfbisect.store.migrations import alembic_config

    db.parent.mkdir(parents=True)
    engine = create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0003")
    engine.dispose()
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO trials (commit_sha, patch_hash, build_hash, mode, mode_hash, workload_hash, host, purpose, "
            "status, owner, started_at, finished_at) VALUES (?, 'p', 'b', 'baseline', 'm', 'w', 'h', 'bisect', 'ok', "
            "'host:1:1', 1000.0, 1060.0)", ("a" * 40,))
        conn.execute(
            "INSERT INTO bisections (good, bad, metric, config_hash, target, commits, settings, status, owner, "
            "started_at) VALUES (?, ?, 'baseline', 'c', '/src', '[]', '{}', 'done', 'host:1:1', 1000.0)",
            ("a" * 40, "b" * 40))
        conn.execute(
            "INSERT INTO observations (bisection_id, seq, commit_sha, value, trial_ids, covariates, recorded_at) "
            "VALUES (1, 0, ?, 4.4, '[1]', '{}', 1060.0)", ("a" * 40,))
    with open_store(db) as store:
        assert schema_diffs(store.engine) == []
        assert sqlite_rows(db, "SELECT version_num FROM alembic_version") == [(head_revision(),)]
        assert store.trial(1).layout is None and store.observations(1)[0].layout is None
        drawn = Layout(slot=2, env_pad=1733, hash_seed=40211)
        tid = store.begin_trial(identity(), "bisect", 1, layout=drawn)
        store.finish_trial(tid, TrialStatus.SKIPPED, error="patch conflict")
        assert store.trial(tid).layout == drawn and sqlite_rows(db, "SELECT layout FROM trials WHERE id = ?", (tid,)) == [("s2-e1733-h40211",)]
        store.add_observation(1, 1, "a" * 40, None, [tid], layout="s2-e1733-h40211+s0-e7")
        assert store.observations(1)[1].layout == "s2-e1733-h40211+s0-e7"
        assert store.trial_count("a" * 40, "baseline") == 2 and store.trial_count("a" * 40, "eagle3") == 0
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE trials SET layout = '<b>s2</b>' WHERE id = ?", (tid,))
    with open_store(db) as store, pytest.raises(StoreError, match=f"Trial {tid} .* not a layout id"):
        store.trial(tid)
