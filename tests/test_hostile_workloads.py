"""Workloads that misbehave (issue #23): a grandchild that keeps stdout open, bytes that are not
UTF-8, 100 MB of output, a 5,000-digit number. Each is a failed (or flagged) run with its reason,
within the deadline, with nothing left running — never a crash of the bisection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from perfbisect.runtime.children import LOG_HEAD_BYTES, TAIL_BYTES, run_bounded
from perfbisect.errors import WorkloadError
from perfbisect.measure.external_workloads import run_command_workload
import psutil
from perfbisect.settings import WorkloadConfig
from tests.cli_runner import run_cli, run_command


def _cfg(script: Path, **kw) -> WorkloadConfig:
    base = dict(kind="command", command=("{python}", str(script)), metric="tok_s", warmup=0, request_timeout_s=600.0)
    base.update(kw)
    return WorkloadConfig(**base)


def _alive(pid: int) -> bool:
    """Is ``pid`` still running, a few seconds after a SIGKILL? (A killed process closes its files
    before the kernel marks it a zombie, so the pipe may report EOF a moment before that.)"""
    for _ in range(100):
        try:
            if psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                return False
        except psutil.NoSuchProcess:
            return False
        time.sleep(0.1)
    return True


def _group_members(pgid: int) -> list[int]:
    members = []
    for proc in psutil.process_iter(["status"]):
        if proc.info["status"] in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            continue
        try:
            if os.getpgid(proc.pid) == pgid:
                members.append(proc.pid)
        except OSError:
            continue
    return members


# A benchmark that starts helpers in the background, prints valid JSON and exits 0: one helper in
# a session of its own (`setsid`, out of reach of a process-group kill) and one in its group, both
# holding its stdout.
LINGERING = textwrap.dedent("""
    import json, os, subprocess, sys
    out = sys.argv[1]
    escaped = subprocess.Popen(["setsid", "sleep", "300"])
    grouped = subprocess.Popen(["sleep", "301"])
    with open(out, "w") as fh:
        json.dump({"leader": os.getpid(), "escaped": escaped.pid, "grouped": grouped.pid}, fh)
    print(json.dumps({"tok_s": 100.0}), flush=True)
