"""SGLang as it is today (0.5.10 → 0.5.23), against real emulator subprocesses on 127.0.0.1.

- The server-info endpoint moved: /server_info since SGLang 0.5.6, /get_server_info before (now a
  deprecated alias). Both are read, the new one first; a speculative trial whose server-wide accept
  length is gone says so.
- Older commits overwrite NCCL settings in their workers (SGLang up to 0.5.3 sets NCCL_CUMEM_ENABLE /
  NCCL_NVLS_ENABLE itself): a variable of the mode's own env that the workers do not run with makes
  the trial untestable; one of the shared [server].env stays a warning.
- A checkout is not the release: each trial records where the server's sglang is imported from,
  and refuses one whose sglang resolves outside the worktree the env puts on PYTHONPATH.

The emulator stands in for SGLang; its knobs PERFBISECT_EMULATOR_SERVER_INFO (which info paths it
answers) and PERFBISECT_EMULATOR_OVERRIDE_ENV (what it sets in its own os.environ before starting its
workers, as SGLang's _set_envs_and_config does) play the old and new servers.
"""

from __future__ import annotations

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from perfbisect.config import load_config
from perfbisect.demo.target import make_demo_target
from perfbisect.errors import ModeNotApplied
from perfbisect.measure.server import ServerSession
from perfbisect.measure.trials import TrialRunner
from perfbisect.measure.workload import (
    SERVER_INFO_PATHS,
    read_server_info,
    server_info,
    server_info_warnings,
)
from perfbisect.app.workspace import Workspace
from perfbisect.runtime.progress import Progress
from perfbisect.model import TrialStatus
from perfbisect.settings import ModeConfig, ServerConfig

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


# ---------------------------------------------------------------------------------------------
# A. /server_info and /get_server_info


@pytest.mark.parametrize(
    ("answers", "path"),
    [("", "/server_info"), ("/get_server_info", "/get_server_info"), ("/server_info", "/server_info"), ("none", None)],
    ids=["both", "old-sglang", "new-sglang", "neither"],
)
def test_server_info_reads_the_new_path_first_and_falls_back_to_the_old(answers, path, emulator_worktree, start_emulator):
    emulator = start_emulator(emulator_worktree(), env={"PERFBISECT_EMULATOR_SERVER_INFO": answers})
    for other in SERVER_INFO_PATHS:  # the emulator answers only what it was told to
        status = httpx.get(emulator.base_url + other, timeout=5).status_code
        assert status == (200 if answers in ("", other) else 404)
    read = read_server_info(emulator.base_url)
    assert read.path == path
    if path is None:
        assert read.info == {} and server_info(emulator.base_url) == {}
    else:
        assert read.info["emulator"] is True and server_info(emulator.base_url) == read.info


class _CountingInfo(BaseHTTPRequestHandler):
    """An old SGLang's info route only (/get_server_info), counting every GET it is asked."""

    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        type(self).asked.append(self.path)
        found = self.path == "/get_server_info"
        body = b'{"internal_states": [{"avg_spec_accept_length": 2.5}]}' if found else b""
        self.send_response(200 if found else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_the_path_that_answered_is_asked_first_next_time():
    _CountingInfo.asked = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _CountingInfo)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{httpd.server_address[1]}"
        assert read_server_info(base).path == "/get_server_info"
        assert _CountingInfo.asked == ["/server_info", "/get_server_info"]
        for _ in range(3):
            assert read_server_info(base).info["internal_states"][0]["avg_spec_accept_length"] == 2.5
        assert _CountingInfo.asked[2:] == ["/get_server_info"] * 3  # one request each, no 404 first
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_speculative_mode_without_accept_length_is_warned_about(emulator_worktree, start_emulator):
    wt = emulator_worktree()
    spec = start_emulator(wt, "--speculative-algorithm", "EAGLE3")
    assert server_info_warnings(read_server_info(spec.base_url), spec.base_url, speculative=True) == ()
    # A server that says nothing of its accept length: the speculative flags did not take (here: not given).
    plain = start_emulator(wt)
    (warning,) = server_info_warnings(read_server_info(plain.base_url), plain.base_url, speculative=True)
    assert "no avg_spec_accept_length" in warning and "GET /server_info" in warning
    assert server_info_warnings(read_server_info(plain.base_url), plain.base_url, speculative=False) == ()
    # Neither endpoint: the missing accept length is said to be missing, not read as "no data".
    gone = start_emulator(wt, "--speculative-algorithm", "EAGLE3", env={"PERFBISECT_EMULATOR_SERVER_INFO": "none"})
    read = read_server_info(gone.base_url)
    (warning,) = server_info_warnings(read, gone.base_url, speculative=True)
    assert "neither GET /server_info nor GET /get_server_info" in warning and "avg_spec_accept_length" in warning


