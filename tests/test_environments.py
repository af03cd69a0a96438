"""Each commit runs in the environment its own requirements resolve to: uv resolves a commit's pyproject into a
lock, one complete venv per lock, verified against it; real uv, real wheels from a wheelhouse written here (no
network), real git history."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfbisect.config import load_config
from perfbisect.demo.wheels import write_wheel
from perfbisect.errors import ConfigError, EnvironmentBuildError
from perfbisect.git.requirements import read_requirements
from perfbisect.measure.environments import moves
from perfbisect.measure.resolver import parse_lock, resolution_date
from perfbisect.app.workspace import Workspace
from perfbisect.app import planning
from tests.cli_runner import run_command
from tests.repo_factory import RepoFactory, target_table

PY = f"{sys.version_info.major}.{sys.version_info.minor}"


def pyproject(deps: list[str], *, version: str = "0.1.0", requires_python: str = ">=3.10", extras: str = "",
              tool_uv: str = "", description: str = "a serving engine") -> str:
    return (f'[project]\nname = "engine"\nversion = "{version}"\ndescription = "{description}"\n'
            f'requires-python = "{requires_python}"\ndependencies = {json.dumps(deps)}\n'
            + (f"\n[project.optional-dependencies]\n{extras}\n" if extras else "")
            + (f"\n{tool_uv}\n" if tool_uv else ""))


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    """kern 1.0 needs rt==1.0, kern 1.1 needs rt==2.0 (a transitive pin that moves with it); fi[cu13] pulls cu13-libs;
    util has 1.0 and 1.2 (a range resolves to the newest)."""
    w = tmp_path / "wheels"
    write_wheel(w, "kern", "1.0", requires=("rt==1.0",))
    write_wheel(w, "kern", "1.1", requires=("rt==2.0",))
    write_wheel(w, "rt", "1.0")
    write_wheel(w, "rt", "2.0")
    write_wheel(w, "fi", "0.6", requires=('cu13-libs==13.0 ; extra == "cu13"',), extras=("cu13",))
    write_wheel(w, "cu13-libs", "13.0")
    write_wheel(w, "util", "1.0")
    write_wheel(w, "util", "1.2")
    return w


def config_for(tmp_path: Path, repo: Path, wheels: Path, extra: str = "") -> Path:
    path = tmp_path / "perfbisect.toml"
    path.write_text(f"""
{target_table(repo, tmp_path / "cache")}
[environment]
requirements = "python/pyproject.toml"
find_links = [{json.dumps(str(wheels))}]
no_index = true
offline = true
{extra}

