"""The git layer on real temporary repositories: ranges, filters, patch stack, worktrees."""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from perfbisect.app.housekeeping import patches_check
from perfbisect.app.workspace import Workspace
from perfbisect.config import load_config
from perfbisect.settings import SGLANG_IGNORE_PATHS, PatchesConfig, PatchVariant
from perfbisect.errors import ConfigError, GitError, InfrastructureError, PatchError
from perfbisect.git.gitrepo import TargetRepo, worktree_tree_hash
from perfbisect.git.pathfilter import PathFilter
from perfbisect.git.patches import PatchConflictError, PatchStack, check_patches
from perfbisect.git.plan import plan_range
from perfbisect.git.worktrees import WorktreePool, slot_name
from tests.repo_factory import RepoFactory, lines

ENGINE = "python/sglang/srt/entrypoints/engine.py"
DEEPSEEK = "python/sglang/srt/models/deepseek_v2.py"


def _edit(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


@dataclass
class History:
    repo: RepoFactory
    shas: dict[str, str]
    patch_dir: Path
    alt_patch: Path


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> History:
    """An SGLang-shaped history whose upstream edits collide with a two-patch local stack.

    c0 base · c1 code · c2 docs only · c3 empty · c4 merge of 2 · c5 upstream edits deepseek_v2
    where patch 2 sits (a variant fits) · c6 upstream edits engine where patch 1 sits (conflict)
    · c7 upstream restores that line (patch 1 applies again) · c8 code (bad).
    """
    root = tmp_path_factory.mktemp("history")
    r = RepoFactory(root / "sglang")
    engine0, ds0 = lines(40, "engine"), lines(40, "ds")
    s = {}
    s["c0"] = r.commit(
        "base",
        {
            ENGINE: engine0,
            DEEPSEEK: ds0,
            "python/sglang/srt/managers/scheduler.py": lines(20, "sched"),
            "docs/index.md": "# docs\n",
            "README.md": "readme\n",
            "test/test_engine.py": "def test(): pass\n",
            "sgl-kernel/csrc/moe.cu": "// kernel\n",
            ".gitignore": "*.so\nbuild/\n",
        },
    )
    s["c1"] = r.commit("scheduler tweak", {"python/sglang/srt/managers/scheduler.py": lines(21, "sched")})
    s["c2"] = r.commit("docs: typo", {"docs/index.md": "# Docs\n", "README.md": "Readme\n"})
    s["c3"] = r.commit("empty", allow_empty=True)
    r.switch("feature", create_at=s["c3"])
    s["side1"] = r.commit("feature part 1", {"python/sglang/srt/layers/a.py": "a = 1\n"})
    s["side2"] = r.commit("feature part 2", {"python/sglang/srt/layers/b.py": "b = 1\n"})
    r.switch("main")
    s["c4"] = r.merge("feature", "Merge feature")
    ds5 = _edit(ds0, "ds 5\n", "ds 5 upstream\n")
    s["c5"] = r.commit("upstream deepseek change", {DEEPSEEK: ds5})
    engine6 = _edit(engine0, "engine 10\n", "engine 10 upstream\n")
    s["c6"] = r.commit("upstream engine change", {ENGINE: engine6})
    s["c7"] = r.commit("revert engine change", {ENGINE: engine0})
    s["c8"] = r.commit("more code", {"python/sglang/srt/layers/a.py": "a = 2\n"})

    patch_dir = root / "patches"
    r.make_patch(s["c0"], {ENGINE: _edit(engine0, "engine 10\n", "engine 10 NCCL_PROTO=LL\n")}, patch_dir, "nccl env", "0001-nccl-env.patch")
    r.make_patch(s["c0"], {DEEPSEEK: _edit(ds0, "ds 5\n", "ds 5 eagle3 capture\n")}, patch_dir, "eagle3 capture", "0002-eagle3-capture.patch")
    alt = r.make_patch(
        s["c5"], {DEEPSEEK: _edit(ds5, "ds 5 upstream\n", "ds 5 upstream eagle3 capture\n")}, root / "alt", "eagle3 capture v2", "0002-eagle3-capture-v2.patch"
    )
    return History(r, s, patch_dir, alt)


@pytest.fixture(scope="module")
def target(history) -> TargetRepo:
    return TargetRepo(history.repo.path)


def _stack(target: TargetRepo, history: History, with_variant: bool = True) -> PatchStack:
    variants = (PatchVariant(patch="0002-eagle3-capture.patch", alternatives=(history.alt_patch,)),) if with_variant else ()
    return PatchStack.load(PatchesConfig(dir=history.patch_dir, variants=variants), target)


# -- ranges ----------------------------------------------------------------------------------


def test_first_parent_range_is_oldest_first_and_skips_side_branch(target, history):
    s = history.shas
    commits = target.first_parent_range(s["c0"], s["c8"])
    assert [c.sha for c in commits] == [s[k] for k in ("c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8")]
    assert commits[4].is_merge and commits[4].parents[0] == s["c3"]
    assert commits[1].subject == "scheduler tweak"


def test_merged_commits_names_the_merged_branch(target, history):
    s = history.shas
    merged = target.merged_commits(s["c4"])
    assert [c.sha for c in merged] == [s["side1"], s["side2"]]
    assert [c.subject for c in merged] == ["feature part 1", "feature part 2"]
    assert target.merged_commits(s["c5"]) == []


def test_changed_paths_against_first_parent(target, history):
    s = history.shas
    target.first_parent_range(s["c0"], s["c8"])  # fills the one-call cache
    assert target.changed_paths(target.resolve(s["c2"])) == ("README.md", "docs/index.md")
    assert target.changed_paths(target.resolve(s["c3"])) == ()
    assert set(target.changed_paths(target.resolve(s["c4"]))) == {"python/sglang/srt/layers/a.py", "python/sglang/srt/layers/b.py"}
    # The per-commit fallback (no range loaded) agrees with the range call.
    fresh = TargetRepo(history.repo.path)
    assert fresh.changed_paths(s["c4"]) == target.changed_paths(s["c4"])
    assert fresh.changed_paths(s["c0"])  # the root commit lists its files


def test_unknown_revision_names_rev_and_fix(target):
    with pytest.raises(GitError) as err:
        target.resolve("no-such-branch")
    assert "Unknown revision 'no-such-branch'" in str(err.value)
    assert "git fetch" in str(err.value)


def test_good_equal_bad_is_refused(target, history):
    with pytest.raises(GitError, match="same commit"):
        target.first_parent_range(history.shas["c5"], history.shas["c5"])


def test_good_not_ancestor_suggests_swap(target, history):
    with pytest.raises(GitError) as err:
        target.first_parent_range(history.shas["c8"], history.shas["c2"])
    assert "not an ancestor" in str(err.value) and "swap" in str(err.value)


def test_good_on_merged_branch_is_refused(target, history):
    with pytest.raises(GitError, match="first-parent"):
        target.first_parent_range(history.shas["side1"], history.shas["c8"])


def test_not_a_git_repo(tmp_path):
    with pytest.raises(GitError, match="not a git repository"):
        TargetRepo(tmp_path)
    with pytest.raises(GitError, match="does not exist"):
        TargetRepo(tmp_path / "missing")


# -- filters ---------------------------------------------------------------------------------


def test_path_filter_globs():
    f = PathFilter(SGLANG_IGNORE_PATHS)
    assert f.matches("README.md") and f.matches("python/sglang/README.md")
    assert f.matches("docs/a/b/c.py") and f.matches(".github/workflows/ci.yml")
    assert f.matches("python/sglang/multimodal_gen/x.py")
    assert not f.matches("python/sglang/srt/models/deepseek_v2.py")
    assert not f.matches("docsx/a.py") and not f.matches("python/test/x.py")
    assert f.only_ignored(["docs/x", "test/y.py"]) and not f.only_ignored(["docs/x", "python/a.py"])
    assert f.only_ignored([])  # nothing changed: the same build as the parent
    assert PathFilter(["sgl-kernel"]).matches("sgl-kernel/csrc/moe.cu")
    assert PathFilter(["*.py"]).matches("a.py") and not PathFilter(["*.py"]).matches("d/a.py")
    assert PathFilter(["python/**/test_*.py"]).matches("python/test_a.py")
    assert PathFilter(["python/**/test_*.py"]).matches("python/x/y/test_a.py")


def test_plan_filters_docs_and_empty_commits_and_names_merges(target, history):
    s = history.shas
    plan = plan_range(target, s["c0"], s["c8"], PathFilter(SGLANG_IGNORE_PATHS + ("nonexistent-dir/**",)))
    by = {e.commit.sha: e for e in plan.entries}
    assert by[s["c0"]].measure and by[s["c0"]].reason == "good endpoint"
    assert by[s["c8"]].measure and by[s["c8"]].reason == "bad endpoint"
    docs = by[s["c2"]]
    assert not docs.measure and docs.filtered and docs.reason == "filtered: only README.md, docs/index.md"
    assert docs.inherits_from == s["c1"]
    empty = by[s["c3"]]
    assert not empty.measure and empty.reason == "filtered: no changed paths" and empty.inherits_from == s["c1"]
    merge = by[s["c4"]]
    assert merge.measure and merge.merged_count == 2 and merge.reason == "merge of 2 commits"
    assert [e.commit.sha for e in plan.filtered] == [s["c2"], s["c3"]]
    # A filter matching nothing is reported as a warning, not an exception; real ones are not.
    warned = [w.pattern for w in plan.warnings]
    assert "nonexistent-dir/**" in warned
    assert str(plan.warnings[0]) == plan.warnings[0].message and "matches no file" in str(plan.warnings[0])
    assert "docs/**" not in warned and "**/*.md" not in warned and "test/**" not in warned
    assert "sgl-router/**" not in warned  # a built-in default that matches nothing is expected
    strict = plan_range(target, s["c0"], s["c8"], PathFilter(["docs/**", "sgl-router/**", "doc/**"], builtin=()))
    assert [w.pattern for w in strict.warnings] == ["sgl-router/**", "doc/**"]


# -- patch stack -----------------------------------------------------------------------------


def test_stack_loads_in_name_order_with_hash(target, history):
    stack = _stack(target, history)
    assert [p.name for p in stack.patches] == ["0001-nccl-env.patch", "0002-eagle3-capture.patch"]
    assert stack.touched_paths == {ENGINE, DEEPSEEK}
    assert len(stack.hash) == 16 and stack.hash != _stack(target, history, with_variant=False).hash


def test_stack_that_applies_everywhere(target, history):
    s = history.shas
    stack = _stack(target, history)
    checks = check_patches(target, s["c0"], s["c4"], stack)
    assert [c.ok for c in checks] == [True] * 5
    assert {c.applied.variants["0002-eagle3-capture.patch"] for c in checks} == {"0002-eagle3-capture.patch"}
    assert len({c.applied.hash for c in checks}) == 1
    # Only the first commit needs a real check: none of the others touch engine.py or deepseek_v2.py.
    assert [c.rechecked for c in checks] == [True, False, False, False, False]


def test_plan_skips_conflicts_and_picks_variants_by_range(target, history):
    s = history.shas
    stack = _stack(target, history)
    plan = plan_range(target, s["c0"], s["c8"], PathFilter(SGLANG_IGNORE_PATHS), stack, check_patches=True)
    by = {e.commit.sha: e for e in plan.entries}
    assert dict(by[s["c1"]].patch_variants)["0002-eagle3-capture.patch"] == "0002-eagle3-capture.patch"
    assert dict(by[s["c5"]].patch_variants)["0002-eagle3-capture.patch"] == "0002-eagle3-capture-v2.patch"
    assert by[s["c5"]].applied_hash != by[s["c1"]].applied_hash
    conflict = by[s["c6"]]
    assert conflict.skipped and not conflict.measure
    assert conflict.reason == f"patch conflict: 0001-nccl-env.patch ({ENGINE})"
    assert conflict.conflict.hunks and conflict.conflict.hunks[0].startswith(f"{ENGINE}:")
    assert by[s["c7"]].measure and not by[s["c7"]].skipped  # the stack applies again
    assert [e.commit.sha for e in plan.skipped] == [s["c6"]]
    assert plan.patch_hash == stack.hash


def test_incremental_check_agrees_with_full_check(target, history):
    s = history.shas
    stack = _stack(target, history)
    commits = target.first_parent_range(s["c0"], s["c8"])
    fast = stack.check_range(commits)
    for quick, c in zip(fast, commits):
        full = stack.check_at(c)
        assert quick.ok == full.ok
        assert (quick.applied.hash if quick.applied else None) == (full.applied.hash if full.applied else None)


def test_apply_in_worktree_and_conflict_error(target, history, tmp_path):
    s = history.shas
    stack = _stack(target, history)
    pool = WorktreePool(target, tmp_path / "cache")
    wt = pool.checkout(s["c5"])
    applied = stack.apply(wt)
    assert applied.variants == {"0001-nccl-env.patch": "0001-nccl-env.patch", "0002-eagle3-capture.patch": "0002-eagle3-capture-v2.patch"}
    assert "NCCL_PROTO=LL" in (wt / ENGINE).read_text()
    assert "ds 5 upstream eagle3 capture" in (wt / DEEPSEEK).read_text()
    assert "<<<<<<<" not in (wt / DEEPSEEK).read_text()  # the failed first variant was undone
    assert applied.hash == stack.check_at(s["c5"]).applied.hash
    # The patched tree hash differs from the commit's own tree: the build key sees the patches.
    assert worktree_tree_hash(wt) != target.git("rev-parse", f"{s['c5']}^{{tree}}").strip()
    assert worktree_tree_hash(wt, ["docs/**"]) == worktree_tree_hash(pool.checkout(s["c5"]), ["docs/**"])

    wt = pool.checkout(s["c6"])
    with pytest.raises(PatchError) as err:
        stack.apply(wt, target.resolve(s["c6"]))
    assert isinstance(err.value, PatchConflictError)
    assert err.value.patch == "0001-nccl-env.patch" and err.value.files == (ENGINE,)
    msg = str(err.value)
    assert "0001-nccl-env.patch" in msg and ENGINE in msg and s["c6"][:10] in msg and "never blamed" in msg
    assert "(upstream engine change)" in msg and "Hunks that did not apply" in msg
    status = subprocess.run(["git", "status", "--porcelain"], cwd=wt, capture_output=True, text=True, check=True)
    assert "UU" not in status.stdout  # no half-applied conflict left behind


def test_git_failure_while_applying_is_not_a_conflict(target, history, tmp_path):
    """A held index.lock (or a full disk) makes `git apply` die: that must stop the run, never skip the commit."""
    stack = _stack(target, history)
    wt = WorktreePool(target, tmp_path / "cache").checkout(history.shas["c5"])
    admin = Path(subprocess.run(["git", "rev-parse", "--git-dir"], cwd=wt, capture_output=True, text=True, check=True).stdout.strip())
    lock = (admin if admin.is_absolute() else wt / admin) / "index.lock"
    lock.write_text("")
    try:
        with pytest.raises(InfrastructureError) as err:
            stack.apply(wt, target.resolve(history.shas["c5"]))
    finally:
        lock.unlink()
    assert not isinstance(err.value, PatchError) and err.value.exit_code == 4
    assert "index.lock" in str(err.value)
    assert stack.apply(wt, target.resolve(history.shas["c5"])).variants  # fine once the lock is gone
    # git dies (status 128) inside `git apply` itself: the patch file vanished after the stack was read.
    copy = tmp_path / "patches"
    copy.mkdir()
    for patch in history.patch_dir.glob("*.patch"):
        (copy / patch.name).write_text(patch.read_text())
    stack = PatchStack.load(PatchesConfig(dir=copy), target)
    (copy / "0001-nccl-env.patch").unlink()
    wt = WorktreePool(target, tmp_path / "cache").checkout(history.shas["c1"])
    with pytest.raises(InfrastructureError, match="not a patch conflict"):
        stack.apply(wt, target.resolve(history.shas["c1"]))


def test_stack_from_branch(target, history, tmp_path):
    r, s = history.repo, history.shas
    r.switch("my-patches", create_at=s["c0"])
    r.commit("nccl env", {ENGINE: _edit(lines(40, "engine"), "engine 30\n", "engine 30 env\n")})
    r.commit("eagle3", {DEEPSEEK: _edit(lines(40, "ds"), "ds 30\n", "ds 30 eagle\n")})
    r.switch("main")
    stack = PatchStack.load(PatchesConfig(branch="my-patches", base=s["c0"]), target)
    try:
        assert [p.name for p in stack.patches] == ["0001-nccl-env.patch", "0002-eagle3.patch"]
        assert all(c.ok for c in check_patches(target, s["c0"], s["c8"], stack))
    finally:
        stack.cleanup()


def test_a_branch_stack_leaves_no_temp_dir(target, history, tmp_path, monkeypatch):
    """The patches a branch stack exports live in a temp dir its owner removes: leaving a ``with``
    block, a Workspace's close() (every command opens one), or a load that fails half-way."""
    r, s = history.repo, history.shas
    r.switch("lifetime-patches", create_at=s["c0"])
    r.commit("nccl env", {ENGINE: _edit(lines(40, "engine"), "engine 30\n", "engine 30 env\n")})
    r.switch("main")
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    config = PatchesConfig(branch="lifetime-patches", base=s["c0"])

    with PatchStack.load(config, target) as stack:
        assert [p.name for p in private.iterdir()] and all(p.name.startswith("perfbisect-patches-") for p in private.iterdir())
        assert stack.check_at(s["c8"]).ok
    assert list(private.iterdir()) == []
    stack.cleanup()  # idempotent

    bad_variant = PatchesConfig(branch="lifetime-patches", base=s["c0"], variants=(PatchVariant(patch="nope.patch", alternatives=()),))
    with pytest.raises(ConfigError, match="nope.patch"):
        PatchStack.load(bad_variant, target)
    assert list(private.iterdir()) == []

    toml = tmp_path / "perfbisect.toml"
    toml.write_text(
        f"[target]\nrepo = {json.dumps(str(r.path))}\ncache_dir = {json.dumps(str(tmp_path / 'cache'))}\n"
        f"[patches]\nbranch = \"lifetime-patches\"\nbase = \"{s['c0']}\"\n"
        '[server]\ncommand = ["true", "{port}"]\n[modes.baseline]\n'
    )
    with Workspace.open(load_config(toml), tmp_path / "r.sqlite") as ws:
        checks = patches_check(ws, s["c0"], s["c8"])
        assert [c.ok for c in checks] == [True] * 9
        assert len(list(private.iterdir())) == 1
    assert list(private.iterdir()) == []


def test_patch_input_errors(target, history, tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        PatchStack.load(PatchesConfig(dir=tmp_path / "nope"), target)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match=r"no \*\.patch or \*\.diff files \(it holds: notes.txt\)"):
        PatchStack.load(PatchesConfig(dir=empty), target)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "0001-real.patch").write_text((history.patch_dir / "0001-nccl-env.patch").read_text())
    (bad / "0002-garbage.patch").write_text("this is not a diff\n")
    with pytest.raises(ConfigError) as err:  # a broken patch file is the config's fault, not every commit's
        PatchStack.load(PatchesConfig(dir=bad), target)
    assert "0002-garbage.patch" in str(err.value) and "format-patch" in str(err.value)
    with pytest.raises(ConfigError, match="0009-missing.patch"):
        PatchStack.load(
            PatchesConfig(dir=history.patch_dir, variants=(PatchVariant(patch="0009-missing.patch", alternatives=(history.alt_patch,)),)),
            target,
        )


