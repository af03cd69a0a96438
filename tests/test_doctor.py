"""Server pidfiles: doctor tells perfbisect's own servers apart from other GPU users, and reaping
spares a server whose perfbisect is alive (real process groups and pidfiles; the GPU holder list
is given, as this machine has no GPU to hold)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from perfbisect.doctor import split_own_servers
from perfbisect.runtime.liveness import process_owner
from tests.cli_runner import run_command


@pytest.fixture
def sleepers():
    procs = []

    def start() -> int:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
        procs.append(proc)
        return proc.pid

    yield start
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _pidfile(cache, pgid: int, owner: str) -> None:
    (cache / "servers").mkdir(parents=True, exist_ok=True)
    (cache / "servers" / f"{pgid}.pid").write_text(f"owner {owner}\n{sys.executable} -c server")


def test_own_server_is_named_as_such_not_as_another_gpu_user(tmp_path, sleepers):
    server, stranger = sleepers(), sleepers()
    _pidfile(tmp_path, server, process_owner())  # started by a live perfbisect: this process
    others, findings = split_own_servers([(0, server, "python"), (1, stranger, "python")], tmp_path)
    assert others == [(1, stranger, "python")]
    assert len(findings) == 1 and findings[0].state == "warn"
    assert "perfbisect's own server" in findings[0].message and f"pid {os.getpid()}" in findings[0].message


def test_server_of_a_dead_perfbisect_is_named_a_leftover(tmp_path, sleepers):
    server = sleepers()
    _pidfile(tmp_path, server, f"{socket.gethostname()}:999999999:0")
    others, findings = split_own_servers([(0, server, "python")], tmp_path)
    assert others == [] and findings[0].state == "error"
    assert "interrupted perfbisect" in findings[0].message and f"kill -9 -{server}" in findings[0].message


def test_without_pidfiles_every_holder_is_another_process(tmp_path, sleepers):
    pid = sleepers()
    assert split_own_servers([(0, pid, "python")], tmp_path) == ([(0, pid, "python")], [])
    assert split_own_servers([(0, pid, "python")], None) == ([(0, pid, "python")], [])


def _owner_of_a_live_process() -> tuple[subprocess.Popen, str]:
    """A live process other than this one, and its owner string as perfbisect writes it."""
    child = subprocess.Popen(
        [sys.executable, "-c", "from perfbisect.runtime.liveness import process_owner; import time; "
         "print(process_owner(), flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )
    owner = child.stdout.readline().strip()
    return child, owner


def test_reaping_spares_a_server_whose_perfbisect_lives_and_kills_it_once_that_one_is_dead(tmp_path, sleepers):
    from perfbisect.measure.server_pidfiles import reap_leftover_servers
    from perfbisect.runtime.progress import Progress

    server = sleepers()
    owner_proc, owner = _owner_of_a_live_process()
    try:
        cmdline = Path(f"/proc/{server}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        (tmp_path / "servers").mkdir()
        pidfile = tmp_path / "servers" / f"{server}.pid"
        pidfile.write_text(f"owner {owner}\n{cmdline}")
        assert reap_leftover_servers(tmp_path, Progress()) == []
        assert pidfile.exists() and Path(f"/proc/{server}").exists()  # in use by a live perfbisect
    finally:
        owner_proc.kill()
        owner_proc.wait()
    assert reap_leftover_servers(tmp_path, Progress()) == [server]  # its perfbisect is gone now
    assert not pidfile.exists()


# -- `perfbisect doctor` on the demo target (the emulator is the stand-in GPU server) ------------

_FINDING = re.compile(r"^\s*(ok|warn|error|info) ([^:]+): (.*)$")


def _doctor(*args: str) -> tuple[subprocess.CompletedProcess, dict[str, list[tuple[str, str]]]]:
    """Run `perfbisect doctor`; its findings by check: [(state, message), ...]."""
    proc = run_command("doctor", *args, columns=400)
    findings: dict[str, list[tuple[str, str]]] = {}
    for line in proc.stdout.splitlines():
        m = _FINDING.match(line)
        assert m, f"not a finding: {line!r}"
        findings.setdefault(m.group(2), []).append((m.group(1), m.group(3)))
    return proc, findings


@pytest.mark.slow
def test_doctor_on_the_demo_target_checks_config_repo_patches_store_noise_and_a_launch(tmp_path):
    from perfbisect.config import load_config
    from perfbisect.demo.target import make_demo_target

    target = make_demo_target(tmp_path / "demo", commits=10)
    db = tmp_path / "r.sqlite"
    env_vars = len(load_config(target.config).server.env)  # the NCCL tuning and the emulator's knobs

    proc, found = _doctor("-c", str(target.config), "--db", str(db), "--launch")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not any(state == "error" for fs in found.values() for state, _ in fs), proc.stdout
    assert found["config"] == [("ok", f"{target.config}: SGLang target; modes baseline, eagle3; metric eagle3; 1 warm-up + 5 runs of 96 tokens")]
    [(state, repo)] = found["target repo"]
    assert state == "ok" and repo.startswith(f"{target.repo} at {target.bad[:10]} ")
    [(state, patches)] = found["patch stack"]
    assert state == "ok" and patches.startswith("3 patches apply at HEAD")
    assert found["target interpreter"][0][0] == "ok" and sys.executable in found["target interpreter"][0][1]
    assert found["results database"] == [("ok", f"{db}: 0 trials stored")]
    [(state, noise)] = found["noise model"]
    assert state == "warn" and "no repeated trials of one build on this host yet" in noise and "5.0% prior" in noise
    assert found["runs per trial"] == [("info", f"[{m}] 5 now; no recommendation yet (no stored trial of this mode on this host yet)")
                                       for m in ("baseline", "eagle3")]
    # The demo pins its kernel (python/pyproject.toml): HEAD's environment is resolved before the launch,
    # and the launch runs in it (the emulator refuses any other version, as SGLang does).
    (state, head), (group_state, group) = found["environments"]
    assert state == "ok" and head.startswith(f"HEAD ({target.bad[:10]}): 1 environment from python/pyproject.toml (uv ")
    assert (group_state, group) == ("ok", f"{target.bad[:10]} (demo-sglang-kernel==0.2.0): resolved, not installed yet (`perfbisect plan --prepare` installs and verifies it)")
    [(state, launch)] = found["server launch"]
    assert state == "ok" and launch.startswith("[baseline] ready in ")
    assert found["worker env"] == [("ok", f"all {env_vars} configured variables reached every process")]
    assert "CPU load" in found and "GPU state" in found and found["python"][0][0] == "info"

    # Two trials of one build: the A/A data the noise model pools, found under the same noise key
    # the trials were stored with.
    measured = run_command("measure", "HEAD", "-m", "baseline", "-n", "2", "-c", str(target.config), "--db", str(db), "-q")
    assert measured.returncode == 0, measured.stderr
    proc, found = _doctor("-c", str(target.config), "--db", str(db))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert found["results database"] == [("ok", f"{db}: 2 trials stored")]
    assert found["noise model"] == [("ok", "A/A data from 1 builds on this host")]
    assert found["environments"][1] == ("ok", f"{target.bad[:10]} (demo-sglang-kernel==0.2.0): built")
    # The stored trials' timings and runs now give a recommendation for the mode they measured.
    (state, baseline), (_, eagle3) = found["runs per trial"]
    assert state in ("ok", "warn") and baseline.startswith("[baseline] 5 now") and "σ_w" in baseline and "2 stored trials" in baseline
    assert eagle3.startswith("[eagle3] 5 now; no recommendation yet")
    assert "server launch" not in found  # only with --launch


def test_doctor_reports_what_cannot_be_opened_and_still_checks_the_machine(tmp_path):
    from perfbisect.demo.target import make_demo_target

    target = make_demo_target(tmp_path / "demo", commits=10)
    config = tmp_path / "perfbisect.toml"
    config.write_text(target.config.read_text().replace(f'repo = "{target.repo}"', f'repo = "{tmp_path / "gone"}"'))
    proc, found = _doctor("-c", str(config), "--db", str(tmp_path / "r.sqlite"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [(state, repo)] = found["target repo"]
    assert state == "error" and str(tmp_path / "gone") in repo
    assert "patch stack" not in found and "results database" not in found  # they need the workspace
    assert found["config"][0][0] == "ok" and "CPU load" in found and "target interpreter" in found
