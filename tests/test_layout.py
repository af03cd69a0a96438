"""Layouts (issue #19): what a trial varies that the commit does not control, and what it records.

The target is a tiny real project whose ``bench.py`` (a ``command`` workload) prints what its process
saw — the length of ``PERFBISECT_LAYOUT_PAD``, its working directory, ``PYTHONHASHSEED`` — and
appends the same to a file outside the worktree, one line per invocation; trials run one at a time,
so line k is the k-th trial. Real git, real subprocesses, real SQLite through the real CLI and app.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from perfbisect.app.bisection import run_bisection
from perfbisect.config import load_config
from perfbisect.layout import FIXED, HASH_SEED_MAX, PAD_VAR, Layout, choose, joined
from perfbisect.settings import LayoutConfig
from perfbisect.store import open_store
from perfbisect.app.workspace import Workspace
from perfbisect.runtime.progress import Progress
from perfbisect.git.worktrees import slot_name
from tests.repo_factory import RepoFactory
from tests.cli_runner import run_cli

BENCH = """\
import json, os, pathlib, random, sys
seen = {"pad": len(os.environ.get("PERFBISECT_LAYOUT_PAD", "")), "cwd": os.getcwd(),
        "cwd_len": len(os.getcwd()), "seed": os.environ.get("PYTHONHASHSEED")}
with open(sys.argv[1], "a") as fh:
    fh.write(json.dumps(seen) + "\\n")
rate = float(pathlib.Path("rate.txt").read_text())
if os.environ.get("BENCH_MODE") == "fast":
    rate *= float(pathlib.Path("fast.txt").read_text())