# -- worktrees -------------------------------------------------------------------------------


def _worktree_paths(repo_path: Path) -> list[str]:
    out = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=repo_path, capture_output=True, text=True, check=True).stdout
    return [l.split(" ", 1)[1] for l in out.splitlines() if l.startswith("worktree ")]


def test_worktree_reuse_leaves_no_stray_files(target, history, tmp_path):
    s = history.shas
    pool = WorktreePool(target, tmp_path / "cache")
    wt = pool.checkout(s["c1"])
    (wt / "stray.txt").write_text("left over")
    (wt / "build").mkdir()
    (wt / "build" / "kernel.so").write_text("ignored build product")
    (wt / ENGINE).write_text("edited")
    again = pool.checkout(s["c6"])
    assert again == wt
    assert not (wt / "stray.txt").exists() and not (wt / "build").exists()
    assert (wt / ENGINE).read_text() == history.repo.read(s["c6"], ENGINE)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=wt, capture_output=True, text=True, check=True).stdout.strip()
    assert head == s["c6"]
    # The user's own checkout is untouched.
    assert (history.repo.path / ENGINE).read_text() == history.repo.read("HEAD", ENGINE)


def test_gc_removes_worktrees(target, history, tmp_path):
    pool = WorktreePool(target, tmp_path / "cache", size=2)
    a = pool.checkout(history.shas["c1"])
    b = pool.checkout(history.shas["c2"])
    assert a != b and str(a) in _worktree_paths(target.path)
    removed = pool.gc()
    assert set(removed) == {a, b}
    assert not a.exists() and not b.exists()
    assert str(a) not in _worktree_paths(target.path) and str(b) not in _worktree_paths(target.path)


