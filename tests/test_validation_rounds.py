"""The validation rounds as data (benchmarks/validation/): every round file parses, names what exists and agrees with
the results kept for it; the configs and summaries it writes are those the rounds wrote; its replay check and the
shared simulated target use only the engine's public API. No network, no perfbisect run."""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from benchmarks.validation import __main__ as cli
from benchmarks.validation import check_gates, configs, driver, summarize
from benchmarks.validation.rounds import PACKAGE, ROOT, Round, all_rounds, load, problems
from perfbisect.report.replay import decision_json

sys.path.insert(0, str(ROOT / "benchmarks"))
from simulated_target import SimulatedTarget, search  # noqa: E402

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROUNDS = all_rounds()


def _tool():
    spec = importlib.util.spec_from_file_location("validate_public_project", ROOT / "tools" / "validate_public_project.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("rnd", ROUNDS, ids=[r.name for r in ROUNDS])
def test_every_round_file_parses_and_names_what_exists(rnd: Round) -> None:
    """Keys, types, commits, projects, workloads, the record and its heading, every run's kept NAME.json (and
    calibrate printout, gates output), runs.jsonl's order, and a simulation's kept table against its arguments."""
    assert problems(rnd) == []


def test_every_kept_public_project_or_table_folder_has_its_round() -> None:
    """Each results folder of the issue #19 rounds and of #34 is named by a round file: no round is left as
    results without the data of what ran."""
    named = {b["results"] for r in ROUNDS for b in r.batches if b["results"]}
    named |= {str(Path(s["output"]).parent) for r in ROUNDS for s in r.simulations}
    kept = {str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "validation").glob("issue19-round*")}
    kept |= {str(p.parent.relative_to(ROOT)) for p in (ROOT / "docs" / "validation" / "issue34").glob("*/summary.txt")}
    assert kept and kept <= named, kept - named
    assert {r.name for r in ROUNDS} >= {"issue19-round8", "issue34"}


def _mutated(rnd: Round, change) -> Round:
    data = copy.deepcopy(rnd.data)
    change(data)
    return Round(rnd.path, data, rnd.projects)


@pytest.mark.parametrize("change, said", [
    (lambda d: d.update(colour="red"), "unknown key 'colour'"),
    (lambda d: d["groups"]["reg"].update(reps=4), "no kept result docs/validation/issue34/busy/reg-4.json"),
    (lambda d: d["groups"]["reg"].update(good="v24.1"), "is not a commit id"),
    (lambda d: d["groups"]["tomli"].update(project="tomlkit"), "not in projects.toml"),
    (lambda d: d["groups"]["aa"].update(workload="bench_gone.py"), "neither in workloads/"),
    (lambda d: d["groups"]["budget"].update(config={"stats": {"max_trials": 14}}), "stats.max_trials is not one"),
    (lambda d: d["batches"][0].update(groups=["aa", "reg", "tomli", "aacal"]), "runs.jsonl ran"),
    (lambda d: d["batches"][0].update(gates=["gates-gone.txt"]), "no kept gates output"),
    (lambda d: d.update(section="no-such-heading"), "has no heading #no-such-heading"),
    (lambda d: d.update(doc="docs/validation/gone.md"), "does not exist"),
])
def test_the_checks_find_what_is_wrong(change, said) -> None:
    found = problems(_mutated(load("issue34"), change))
    assert any(said in p for p in found), found


@pytest.mark.parametrize("change, said", [
    (lambda s: s.update(seeds=[0, 199]), "seeds [0, 199] disagree"),
    (lambda s: s["args"].__setitem__(s["args"].index("--reps") + 1, "100"), "the arguments ask for 100"),
    (lambda s: s["args"].__setitem__(s["args"].index("--strategies") + 1, "perfbisect"), "ran strategies"),
    (lambda s: s["args"].__setitem__(s["args"].index("--scenarios") + 1, "S1,S2"), "the kept table's cells"),
    (lambda s: s.update(script="benchmarks/gone.py"), "does not exist"),
])
def test_the_checks_hold_a_simulation_to_its_kept_table(change, said) -> None:
    found = problems(_mutated(load("issue19-round9"), lambda d: change(d["simulations"][0])))
    assert any(said in p for p in found), found