""")


def test_a_grandchild_holding_stdout_fails_the_run_and_is_killed(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text(LINGERING)
    pids_file = tmp_path / "pids.json"
    # A 600 s deadline: the run must come back on its own, long before it, with the reason.
    w = _cfg(script, command=("{python}", str(script), str(pids_file)))
    with pytest.raises(WorkloadError, match="holding its output open") as err:
        run_command_workload(w, tmp_path, sys.executable, {}, tmp_path / "cmd.log")
    pids = json.loads(pids_file.read_text())
    assert "sleep 300" in str(err.value)
    assert not _alive(pids["escaped"]) and not _alive(pids["grouped"])
    assert _group_members(pids["leader"]) == []
    assert "killed" in (tmp_path / "cmd.log").read_text()


def test_the_deadline_covers_a_grandchild_that_outlives_a_timed_out_command(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text(LINGERING + "import time\ntime.sleep(300)\n")
    pids_file = tmp_path / "pids.json"
    w = _cfg(script, command=("{python}", str(script), str(pids_file)), request_timeout_s=3.0)
    with pytest.raises(WorkloadError, match="ran longer than workload.request_timeout_s = 3 s"):
        run_command_workload(w, tmp_path, sys.executable, {}, tmp_path / "cmd.log")
    pids = json.loads(pids_file.read_text())
    assert not any(_alive(pids[k]) for k in ("leader", "escaped", "grouped"))
    assert _group_members(pids["leader"]) == []


def test_binary_output_is_decoded_with_replacement(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text(
        "import sys\n"
        "sys.stdout.buffer.write(b'\\xff\\xfe\\x00garbage \\xc3\\x28\\n' * 3)\n"
        "sys.stderr.buffer.write(b'\\x80\\x81 warn\\n')\n"
        "sys.stdout.buffer.write(b'{\"tok_s\": 42.5}\\n')\n"
    )
    (run,) = run_command_workload(_cfg(script), tmp_path, sys.executable, {}, tmp_path / "cmd.log")
    assert run.usable and run.value == 42.5
    log = (tmp_path / "cmd.log").read_text(encoding="utf-8")  # the log is valid UTF-8
    assert "\ufffd" in log and "garbage" in log and "warn" in log


def test_binary_output_without_json_is_a_failed_run_with_its_reason(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text("import sys\nsys.stdout.buffer.write(bytes(range(256)) * 10)\n")
    with pytest.raises(WorkloadError, match="printed no JSON object"):
        run_command_workload(_cfg(script), tmp_path, sys.executable, {}, tmp_path / "cmd.log")


@pytest.mark.parametrize("printed, reason", [
    ("'{\"tok_s\": ' + '9' * 5000 + '}'", "integer of 5000 digits"),
    ("'{\"tok_s\": 1e300}'", "out of range"),
    ("'{\"tok_s\": ' + '9' * 400 + '}'", "integer of 400 digits"),
    ("'{\"tok_s\": Infinity}'", "not a finite positive number"),
])
def test_absurd_numbers_flag_the_run_with_their_reason(tmp_path, printed, reason):
    script = tmp_path / "bench.py"
    script.write_text(f"print({printed})\n")
    (run,) = run_command_workload(_cfg(script), tmp_path, sys.executable, {}, tmp_path / "cmd.log")
    assert not run.usable and run.value is None
    assert reason in run.error


# 100 MB on stdout (and some on stderr), the JSON line last. Run in a subprocess of its own so its
# peak memory is this run's alone.
HUGE = textwrap.dedent("""
    import json, resource, sys
    from pathlib import Path
    from perfbisect.measure.external_workloads import run_command_workload
    from perfbisect.settings import WorkloadConfig
    tmp = Path(sys.argv[1])
    (tmp / "bench.py").write_text(
        "import sys\\n"
        "line = b'x' * 1023 + b'\\\\n'\\n"
        "for _ in range(100 * 1024): sys.stdout.buffer.write(line)\\n"
        "for _ in range(4 * 1024): sys.stderr.buffer.write(line)\\n"
        "print('{\\"tok_s\\": 7.0}')\\n"
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    w = WorkloadConfig(kind="command", command=("{python}", str(tmp / "bench.py")), metric="tok_s", warmup=0,
                       request_timeout_s=600.0)
    (run,) = run_command_workload(w, tmp, sys.executable, {}, tmp / "cmd.log")
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"value": run.value, "before_kib": before, "after_kib": after}))
""")


def test_huge_output_is_capped_in_the_log_and_never_held_whole(tmp_path):
    proc = subprocess.run([sys.executable, "-c", HUGE, str(tmp_path)], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["value"] == 7.0
    # 100 MB went through; memory grew by far less than that (the old code held it whole: ~500 MB).
    assert seen["after_kib"] - seen["before_kib"] < 32 * 1024, seen
    log = tmp_path / "cmd.log"
    assert log.stat().st_size < 2 * (LOG_HEAD_BYTES + TAIL_BYTES) + 64 * 1024
    text = log.read_text()
    assert "bytes of stdout not kept (104857" in text and "bytes of stderr not kept" in text
    assert '{"tok_s": 7.0}' in text  # the tail is kept


def test_run_bounded_keeps_both_tails_and_the_sizes(tmp_path):
    run = run_bounded([sys.executable, "-c", "import sys; print('a' * 10); print('b' * 5, file=sys.stderr)"],
                      cwd=tmp_path, env=None, timeout_s=60, log_path=tmp_path / "x.log", header="=== x")
    assert run.returncode == 0 and not run.lingering
    assert run.stdout == "a" * 10 + "\n" and run.stderr == "b" * 5 + "\n"
    assert (run.stdout_bytes, run.stderr_bytes) == (11, 6)
    assert "--- perfbisect: exit 0" in (tmp_path / "x.log").read_text()


# Through the command line: a bisection whose workload prints binary bytes and 5,000-digit
# integers ends (every trial failed or flagged with its reason) instead of crashing, and leaves
# no bisection `running` for every `resume` to crash on again.
HOSTILE_BENCH = textwrap.dedent("""
    import sys
    sys.stdout.buffer.write(b"\\xff\\xfe binary \\x80\\n")
    print('{"tok_s": ' + "9" * 5000 + '}')
