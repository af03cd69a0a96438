"""One benchmark for every commit (issue #49, 1): ``workload.files`` places the working tree's benchmark in every
worktree, the worktree is importable by a benchmark kept outside, and `plan` warns where the file a command names
is not the user's (untracked, edited, missing at an endpoint). Real repositories, real command subprocesses."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from perfbisect.config import load_config
from perfbisect.measure.workload_files import named_files, snapshot

from .cli_runner import run_cli
from .repo_factory import RepoFactory, command_config

BENCH = """\
import json, pathlib
print(json.dumps({"ops_per_s": float(pathlib.Path("rate.txt").read_text()) * SCALE}))
"""


def _config(dir: Path, repo: Path, command: str = '["{python}", "bench.py"]', extra: str = "") -> Path:
    return command_config(dir, repo, command, extra)


def _project(path: Path) -> tuple[RepoFactory, list[str]]:
    """rate.txt over six commits (the fourth the culprit); no bench.py committed anywhere."""
    r = RepoFactory(path)
    shas = [r.commit(f"c{i} rate {rate}", {"rate.txt": f"{rate}\n", f"src/m{i}.py": f"x = {i}\n"})
            for i, rate in enumerate(["100", "100", "100", "75", "75", "75"])]
    return r, shas


def _stored_values(db: Path) -> list[float]:
    with sqlite3.connect(db) as con:
        return [v for (v,) in con.execute("SELECT metric_value FROM runs WHERE metric_value IS NOT NULL AND warmup = 0")]


def test_an_untracked_benchmark_is_named_by_plan_and_runs_at_every_commit_from_workload_files(tmp_path):
    r, shas = _project(tmp_path / "proj")
    (r.path / "bench.py").write_text(BENCH.replace("SCALE", "1.0"))  # written today, never committed
    plain = _config(tmp_path, r.path)
    plan = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(plain), "--db", str(tmp_path / "p.sqlite"))
    assert plan.returncode == 0, plan.stderr
    said = plan.stdout + plan.stderr
    assert "bench.py, which is untracked" in said and "workload.files" in said
    config = _config(tmp_path, r.path, extra='files = ["bench.py"]\n')
    quiet = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(tmp_path / "p.sqlite"))
    assert quiet.returncode == 0 and "untracked" not in quiet.stdout + quiet.stderr
    db = tmp_path / "r.sqlite"
    proc = run_cli("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["verdict"] == "regressed" and result["culprit"] == shas[3], result["explanation"]
    assert set(_stored_values(db)) == {100.0, 75.0}
    with sqlite3.connect(db) as con:
        versions = [json.loads(v) for (v,) in con.execute("SELECT versions FROM trials WHERE versions IS NOT NULL")]
    assert versions and {v.get("workload_files") for v in versions} == {snapshot(load_config(config)).hash}


def test_an_edit_to_a_tracked_benchmark_is_what_runs_when_listed_and_is_warned_of_when_not(tmp_path):
    r, shas = _project(tmp_path / "proj")
    shas.append(r.commit("add bench", {"bench.py": BENCH.replace("SCALE", "1.0")}))
    (r.path / "bench.py").write_text(BENCH.replace("SCALE", "2.0"))  # the user's edit, not committed
    plain = _config(tmp_path, r.path)
    plan = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(plain), "--db", str(tmp_path / "p.sqlite"))
    said = plan.stdout + plan.stderr
    assert "bench.py, which has uncommitted edits" in said
    assert f"missing at the good endpoint {shas[0][:10]}" in said  # added only at the bad endpoint
    db = tmp_path / "m.sqlite"
    measured = run_cli("measure", shas[-1], "-c", str(plain), "--db", str(db))
    assert measured.returncode == 0, measured.stderr
    assert _stored_values(db) == [75.0]  # the commit's own bench.py: the edit does not run
    listed = _config(tmp_path, r.path, extra='files = ["bench.py"]\n')
    for rev in (shas[0], shas[-1]):  # the good endpoint has no bench.py of its own: the working tree's runs there
        proc = run_cli("measure", rev, "-c", str(listed), "--db", str(db))
        assert proc.returncode == 0, proc.stderr
    assert sorted(_stored_values(db)) == [75.0, 150.0, 200.0]
    with sqlite3.connect(db) as con:
        builds = set(con.execute("SELECT commit_sha, build_hash FROM trials"))
    assert len(builds) == 3  # the listed benchmark is part of what was built: never pooled with the commit's own


def test_a_benchmark_kept_outside_the_repository_imports_the_commits_code(tmp_path):
    r = RepoFactory(tmp_path / "proj")
    sha = r.commit("lib", {"mylib.py": "RATE = 42.0\n"})
    outside = tmp_path / "elsewhere" / "bench.py"
    outside.parent.mkdir()
    outside.write_text("import json, mylib\nprint(json.dumps({'ops_per_s': mylib.RATE}))\n")
    config = _config(tmp_path, r.path, command=json.dumps(["{python}", str(outside)]))
    assert named_files(load_config(config)) == []  # outside the repository: not a file of it to warn about
    db = tmp_path / "o.sqlite"
    proc = run_cli("measure", sha, "-c", str(config), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert _stored_values(db) == [42.0]


def test_the_snapshot_is_taken_once_and_keyed_by_content(tmp_path):
    r = RepoFactory(tmp_path / "proj")
    r.commit("c0", {"rate.txt": "1\n"})
    (r.path / "benchmarks").mkdir()
    (r.path / "benchmarks" / "b.py").write_text("print(1)\n")
    (r.path / "benchmarks" / "data.json").write_text("{}\n")
    config = load_config(_config(tmp_path, r.path, command='["{python}", "-m", "benchmarks.b"]', extra='files = ["benchmarks"]\n'))
    assert named_files(config) == ["benchmarks/b.py"]
    first = snapshot(config)
    assert first.paths == ("benchmarks/b.py", "benchmarks/data.json")
    (r.path / "benchmarks" / "b.py").write_text("print(2)\n")  # an edit after the snapshot reaches no placed copy
    worktree = tmp_path / "wt"
    worktree.mkdir()
    first.place(worktree)
    assert (worktree / "benchmarks" / "b.py").read_text() == "print(1)\n"
    second = snapshot(config)
    assert second.hash != first.hash and snapshot(config).hash == second.hash


def test_workload_files_that_are_not_paths_of_the_repository_are_config_errors(tmp_path):
    r, shas = _project(tmp_path / "proj")
    for entry, words in [("../bench.py", "not a path inside the repository"), ("/tmp/bench.py", "not a path inside"),
                         ("nothere.py", "not in your working tree")]:
        config = _config(tmp_path, r.path, extra=f"files = [{json.dumps(entry)}]\n")
        proc = run_cli("measure", shas[0], "-c", str(config), "--db", str(tmp_path / "e.sqlite"))
        assert proc.returncode == 2, (entry, proc.stdout, proc.stderr)
        assert words in proc.stderr and "workload.files" in proc.stderr


def test_doctor_names_an_untracked_benchmark_and_an_edited_one(tmp_path):
    r, shas = _project(tmp_path / "proj")
    (r.path / "bench.py").write_text(BENCH.replace("SCALE", "1.0"))
    config = _config(tmp_path, r.path)
    proc = run_cli("doctor", "--json", "-c", str(config), "--db", str(tmp_path / "d.sqlite"))
    found = [f for f in json.loads(proc.stdout)["findings"] if f["check"] == "workload files"]
    assert [f["state"] for f in found] == ["warn"] and "untracked" in found[0]["message"], found
    listed = _config(tmp_path, r.path, extra='files = ["bench.py"]\n')
    proc = run_cli("doctor", "--json", "-c", str(listed), "--db", str(tmp_path / "d.sqlite"))
    found = [f for f in json.loads(proc.stdout)["findings"] if f["check"] == "workload files"]
    assert [f["state"] for f in found] == ["ok"] and "bench.py from your working tree" in found[0]["message"], found


def test_the_benchmark_wins_where_a_commit_disagrees_about_file_and_folder(tmp_path):
    r = RepoFactory(tmp_path / "proj")
    r.commit("c0", {"rate.txt": "1\n"})
    (r.path / "bench").mkdir()
    (r.path / "bench" / "x").mkdir()
    (r.path / "bench" / "x" / "y.py").write_text("print(1)\n")
    (r.path / "run.py").write_text("print(2)\n")
    config = load_config(_config(tmp_path, r.path, extra='files = ["bench", "./run.py"]\n'))
    snap = snapshot(config)
    worktree = tmp_path / "wt"
    (worktree / "bench").mkdir(parents=True)
    (worktree / "bench" / "x").write_text("a file where the benchmark has a folder\n")
    (worktree / "run.py").mkdir()  # a folder where it has a file
    (worktree / "run.py" / "inner").write_text("\n")
    snap.place(worktree)
    assert (worktree / "bench" / "x" / "y.py").read_text() == "print(1)\n"
    assert (worktree / "run.py").read_text() == "print(2)\n"


def test_the_whole_tree_is_no_workload_file_and_dot_slash_names_one(tmp_path):
    r, shas = _project(tmp_path / "proj")
    (r.path / "bench.py").write_text(BENCH.replace("SCALE", "1.0"))
    for entry in (".", "./"):
        proc = run_cli("measure", shas[0], "-c", str(_config(tmp_path, r.path, extra=f'files = ["{entry}"]\n')),
                       "--db", str(tmp_path / "e.sqlite"))
        assert proc.returncode == 2 and "not a path inside the repository" in proc.stderr, (entry, proc.stderr)
    dotted = _config(tmp_path, r.path, extra='files = ["./bench.py"]\n')
    plan = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(dotted), "--db", str(tmp_path / "p.sqlite"))
    assert plan.returncode == 0 and "untracked" not in plan.stdout + plan.stderr


def test_only_scripts_of_the_repository_are_named(tmp_path):
    r = RepoFactory(tmp_path / "proj")
    r.commit("c0", {"tools/b.py": "print(1)\n", "pkg/__init__.py": "", "pkg/bench.py": "print(1)\n"})
    (r.path / "out.json").write_text("{}\n")  # a leftover output of a manual run
    for command, named in [
        ('["{python}", "-m", "pytest", "-q"]', []),  # an installed module, not this repository's
        ('["{python}", "-m", "pkg.bench"]', ["pkg/bench.py"]),
        ('["{python}", "tools/b.py", "--result-file", "out.json"]', ["tools/b.py"]),
        ('["bash", "-c", "python tools/b.py"]', []),  # a shell snippet, not a path
        ('["{python}", "{worktree}/tools/b.py", "-o", "out.json"]', ["tools/b.py"]),
    ]:
        assert named_files(load_config(_config(tmp_path, r.path, command=command))) == named, command


def test_a_bisection_keeps_the_benchmark_it_started_with(tmp_path):
    """Its hash is stored with the bisection: `resume` and its cluster jobs run that copy, never the working tree's
    of today; a copy gone from the cache is refused, not replaced."""
    from perfbisect.errors import ConfigError
    from perfbisect.app.workspace import Workspace

    r, shas = _project(tmp_path / "proj")
    (r.path / "bench.py").write_text(BENCH.replace("SCALE", "1.0"))
    config = _config(tmp_path, r.path, extra='files = ["bench.py"]\n')
    db = tmp_path / "r.sqlite"
    assert run_cli("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(db)).returncode == 0
    with sqlite3.connect(db) as con:
        (start,) = con.execute("SELECT search_start FROM bisections").fetchone()
    digest = json.loads(start)["workload_files"]
    (r.path / "bench.py").write_text(BENCH.replace("SCALE", "2.0"))  # edited after the bisection started
    with Workspace.open(load_config(config), db) as ws:
        ws.keep_workload_files(json.loads(start), 1)
        assert ws.workload_files.hash == digest
        assert "* 1.0" in (ws.workload_files.root / "bench.py").read_text()
    import shutil

    shutil.rmtree(tmp_path / "cache" / "workload-files" / digest)
    with Workspace.open(load_config(config), db) as ws, pytest.raises(ConfigError, match="is gone from"):
        ws.keep_workload_files(json.loads(start), 1)