def test_every_run_config_is_one_perfbisect_reads() -> None:
    """Every run's perfbisect.toml parses, holds only keys perfbisect knows, gives each run its own cache
    directory, and puts worktree slot 0 at the length its group asks for."""
    from perfbisect.config import known_keys

    known = set(known_keys())
    for rnd in ROUNDS:
        for batch in rnd.batches:
            caches = set()
            for run in rnd.runs(batch):
                data = tomllib.loads(configs.render(rnd, batch, run))
                keys = {f"{t}.{k}" for t, table in data.items() if t != "modes" for k in table}
                keys |= {f"modes.NAME.{k}" for mode in data["modes"].values() for k in mode}
                assert keys <= known, (rnd.name, run.name, keys - known)
                group = rnd.groups[run.group]
                assert data["workload"]["metric"] == group["metric"] and data["stats"]["metric"] in data["modes"]
                caches.add(data["target"]["cache_dir"])
                if "slot0_path_len" in group:
                    assert len(data["target"]["cache_dir"] + configs.SLOT0) == group["slot0_path_len"]
            assert len(caches) == len(rnd.runs(batch)), (rnd.name, batch["name"])


def test_a_config_difference_lands_in_its_table() -> None:
    rnd = load("issue34")
    batch = rnd.batch("budget")
    text = configs.render(rnd, batch, rnd.runs(batch)[0])
    assert tomllib.loads(text)["stats"] == {"metric": "baseline", "max_trials_total": 14}
    assert 'metric = "wall_ops_s"' in text and "/wall/cache/budget-1" in text
    fixed = load("issue19-round1")
    batch = fixed.batch(None)
    run = [r for r in fixed.runs(batch) if r.group == "layfix"][0]
    assert tomllib.loads(configs.render(fixed, batch, run))["layout"] == {"randomize": False}


def test_the_summaries_are_the_kept_ones() -> None:
    """summarize writes each batch's kept summary.txt again, byte for byte, from its kept runs.jsonl and results."""
    folders = {b["results"] for r in ROUNDS for b in r.batches if b["results"]}
    checked = 0
    for folder in sorted(folders):
        out = ROOT / folder
        if (out / "runs.jsonl").exists():
            assert "\n".join(summarize.lines(out)) + "\n" == (out / "summary.txt").read_text(), folder
            checked += 1
    assert checked >= 5


def test_the_workloads_are_the_ones_the_rounds_ran() -> None:
    """packaging's workload is tools/validate_public_project.py's, and so is its filter list; the others are kept
    in the package (tomli's bench reads its document beside it)."""
    tool = _tool()
    assert driver.bench_from_tool() == tool.BENCH
    assert load("issue34").projects["packaging"]["ignore"] == tool.IGNORE
    for name in ("bench_micro.py", "bench_tomli_inline.py", "tomli_inline.toml"):
        assert (PACKAGE / "workloads" / name).is_file()
    assert tomllib.loads((PACKAGE / "workloads" / "tomli_inline.toml").read_text())["t39"]["sub"]["z"] == [1, 2, 3]


def test_write_workloads_puts_every_workload_a_round_names_in_its_work_folder(tmp_path) -> None:
    work = driver.write_workloads(load("issue19-round8"), tmp_path)
    assert sorted(p.name for p in work.iterdir()) == ["bench_micro.py", "bench_perfbisect.py", "bench_tomli_inline.py",
                                                     "tomli_inline.toml"]


def _seeded_search(seed: int = 3):
    """A seeded search of a simulated range, with each decision stored as the store keeps it."""
    from perfbisect.engine.bisect import SearchPolicy
    from perfbisect.engine.stats import NoiseModel
    from perfbisect.settings import StatsConfig

    cs = [f"{j:02d}" + "cd" * 19 for j in range(12)]
    target = SimulatedTarget({7: -12.0}, 12, 2.0, seed=seed)
    live: list[dict] = []
    settings = {"max_trials_total": 60, "a_key_of_a_later_version": 1}
    start = {"noise": {"sigma_b": 0.05, "dof": 3.0, "source": "prior: 5.0% assumed", "a_later_field": 2},
             "history": [], "higher_is_better": True}
    policy = check_gates.policy_of(cs, settings, start)

    def measure(act, obs):
        live.append({**decision_json(act), "after": len(obs), "pending": [], "host": None})
        from perfbisect.model import Observation
        obs.append(Observation(act.commit, target.trial(cs.index(act.commit), len(obs)), seq=len(obs)))

    outcome, obs = search(policy, measure, 200)
    # the same policy built directly from the constructor decides the same
    direct = SearchPolicy(cs, StatsConfig(max_trials_total=60), NoiseModel(0.05, 3.0, "prior: 5.0% assumed"))
    assert decision_json(direct.next(obs)) == decision_json(policy.next(obs))
    return cs, settings, start, outcome, obs, live