[workload]
kind = "command"
command = ["{{python}}", "-c", "print('{{\\"ops_per_s\\": 1}}')"]
metric = "ops_per_s"
""")
    return path


def history(tmp_path: Path) -> tuple[RepoFactory, list[str]]:
    """Five commits: base; a version-only bump (same requirements); `util>=1.1` (same lock: util 1.2 either way);
    kern 1.0 → 1.1 (rt 1.0 → 2.0 moves with it); a code change."""
    r = RepoFactory(tmp_path / "target")
    deps = ["kern==1.0", "fi[cu13]==0.6", "util>=1.0"]
    shas = [r.commit("base", {"python/pyproject.toml": pyproject(deps), "python/engine/x.py": "a = 1\n"})]
    shas.append(r.commit("bump version", {"python/pyproject.toml": pyproject(deps, version="0.2.0", description="faster")}))
    deps[2] = "util>=1.1"
    shas.append(r.commit("raise util's floor", {"python/pyproject.toml": pyproject(deps, version="0.2.0")}))
    deps[0] = "kern==1.1"
    shas.append(r.commit("[Dependency] kern 1.1", {"python/pyproject.toml": pyproject(deps, version="0.2.0")}))
    shas.append(r.commit("code", {"python/engine/x.py": "a = 2\n"}))
    return r, shas


def interpreter_packages(python: str) -> list:
    out = subprocess.run([python, "-c", "import json\nfrom importlib import metadata\n"
                          "print(json.dumps(sorted((d.metadata['Name'], d.version) for d in metadata.distributions())))"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_a_range_is_grouped_by_lock_and_what_moves_between_locks_is_listed_compiled_first(tmp_path, wheelhouse):
    r, shas = history(tmp_path)
    cfg = load_config(config_for(tmp_path, r.path, wheelhouse))
    with Workspace.open(cfg, tmp_path / "r.sqlite") as ws:
        plan = planning.plan(ws, shas[0], shas[-1], check_patches=False)
        groups = plan.environments
        resolver = ws.environments.resolver
        # Three requirement sets (the version bump reads nothing new), two locks.
        assert len({resolver.key(ws.environments.requirements(s), ws.environments.date_for(s)) for s in shas}) == 3
    assert [g.commits for g in groups] == [tuple(shas[:3]), tuple(shas[3:])]
    first, second = groups
    # The extra pulled its dependency, the range resolved to the newest, the transitive pin came along.
    assert first.packages == {"cu13-libs": "13.0", "fi": "0.6", "kern": "1.0", "rt": "1.0", "util": "1.2"}
    assert second.packages == {**first.packages, "kern": "1.1", "rt": "2.0"}
    assert [m.text() for m in second.moves] == ["kern 1.0 → 1.1", "rt 1.0 → 2.0"]  # kern: compiled, first
    assert not first.built and first.problem is None and second.first_subject == "[Dependency] kern 1.1"
    assert "3 requirement sets" in plan.environments_note and "not resolved here" not in plan.environments_note
    # Resolution is kept: a second plan reads the locks uv wrote, and says the same.
    with Workspace.open(cfg, tmp_path / "r.sqlite") as ws:
        again = planning.plan(ws, shas[0], shas[-1], check_patches=False).environments
    assert [(g.commits, g.packages) for g in again] == [(g.commits, g.packages) for g in groups]


def test_plan_prepare_installs_one_complete_verified_environment_per_lock_and_changes_nothing_of_the_users(tmp_path, wheelhouse):
    r, shas = history(tmp_path)
    cfg_path = config_for(tmp_path, r.path, wheelhouse)
    before = interpreter_packages(sys.executable)
    done = run_command("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(cfg_path), "--prepare", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [p["outcome"].split(" in ")[0] for p in data["prepared"]] == ["built", "built"]
    envs = sorted((tmp_path / "cache" / "envs").glob("*/env.json"))
    assert len(envs) == 2
    for marker, group in zip(sorted(envs, key=lambda p: json.loads(p.read_text())["packages"]["kern"]), data["environments"]):
        python = str(marker.parent / "bin" / "python")
        installed = {normal: version for normal, version in
                     ((n.lower().replace("_", "-"), v) for n, v in interpreter_packages(python))}
        assert installed == group["packages"]  # complete: exactly the lock, nothing of perfbisect's interpreter
        assert json.loads(marker.read_text())["packages"] == group["packages"]
    assert interpreter_packages(sys.executable) == before  # the user's interpreter is untouched
    # Every trial of the range then finds its environment built; a second --prepare builds nothing.
    again = run_command("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(cfg_path), "--prepare")
    assert again.returncode == 0, again.stderr
    assert "prepared: 2 environment groups" in again.stdout and again.stdout.count("  cached") == 2
    assert f"{shas[3][:10]} [Dependency] kern 1.1: 2 packages moved: kern 1.0 → 1.1, rt 1.0 → 2.0" in again.stdout


def test_a_trial_runs_in_its_commits_environment_and_records_which(tmp_path, wheelhouse):
    """The workload reports the kern version its interpreter imports as its metric: 1.0 at the good end, 1.1 at
    the bad one, each from its own environment."""
    import sqlite3

    r, shas = history(tmp_path)
    cfg_path = config_for(tmp_path, r.path, wheelhouse)
    text = cfg_path.read_text()
    start = text.index("command = [")
    end = text.index("\n", start)
    cfg_path.write_text(text[:start] + 'command = ["{python}", "-c", "import json; from importlib import metadata; '
                        "print(json.dumps({'ops_per_s': float(metadata.version('kern'))}))\"]" + text[end:])
    db = tmp_path / "m.sqlite"
    for sha in (shas[0], shas[-1]):
        proc = run_command("measure", sha, "-n", "1", "-c", str(cfg_path), "--db", str(db))
        assert proc.returncode == 0, proc.stderr
    con = sqlite3.connect(db)
    rows = con.execute("select t.commit_sha, t.versions, r.metric_value from trials t join runs r on r.trial_id = t.id "
                       "where not r.warmup order by t.id").fetchall()
    con.close()
    assert [(sha, value) for sha, _, value in rows] == [(shas[0], 1.0), (shas[-1], 1.1)]
    keys = [json.loads(v)["environment"] for _, v, _ in rows]
    assert len(set(keys)) == 2 and all(json.loads(v)["environment_packages"] == 5 for _, v, _ in rows)
    assert {p.parent.name for p in (tmp_path / "cache" / "envs").glob("*/env.json")} == set(keys)


def test_a_commit_whose_requires_python_excludes_the_interpreter_is_untestable_at_plan_time(tmp_path, wheelhouse):
    r = RepoFactory(tmp_path / "target")
    good = r.commit("base", {"python/pyproject.toml": pyproject(["util>=1.0"])})
    mid = r.commit("needs a future python", {"python/pyproject.toml": pyproject(["util>=1.0"], requires_python=">=3.99")})
    bad = r.commit("back", {"python/pyproject.toml": pyproject(["util>=1.0"], version="0.3.0")})
    cfg_path = config_for(tmp_path, r.path, wheelhouse)
    done = run_command("plan", f"good={good}", f"bad={bad}", "-c", str(cfg_path))
    assert done.returncode == 0, done.stderr
    assert f"{mid[:10]}  UNTESTABLE: its python/pyproject.toml requires Python >=3.99, and target.python is" in done.stdout
    assert "would be skipped as untestable (never blamed)" in done.stdout
    # At an endpoint: plan says run would refuse, and run refuses before measuring anything.
    refused = run_command("plan", f"good={good}", f"bad={mid}", "-c", str(cfg_path))
    assert refused.returncode == 2 and "The bad endpoint" in refused.stderr and "requires Python >=3.99" in refused.stderr
    db = tmp_path / "r.sqlite"
    run = run_command("run", f"good={good}", f"bad={mid}", "-c", str(cfg_path), "--db", str(db))
    assert run.returncode == 2 and "cannot get its environment" in run.stderr and "Nothing was measured" in run.stderr
    # A trial at that commit is stored as skipped with the reason, never blamed.
    measured = run_command("measure", mid, "-n", "1", "-c", str(cfg_path), "--db", str(db))
    import sqlite3

    con = sqlite3.connect(db)
    (status, error), = con.execute("select status, error from trials").fetchall()
    con.close()
    assert status == "skipped" and error.startswith("environment cannot be made: its python/pyproject.toml requires Python")
    assert "skipped (its environment cannot be made)" in measured.stderr


def test_a_requirement_no_source_has_is_named_with_the_commits_that_need_it(tmp_path, wheelhouse):
    r = RepoFactory(tmp_path / "target")
    good = r.commit("base", {"python/pyproject.toml": pyproject(["kern==1.0"])})
    mid = r.commit("kern 9", {"python/pyproject.toml": pyproject(["kern==9.0"])})
    bad = r.commit("code", {"python/x.py": "a = 1\n"})
    cfg = load_config(config_for(tmp_path, r.path, wheelhouse))
    with Workspace.open(cfg, tmp_path / "r.sqlite") as ws:
        groups = planning.plan(ws, good, bad, check_patches=False).environments
        assert [g.commits for g in groups] == [(good,), (mid, bad)]
        assert groups[1].problem and "kern==9.0" in groups[1].problem and "cannot be resolved" in groups[1].problem
        with pytest.raises(EnvironmentBuildError, match="kern==9.0"):
            ws.environments.ensure(mid)


def test_resolution_date_policies_and_the_retired_pin_keys():
    assert resolution_date("bad", commit_date="2026-02-19T12:24:05+08:00", bad_date="2026-08-20T14:29:24-07:00") == "2026-08-20T21:29:24Z"
    assert resolution_date("bad", commit_date="2026-02-19T12:24:05+08:00", bad_date=None) == "2026-02-19T04:24:05Z"
    assert resolution_date("commit", commit_date="2026-02-19T12:24:05+08:00", bad_date="2026-08-20T14:29:24-07:00") == "2026-02-19T04:24:05Z"
    assert resolution_date("now", commit_date="2026-02-19T12:24:05+08:00", bad_date=None) == ""
    assert resolution_date("2026-05-01", commit_date="2026-02-19T12:24:05+08:00", bad_date=None) == "2026-05-01T00:00:00Z"
    assert parse_lock("--find-links /w\nkern==1.0\n    # via x\nRT_Lib==2.0 ; sys_platform == 'linux'\nsrc @ file:///s\n") == {
        "kern": "1.0", "rt-lib": "2.0", "src": "@ file:///s"}
    assert [m.text() for m in moves({"torch": "2.9.1", "attrs": "1"}, {"torch": "2.13.0", "aiohttp": "3"})] == [
        "torch 2.9.1 → 2.13.0", "+aiohttp 3", "-attrs 1"]


@pytest.mark.parametrize("body, fragment", [
    ('[build]\npinned_packages = ["sgl-kernel"]\n', "key 'build.pinned_packages' is no longer read"),
    ('[build]\nwheel_dir = "w"\n', "wheel_dir becomes environment.find_links"),
    ('[environment]\nrequirements = "python/pyproject.toml"\nresolve_date = "yesterday"\n', "environment.resolve_date"),
    ('[environment]\nrequirements = "/etc/passwd"\n', "relative to its root"),
])
def test_config_errors_name_the_key_and_the_fix(tmp_path, body, fragment):
    path = tmp_path / "perfbisect.toml"
    path.write_text(f'[target]\nrepo = "."\n[server]\ncommand = ["x"]\n{body}')
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(".", r"\.")):
        load_config(path)


def test_requirement_sets_read_what_resolution_reads():
    base = read_requirements("python/pyproject.toml", pyproject(["a==1"]))
    assert base.problem is None and base.requires_python == ">=3.10"
    assert read_requirements("python/pyproject.toml", pyproject(["a==1"], version="9", description="x")).key == base.key
    assert read_requirements("python/pyproject.toml", pyproject(["a==2"])).key != base.key
    uv_index = '[[tool.uv.index]]\nname = "cu130"\nurl = "https://download.pytorch.org/whl/cu130"\n'
    assert read_requirements("python/pyproject.toml", pyproject(["a==1"], tool_uv=uv_index)).key != base.key
    without = read_requirements("python/pyproject.toml", pyproject(["a"]), ["srt"])  # an extra this commit lacks
    assert without.problem is None and without.extras == () and without.missing_extras == ("srt",)
    dynamic = '[project]\nname = "x"\ndynamic = ["dependencies"]\n'
    assert "dynamic" in read_requirements("python/pyproject.toml", dynamic).problem
    assert "not valid TOML" in read_requirements("python/pyproject.toml", "[project\n").problem
    assert read_requirements("python/pyproject.toml", None).problem == "the commit has no python/pyproject.toml"
    with_extra = read_requirements("python/pyproject.toml", pyproject(["a"], extras='srt = ["b==2"]'), ["srt"])
    assert with_extra.dependencies() == ["a", "b==2"] and with_extra.key != read_requirements(
        "python/pyproject.toml", pyproject(["a"], extras='srt = ["b==2"]')).key


def test_a_culprit_that_moves_the_environment_says_what_moved_and_compare_env_from_measures_the_code_alone(tmp_path, wheelhouse):
    """The workload's metric falls 10% with kern 1.1 (the environment, not the code): the bisection names the
    commit that bumps it and says which packages moved there; the culprit against its parent in the parent's
    environment (`compare --env-from`) is then `same`. The noise is a fixed sequence (seeded, not timed)."""
    r, shas = history(tmp_path)
    cfg_path = config_for(tmp_path, r.path, wheelhouse, extra="")
    counter = tmp_path / "counter"
    script = tmp_path / "bench.py"
    script.write_text(
        "import json, math, pathlib\nfrom importlib import metadata\n"
        f"p = pathlib.Path({str(counter)!r})\nn = int(p.read_text()) + 1 if p.exists() else 1\np.write_text(str(n))\n"
        "value = (2.0 - float(metadata.version('kern'))) * 100 * (1 + 0.004 * math.sin(n * 1.7))\n"
        "print(json.dumps({'ops_per_s': value}))\n")
    text = cfg_path.read_text()
    start = text.index("command = [")
    end = text.index("\n", start)
    cfg_path.write_text(text[:start] + f'command = ["{{python}}", {json.dumps(str(script))}]' + text[end:]
                        + "\n[stats]\nmax_trials_total = 24\n")
    db = tmp_path / "r.sqlite"
    run = run_command("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(cfg_path), "--db", str(db), "--json", timeout=600)
    assert run.returncode in (0, 3), run.stderr
    result = json.loads(run.stdout)
    assert result["verdict"] == "regressed" and result["culprit"] == shas[3], result
    env = result["environment"]
    assert env["parent"] == shas[2] and env["moves"] == ["kern 1.0 → 1.1", "rt 1.0 → 2.0"]
    assert env["split"][1:3] == ["compare", shas[2][:10]] and "--env-from" in env["split"]
    text_run = run_command("log", "-c", str(cfg_path), "--db", str(db))
    assert text_run.returncode == 0
    # The split: the culprit's code in its parent's environment measures what the code alone did (nothing).
    split = run_command(*env["split"][1:], "-c", str(cfg_path), "--db", str(db), "--json", "--max-trials", "4", timeout=600)
    assert split.returncode == 0, split.stderr
    data = json.loads(split.stdout)
    assert data["verdict"] == "same", data
    envs = {p.parent.name for p in (tmp_path / "cache" / "envs").glob("*/env.json")}
    assert len(envs) == 2  # the split built nothing new: both sides ran in the parent's environment
