"""The Slurm executor against a real single-node Slurm (munged, slurmctld, slurmd: tests/slurm_setup.py).

One demo bisection with ``[executor] kind = "slurm"`` is shared by the module: its first job is
cancelled with ``scancel`` mid-trial (retried, never blamed), later perfbisect is SIGKILLed while a
job runs and ``resume`` re-attaches to it (no second submission), and the resumed bisection names
the planted culprit. Every wait is for an event (a row, a line, an exit), never for a duration.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from perfbisect.config import parse_config
from perfbisect.report.replay import replay
from perfbisect.store import open_store
from perfbisect.demo.target import make_demo_target
from perfbisect.errors import ConfigError
from perfbisect.runtime.locks import NODE_LOCK_NAME
from perfbisect.settings import ExecutorConfig
from perfbisect.executors.slurm import DB_ENV, SCRIPT, idle_nodes, job_db_argument, sbatch_argv

pytestmark = pytest.mark.slow

EVENT_TIMEOUT_S = 300  # generous: a shared 2-core machine; nothing here measures speed


class Cli:
    """A perfbisect command in the background, its stderr collected line by line."""

    def __init__(self, *args: str, env: dict[str, str]):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "perfbisect.cli", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**env, "COLUMNS": "300"},
        )
        self.lines: list[str] = []
        self.out_lines: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(pipe, into), daemon=True)
                         for pipe, into in ((self.proc.stderr, self.lines), (self.proc.stdout, self.out_lines))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(pipe, into: list[str]) -> None:
        for line in pipe:
            into.append(line)

    @property
    def out(self) -> str:
        return "".join(self.out_lines)

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    @property
    def said(self) -> str:
        """stderr with its line wrapping undone (Rich wraps long lines at the terminal width)."""
        return " ".join(self.stderr.split())

    def wait_for(self, text: str) -> None:
        until(lambda: text in self.stderr, f"{text!r} in the output", self)

    def finish(self) -> int:
        try:
            self.proc.wait(timeout=EVENT_TIMEOUT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        for reader in self._readers:
            reader.join(timeout=10)
        return self.proc.returncode


def until(check, what: str, cli: Cli | None = None):
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while True:
        value = check()
        if value:
            return value
        if cli is not None and cli.proc.poll() is not None:
            value = check()
            assert value, f"perfbisect exited {cli.proc.returncode} before {what}:\n{cli.stderr}"
            return value
        assert time.monotonic() < deadline, f"no {what} after {EVENT_TIMEOUT_S}s" + (f":\n{cli.stderr}" if cli else "")
        time.sleep(0.05)


def rows(db: Path, sql: str, *args) -> list[tuple]:
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute(sql, args).fetchall()
    except sqlite3.OperationalError:  # the schema is not there yet
        return []
    finally:
        con.close()


@dataclass
class Scenario:
    demo: object
    db: Path
    cluster: object
    terminated: Cli  # `run`, stopped by SIGTERM during its first job
    terminated_job: str
    run: Cli  # the first `resume`: a job scancelled mid-trial, then SIGKILL while a job runs
    run_rc: int
    resume: Cli  # the second `resume`, re-attached, to the end
    resume_rc: int
    cancelled_job: str
    cancelled_slot: int
    attached_job: str
    attached_slot: int
    picked: Cli  # the `resume` between: it read the result of a job that finished while perfbisect was dead
    finished_job: str
    notes: dict = field(default_factory=dict)


def _config(base: str, runs: int, **executor) -> str:
    text = base.replace("runs = 5", f"runs = {runs}")
    table = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in executor.items())
    return text + f"\n[executor]\nkind = \"slurm\"\n{table}\n"


def _measuring(db: Path, cli: Cli, min_runs: int) -> str:
    """The job id of a job whose trial is running and has measured ``min_runs`` runs."""
    return until(lambda: rows(db, (
        "select t.job_id from trials t where t.status = 'running' and t.job_id is not null and "
        "(select count(*) from runs r where r.trial_id = t.id and r.warmup = 0) >= ?"
    ), min_runs), "a job's trial measuring", cli)[0][0]


@pytest.fixture(scope="module")
def scenario(slurm_cluster, tmp_path_factory) -> Scenario:
    root = tmp_path_factory.mktemp("slurm-bisect")
    demo = make_demo_target(root / "demo", commits=12)
    db = root / "results.sqlite"
    locks = root / "locks"
    locks.mkdir()
    env = {**slurm_cluster.env, "PERFBISECT_LOCK_DIR": str(locks)}
    config = demo.config
    # The which-path step has its own test (test_the_which_path_step_runs_as_one_slurm_job): this
    # scenario is about the search's jobs, and stays within its event timeouts without those trials.
    base = config.read_text().replace("[stats]\n", "[stats]\nmode_trials = 0\n", 1)
    assert "mode_trials = 0" in base
    # Trials run until cancelled (a workload of a million runs) until the config is rewritten: every
    # job reads the config when it starts, and then finds the ordinary demo workload.
    config.write_text(_config(base, 1_000_000, poll_s=0.2))
    started = time.monotonic()

    # SIGTERM during the first job: perfbisect cancels it and says how to resume.
    terminated = Cli("run", f"good={demo.good}", f"bad={demo.bad}", "-c", str(config), "--db", str(db), "--yes", env=env)
    terminated_job = _measuring(db, terminated, 1)
    terminated.proc.send_signal(signal.SIGTERM)
    terminated.finish()

    # (b) scancel a job mid-trial (its trial running with measured runs): retried, never blamed.
    run = Cli("resume", "-c", str(config), "--db", str(db), env=env)
    job = _measuring(db, run, 2)
    tmp = config.with_suffix(".new")
    tmp.write_text(_config(base, 5, poll_s=0.2))
    tmp.replace(config)
    slot = rows(db, "select slot from jobs where job_id = ?", job)[0][0]
    cancelled_at = time.monotonic()
    slurm_cluster.run("scancel", job)
    run.wait_for(f"(slot {slot}, attempt 2")
    retry_seen = time.monotonic()

    # (c) hold the node lock between two jobs, so that the next job is RUNNING in Slurm but waits;
    # SIGKILL perfbisect then. First the job finishes while perfbisect is dead (resume reads its
    # result), then once more, and resume re-attaches to the job still running.
    until(lambda: rows(db, "select id from jobs where state = 'observed'"), "a first observation", run)
    fd = os.open(locks / NODE_LOCK_NAME, os.O_RDWR | os.O_CREAT)

    def lock() -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def job_waiting(cli: Cli) -> tuple[str, int]:
        return until(lambda: rows(db, (
            "select job_id, slot from jobs where state = 'submitted' and started_at is not null and job_id is not null"
        )), "a job started on the node", cli)[0]

    try:
        until(lock, "the node lock between two jobs", run)
        finished_job, _ = job_waiting(run)
        run.proc.kill()
        run_rc = run.finish()
        fcntl.flock(fd, fcntl.LOCK_UN)
        until(lambda: rows(db, "select id from jobs where job_id = ? and state = 'result'", finished_job),
              f"job {finished_job} to store its result with perfbisect dead")
        picked = Cli("resume", "-c", str(config), "--db", str(db), env=env)
        picked.wait_for(f"job {finished_job} finished while perfbisect was stopped")
        until(lock, "the node lock between two jobs", picked)
        attached_job, attached_slot = job_waiting(picked)
        picked.proc.kill()
        picked.finish()
        state = slurm_cluster.run("squeue", "--noheader", "--jobs", attached_job, "--format=%T").stdout.strip()
        assert state == "RUNNING", f"job {attached_job} should outlive a SIGKILLed perfbisect; squeue says {state!r}"
        # The rest runs on two slots: the policy proposes a batch and results arrive in any order
        # (on this one node the second job waits in Slurm's queue while the first runs).
        tmp.write_text(_config(base, 5, poll_s=0.2, nodes=2))
        tmp.replace(config)
        resume = Cli("resume", "-c", str(config), "--db", str(db), env=env)
        resume.wait_for(f"re-attached to job {attached_job}")
    finally:
        os.close(fd)  # releases the node lock: the job goes on
    resume_rc = resume.finish()
    return Scenario(
        demo, db, slurm_cluster, terminated, terminated_job, run, run_rc, resume, resume_rc, job, slot,
        attached_job, attached_slot, picked, finished_job,
        notes={"cancel_to_resubmit_s": retry_seen - cancelled_at, "module_s": time.monotonic() - started},
    )


# ------------------------------------------------------------------------------------------------


def test_a_demo_bisection_runs_its_trials_as_slurm_jobs_and_names_the_culprit(scenario):
    s = scenario
    assert s.resume_rc in (0, 1), s.resume.stderr  # 1: the regression found (exit code of a verdict)
    assert f"first bad commit: {s.demo.planted[:10]}" in s.resume.out, s.resume.out + s.resume.stderr
    observations = rows(s.db, "select seq, commit_sha, trial_ids from observations order by seq")
    assert len(observations) >= 3
    jobs = {r[0]: r[1:] for r in rows(s.db, "select observation_seq, job_id, node, commit_sha from jobs where state = 'observed'")}
    assert sorted(jobs) == [o[0] for o in observations]  # every observation came from one job
    for seq, commit, trial_ids in observations:
        job_id, node, job_commit = jobs[seq]
        assert job_commit == commit and node == s.cluster.node
        for tid in re.findall(r"\d+", trial_ids):
            assert rows(s.db, "select job_id, node, status from trials where id = ?", int(tid)) == [(job_id, node, "ok")]
    # With two slots, two jobs were in flight at once: one submitted before the other's result landed.
    spans = rows(s.db, "select submitted_at, finished_at from jobs where state = 'observed' order by submitted_at")
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), spans
    # Slurm itself ran them: each job id is known to slurmctld as a completed batch job of this node.
    some = jobs[observations[-1][0]][0]
    info = s.cluster.run("scontrol", "show", "job", "-o", some).stdout
    assert "JobState=COMPLETED" in info and f"BatchHost={s.cluster.node}" in info
    assert "submitted:" in s.run.stderr and "RUNNING on" in s.run.stderr
    # A job submitted while the node was idle was pinned to it (sinfo → the policy → --nodelist).
    assert f", on {s.cluster.node})" in s.run.stderr + s.resume.stderr
    starts = sorted(r[0] for r in rows(s.db, "select started_at - submitted_at from jobs where started_at is not null"))
    print(f"\nslurm scenario: {len(observations)} observations; sbatch -> job's own start (Slurm + Python imports): "
          f"median {starts[len(starts) // 2]:.1f}s, max {starts[-1]:.1f}s; cancel -> resubmission "
          f"{s.notes['cancel_to_resubmit_s']:.1f}s; scenario {s.notes['module_s']:.0f}s")


def test_b_a_job_cancelled_mid_trial_is_retried_and_never_blamed(scenario):
    s = scenario
    lost = rows(s.db, "select state, error, attempt, commit_sha from jobs where job_id = ?", s.cancelled_job)
    assert len(lost) == 1
    state, error, attempt, commit = lost[0]
    assert state == "lost" and attempt == 1 and "CANCELLED" in error, lost
    trials = rows(s.db, "select id, status, error from trials where job_id = ?", s.cancelled_job)
    assert trials and all(t[1] == "failed" for t in trials), trials  # stopped mid-trial, stored as such
    held = " ".join(r[0] for r in rows(s.db, "select trial_ids from observations"))
    assert not {str(t[0]) for t in trials} & set(re.findall(r"\d+", held))  # no observation uses them
    retry = rows(s.db, "select state, attempt, commit_sha, observation_seq from jobs where slot = ? and job_id != ?",
                 s.cancelled_slot, s.cancelled_job)
    assert [(r[0], r[1], r[2]) for r in retry] == [("observed", 2, commit)]
    value = rows(s.db, "select value from observations where seq = ?", retry[0][3])[0][0]
    assert value is not None  # the commit was measured, not marked untestable
    assert "infrastructure failure, not a property of the commit" in s.run.said


def test_c_resume_after_sigkill_reattaches_instead_of_submitting_again(scenario):
    s = scenario
    assert s.run_rc == -signal.SIGKILL and s.picked.proc.returncode == -signal.SIGKILL
    # A job that finished while perfbisect was dead: its stored result became an observation, once.
    finished = rows(s.db, "select slot, state, observation_seq from jobs where job_id = ?", s.finished_job)
    assert len(finished) == 1 and finished[0][1] == "observed", finished
    assert rows(s.db, "select count(*) from jobs where slot = ?", finished[0][0]) == [(1,)]
    assert f"job {s.finished_job} submitted" not in s.picked.stderr
    same_slot = rows(s.db, "select job_id, state, attempt from jobs where slot = ?", s.attached_slot)
    assert same_slot == [(s.attached_job, "observed", 1)], same_slot
    assert f"job {s.attached_job} submitted" not in s.resume.stderr
    slots = rows(s.db, "select slot, count(*) from jobs where state != 'lost' group by slot having count(*) > 1")
    assert slots == []  # no slot was ever submitted twice except after a loss
    assert rows(s.db, "select status from bisections") == [("done",)]


def test_the_report_names_the_node_and_job_of_each_trial(scenario):
    s = scenario
    report = Path(re.search(r"report: (\S+\.html)", s.resume.out + s.resume.stderr).group(1))
    html = report.read_text()
    assert f"job {s.attached_job}" in html and s.cluster.node in html


def test_the_report_replays_and_checks_every_decision_like_a_local_one(scenario):
    """Each job keeps the decision that submitted it, with what it was decided on; its observation carries it on,
    and the report's replay recomputes every one in that context (the jobs in flight, the node) and checks it."""
    s = scenario
    stored = {seq: json.loads(d) for seq, d in rows(s.db, "select seq, decision from observations order by seq")}
    assert stored and all(d is not None for d in stored.values()), stored
    by_job = {seq: json.loads(d) for seq, d in rows(s.db, "select observation_seq, decision from jobs where state = 'observed'")}
    assert by_job == stored  # the job's decision is its observation's, retried and re-attached jobs included
    commits = {seq: c for seq, c in rows(s.db, "select seq, commit_sha from observations")}
    assert all(d["commit"] == commits[seq] for seq, d in stored.items())
    assert any(d["pending"] for d in stored.values())  # with two slots, some were decided with a job in flight
    assert any(d["after"] != seq for seq, d in stored.items()) or any(d["host"] for d in stored.values())
    store = open_store(s.db)
    record = store.bisection(rows(s.db, "select id from bisections")[0][0])
    replayed = replay(record, store.observations(record.id))
    assert (replayed["compared"], replayed["mismatches"]) == (len(stored), 0), replayed["batch_mismatches"]
    assert "each of its" in replayed["note"] and "checked" in replayed["note"]
    html = Path(re.search(r"report: (\S+\.html)", s.resume.out + s.resume.stderr).group(1)).read_text()
    assert f"Each of the {len(stored)} replayed decisions is the one the search made live." in " ".join(html.split())

    # A decision changed after the fact is caught: the check is not a tautology.
    seq, first = next((k, d) for k, d in stored.items() if d["pending"])
    tampered = [replace(o, decision={**o.decision, "reason": o.decision["reason"] + " (edited)"}) if o.seq == seq else o
                for o in store.observations(record.id)]
    again = replay(record, tampered)
    assert (again["compared"], again["mismatches"], again["batch_mismatches"]) == (len(stored), 1, [seq])