def test_the_replay_makes_every_stored_decision_again_and_finds_one_that_differs() -> None:
    cs, settings, start, outcome, obs, live = _seeded_search()
    assert outcome.culprit == cs[7]
    rp = check_gates.replay(check_gates.policy_of(cs, settings, start), obs, live)
    assert rp["shown"] == rp["total"] == len(obs) and rp["compared"] == len(obs) - 1 and rp["mismatches"] == 0
    assert rp["final"].outcome.verdict == outcome.verdict and rp["final"].outcome.culprit == outcome.culprit
    tampered = copy.deepcopy(live)
    tampered[4]["reason"] = "not what the search said"
    # a decision stored as made with a trial in flight is asked again with next_batch, that trial pending
    tampered[6].update(after=5, pending=[[tampered[5]["commit"], None]])
    rp = check_gates.replay(check_gates.policy_of(cs, settings, start), obs, tampered)
    assert rp["compared"] == len(obs) - 1 and 1 <= rp["mismatches"] <= 2


def test_the_drivers_and_the_simulated_target_use_only_the_engines_public_api() -> None:
    """From perfbisect.engine they import only SearchPolicy, Measure, Done, the constructor's NoiseModel and the policy a
    stored bisection built (search_start.policy_for), and
    call no underscore method on anything."""
    allowed = {"perfbisect.engine.bisect": {"SearchPolicy"}, "perfbisect.engine.observations": {"Measure", "Done"},
               "perfbisect.engine.stats": {"NoiseModel"}, "perfbisect.engine.search_start": {"policy_for"}}
    files = sorted(PACKAGE.rglob("*.py")) + [ROOT / "benchmarks" / "simulated_target.py"]
    for path in files:
        if path.parent.name == "workloads":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("perfbisect.engine"):
                assert {a.name for a in node.names} <= allowed.get(node.module, set()), (path.name, node.module)
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("perfbisect.engine") for a in node.names), path.name
            if isinstance(node, ast.Attribute) and re.match(r"_[a-z]", node.attr):
                raise AssertionError(f"{path.name}:{node.lineno} uses .{node.attr}")


def test_the_command_line_lists_shows_and_checks_the_rounds(capsys) -> None:
    with pytest.raises(SystemExit) as help_exit:
        cli.main(["--help"])
    assert help_exit.value.code == 0 and "examples:" in capsys.readouterr().out
    assert cli.main(["list"]) == 0
    listed = capsys.readouterr().out
    assert all(r.name in listed for r in ROUNDS)
    assert cli.main(["show", "issue19-round9"]) == 0
    shown = capsys.readouterr().out
    assert "PB_SPRT_ENDS=4 PB_SPRT_CAP=10 python benchmarks/strategies.py --reps 300" in shown
    assert cli.main(["check"]) == 0
    assert cli.main(["config", "issue34", "aa-2", "--batch", "loaded"]) == 0
    assert '"/work/validation/issue34/heavy/cache/aa-2"' in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no batch"):
        cli.main(["config", "issue34", "aa-2"])
    with pytest.raises(SystemExit, match="not recorded"):
        cli.main(["simulate", "issue19-round5", "second-change-z3-300", "--out", "/nonexistent"])


def test_the_validation_records_link_the_package_and_their_round_files() -> None:
    for doc, rounds_named in (("issue19.md", ["issue19-round8"]), ("issue34.md", ["issue34"])):
        text = (ROOT / "docs" / "validation" / doc).read_text(encoding="utf-8")
        assert "../../benchmarks/validation/" in text
        for name in rounds_named:
            assert f"../../benchmarks/validation/rounds/{name}.toml" in text
    assert not list((ROOT / "docs" / "validation").glob("*/driver"))
    assert json.loads((ROOT / "docs" / "validation" / "issue34" / "busy" / "reg-1.json").read_text())["culprit"]
