"""The post-`git pull` hook with real git: a bare upstream, a clone with the hook, the demo emulator.

What a pull must never suffer (a broken perfbisect, a bad config, a busy GPU) is tested without
measuring anything; the end-to-end tests (marked slow) let the detached check find the planted
slowdown after a plain `git pull` and after `git pull --rebase`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfbisect.hook import check, checkqueue, hook
from perfbisect.hook.checkqueue import CheckQueue, Entry, coalesce
from perfbisect.config import load_config
from perfbisect.errors import ConfigError
from tests.hook_setup import git, make_pull_setup
from tests.cli_runner import run_command

USER_HOOK = b"#!/bin/sh\n# the user's own hook\nprintf '%s|' \"$@\" >> \"$0.ran\"\ncat >> \"$0.stdin\"\nexit 3\n"


def wait_until(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def user_hook(directory: Path, name: str, mode: int = 0o750) -> bytes:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(USER_HOOK)
    path.chmod(mode)
    return USER_HOOK


# ------------------------------------------------------------------------------------------------
# install / uninstall / status


def test_install_chains_existing_hooks_and_uninstall_restores_them_byte_for_byte(tmp_path):
    setup = make_pull_setup(tmp_path)
    git(setup.clone, "config", "core.hooksPath", "my-hooks")  # relative: to the worktree root
    hooks = setup.clone / "my-hooks"
    user_hook(hooks, "post-merge", 0o750)
    (hooks / "shared-rewrite").write_bytes(b"#!/bin/sh\nexit 0\n")
    (hooks / "shared-rewrite").chmod(0o755)
    os.symlink("shared-rewrite", hooks / "post-rewrite")  # a hook manager's symlink
    before = {p.name: (p.read_bytes(), os.lstat(p).st_mode, os.readlink(p) if p.is_symlink() else None)
              for p in hooks.iterdir()}

    lines = hook.install(setup.clone, setup.config, python=sys.executable)
    assert any("kept the existing hook" in line for line in lines)
    assert hook.is_ours(hooks / "post-merge") and hook.is_ours(hooks / "post-rewrite")
    assert (hooks / "post-merge.perfbisect-orig").read_bytes() == USER_HOOK
    assert not (setup.clone / ".git" / "hooks" / "post-merge").exists()
    state = hook.status(setup.clone)
    assert state["works"], state["problems"]
    assert [h["chained"] is not None for h in state["hooks"]] == [True, True]
    hook.install(setup.clone, setup.config, python=sys.executable)  # again: ours is replaced, the original kept
    assert (hooks / "post-merge.perfbisect-orig").read_bytes() == USER_HOOK

    hook.uninstall(setup.clone)
    after = {p.name: (p.read_bytes(), os.lstat(p).st_mode, os.readlink(p) if p.is_symlink() else None)
             for p in hooks.iterdir()}
    assert after == before


def test_uninstall_without_an_original_leaves_no_hook(tmp_path):
    setup = make_pull_setup(tmp_path)
    hook.install(setup.clone, setup.config, python=sys.executable)
    hook.uninstall(setup.clone)
    hooks = setup.clone / ".git" / "hooks"
    assert not any(p.name.startswith(("post-merge", "post-rewrite")) for p in hooks.iterdir())
    assert not hook.status(setup.clone)["works"]


def test_the_hook_script_is_shipped_and_posix_sh():
    from perfbisect.resources import data_dir

    script = data_dir("hooks") / hook.TEMPLATE
    assert script.read_text().startswith("#!/bin/sh\n")
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert '"hooks" = "perfbisect/_data/hooks"' in pyproject


def test_hook_values_are_quoted_never_interpreted(tmp_path):
    text = hook.render("post-merge", "/opt/py'$(touch x)/bin/python", tmp_path / "a b;$(x)" / "c.toml", tmp_path)
    out = subprocess.run(["sh", "-c", text.split("\norig=")[0] + '\nprintf "%s\\n" "$PB_PYTHON" "$PB_CONFIG"'],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.stdout.splitlines() == ["/opt/py'$(touch x)/bin/python", str(tmp_path / "a b;$(x)" / "c.toml")]
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------------------
# a pull never fails or waits


def test_missing_perfbisect_leaves_the_pull_succeeding_with_one_line(tmp_path):
    setup = make_pull_setup(tmp_path)
    user_hook(setup.clone / ".git" / "hooks", "post-merge")
    hook.install(setup.clone, setup.config, python=str(tmp_path / "gone" / "python"))
    pull = git(setup.clone, "pull", "-q", check=False)
    assert pull.returncode == 0, pull.stderr
    said = [line for line in (pull.stdout + pull.stderr).splitlines() if line.startswith("perfbisect:")]
    assert len(said) == 1 and "is missing" in said[0]
    assert git(setup.clone, "rev-parse", "HEAD").stdout.strip() == setup.target.bad
    # The user's own hook still ran, with git's argument (0: not a squash merge).
    assert (setup.clone / ".git" / "hooks" / "post-merge.perfbisect-orig.ran").read_text() == "0|"
    state = hook.status(setup.clone)
    assert not state["works"] and any("missing" in p for p in state["problems"])


def test_broken_perfbisect_and_bad_config_are_said_on_the_next_pull(tmp_path):
    setup = make_pull_setup(tmp_path)
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\necho 'ImportError: perfbisect is broken' >&2\nexit 1\n")
    broken.chmod(0o755)
    hook.install(setup.clone, setup.config, python=str(broken))
    first = setup.push_commit("docs/a.md", "a\n", "docs: a")
    git(setup.clone, "reset", "-q", "--hard", setup.target.bad)
    pull = git(setup.clone, "pull", "-q", check=False)
    assert pull.returncode == 0, pull.stderr
    unseen = setup.state_dir / "unseen"
    wait_until(unseen.exists, what="the failed start to be noted")
    said = unseen.read_text()
    second = setup.push_commit("docs/a.md", "b\n", "docs: b")
    again = git(setup.clone, "pull", "-q", check=False)
    assert again.returncode == 0
    lines = [line for line in (again.stdout + again.stderr).splitlines() if line.startswith("perfbisect:")]
    assert "did not run (exit 1)" in lines[0] and first[:10] in lines[0]
    # Said once: the note was taken; the next one is this pull's own failed start, about its range.
    wait_until(unseen.exists, what="the second failed start to be noted")
    assert unseen.read_text() != said and second[:10] in unseen.read_text()
    assert not hook.status(setup.clone)["works"]

    # A config that no longer loads: the pull still succeeds; the worker's error is in its log.
    setup.config.write_text("[hook]\naction = 'sometimes'\n")
    hook_state = hook.status(setup.clone)
    assert any("does not load" in p for p in hook_state["problems"])


def test_a_busy_gpu_makes_the_check_wait_and_pulls_meanwhile_are_coalesced(tmp_path):
    setup = make_pull_setup(tmp_path, hook_table='idle_s = 0.3\naction = "check"\nmodes = ["eagle3"]\n')
    text = setup.config.read_text().replace("[stats]\n", "[stats]\nmax_trials_per_commit = 2\n")
    setup.config.write_text(text)
    busy = tmp_path / "gpu-busy"
    busy.write_text("4242\n")
    env = {check.FAKE_BUSY_ENV: str(busy)}
    hook.install(setup.clone, setup.config, python=sys.executable)
    git(setup.clone, "reset", "-q", "--hard", setup.target.bad)

    a = setup.push_commit("python/sglang/srt/managers/scheduler.py", "\n\ndef a():\n    pass\n", "scheduler: a")
    first = git(setup.clone, "pull", "-q", env=env)
    assert first.returncode == 0
    # The first pull has no worker lock file yet: the hook says its one line and nothing else.
    assert [line for line in (first.stdout + first.stderr).splitlines() if line] == [
        f"perfbisect: checking {setup.target.bad[:10]}..{a[:10]} in the background (`perfbisect status`)"
    ]
    cfg = load_config(setup.config)
    waiting = wait_until(lambda: (s := checkqueue.status(cfg))["worker"]["phase"] == "waiting" and s, what="the worker to wait")
    assert "GPUs busy (pid 4242" in waiting["worker"]["detail"]
    assert "waiting: GPUs busy (pid 4242" in "\n".join(checkqueue.format_status(waiting))
    b = setup.push_commit("python/sglang/srt/managers/scheduler.py", "\n\ndef b():\n    pass\n", "scheduler: b")
    git(setup.clone, "pull", "-q", env=env)
    c = setup.push_commit("python/sglang/srt/managers/scheduler.py", "\n\ndef c():\n    pass\n", "scheduler: c")
    git(setup.clone, "pull", "-q", env=env)
    time.sleep(1.0)
    state = checkqueue.status(cfg)
    assert state["worker"]["phase"] == "waiting" and setup.history() == []
    assert len(state["queued"]) == 2 and state["next"] == {"old": a, "new": c, "coalesced": 2}
    assert not (setup.cache_dir / "results.sqlite").exists() or _trials(setup) == 0

    busy.unlink()  # the user's job ended
    done = setup.wait_for_checks(2, timeout=600)
    assert (done[0]["old"], done[0]["new"], done[0]["coalesced"]) == (setup.target.bad, a, 1)
    assert (done[1]["old"], done[1]["new"], done[1]["coalesced"]) == (a, c, 2)
    assert b not in (done[1]["old"], done[1]["new"])
    assert all(d["verdict"] in ("same", "inconclusive", "improved", "regressed") and d["report"] for d in done)
    final = json.loads(run_command("status", "--json", "-c", str(setup.config)).stdout)
    assert final["queued"] == [] and final["worker"]["phase"] in ("idle",)
    assert [r["new"] for r in final["results"]] == [c, a]


def _trials(setup) -> int:
    import sqlite3

    con = sqlite3.connect(setup.cache_dir / "results.sqlite")
    try:
        return con.execute("select count(*) from trials").fetchone()[0]
    finally:
        con.close()


# ------------------------------------------------------------------------------------------------
# end to end: the planted slowdown is found after a pull


@pytest.mark.slow
def test_git_pull_checks_the_range_and_bisects_the_planted_regression(tmp_path):
    setup = make_pull_setup(tmp_path)
    user_hook(setup.clone / ".git" / "hooks", "post-merge")
    hook.install(setup.clone, setup.config, python=sys.executable)
    started = time.monotonic()
    pull = git(setup.clone, "pull", check=False)
    assert pull.returncode == 0, pull.stderr
    assert "perfbisect: checking" in pull.stdout + pull.stderr
    assert time.monotonic() - started < 60  # returned long before any check could have finished
    (result,) = setup.wait_for_checks(1)
    assert result["verdict"] == "regressed" and result["culprit"] == setup.target.planted
    assert (result["old"], result["new"]) == (setup.target.good, setup.target.bad)
    assert result["mode"] == "eagle3" and result["bisection"] and Path(result["report"]).exists()
    assert result["comparisons"]["eagle3"]["verdict"] == "regressed"
    assert (setup.clone / ".git" / "hooks" / "post-merge.perfbisect-orig.ran").exists()
    status = run_command("status", "-c", str(setup.config))
    assert f"culprit {setup.target.planted[:10]}" in status.stdout and "report:" in status.stdout
    # The next pull prints the result once (its own check waits on a busy GPU and is stopped here).
    setup.push_commit("docs/x.md", "x\n", "docs: x")
    (tmp_path / "busy").write_text("1\n")
    following = git(setup.clone, "pull", "-q", env={check.FAKE_BUSY_ENV: str(tmp_path / "busy")})
    assert "regressed [eagle3]" in following.stdout + following.stderr
    stop_worker(setup)


def stop_worker(setup) -> None:
    import signal

    cfg = load_config(setup.config)
    pid = wait_until(lambda: checkqueue.status(cfg)["worker"]["pid"], what="the worker")
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: checkqueue.status(cfg)["worker"]["pid"] is None, what="the worker to stop")


@pytest.mark.slow
def test_git_pull_rebase_runs_post_rewrite_and_finds_the_planted_regression(tmp_path):
    setup = make_pull_setup(tmp_path)
    user_hook(setup.clone / ".git" / "hooks", "post-rewrite")
    local = setup.clone / "docs" / "local.md"
    local.parent.mkdir(exist_ok=True)
    local.write_text("my notes\n")
    git(setup.clone, "add", "-A")
    git(setup.clone, "commit", "-qm", "docs: my local notes")
    mine = git(setup.clone, "rev-parse", "HEAD").stdout.strip()
    hook.install(setup.clone, setup.config, python=sys.executable)
    pull = git(setup.clone, "pull", "--rebase", check=False)
    assert pull.returncode == 0, pull.stderr
    new = git(setup.clone, "rev-parse", "HEAD").stdout.strip()
    ran = setup.clone / ".git" / "hooks" / "post-rewrite.perfbisect-orig"
    assert Path(f"{ran}.ran").read_text() == "rebase|"
    assert Path(f"{ran}.stdin").read_text().split()[:2] == [mine, new]  # the rewritten list reached it
    (result,) = setup.wait_for_checks(1)
    # ORIG_HEAD (the local commit) is not an ancestor of the rebased HEAD: checked from the merge base.
    assert (result["old"], result["new"]) == (setup.target.good, new)
    assert result["verdict"] == "regressed" and result["culprit"] == setup.target.planted


# ------------------------------------------------------------------------------------------------
# pieces


def test_coalescing_takes_old_of_the_earliest_and_new_of_the_latest(tmp_path):
    q = CheckQueue(tmp_path)
    assert q.take() is None
    q.append("a" * 40, "b" * 40)
    q.append("c" * 40, "d" * 40)
    with open(tmp_path / "queue", "a") as fh:
        fh.write("not a line\n" + "e" * 40 + " " + "f" * 40)  # junk is skipped, a torn line waits
    job = q.take()
    assert (job.old, job.new, job.coalesced) == ("a" * 40, "d" * 40, 2)
    assert len(q.waiting()) == 0  # taken by this (live) worker: being checked, not waiting
    assert q.take() == job  # not yet answered: still there for a worker that takes again (one killed mid-check)
    q.done(job)
    assert q.take() is None and len(q.waiting()) == 0
    with open(tmp_path / "queue", "a") as fh:
        fh.write(" 1 post-merge\n")
    assert [(e.old, e.new) for e in q.waiting()] == [("e" * 40, "f" * 40)]
    assert coalesce([Entry("1111", "2222", 0, ""), Entry("3333", "4444", 1, "")]).old == "1111"


def test_wait_for_idle_needs_the_gpus_free_for_idle_s(tmp_path, monkeypatch):
    busy = tmp_path / "busy"
    busy.write_text("77\n")
    monkeypatch.setenv(check.FAKE_BUSY_ENV, str(busy))
    now = [0.0]
    said = []

    def sleep(s):
        now[0] += s
        if now[0] >= 3 and busy.exists():
            busy.unlink()

    check.wait_for_idle(10, said.append, poll_s=1, clock=lambda: now[0], sleep=sleep)
    assert now[0] >= 13 and "GPUs busy (pid 77" in said[0]
    assert any("GPUs free for" in s for s in said)


def test_hook_config_is_validated(tmp_path):
    cfg = tmp_path / "perfbisect.toml"
    base = '[server]\ncommand = ["x", "{port}"]\n'
    cfg.write_text(base + '[hook]\naction = "check"\nidle_s = 5\nnotify_command = ["notify-send", "{line}"]\n'
                   'webhook_url = "http://127.0.0.1:9/x"\n')
    hc = load_config(cfg).hook
    assert (hc.action, hc.idle_s, hc.notify_command) == ("check", 5.0, ("notify-send", "{line}"))
    # A plain string is refused (issue #23): the docs say argument list, and nothing is split like a shell.
    for bad in ('action = "always"', "idle_s = -1", 'modes = ["nope"]', "colour = 1", 'notify_command = "notify-send {line}"'):
        cfg.write_text(base + f"[hook]\n{bad}\n")
        with pytest.raises(ConfigError):
            load_config(cfg)


def test_notification_failures_never_break_the_check(tmp_path):
    import http.server
    import threading

    from perfbisect.hook.notify import notify, summary_line

    got = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *a):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    result = {"old": "a" * 40, "new": "b" * 40, "verdict": "regressed", "culprit": "c" * 40, "effect_pct": -12.3,
              "mode": "eagle3", "report": "/r.html", "culprit_subject": "evil\x1b[2Jsubject"}
    line = summary_line(result)
    assert "\x1b" not in line and "-12.3%" in line and "report: /r.html" in line
    out = tmp_path / "cmd-out"
    warned = []
    problems = notify(result, line, f"http://127.0.0.1:{server.server_address[1]}/hook",
                      ["sh", "-c", 'printf "%s %s" "$1" "$PERFBISECT_CULPRIT" > "$2"', "sh", "{verdict}", str(out)], warned.append)
    server.shutdown()
    assert problems == [] and got[0]["verdict"] == "regressed" and got[0]["culprit"] == "c" * 40
    assert got[0]["report"] == "/r.html" and got[0]["effect_pct"] == -12.3
    assert out.read_text() == "regressed " + "c" * 40
    problems = notify(result, line, "http://127.0.0.1:9/closed", ["sh", "-c", "exit 5"], warned.append)
    assert len(problems) == 2 and "exited 5" in problems[1] and warned[-2:] == problems
    assert notify(result, line, None, [str(tmp_path / "no-such-command")], warned.append)[0].startswith("notify command")


def test_a_hook_installed_before_the_package_layout_still_reaches_the_worker(tmp_path):
    """Hooks written before perfbisect's modules moved into packages run `python -m perfbisect.hookworker`:
    that path still runs the worker (same answer as the new path), so an earlier install keeps working."""
    missing = tmp_path / "no-such.toml"
    old = subprocess.run([sys.executable, "-m", "perfbisect.hookworker", str(missing), str(tmp_path / "state")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    new = subprocess.run([sys.executable, "-m", "perfbisect.hook.hookworker", str(missing), str(tmp_path / "state")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert old.returncode == new.returncode != 0
    assert "No config file at" in old.stderr and old.stderr == new.stderr


def test_a_worker_killed_mid_check_leaves_its_range_for_the_next_pull(tmp_path):
    """SIGKILL of the background worker while it checks (here: waiting for the GPUs, the range taken) loses nothing:
    the next pull's worker checks that range together with the new one, and names the planted regression."""
    import signal

    setup = make_pull_setup(tmp_path, hook_table='idle_s = 0.3\n')
    busy = tmp_path / "gpu-busy"
    busy.write_text("4242\n")
    hook.install(setup.clone, setup.config, python=sys.executable)
    assert git(setup.clone, "pull", "-q", env={check.FAKE_BUSY_ENV: str(busy)}).returncode == 0
    cfg = load_config(setup.config)
    waiting = wait_until(lambda: (s := checkqueue.status(cfg))["worker"]["phase"] == "waiting" and s, what="the worker to wait")
    pid = waiting["worker"]["pid"]
    assert waiting["queued"] == []  # the pulled range is the worker's, being checked
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not _alive(pid), what="the worker to die")
    assert setup.history() == []
    assert [e["new"] for e in checkqueue.status(cfg)["queued"]] == [setup.target.bad]  # waiting again, not lost
    busy.unlink()
    docs = setup.push_commit("docs/y.md", "y\n", "docs: y")
    assert git(setup.clone, "pull", "-q").returncode == 0
    (result,) = setup.wait_for_checks(1, timeout=600)
    assert (result["old"], result["new"], result["coalesced"]) == (setup.target.good, docs, 2)
    assert result["verdict"] == "regressed" and result["culprit"] == setup.target.planted
    assert json.loads(run_command("status", "--json", "-c", str(setup.config)).stdout)["queued"] == []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours counts as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return False


