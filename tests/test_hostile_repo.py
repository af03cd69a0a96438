"""A hostile target repository: shell metacharacters and a placeholder in its path, \\x01, tabs and
terminal escape sequences in subjects, non-ASCII / quoted / tab file names touched by the patch
stack. Ranges, patch checks, plans and the CLI must read it exactly and print it inert.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from perfbisect.settings import PatchesConfig
from perfbisect.git.gitrepo import TargetRepo
from perfbisect.git.pathfilter import PathFilter
from perfbisect.git.patches import PatchStack, check_patches
from perfbisect.git.plan import plan_range
from tests.repo_factory import RepoFactory, lines
from tests.cli_runner import run_command

ODD_FILES = (
    "python/sglang/srt/módulo_ñ.py",
    'python/sglang/srt/q"uote.py',
    "python/sglang/srt/tab\there.py",
)
SUBJECTS = (
    "Fix \x01phantom\x01 commit in \x01 parser",
    "\x1b]0;pwned\x07Title change \x1b[31mred\x1b[0m and \x1b[2J clear",
    "Tabs\tin\tsubject and a newline-free \r carriage return",
    "last: 40 hex 0123456789abcdef0123456789abcdef01234567",
)
RAW_CONTROL = ("\x1b", "\x07", "\x01", "\r")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    # Metacharacters and a placeholder in the repository path itself.
    r = RepoFactory(root / "sg lang; $(touch pwned) `x` {host} 'q'")
    files = {name: lines(30, "odd") for name in ODD_FILES}
    files["python/sglang/srt/engine.py"] = lines(30, "engine")
    files["bench.py"] = "import json, os\nprint(json.dumps({'tok_s': 100.0, 'cwd_ok': os.path.isdir('python')}))\n"
    good = r.commit("base", files)
    shas = [good]
    for i, subject in enumerate(SUBJECTS):
        shas.append(r.commit(subject, {"python/sglang/srt/engine.py": lines(30 + i + 1, "engine")}))
    patches = root / "patches"
    r.make_patch(good, {name: lines(30, "odd").replace("odd 3\n", "odd 3 patched\n") for name in ODD_FILES},
                 patches, "touch odd names", "0001-odd-names.patch")
    return r, shas, patches


def test_range_reads_every_commit_exactly(hostile):
    r, shas, _ = hostile
    repo = TargetRepo(r.path)
    commits = repo.first_parent_range(shas[0], shas[-1])
    assert [c.sha for c in commits] == shas  # no phantom commit from \x01, none lost
    assert [c.subject for c in commits[1:]] == [" ".join(s.split("\n")) for s in SUBJECTS]
    assert repo.changed_paths(commits[0]) == tuple(sorted(list(ODD_FILES) + ["bench.py", "python/sglang/srt/engine.py"]))


def test_patch_touching_quoted_and_non_ascii_names_applies(hostile):
    r, shas, patches = hostile
    repo = TargetRepo(r.path)
    stack = PatchStack.load(PatchesConfig(dir=patches), repo)
    assert stack.touched_paths == frozenset(ODD_FILES)
    checks = check_patches(repo, shas[0], shas[-1], stack)
    assert [c.ok for c in checks] == [True] * len(shas), [c.conflict.describe() for c in checks if not c.ok]
    assert stack.check_at(shas[-1]).ok
    plan = plan_range(repo, shas[0], shas[-1], PathFilter(()), stack, check_patches=True)
    assert not plan.skipped


def _config(r: RepoFactory, patches: Path, tmp_path: Path) -> Path:
    config = tmp_path / "perfbisect.toml"
    config.write_text(
        "[target]\n"
        f"repo = {json.dumps(str(r.path))}\n"
        f"python = {json.dumps(sys.executable)}\n"
        "[patches]\n"
        f"dir = {json.dumps(str(patches))}\n"
        "[server]\n"
        'command = ["{python}", "-m", "perfbisect.demo.emulator", "--port", "{port}", "--worktree", "{worktree}"]\n'
        "[modes.baseline]\n"
        "[workload]\n"
        'kind = "command"\n'
        'command = ["{python}", "{worktree}/bench.py"]\n'
        'metric = "tok_s"\n'
        "warmup = 0\n"
    )
    return config


def test_cli_prints_repository_text_inert_and_sees_no_conflict(hostile, tmp_path):
    r, shas, patches = hostile
    config = _config(r, patches, tmp_path)
    out = {}
    for args in (["plan", f"good={shas[0]}", f"bad={shas[-1]}"], ["patches", "check", f"good={shas[0]}", f"bad={shas[-1]}"]):
        proc = out[args[0]] = run_command(*args, "-c", str(config), "--db", str(tmp_path / "r.sqlite"))
        assert proc.returncode == 0, proc.stderr
        assert "CONFLICT" not in proc.stdout and "does not apply" not in proc.stdout, proc.stdout
        for ch in RAW_CONTROL:
            assert ch not in proc.stdout + proc.stderr, (args, ch)
    assert "\\x1b]0;pwned\\x07Title change" in out["plan"].stdout  # shown, escaped, not acted on


def test_measure_in_a_repository_whose_path_holds_a_placeholder(hostile, tmp_path):
    """{worktree} expands to a path with metacharacters and '{host}': it reaches the command verbatim,
    through no shell (test_config checks that the '{host}' inside is not expanded a second time)."""
    r, shas, patches = hostile
    config = _config(r, patches, tmp_path)
    proc = run_command("measure", shas[-1], "-c", str(config), "--db", str(tmp_path / "r.sqlite"), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["trials"]["baseline"]
    assert [round(row["tok_s"], 6) for row in rows] == [100.0]
    assert not (Path.cwd() / "pwned").exists() and not (r.path / "pwned").exists()