""")


def test_a_bisection_over_a_hostile_workload_ends_and_is_not_left_running(tmp_path):
    import sqlite3

    from perfbisect.demo.target import make_demo_target

    demo = make_demo_target(tmp_path / "demo", commits=10)
    (tmp_path / "bench.py").write_text(HOSTILE_BENCH)
    text = demo.config.read_text()
    for old, new in (('[workload]\nkind = "sglang"', f'[workload]\nkind = "command"\ncommand = ["{{python}}", "{tmp_path}/bench.py"]\nmetric = "tok_s"'),
                     ('metric = "eagle3"', 'metric = "baseline"'),
                     ("min_effect_pct = 3.0", "min_effect_pct = 3.0\nmax_trials_total = 4")):
        assert old in text, old
        text = text.replace(old, new, 1)
    demo.config.write_text(text)
    db = tmp_path / "r.sqlite"
    proc = run_command("run", f"good={demo.good}", f"bad={demo.bad}", "--yes", "-c", str(demo.config), "--db", str(db),
                       timeout=600, cwd=demo.root)
    flat = " ".join(proc.stderr.split())
    assert "unexpected" not in flat and "Traceback" not in flat, flat[-3000:]
    assert proc.returncode in (3, 4), flat[-3000:]  # inconclusive or nothing measured: never a crash
    with sqlite3.connect(db) as conn:
        statuses = [r[0] for r in conn.execute("SELECT status FROM bisections")]
        errors = [r[0] for r in conn.execute("SELECT error FROM runs WHERE error IS NOT NULL")]
    # nothing measured (exit 4) stores no bisection; an inconclusive one is stored, finished
    assert "running" not in statuses and (statuses or proc.returncode == 4)
    assert errors and all("integer of 5000 digits" in e for e in errors)


def test_compare_over_a_workload_that_leaves_a_daemon_ends_with_its_reason_not_a_database_error(tmp_path):
    """Every trial of a workload that leaves a `setsid` daemon holding its output fails (the daemon is
    killed): compare said "results database failed: NOT NULL constraint failed: comparisons.effect_pct"
    (exit 4) — it tried to store a comparison of nothing. It now ends with the workload's own reason,
    exit 4 (a runtime failure, as documented), the trials kept, nothing left running."""
    from tests.repo_factory import RepoFactory

    r = RepoFactory(tmp_path / "repo")
    r.commit("one", {"a.txt": "1\n"})
    r.commit("two", {"a.txt": "2\n"})
    marker = tmp_path / "daemon-pid"
    script = tmp_path / "bench.py"
    script.write_text(textwrap.dedent(f"""
        import json, subprocess
        daemon = subprocess.Popen(["setsid", "sleep", "300"])  # keeps our stdout, out of reach of a group kill
        open({str(marker)!r}, "a").write(f"{{daemon.pid}}\\n")
        print(json.dumps({{"ops_s": 5.0}}))
    """))
    cfg = tmp_path / "perfbisect.toml"
    cfg.write_text(f"""
[target]
repo = {json.dumps(str(r.path))}
python = {json.dumps(sys.executable)}

[workload]
kind = "command"
command = ["{{python}}", {json.dumps(str(script))}]
metric = "ops_s"
warmup = 0
request_timeout_s = 60
""")
    db = tmp_path / "r.sqlite"
    done = run_cli("compare", "HEAD~1", "HEAD", "-c", str(cfg), "--db", str(db), "--max-trials", "2")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "NOT NULL" not in done.stderr and "results database failed" not in done.stderr
    assert "gave a usable result, so there is nothing to compare" in done.stderr
    assert "left a process holding its output open" in done.stderr
    import sqlite3
    con = sqlite3.connect(db)
    try:
        statuses = [s for (s,) in con.execute("select status from trials")]
    finally:
        con.close()
    assert statuses and all(s == "failed" for s in statuses)  # every trial kept, with its error
    assert not any(_alive(int(pid)) for pid in marker.read_text().split())  # no daemon left running