def test_layout_slots_have_paths_of_different_lengths_and_are_reused_pruned_and_gced(target, history, tmp_path):
    """A trial's layout picks a slot: each slot a path of its own length, reused and cleaned like any."""
    s = history.shas
    pool = WorktreePool(target, tmp_path / "cache", size=4)
    paths = [pool.checkout(s["c1"], slot=i) for i in range(4)]
    assert paths[0].name == slot_name(0) == "wt0"  # the fixed layout's slot: where worktrees always were
    lengths = [len(str(p)) for p in paths]
    assert all(b - a >= 20 for a, b in zip(lengths, lengths[1:])), lengths
    assert all(len(slot_name(i)) < 255 for i in range(8))
    assert len({n % 16 for n in lengths}) == 4  # different alignments, not just different lengths
    (paths[2] / "stray.txt").write_text("left over")
    assert pool.checkout(s["c6"], slot=2) == paths[2]  # reused: reset, cleaned, checked out
    assert not (paths[2] / "stray.txt").exists() and (paths[2] / ENGINE).read_text() == history.repo.read(s["c6"], ENGINE)
    assert pool.path(3) == paths[3]
    with pytest.raises(ValueError, match="slot 4"):
        pool.checkout(s["c1"], slot=4)
    history.repo.git("worktree", "lock", str(paths[3]))
    pool = WorktreePool(target, tmp_path / "cache", size=4)  # reopening prunes and unlocks every slot
    assert pool.checkout(s["c2"], slot=3) == paths[3]
    assert set(pool.gc()) == set(paths)
    assert not any(p.exists() for p in paths) and not (set(map(str, paths)) & set(_worktree_paths(target.path)))


