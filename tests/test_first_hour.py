"""A new user's first hour (issue #49): the advised check checks, words of the target kind, one message where
nothing was measured, answers scripts can read, and a CLI that behaves as git's does. Real repositories, real
command subprocesses, the CLI through its one error boundary."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from perfbisect.report import words
from perfbisect.report.costs import search_status_line

from .cli_runner import run_cli, run_command
from .repo_factory import RepoFactory, command_config


def _config(dir: Path, repo: Path, bench: str, extra: str = "", workload: str = "") -> Path:
    (dir / "bench.py").write_text(bench)
    return command_config(dir, repo, json.dumps(["{python}", str(dir / "bench.py")]), workload + extra)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    r = RepoFactory(tmp_path_factory.mktemp("first-hour") / "proj")
    shas = [r.commit(f"c{i} rate {rate}", {"rate.txt": f"{rate}\n", f"src/m{i}.py": f"x = {i}\n"})
            for i, rate in enumerate([100, 100, 100, 80, 80])]
    return r, shas


GOOD_BENCH = "import json, pathlib\nprint(json.dumps({'ops_per_s': float(pathlib.Path('rate.txt').read_text())}))\n"


@pytest.mark.parametrize("bench, state, words", [
    (GOOD_BENCH, "ok", "ops_per_s = 80.00 ops/s (higher is better)"),
    ("import json\nprint(json.dumps({'ops': 1}))\n", "error", "without the key 'ops_per_s'"),
    ("import json\nprint(json.dumps({'ops_per_s': 0}))\n", "error", "came back as 0"),
    ("raise SystemExit('boom')\n", "error", "exited with status 1"),
    ("import time\ntime.sleep(30)\n", "error", "ran longer than workload.request_timeout_s"),
    ("import sys\nsys.exit(125)\n", "warn", "cannot be tested"),
], ids=["ok", "missing-key", "zero", "crash", "timeout", "untestable"])
def test_doctor_launch_runs_a_command_workload_once_and_shows_what_it_parsed(project, tmp_path, bench, state, words):
    r, shas = project
    config = _config(tmp_path, r.path, bench, workload="request_timeout_s = 2\n")
    proc = run_cli("doctor", "--launch", "--json", "-c", str(config), "--db", str(tmp_path / "d.sqlite"))
    found = [f for f in json.loads(proc.stdout)["findings"] if f["check"].startswith("workload at")]
    assert len(found) == 1 and found[0]["check"] == f"workload at HEAD {shas[-1][:10]}", found
    assert found[0]["state"] == state and words in " ".join(found[0]["message"].split()), found
    assert proc.returncode == (2 if state == "error" else 0)
    with sqlite3.connect(tmp_path / "d.sqlite") as con:
        assert con.execute("SELECT count(*) FROM trials").fetchone() == (0,)  # nothing stored


def test_doctor_launch_with_a_range_runs_the_command_at_both_endpoints(project, tmp_path):
    r, shas = project
    config = _config(tmp_path, r.path, GOOD_BENCH)
    proc = run_cli("doctor", "--launch", "--range", f"{shas[0]}..{shas[-2]}", "-c", str(config), "--db", str(tmp_path / "d.sqlite"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = " ".join(proc.stdout.split())
    assert f"workload at HEAD {shas[-1][:10]}: ops_per_s = 80.00 ops/s" in out
    assert f"workload at good endpoint {shas[0][:10]}: ops_per_s = 100.0 ops/s" in out
    assert f"workload at bad endpoint {shas[-2][:10]}: ops_per_s = 80.00 ops/s" in out


def test_a_configuration_that_measures_nothing_is_one_error_and_no_stored_bisection(project, tmp_path):
    r, shas = project
    config = _config(tmp_path, r.path, "raise SystemExit('no such benchmark')\n")
    db = tmp_path / "r.sqlite"
    proc = run_cli("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(db))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "INCONCLUSIVE" not in proc.stdout and "report:" not in proc.stdout, proc.stdout
    said = " ".join(proc.stderr.split())
    assert said.count("No trial produced a measurement") == 1
    hint = said.split("Fix that (")[-1]
    assert hint.startswith(f"run `perfbisect doctor --launch --range {shas[0]}..{shas[-1]}` to run workload.command once")
    assert "server" not in hint
    assert "Pick an endpoint" not in proc.stdout + proc.stderr
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM bisections").fetchone() == (0,)
        assert con.execute("SELECT count(*), max(bisection_id) FROM trials WHERE status = 'failed'").fetchone()[0] >= 1
    listed = run_cli("log", "-c", str(config), "--db", str(db))
    assert "bisection #" not in listed.stdout
    as_json = run_cli("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(db), "--json")
    assert as_json.returncode == 4 and json.loads(as_json.stdout)["verdict"] is None


OLD_PYTHONS = [p for p in (Path("/root/.pyenv/versions/3.7.16/bin/python"), Path("/usr/bin/python3.7"),
                           Path("/root/.pyenv/versions/2.7.18/bin/python")) if p.exists()]


def _stand_in_python_37(dir: Path) -> Path:
    """A stand-in for a Python 3.7 where none is installed (CI): the real probe answer checked below where one is."""
    stub = dir / "python3.7"
    stub.write_text('#!/bin/sh\nif [ "$1" = "-c" ]; then echo 3.7.16; exit 0; fi\necho "PERFBISECT_TOO_OLD 3.7.16"; exit 3\n')
    stub.chmod(0o755)
    return stub


def test_a_target_python_too_old_to_be_read_is_refused_at_plan_and_doctor_with_the_versions_that_work(project, tmp_path):
    r, shas = project
    old = OLD_PYTHONS[0] if OLD_PYTHONS else _stand_in_python_37(tmp_path)
    config = _config(tmp_path, r.path, GOOD_BENCH)
    config.write_text(config.read_text().replace(json.dumps(sys.executable), json.dumps(str(old))))
    plan = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(tmp_path / "p.sqlite"))
    said = " ".join(plan.stderr.split())
    assert plan.returncode == 2 and "needs Python 3.8 or newer" in said and "[target] python" in said, plan.stderr
    run = run_cli("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(tmp_path / "p.sqlite"))
    assert run.returncode == 2 and "needs Python 3.8 or newer" in run.stderr
    doctor = run_cli("doctor", "--json", "-c", str(config), "--db", str(tmp_path / "p.sqlite"))
    found = {f["check"]: f for f in json.loads(doctor.stdout)["findings"]}
    assert found["target interpreter"]["state"] == "error" and "3.8 or newer" in found["target interpreter"]["message"]


@pytest.mark.skipif(not OLD_PYTHONS, reason="no Python older than 3.8 installed here")
@pytest.mark.parametrize("old", OLD_PYTHONS, ids=lambda p: p.parent.parent.name)
def test_the_version_probe_names_a_real_old_python(old):
    from perfbisect.errors import ConfigError
    from perfbisect.measure.versions import python_version_problem, target_versions

    with pytest.raises(ConfigError, match="needs Python 3.8 or newer"):
        target_versions(str(old), timeout_s=60)
    assert "3.8 or newer" in python_version_problem(str(old))
    assert python_version_problem(sys.executable) is None


def test_help_text_keeps_every_bracketed_table_name(tmp_path):
    """Rich markup took `[stats]` for a style and printed "(: metric, ...)": every `[table]` a command's help or
    option help names is in what `--help` prints."""
    import re

    import typer.main

    from perfbisect.cli.main import cli

    def walk(group, prefix=""):
        for name, command in group.commands.items():
            if getattr(command, "commands", None) is not None:
                yield from walk(command, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", command

    checked = 0
    for name, command in walk(typer.main.get_command(cli)):
        texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        wanted = {m.group(1) for t in texts for m in re.finditer(r"\\?\[([A-Za-z_][\w.]*)\]", t)}
        if not wanted:
            continue
        shown = run_cli(*name.split(), "--help", env={"COLUMNS": "400"}).stdout
        flat = " ".join(shown.split())
        missing = [w for w in wanted if f"[{w}]" not in flat]
        assert not missing, (name, missing)
        checked += len(wanted)
    assert checked >= 3  # [stats], [environment], [store] ... are named somewhere


def test_a_mistyped_db_directory_is_refused_not_created(project, tmp_path):
    r, shas = project
    config = _config(tmp_path, r.path, GOOD_BENCH)
    wrong = tmp_path / "reslts" / "r.sqlite"
    proc = run_cli("log", "-c", str(config), "--db", str(wrong))
    assert proc.returncode == 2 and "does not exist" in proc.stderr and str(wrong.parent) in proc.stderr
    assert not wrong.parent.exists()


def test_commands_work_from_a_subdirectory_of_the_repository_as_git_does(project, tmp_path):
    r, shas = project
    repo = tmp_path / "own"
    RepoFactory(repo).commit("c0", {"src/deep/x.py": "x = 1\n", "rate.txt": "100\n"})
    (repo / "perfbisect.toml").write_text(_config(tmp_path, repo, GOOD_BENCH).read_text().replace(
        json.dumps(str(repo)), '"."'))
    proc = run_cli("doctor", "--json", cwd=repo / "src" / "deep", env={"PERFBISECT_CONFIG": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = {f["check"]: f for f in json.loads(proc.stdout)["findings"]}
    assert str(repo / "perfbisect.toml") in found["config"]["message"] and found["target repo"]["state"] == "ok"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    missing = run_cli("plan", "good=HEAD~1", "bad=HEAD", cwd=outside, env={"PERFBISECT_CONFIG": ""})
    assert missing.returncode == 2 and "perfbisect.toml" in missing.stderr


# --- the status line (issue #49, 5 and 6): seeded engine runs, no timing ------------------------------------


def _seeded_statuses(seed: int) -> list:
    """Every status line of one engine run on 32 commits with a −5% step at 8 and a −10% one at 20 (seeded)."""
    import math

    import numpy as np

    from perfbisect.app.bisection import search_status, stepped_back
    from perfbisect.engine.bisect import SearchPolicy
    from perfbisect.engine.observations import Done
    from perfbisect.engine.stats import NoiseModel
    from perfbisect.model import Observation
    from perfbisect.settings import StatsConfig

    cs = [f"{j:02d}" + "ab" * 19 for j in range(32)]
    settings = StatsConfig()
    policy = SearchPolicy(cs, settings, NoiseModel.prior(5.0))
    rng = np.random.default_rng(seed)
    obs, last, out = [], "", []
    while True:
        act = policy.next(obs)
        if isinstance(act, Done):
            return out
        again = stepped_back(last, act.phase)
        last = act.phase
        out.append((act, search_status(1, act, len(obs), settings, 20, 100.0, 30.0, again=again)))
        j = cs.index(act.commit)
        level = math.log(100) + (math.log(0.9) if j >= 20 else 0) + (math.log(0.95) if j >= 8 else 0)
        obs.append(Observation(act.commit, level + float(rng.normal(0, 0.03)), seq=len(obs)))


@pytest.mark.parametrize("seed", [0, 1])
def test_the_status_line_says_what_a_check_checks_how_many_trials_it_needs_and_why_a_phase_steps_back(seed):
    statuses = _seeded_statuses(seed)
    checks = [(a, s) for a, s in statuses if a.phase in ("second-change check", "confirming")]
    assert checks
    for act, status in checks:
        assert words.check_text(act) and words.check_text(act) in search_status_line(status)
        if act.needs:
            assert f"~{act.needs} more trial" in search_status_line(status)
    assert any(a.needs for a, _ in checks)  # at least one check could say how many trials it needs
    from perfbisect.app.bisection import PHASES

    for (before, _), (act, status) in zip(statuses, statuses[1:]):
        if PHASES.index(act.phase) < PHASES.index(before.phase):
            assert status.again and f"{act.phase} again" in search_status_line(status)
        else:
            assert not status.again


def test_no_best_commit_is_shown_while_no_change_is_likeliest():
    statuses = _seeded_statuses(0)
    early = [s for a, s in statuses if a.p_none is not None and a.p is not None and a.p_none >= a.p * (1 - a.p_none)]
    assert early
    for status in early:
        assert "likeliest: no change" in search_status_line(status) and "best:" not in search_status_line(status)


def test_the_eta_is_a_floor_a_ceiling_or_an_estimate_and_never_a_question_once_a_trial_is_timed():
    from perfbisect.engine import cost

    def status(**kw):
        base = dict(bisection_id=1, trial=30, max_trials=120, expected=20, phase="second-change check",
                    commit="abc1234567", best="abc1234567", p=0.99, elapsed_s=600.0, trial_s=120.0)
        return cost.SearchStatus(**{**base, **kw})

    assert "ETA ≥ 12m" in search_status_line(status(needs=6))  # the check's trials: a floor
    assert "ETA ≤ 3h02m" in search_status_line(status())  # past the estimate, nothing to floor it: the budget's ceiling
    assert "ETA ~" in search_status_line(status(phase="locating", trial=5))
    assert "ETA ?" in search_status_line(status(trial_s=None))  # before any trial is timed
    for kw in ({}, {"needs": 1}, {"trial": 119}, {"phase": "locating", "trial": 19}):
        assert "ETA ?" not in search_status_line(status(**kw))


def test_lower_is_better_is_said_and_times_read_in_their_unit(tmp_path):
    from perfbisect.metrics import Metric, readable, signed

    assert signed(0.003705, "s") == "+3.71 ms" and signed(-0.0000190, "s") == "-19.0 µs"
    assert readable(1500.0, "ms") == "1.50 s" and signed(-25.31, "ops/s") == "-25.31 ops/s"
    assert Metric("wall_s", "wall_s", "s", False).format(0.002962) == "2.96 ms"
    r = RepoFactory(tmp_path / "proj")
    shas = [r.commit(f"c{i}", {"t.txt": ("0.0037" if i >= 4 else "0.0030") + "\n", f"f{i}.txt": f"{i}\n"}) for i in range(7)]
    bench = "import json, pathlib\nprint(json.dumps({'wall_s': float(pathlib.Path('t.txt').read_text())}))\n"
    config = _config(tmp_path, r.path, bench)
    config.write_text(config.read_text().replace('metric = "ops_per_s"', 'metric = "wall_s"\nhigher_is_better = false'))
    proc = run_cli("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(tmp_path / "r.sqlite"))
    assert proc.returncode == 0, proc.stderr
    assert "metric: wall_s (s; lower is better, so + is slower)" in proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    import re

    assert re.search(r"\(\+\d{3} µs, lower is better\)", last) and "0.000" not in last, proc.stdout + proc.stderr
    assert "→ 3.70 ms" in proc.stderr and "0.0037" not in proc.stderr


def test_a_closed_pipe_keeps_the_status_a_command_reached(project, tmp_path):
    """`perfbisect run --fail-on-regression | head -1` must still fail on a regression (the reader going away is
    not an error, but neither is it a pass); a listing or help cut short ends 0."""
    import os

    r, shas = project
    config = _config(tmp_path, r.path, GOOD_BENCH)
    read, write = os.pipe()
    os.close(read)
    try:
        proc = run_command("run", f"good={shas[0]}", f"bad={shas[-1]}", "--fail-on-regression", "-c", str(config),
                           "--db", str(tmp_path / "r.sqlite"), stdout=write)
        listing = run_command("log", "-c", str(config), "--db", str(tmp_path / "r.sqlite"), stdout=write)
    finally:
        os.close(write)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "Cannot write" not in proc.stderr, proc.stderr
    assert listing.returncode == 0 and listing.stderr == "", listing.stderr