def test_the_result_line_reaches_the_terminal_inert(tmp_path):
    """What the next pull prints (a culprit's subject, a path) carries no escape sequence: written inert, and the
    hook filters what an older writer may have left."""
    q = CheckQueue(tmp_path / "q")
    q.set_line("perfbisect: 1..2 regressed · culprit abc \"\x1b[2J\x1b]0;pwned\x07 subject\u202e\"")
    written = (tmp_path / "q" / "unseen").read_text()
    assert "\x1b" not in written and "\x07" not in written and "\u202e" not in written and "subject" in written
    setup = make_pull_setup(tmp_path / "pull")
    hook.install(setup.clone, setup.config, python=sys.executable)
    setup.state_dir.mkdir(parents=True, exist_ok=True)
    (setup.state_dir / "unseen").write_text("perfbisect: old line \x1b[31mred\x1b[0m \x1b]0;title\x07 end\n")
    busy = tmp_path / "busy"
    busy.write_text("4242\n")
    pull = git(setup.clone, "pull", "-q", env={check.FAKE_BUSY_ENV: str(busy)})
    said = pull.stdout + pull.stderr
    assert "perfbisect: old line" in said and "end" in said and "\x1b" not in said and "\x07" not in said
    stop_worker(setup)


def test_hook_status_reads_back_a_config_path_holding_a_newline(tmp_path):
    """A config path may hold a newline (shell-quoted in the hook): `hook status` reads the hook as the shell does."""
    from tests.hook_setup import make_pull_setup as _setup

    setup = _setup(tmp_path / "s")
    odd = tmp_path / "odd\ndir"
    odd.mkdir()
    config = odd / "perfbisect.toml"
    config.write_text(setup.config.read_text())
    hook.install(setup.clone, config, python=sys.executable)
    data = hook.status(setup.clone)
    assert data["config"] == str(config) and data["works"], data["problems"]
    text = (hook.hooks_dir(setup.clone) / "post-merge").read_text()
    out = subprocess.run(["sh", "-c", text.split("\norig=")[0] + '\nprintf "%s" "$PB_CONFIG"'], capture_output=True, text=True)
    assert out.stdout == str(config)  # and the shell reads the same path


def test_hook_status_names_a_hook_that_still_starts_the_worker_by_its_older_path(tmp_path):
    """A hook written before the package layout reaches the worker through the perfbisect.hookworker shim, which is
    removed in perfbisect 0.3: `hook status` says so, and that installing again fixes it."""
    setup = make_pull_setup(tmp_path)
    hook.install(setup.clone, setup.config, python=sys.executable)
    path = hook.hooks_dir(setup.clone) / "post-merge"
    text = path.read_text()
    assert "-m perfbisect.hook.hookworker" in text
    path.write_text(text.replace("-m perfbisect.hook.hookworker", "-m perfbisect.hookworker"))
    problems = hook.status(setup.clone)["problems"]
    old = [p for p in problems if p.startswith("post-merge ")]
    assert len(old) == 1 and "python -m perfbisect.hookworker, removed in perfbisect 0.3" in old[0], problems
    assert "run `perfbisect hook install` again" in old[0]
    assert not any("post-rewrite" in p and "0.3" in p for p in problems)  # the current one is not named
