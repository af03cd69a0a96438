"""Targets other than SGLang, through the real CLI: a `command` workload with no [server] table over a
real git repository, exit 125 as "untestable", `perfbisect skip`, filters per target, init templates.

The target is a tiny Python project: ``bench.py`` prints ``{"ops_per_s": RATE}`` (with 1% noise),
RATE read from ``rate.txt`` of the commit under test; one commit makes it 25% slower.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from perfbisect.config import load_config
from perfbisect.errors import ConfigError
from perfbisect.git.targets import active_filters, is_sglang_target
from tests.repo_factory import RepoFactory
from tests.cli_runner import run_cli

BENCH = """\
import json, pathlib, random, sys
rate = pathlib.Path("rate.txt").read_text().strip()
if rate == "untestable":
    print("this commit cannot be built", file=sys.stderr)
    sys.exit(125)
print("warming up")
print(json.dumps({"ops_per_s": float(rate) * random.gauss(1.0, 0.01), "unit": "ops/s"}))
"""


def make_project(path: Path, rates: list[str]) -> tuple[RepoFactory, list[str]]:
    """One commit per rate (the first also adds bench.py), plus a docs-only commit after the first."""
    r = RepoFactory(path)
    shas = [r.commit("c0 base", {"bench.py": BENCH, "rate.txt": rates[0] + "\n"})]
    shas.append(r.commit("c1 docs only", {"docs/guide.md": "how to use it\n"}))
    for i, rate in enumerate(rates[1:], start=2):
        shas.append(r.commit(f"c{i} rate {rate}", {"rate.txt": rate + "\n", f"src/m{i}.py": f"x = {i}\n"}))
    return r, shas


def command_config(dir: Path, repo: Path, extra: str = "") -> Path:
    """A command workload and no [server] table at all."""
    config = dir / "perfbisect.toml"
    config.write_text(
        "[target]\n"
        f"repo = {json.dumps(str(repo))}\n"
        f"python = {json.dumps(sys.executable)}\n"
        "[workload]\n"
        'kind = "command"\n'
        'command = ["{python}", "bench.py"]\n'
        'metric = "ops_per_s"\n'
        "warmup = 0\n"
        "[stats]\n"
        "max_trials_total = 60\n" + extra
    )
    return config


def db_rows(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as con:
        return con.execute(sql).fetchall()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    # c0 100, c1 docs, c2 100, c3 100, c4 75 (the culprit), c5 75, c6 75
    return make_project(tmp_path_factory.mktemp("targets") / "proj", ["100", "100", "100", "75", "75", "75"])


def test_command_workload_without_server_finds_the_culprit(project, tmp_path):
    r, shas = project
    config = command_config(tmp_path, r.path)
    assert load_config(config).server.command == ()
    db = tmp_path / "r.sqlite"
    proc = run_cli("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["verdict"] == "regressed" and result["culprit"] == shas[4], result["explanation"]
    assert result["filtered"] == []  # no SGLang filters: the docs-only commit is a candidate like any other
    assert "filters: no default path filters (not an SGLang target: command workload)" in proc.stderr
    assert not (r.path / ".git" / "perfbisect" / "servers").exists() or not list((r.path / ".git" / "perfbisect" / "servers").iterdir())


def test_exit_125_makes_a_commit_untestable_never_blamed(tmp_path):
    # c3 cannot be tested (its bench exits 125) and sits right before the culprit c4.
    r, shas = make_project(tmp_path / "proj", ["100", "100", "untestable", "75", "75", "75"])
    config = command_config(tmp_path, r.path)
    db = tmp_path / "r.sqlite"
    proc = run_cli("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["verdict"] == "regressed", result["explanation"]
    assert shas[3] in result["skipped"]
    # c3 is untestable, so the change is "c3 or c4": no one commit is named, the set and its flag carry it.
    assert result["culprit"] is None and result["culprit_is_set"] is True
    assert set(result["culprit_set"]) >= {shas[3], shas[4]}
    assert db_rows(db, "select culprit from bisections") == [(None,)]
    # Every other view of it says the same: the log, its detail, the markdown summary, the index.
    listed = run_cli("log", "--db", str(db), "-c", str(config))
    assert listed.returncode == 0 and "culprit" not in listed.stdout.replace("culprit one of", ""), listed.stdout
    detail = run_cli("log", "1", "--db", str(db), "-c", str(config))
    assert f"culprit one of {shas[3][:10]}, {shas[4][:10]}" in detail.stdout, detail.stdout
    site = tmp_path / "site"
    assert run_cli("report", "--index", str(site), "--db", str(db), "-c", str(config)).returncode == 0
    index = (site / "index.html").read_text()
    row = index.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    assert "one of" in row and shas[3][:10] in row and shas[4][:10] in row, row
    md = run_cli("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(db), "--format", "markdown")
    assert md.returncode == 0, md.stderr
    assert f"| first bad commit | one of `{shas[3][:10]}`, `{shas[4][:10]}`" in md.stdout, md.stdout
    text = run_cli("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(db))
    assert "first bad commit: one of these 2" in text.stdout and f"first bad commit: {shas[4][:10]}" not in text.stdout
    # What the hook sends: no culprit named, the set and its flag instead.
    from perfbisect.hook.notify import payload, summary_line

    sent = {"verdict": "regressed", "culprit": None, "culprit_set": [shas[3], shas[4]], "culprit_is_set": True}
    body = payload(sent, summary_line(sent))
    assert body["culprit"] is None and body["culprit_is_set"] is True and body["culprit_set"] == [shas[3], shas[4]]
    assert f"culprit one of {shas[3][:10]}, {shas[4][:10]}" in body["line"]
    statuses = db_rows(db, f"select status, error from trials where commit_sha = '{shas[3]}'")
    assert statuses and all(s == "skipped" and "untestable" in (e or "") for s, e in statuses), statuses
    assert db_rows(db, "select count(*) from trials where status = 'failed'") == [(0,)]


def test_skip_marks_persist_and_the_search_never_measures_them(project, tmp_path):
    r, shas = project
    config = command_config(tmp_path, r.path)
    marked = run_cli("skip", shas[5][:10], "--reason", "flaky build", "-c", str(config))
    assert marked.returncode == 0, marked.stderr
    assert f"marked untestable: {shas[5][:10]}" in marked.stdout
    try:
        listed = run_cli("skip", "-c", str(config))  # a fresh process: read back from <cache_dir>/skipped.json
        assert listed.returncode == 0 and shas[5][:10] in listed.stdout and "flaky build" in listed.stdout
        plan = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(tmp_path / "p.sqlite"))
        assert plan.returncode == 0, plan.stderr
        line = next(ln for ln in plan.stdout.splitlines() if ln.startswith(shas[5][:10]))
        assert "SKIP" in line and "perfbisect skip" in line and "flaky build" in line
        db = tmp_path / "r.sqlite"
        proc = run_cli("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(db), "--json")
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout)
        assert result["culprit"] == shas[4] and shas[5] in result["skipped"]
        assert db_rows(db, f"select count(*) from trials where commit_sha = '{shas[5]}'") == [(0,)]
    finally:
        undo = run_cli("skip", "--undo", shas[5][:10], "-c", str(config))
    assert undo.returncode == 0 and f"unmarked: {shas[5][:10]}" in undo.stdout
    assert "no commit is marked untestable" in run_cli("skip", "-c", str(config)).stdout


def test_filters_skip_in_the_config_and_a_bad_revision_there(project, tmp_path):
    r, shas = project
    config = command_config(tmp_path, r.path, f'[filters]\nskip = ["{shas[2]}"]\n')
    plan = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(tmp_path / "p.sqlite"), "--json")
    assert plan.returncode == 0, plan.stderr
    entry = next(e for e in json.loads(plan.stdout)["entries"] if e["commit"]["sha"] == shas[2])
    assert entry["measure"] is False and "[filters] skip" in entry["skip"]
    bad = command_config(tmp_path, r.path, '[filters]\nskip = ["no-such-rev"]\n')
    proc = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(bad), "--db", str(tmp_path / "p.sqlite"))
    assert proc.returncode == 2 and "filters.skip" in proc.stderr and "no-such-rev" in proc.stderr


def test_plan_names_the_filters_and_only_sglang_targets_get_sglangs(project, tmp_path):
    r, shas = project
    config = command_config(tmp_path, r.path, '[filters]\nignore = ["docs/**"]\n')
    proc = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(tmp_path / "p.sqlite"), "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["default_filters"] == [] and plan["default_filters_of"] is None
    assert plan["user_filters"] == ["docs/**"] and plan["filters"] == ["docs/**"]
    assert "not an SGLang target" in plan["filters_note"]
    text = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(tmp_path / "p.sqlite"))
    assert "filters: no default path filters (not an SGLang target: command workload); yours ([filters] ignore): docs/**" in text.stdout
    assert "filtered: only docs/guide.md" in text.stdout
    # The same repository as an SGLang target (an OpenAI workload against sglang.launch_server): SGLang's defaults.
    sglang = command_config(tmp_path, r.path).read_text().replace(
        'kind = "command"', 'kind = "openai-completions"'
    ).replace('metric = "ops_per_s"', 'metric = "decode_tok_s"') + '[server]\ncommand = ["{python}", "-m", "sglang.launch_server", "--port", "{port}"]\n'
    (tmp_path / "sglang.toml").write_text(sglang)
    cfg = load_config(tmp_path / "sglang.toml")
    assert is_sglang_target(cfg) and active_filters(cfg).defaults_of == "SGLang"
    proc = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(tmp_path / "sglang.toml"), "--db", str(tmp_path / "p.sqlite"), "--json")
    plan = json.loads(proc.stdout)
    assert plan["default_filters_of"] == "SGLang" and "docs/**" in plan["default_filters"]
    assert plan["filters_note"].startswith("SGLang's default path filters")


@pytest.mark.parametrize("flag, kind", [("--command", "command"), ("--openai", "openai-completions")])
def test_init_templates_load_and_plan_a_real_repository(project, tmp_path, flag, kind):
    r, shas = project
    path = tmp_path / "perfbisect.toml"
    proc = run_cli("init", flag, "--path", str(path), "--python", sys.executable)
    assert proc.returncode == 0, proc.stderr
    cfg = load_config(path)
    assert cfg.workload.kind == kind and not is_sglang_target(cfg) and active_filters(cfg).patterns == ()
    assert (cfg.server.command == ()) == (kind == "command")
    # The template's repo = "." is the folder it was written to: point it at the project.
    path.write_text(path.read_text().replace('repo = "."', f"repo = {json.dumps(str(r.path))}"))
    plan = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(path), "--db", str(tmp_path / "p.sqlite"))
    assert plan.returncode == 0, plan.stderr
    assert f"{len(shas)} commits: {len(shas)} to measure" in plan.stdout
    both = run_cli("init", "--command", "--openai", "--path", str(tmp_path / "x.toml"))
    assert both.returncode == 2 and "one of them" in both.stderr


def test_a_server_workload_still_needs_server_command(tmp_path):
    r, _ = make_project(tmp_path / "proj", ["100", "90"])
    config = command_config(tmp_path, r.path)
    config.write_text(config.read_text().replace('kind = "command"', 'kind = "openai-chat"').replace('metric = "ops_per_s"', 'metric = "decode_tok_s"'))
    with pytest.raises(ConfigError, match=r"'server.command' is required for workload.kind = 'openai-chat'"):
        load_config(config)


def test_doctor_on_a_command_target_speaks_neither_sglang_nor_tokens(project, tmp_path):
    r, _ = project
    config = command_config(tmp_path, r.path)
    proc = run_cli("doctor", "--launch", "-c", str(config), "--db", str(tmp_path / "d.sqlite"))
    out = proc.stdout
    # no server to launch: the command itself is run once at HEAD and its metric shown (issue #49)
    assert "command workload target" in out and "workload at HEAD" in out and "nothing stored" in out, out
    assert "sglang" not in out.lower() and "tokens" not in out, out