# ---------------------------------------------------------------------------------------------
# B. A variable that defines the mode, overwritten in the workers


def emulator_config(*flags: str, env=None) -> ServerConfig:
    return ServerConfig(
        command=("{python}", "-m", "perfbisect.demo.emulator", "--host", "{host}", "--port", "{port}",
                 "--worktree", "{worktree}", *flags),
        env=dict(env or {}), ready_timeout_s=20.0, ready_poll_s=0.1, shutdown_grace_s=3.0,
    )


def _checks(tmp_path: Path, server: ServerConfig, mode: ModeConfig, workers: int = 2):
    worktree = tmp_path / "wt"
    (worktree / "python" / "sglang").mkdir(parents=True, exist_ok=True)
    with ServerSession(server, mode, worktree, sys.executable, tmp_path / "server.log") as s:
        s.wait_ready()
        deadline = time.monotonic() + 5
        while len(s.group_pids()) < workers + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        checks = s.check_env()
        return s, checks, s.mode_not_applied(checks)


def test_a_mode_variable_the_workers_overwrite_is_an_error_naming_each_workers_value(tmp_path):
    # As SGLang <= 0.5.3: the server process sets NCCL_NVLS_ENABLE itself before it spawns its workers.
    server = emulator_config("--workers", "2", env={"NCCL_PROTO": "LL", "PERFBISECT_EMULATOR_OVERRIDE_ENV": "NCCL_NVLS_ENABLE=0"})
    mode = ModeConfig(name="nvls", env={"NCCL_NVLS_ENABLE": "1"})
    s, checks, error = _checks(tmp_path, server, mode)
    by_pid = {c.pid: c for c in checks}
    assert len(checks) == 3 and by_pid[s.pid].ok  # the launching process still shows what it got
    workers = [c for pid, c in by_pid.items() if pid != s.pid]
    assert all(c.mismatched == (("NCCL_NVLS_ENABLE", "1", "0"),) for c in workers)
    assert isinstance(error, ModeNotApplied)
    message = str(error)
    assert "NCCL_NVLS_ENABLE='1'" in message and "[modes.nvls].env" in message
    for c in workers:  # each worker by pid and command line, with the value it had
        assert f"pid {c.pid} ({c.short_cmdline()}): '0'" in message
    assert f"pid {s.pid} " in message and "'1' as set" in message
    assert "patch stack" in message and "engine.py" in message and "drop it from [modes.nvls].env" in message
    assert "\n" not in message  # one paragraph


def test_a_mode_variable_missing_in_the_workers_is_an_error_too(tmp_path):
    server = emulator_config("--workers", "1")
    mode = ModeConfig(name="cumem", args=("--drop-env", "NCCL_CUMEM_ENABLE"), env={"NCCL_CUMEM_ENABLE": "1"})
    _, _, error = _checks(tmp_path, server, mode, workers=1)
    assert isinstance(error, ModeNotApplied) and "NCCL_CUMEM_ENABLE='1'" in str(error) and "unset" in str(error)


def test_a_shared_server_variable_overwritten_stays_a_warning(tmp_path):
    server = emulator_config("--workers", "2", env={"NCCL_CUMEM_ENABLE": "1", "PERFBISECT_EMULATOR_OVERRIDE_ENV": "NCCL_CUMEM_ENABLE=0"})
    mode = ModeConfig(name="baseline", env={"NCCL_ALGO": "Ring"})
    s, checks, error = _checks(tmp_path, server, mode)
    assert error is None
    assert [c.mismatched for c in checks if c.pid != s.pid] == [(("NCCL_CUMEM_ENABLE", "1", "0"),)] * 2


# ---------------------------------------------------------------------------------------------
# Whole trials on the demo target (real git, worktrees, builds, emulator servers, SQLite)


class Collect(Progress):
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warn(self, message: str) -> None:
        self.warnings.append(message)