print(json.dumps({"ops_per_s": rate * random.gauss(1.0, 0.01), **seen}))
"""


def make_project(path: Path) -> tuple[RepoFactory, list[str]]:
    """Six commits; the fourth makes the "fast" mode 25% less fast (the baseline does not move)."""
    r = RepoFactory(path)
    shas = [r.commit("c0 base", {"bench.py": BENCH, "rate.txt": "100\n", "fast.txt": "1.6\n"})]
    for i in range(1, 6):
        files = {f"src/m{i}.py": f"x = {i}\n"}
        if i == 3:
            files["fast.txt"] = "1.2\n"
        shas.append(r.commit(f"c{i}", files))
    return r, shas


def write_config(dir: Path, repo: Path, seen: Path, extra: str = "") -> Path:
    config = dir / "perfbisect.toml"
    config.write_text(
        "[target]\n"
        f"repo = {json.dumps(str(repo))}\n"
        f"python = {json.dumps(sys.executable)}\n"
        f"cache_dir = {json.dumps(str(dir / 'cache'))}\n"  # worktrees of this test only
        "[workload]\n"
        'kind = "command"\n'
        f"command = [\"{{python}}\", \"bench.py\", {json.dumps(str(seen))}]\n"
        'metric = "ops_per_s"\n'
        "warmup = 0\n" + extra
    )
    return config


def seen_lines(seen: Path) -> list[dict]:
    return [json.loads(line) for line in seen.read_text().splitlines()]


def slot_path(dir: Path, slot: int) -> str:
    """The worktree of ``slot`` under the cache directory ``write_config(dir, ...)`` sets."""
    return str((dir / "cache" / "worktrees" / slot_name(slot)).resolve())


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return make_project(tmp_path_factory.mktemp("layout") / "proj")


# --- the draw ----------------------------------------------------------------------------------


def test_a_layout_id_names_it_and_its_env_is_what_it_adds():
    layout = Layout(slot=2, env_pad=1733, hash_seed=40211)
    assert layout.id == "s2-e1733-h40211" and Layout.parse(layout.id) == layout
    assert layout.env() == {PAD_VAR: "x" * 1733, "PYTHONHASHSEED": "40211"}
    assert FIXED.id == "s0-e0" and Layout.parse("s0-e0") == FIXED and FIXED.fixed and FIXED.env() == {}
    assert Layout(slot=1, env_pad=0).env() == {}
    with pytest.raises(ValueError, match="not a layout id"):
        Layout.parse("s2-e1733-h")
    assert joined([Layout(1, 2, 3), None, FIXED]) == "s1-e2-h3+s0-e0" and joined([None]) is None


def test_draws_are_reproducible_differ_between_trials_and_stay_in_range():
    settings = LayoutConfig()
    draws = [choose(settings, commit="a" * 40, mode="baseline", counter=n) for n in range(64)]
    assert draws == [choose(settings, commit="a" * 40, mode="baseline", counter=n) for n in range(64)]
    assert {d.slot for d in draws} == set(range(settings.path_slots))
    assert len({d.env_pad for d in draws}) > 50 and all(0 <= d.env_pad <= settings.env_pad_max for d in draws)
    assert all(1 <= d.hash_seed <= HASH_SEED_MAX for d in draws)
    assert choose(settings, commit="b" * 40, mode="baseline", counter=0) != draws[0]
    assert choose(settings, commit="a" * 40, mode="eagle3", counter=0) != draws[0]
    assert choose(settings, commit="a" * 40, mode="baseline", counter=0, hash_seed_pinned=True).hash_seed is None
    assert choose(LayoutConfig(randomize=False), commit="a" * 40, mode="baseline", counter=5) == FIXED
    narrow = LayoutConfig(env_pad_max=0, path_slots=1, hash_seed=False)
    assert {choose(narrow, commit="a" * 40, mode="m", counter=n) for n in range(16)} == {FIXED}


def test_a_commits_trials_rotate_through_the_worktree_slots():
    # any path_slots consecutive trials of one commit run in every slot once (a slot that moves the level
    # cannot pile up on one commit's trials and not its neighbour's); where the rotation starts is the commit's own
    for slots in (2, 3, 4, 8):
        settings = LayoutConfig(path_slots=slots)
        for commit in ("a" * 40, "b" * 40, "c" * 40):
            draws = [choose(settings, commit=commit, mode="baseline", counter=n).slot for n in range(3 * slots)]
            assert all(sorted(draws[k:k + slots]) == list(range(slots)) for k in range(2 * slots + 1))
            assert all((b - a) % slots == 1 for a, b in zip(draws, draws[1:]))
    starts = {choose(LayoutConfig(path_slots=8), commit=c * 40, mode="baseline", counter=0).slot for c in "abcdef0123456789"}
    assert len(starts) > 1


# --- what each trial's process saw, against what its trial stored ---------------------------------


def test_every_trial_runs_under_its_own_layout_and_stores_what_its_process_saw(project, tmp_path):
    r, shas = project
    seen = tmp_path / "seen.jsonl"
    config = write_config(tmp_path, r.path, seen)
    db = tmp_path / "r.sqlite"
    proc = run_cli("measure", shas[0], "-m", "baseline", "-n", "6", "-c", str(config), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    with open_store(db) as store:
        trials = store.trials(status=None)
    observed = seen_lines(seen)
    assert len(trials) == len(observed) == 6
    # the store's count is the draw's counter: the first four trials of the commit ran in the four slots, one each
    assert sorted(t.layout.slot for t in trials[:4]) == [0, 1, 2, 3]
    for trial, saw in zip(trials, observed):
        layout = trial.layout
        assert layout is not None and saw["pad"] == layout.env_pad
        assert saw["cwd"] == slot_path(tmp_path, layout.slot) and saw["cwd_len"] == len(slot_path(tmp_path, layout.slot))
        assert saw["seed"] == str(layout.hash_seed)
        assert f"trial #{trial.id} [layout {layout.id}]: " in proc.stdout  # measure's table shows it
    assert len({t.layout for t in trials}) == 6
    assert len({s["cwd_len"] for s in observed}) >= 2 and len({s["pad"] for s in observed}) >= 2
    assert len({s["seed"] for s in observed}) >= 2
    # The padding is written to the environment, never into a log a user reads.
    assert all(len(line) < 1000 for t in trials for line in Path(t.log_path).read_text().splitlines())


def test_randomize_false_runs_every_trial_under_the_fixed_layout(project, tmp_path):
    r, shas = project
    seen = tmp_path / "seen.jsonl"
    config = write_config(tmp_path, r.path, seen, "[layout]\nrandomize = false\n")
    db = tmp_path / "r.sqlite"
    proc = run_cli("measure", shas[0], "-m", "baseline", "-n", "3", "-c", str(config), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    with open_store(db) as store:
        assert [t.layout for t in store.trials(status=None)] == [FIXED] * 3
    inherited = os.environ.get("PYTHONHASHSEED")  # what perfbisect itself was started with: left alone
    assert seen_lines(seen) == [{"pad": 0, "cwd": slot_path(tmp_path, 0), "cwd_len": len(slot_path(tmp_path, 0)), "seed": inherited}] * 3
    assert [p.name for p in (tmp_path / "cache" / "worktrees").iterdir()] == ["wt0"]


def test_a_hash_seed_the_config_sets_wins_and_the_layout_records_none(project, tmp_path):
    r, shas = project
    seen = tmp_path / "seen.jsonl"
    config = write_config(tmp_path, r.path, seen, '[modes.baseline.env]\nPYTHONHASHSEED = "7"\n')
    db = tmp_path / "r.sqlite"
    proc = run_cli("measure", shas[1], "-m", "baseline", "-n", "3", "-c", str(config), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    with open_store(db) as store:
        layouts = [t.layout for t in store.trials(status=None)]
    assert [s["seed"] for s in seen_lines(seen)] == ["7"] * 3
    assert all(layout.hash_seed is None for layout in layouts)
    assert [s["pad"] for s in seen_lines(seen)] == [layout.env_pad for layout in layouts]


# --- a bisection: observations carry their trials' layouts, a resume keeps them ----------------------


class StopAt(Progress):
    """Stands for Ctrl-C before the bisection's ``trial``-th observation (KeyboardInterrupt, as the
    signal handlers raise it), so the test does not race a signal against a trial."""

    def __init__(self, trial: int):
        self.trial = trial

    def search(self, status) -> None:
        if status.trial == self.trial:
            raise KeyboardInterrupt


def test_observations_carry_their_trials_layouts_and_a_resume_keeps_the_stored_ones(project, tmp_path):
    r, shas = project
    seen = tmp_path / "seen.jsonl"
    extra = (
        '[modes.baseline.env]\nBENCH_MODE = "baseline"\n[modes.fast.env]\nBENCH_MODE = "fast"\n'
        '[stats]\nmetric = "ratio:fast/baseline"\nmax_trials_total = 40\n'
    )
    config = write_config(tmp_path, r.path, seen, extra)
    db = tmp_path / "r.sqlite"
    cfg = load_config(config)
    with Workspace.open(cfg, db) as ws:
        with pytest.raises(KeyboardInterrupt):
            run_bisection(ws, shas[0], shas[-1], StopAt(trial=3))
        (record,) = ws.store.bisections()
        before = ws.store.observations(record.id)
        trials_before = {t.id: t.layout for t in ws.store.trials(bisection_id=record.id, status=None)}
        assert len(before) == 2 and all(o.layout for o in before)
        result = run_bisection(ws, shas[0], shas[-1], resume_id=record.id)
        after = ws.store.observations(record.id)
        trials = {t.id: t for t in ws.store.trials(bisection_id=record.id, status=None)}
    assert after[:2] == before and len(after) > 2
    assert {tid: trials[tid].layout for tid in trials_before} == trials_before  # stored layouts kept
    for obs in after:
        by_mode = {trials[tid].identity.mode: trials[tid].layout.id for tid in obs.trial_ids}
        assert obs.layout == "+".join(by_mode[m] for m in cfg.metric_modes), obs  # baseline+fast
    assert len({t.layout.slot for t in trials.values()}) >= 2
    assert len(seen_lines(seen)) == len(trials)  # no trial ran twice

    # `perfbisect log ID` lists each commit's layouts; the report has a table of them (escaped).
    log = run_cli("log", str(result.bisection_id), "-c", str(config), "--db", str(db))
    assert log.returncode == 0, log.stderr
    first = trials[after[0].trial_ids[0]].layout.id
    assert "layouts " in log.stdout and first in log.stdout
    html = tmp_path / "report.html"
    report = run_cli("report", str(result.bisection_id), "-o", str(html), "-c", str(config), "--db", str(db))
    assert report.returncode == 0, report.stderr
    text = html.read_text()
    assert "<h3>Layouts</h3>" in text and f'<td class="sha">{first}</td>' in text
    assert f"{len(trials)} trials under {len({t.layout for t in trials.values()})} layouts" in text