def test_sigterm_cancels_the_jobs_in_flight_and_says_how_to_resume(scenario):
    s = scenario
    t = s.terminated
    assert t.proc.returncode == 143, t.stderr
    assert f"cancelled the Slurm jobs in flight ({s.terminated_job}) with scancel" in t.said, t.stderr
    assert re.search(r"Interrupted by SIGTERM: .*perfbisect resume 1 ", t.said), t.stderr
    (state, error), = rows(s.db, "select state, error from jobs where job_id = ?", s.terminated_job)
    assert state == "lost" and error.startswith("cancelled: perfbisect was interrupted"), error
    assert "JobState=CANCELLED" in s.cluster.run("scontrol", "show", "job", "-o", s.terminated_job).stdout
    trials = rows(s.db, "select status, error from trials where job_id = ?", s.terminated_job)
    assert trials and all(status == "failed" for status, _ in trials), trials


def test_the_which_path_step_runs_as_one_slurm_job(slurm_cluster, tmp_path):
    """EAGLE-3 bisected on the cluster: the baseline (and EAGLE-3 again) at the culprit and the commit
    before it are measured by one job on one node, interleaved, and the verdict says which path."""
    demo = make_demo_target(tmp_path / "demo", commits=6, seeded=True)
    demo.config.write_text(_config(demo.config.read_text(), 5, poll_s=0.2))
    db = tmp_path / "r.sqlite"
    run = Cli("run", f"good={demo.good}", f"bad={demo.bad}", "-c", str(demo.config), "--db", str(db), "--yes", "--json",
              env={**slurm_cluster.env, "PERFBISECT_LOCK_DIR": str(tmp_path)})
    assert run.finish() in (0, 1), run.stderr
    result = json.loads(run.out)
    assert result["culprit"] == demo.planted, run.stderr
    rp = result["regressed_path"]
    assert rp is not None and rp["after"] == demo.planted and rp["baseline"] == "baseline"
    assert result["regressed"] in ("speculative", "unclear") and result["regressed"] == rp["path"]
    assert "which path: " in run.said
    # One job, named as a which-path job, ran every modes trial; it is no observation of the search.
    (job_id, name, state, node), = rows(db, "select job_id, job_name, state, node from jobs where job_name like '%-modes'")
    assert state == "result" and node == slurm_cluster.node
    modes = rows(db, "select mode, commit_sha, job_id from trials where purpose = 'modes'")
    # the baseline always; EAGLE-3 only where the search left fewer than stats.mode_trials (3) at the pair
    assert "baseline" in {m for m, _, _ in modes} <= {"baseline", "eagle3"} and {j for _, _, j in modes} == {job_id}
    assert {c for _, c, _ in modes} == {rp["before"], rp["after"]} and rp["trials"] == len(modes)
    for sha in (rp["before"], rp["after"]):
        assert rows(db, "select count(*) from trials where commit_sha = ? and mode = 'eagle3' and status = 'ok'", sha)[0][0] >= 3
    assert rows(db, "select count(*) from observations") == rows(db, "select count(*) from jobs where state = 'observed'")
    assert "JobState=COMPLETED" in slurm_cluster.run("scontrol", "show", "job", "-o", job_id).stdout