def demo(tmp_path: Path, *, server_env: str = "", modes: dict[str, str] | None = None, python: str | None = None):
    """The demo target (no pins) with lines added to [server.env] and to [modes.NAME] tables."""
    target = make_demo_target(tmp_path / "demo", commits=4, pins=False, runs=3)
    text = target.config.read_text()
    ours = next((line for line in server_env.splitlines() if line.startswith("PYTHONPATH = ")), None)
    if ours is not None:  # the demo's own PYTHONPATH (where the emulator is imported from) goes after the test's
        theirs = next(line for line in text.splitlines() if line.startswith("PYTHONPATH = "))
        text = text.replace(theirs + "\n", "")
        server_env = server_env.replace(ours, ours[:-1] + ":" + theirs.split(' = "', 1)[1])
    text = text.replace("[server.env]\n", "[server.env]\n" + server_env)
    for name, lines in (modes or {}).items():
        header = f"[modes.{name}]\n"
        assert header in text
        text = text.replace(header, header + lines)
    if python is not None:
        text = text.replace(f'python = "{sys.executable}"', f'python = "{python}"')
    target.config.write_text(text)
    return target


def test_a_trial_whose_workers_lose_the_mode_is_skipped_and_one_of_shared_env_is_measured(tmp_path):
    target = demo(tmp_path, server_env='PERFBISECT_EMULATOR_OVERRIDE_ENV = "NCCL_NVLS_ENABLE=0,NCCL_PROTO=Simple"\n',
                  modes={"baseline": 'env = { NCCL_NVLS_ENABLE = "1" }\n'})
    progress = Collect()
    with Workspace.open(load_config(target.config), tmp_path / "r.sqlite") as ws:
        runner = TrialRunner(ws, progress)
        commit = ws.repo.resolve(target.bad)
        skipped = runner.trial(commit, "baseline", purpose="bisect")
        assert skipped.status is TrialStatus.SKIPPED and skipped.summary is None and skipped.runs == ()
        assert skipped.error.startswith("mode not applied: Mode 'baseline' did not reach the server's workers")
        assert "NCCL_NVLS_ENABLE='1'" in skipped.error
        stored = ws.store.trial(skipped.id)
        assert stored.status is TrialStatus.SKIPPED and stored.env_checks  # what the workers had is kept
        assert any("skipped: Mode 'baseline'" in w for w in progress.warnings)
        # NCCL_PROTO (shared [server].env) was overwritten too, in both modes: eagle3 is measured, with a warning.
        measured = runner.trial(commit, "eagle3", purpose="bisect")
        assert measured.status is TrialStatus.OK and measured.summary is not None
        assert any("NCCL_PROTO='Simple' (wanted 'LL')" in w for w in progress.warnings)


def test_each_trial_records_the_server_info_path_and_where_sglang_came_from(tmp_path):
    target = demo(tmp_path, server_env='PYTHONPATH = "{worktree}/python"\nPERFBISECT_EMULATOR_SERVER_INFO = "/get_server_info"\n')
    progress = Collect()
    with Workspace.open(load_config(target.config), tmp_path / "r.sqlite") as ws:
        runner = TrialRunner(ws, progress)
        commit = ws.repo.resolve(target.bad)
        trial = runner.trial(commit, "eagle3", purpose="bisect")
        assert trial.status is TrialStatus.OK, trial.error
        stored = ws.store.trial(trial.id)
        worktree = Path(stored.versions["sglang_file"]).parents[2]  # <worktree>/python/sglang/__init__.py
        assert stored.versions["sglang_file"] == str(worktree / "python" / "sglang" / "__init__.py")
        assert (worktree / ".git").exists()  # a worktree of the target, not an install
        assert stored.server_info["perfbisect"] == {"server_info_path": "/get_server_info", "warnings": []}
        assert stored.server_info["emulator"] is True and not progress.warnings


def test_a_speculative_trial_without_server_info_is_measured_and_says_what_is_missing(tmp_path):
    target = demo(tmp_path, server_env='PERFBISECT_EMULATOR_SERVER_INFO = "none"\n')
    progress = Collect()
    with Workspace.open(load_config(target.config), tmp_path / "r.sqlite") as ws:
        trial = TrialRunner(ws, progress).trial(ws.repo.resolve(target.bad), "eagle3", purpose="bisect")
        assert trial.status is TrialStatus.OK and trial.summary is not None
        (warning,) = trial.server_info["perfbisect"]["warnings"]
        assert trial.server_info["perfbisect"]["server_info_path"] is None
        assert "neither GET /server_info nor GET /get_server_info" in warning
        assert any(warning in w for w in progress.warnings)
        # The per-run accept length from meta_info is still there.
        assert all(r.spec_accept_length for r in trial.usable_runs)