def test_stale_lock_and_locked_worktree_are_recovered(target, history, tmp_path):
    pool = WorktreePool(target, tmp_path / "cache")
    wt = pool.checkout(history.shas["c1"])
    # What a killed run leaves: a worktree lock and an index.lock in its admin dir.
    history.repo.git("worktree", "lock", "--reason", "crashed run", str(wt))
    admin = Path(history.repo.git("rev-parse", "--absolute-git-dir", cwd=wt).strip())
    (admin / "index.lock").write_text("")
    with pytest.raises(subprocess.CalledProcessError):
        history.repo.git("reset", "--hard", cwd=wt)  # git itself is stuck on the lock
    pool = WorktreePool(target, tmp_path / "cache")  # opening the pool recovers
    assert not (admin / "index.lock").exists()
    wt = pool.checkout(history.shas["c2"])
    assert (wt / "docs/index.md").read_text() == "# Docs\n"
    pool.gc()
    assert str(wt) not in _worktree_paths(target.path)


def test_deleted_worktree_directory_is_recreated(target, history, tmp_path):
    import shutil

    pool = WorktreePool(target, tmp_path / "cache")
    wt = pool.checkout(history.shas["c1"])
    shutil.rmtree(wt)  # e.g. the user cleaned the cache by hand
    pool = WorktreePool(target, tmp_path / "cache")
    assert pool.checkout(history.shas["c2"]) == wt and (wt / "docs/index.md").exists()
    pool.gc()


def test_run_git_in_a_missing_directory_is_gits_error_not_a_run_elsewhere(tmp_path):
    from perfbisect.git.gitrepo import run_git

    status, out, err = run_git(tmp_path / "gone", ["rev-parse", "--show-toplevel"])
    assert status != 0 and out == "" and "gone" in err