def test_sbatch_refusing_the_job_is_a_clear_error(slurm_cluster, tmp_path):
    demo = make_demo_target(tmp_path / "demo", commits=10)
    demo.config.write_text(_config(demo.config.read_text(), 5, partition="no-such-partition"))
    run = Cli("run", f"good={demo.good}", f"bad={demo.bad}", "-c", str(demo.config), "--db", str(tmp_path / "r.sqlite"),
              "--yes", env={**slurm_cluster.env, "PERFBISECT_LOCK_DIR": str(tmp_path)})
    assert run.finish() not in (0, 1), run.stderr
    assert "sbatch refused the job" in run.said and "no-such-partition" in run.said, run.stderr
    assert "Traceback" not in run.stderr
    assert rows(tmp_path / "r.sqlite", "select state from jobs") == [("lost",)]


# ------------------------------------------------------------------------------------------------
# What needs no cluster


def test_sbatch_command_is_an_argument_list_with_the_config_resources():
    cfg = ExecutorConfig(kind="slurm", partition="gpu", account="perf", time_limit="01:30:00", constraint="h100",
                         gpus_per_node=8, sbatch_args=("--qos=high",))
    argv = sbatch_argv(cfg, name="pb-1", output=Path("/o/%j.out"), script=SCRIPT, args=["/py", "--row", "3; rm -rf /"],
                       nodelist="node07")
    assert argv[:3] == ["sbatch", "--parsable", "--exclusive"]
    for flag in ("--partition=gpu", "--account=perf", "--time=01:30:00", "--constraint=h100", "--gpus-per-node=8",
                 "--nodelist=node07", "--qos=high", "--job-name=pb-1", "--output=/o/%j.out"):
        assert flag in argv
    assert not any(a.startswith("--wrap") for a in argv)
    assert argv[-4:] == [str(SCRIPT), "/py", "--row", "3; rm -rf /"]  # passed through, never parsed by a shell
    assert os.access(SCRIPT, os.X_OK)