def test_a_trial_whose_sglang_is_not_the_checkout_is_refused(tmp_path):
    # The "installed" sglang that a wrapper interpreter puts first: PYTHONPATH in the config names the
    # worktree, but what would serve is that copy (and its version, not the checkout's).
    installed = tmp_path / "site" / "sglang"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("__version__ = '0.5.23'\n")
    wrapper = tmp_path / "bin" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={installed.parent} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    target = demo(tmp_path, server_env='PYTHONPATH = "{worktree}/python"\n', python=str(wrapper))
    progress = Collect()
    with Workspace.open(load_config(target.config), tmp_path / "r.sqlite") as ws:
        commit = ws.repo.resolve(target.bad)
        trial = TrialRunner(ws, progress).trial(commit, "baseline", purpose="bisect")
        assert trial.status is TrialStatus.SKIPPED and trial.runs == () and trial.log_path is None  # no server started
        assert "the server would not run the checkout under test" in trial.error
        assert str(installed / "__init__.py") in trial.error and commit.short in trial.error
        assert ws.store.trial(trial.id).versions["sglang_file"] == str(installed / "__init__.py")
        assert any("skipped: the server would not run the checkout" in w for w in progress.warnings)


# ---------------------------------------------------------------------------------------------
# C. Which implementation served: SGLang's Rust TreeCore and its silent fallback to Python


def test_a_fallback_to_the_python_tree_core_is_recorded_and_refused_when_the_mode_asks_for_rust(tmp_path):
    """SGLang's unified radix cache falls back from the Rust TreeCore to the Python one with only an
    INFO line ("Using the Python TreeCore: <reason>"). Under the commit's own default that is recorded
    with the trial and shown; for a mode that asks for Rust it is a mode change: untestable there."""
    from perfbisect.measure.served import served_from_log

    reason = "PyTorch 2.14.0 is outside the Rust TreeCore support range"
    target = demo(tmp_path, server_env=f'PERFBISECT_EMULATOR_TREE_CORE_FALLBACK = "{reason}"\n',
                  modes={"eagle3": 'env = { SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND = "rust" }\n'})
    progress = Collect()
    with Workspace.open(load_config(target.config), tmp_path / "r.sqlite") as ws:
        runner = TrialRunner(ws, progress)
        commit = ws.repo.resolve(target.bad)
        measured = runner.trial(commit, "baseline", purpose="bisect")  # the commit's default: recorded, measured
        assert measured.status is TrialStatus.OK and measured.summary is not None
        assert measured.server_info["perfbisect"]["served"] == {"tree_core": "python", "tree_core_fallback": reason}
        assert any(f"served by the Python TreeCore (SGLang: {reason})" in w for w in progress.warnings)
        refused = runner.trial(commit, "eagle3", purpose="bisect")
        assert refused.status is TrialStatus.SKIPPED and refused.summary is None
        assert refused.error.startswith("mode not applied: Mode 'eagle3' asks for the Rust TreeCore")
        assert reason in refused.error and "never blamed" in refused.error
    # The lines are read from the server's own log, as SGLang writes them.
    log = tmp_path / "server.log"
    log.write_text("INFO loader: Building sglang.srt.rust_extensions._server with `cargo build --release --locked`\n"
                   f"INFO tree_core_registry: Using the Python TreeCore: {reason}\n")
    assert served_from_log(log).as_json() == {"tree_core": "python", "tree_core_fallback": reason,
                                              "cargo_builds": ["sglang.srt.rust_extensions._server"]}
    assert served_from_log(tmp_path / "missing.log").as_json() == {}


def test_doctor_launch_says_which_tree_core_served_and_errors_on_a_fallback_the_mode_refuses(tmp_path):
    import json

    from tests.cli_runner import run_cli

    reason = "this installation contains neither the Rust TreeCore extension nor its sources"
    target = demo(tmp_path, server_env=f'PERFBISECT_EMULATOR_TREE_CORE_FALLBACK = "{reason}"\n',
                  modes={"baseline": 'env = { SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND = "rust" }\n'})
    done = run_cli("doctor", "--launch", "--json", "-c", str(target.config), "--db", str(tmp_path / "r.sqlite"))
    findings = json.loads(done.stdout)
    served = [f for f in (findings["findings"] if isinstance(findings, dict) else findings) if f["check"] == "served by"]
    assert served == [{"check": "served by", "state": "error",
                       "message": f"served by the Python TreeCore (SGLang: {reason})"}], done.stdout
    assert done.returncode != 0