def test_executor_config_keys_are_checked(tmp_path):
    demo = make_demo_target(tmp_path / "demo", commits=10)
    from perfbisect.config import tomllib

    data = tomllib.loads(demo.config.read_text())
    assert parse_config(data, path=demo.config).executor == ExecutorConfig()
    data["executor"] = {"kind": "slurm", "nodes": 4, "sbatch_args": ["--qos=high"]}
    cfg = parse_config(data, path=demo.config).executor
    assert (cfg.kind, cfg.nodes, cfg.sbatch_args) == ("slurm", 4, ("--qos=high",))
    for bad, word in (({"kind": "kubernetes"}, "executor.kind"), ({"nodes": 0}, "executor.nodes"),
                      ({"retries": -1}, "executor.retries")):
        data["executor"] = bad
        with pytest.raises(ConfigError, match=word):
            parse_config(data, path=demo.config)


def test_a_store_password_reaches_the_job_through_its_environment_never_its_command_line(tmp_path, monkeypatch):
    from perfbisect.store import locate
    from perfbisect.app import slurmjob

    url = "postgresql+psycopg://perf:s3cr3t@db.internal:5432/results"
    arg, env = job_db_argument(locate(url))
    assert "s3cr3t" not in arg and arg == f"env:{DB_ENV}" and env == {DB_ENV: url}
    plain = tmp_path / "r.sqlite"
    assert job_db_argument(locate(plain)) == (str(plain), None)  # nothing secret: the path as given
    # A job whose environment lost the URL (sbatch --export=NONE) says so, and how to fix it.
    demo = make_demo_target(tmp_path / "demo", commits=4)
    monkeypatch.delenv(DB_ENV, raising=False)
    with pytest.raises(Exception, match=f"{DB_ENV}.*--export=ALL"):
        slurmjob._run(argparse.Namespace(config=str(demo.config), db=arg, row=1))


def test_idle_nodes_come_from_sinfo_and_a_constraint_filters_them(scenario, monkeypatch):
    """After the shared bisection the node is idle; a feature it lacks, or an expression only Slurm
    can evaluate, pins nothing."""
    for key, value in scenario.cluster.env.items():
        monkeypatch.setenv(key, value)
    slurm = ExecutorConfig(kind="slurm")
    assert until(lambda: idle_nodes(slurm), "the node idle after the bisection") == [scenario.cluster.node]
    assert idle_nodes(ExecutorConfig(kind="slurm", partition="debug")) == [scenario.cluster.node]
    assert idle_nodes(ExecutorConfig(kind="slurm", constraint="h100")) == []
    assert idle_nodes(ExecutorConfig(kind="slurm", constraint="h100&ib")) == []
