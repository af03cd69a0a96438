"""`perfbisect patches carry`: the patch stack carried over each boundary of a generated history, as `git rebase`
would — real git, real worktrees, a real config file the carry appends its variants to."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from perfbisect.git.carry import claims
from tests.cli_runner import run_command
from tests.repo_factory import RepoFactory, target_table

LINES = [f"v{i} = {i}\n" for i in range(40)]


def text(**changes: str) -> str:
    """The module with some lines replaced: text(l10="x = 2\\n")."""
    lines = list(LINES)
    for key, value in changes.items():
        lines[int(key[1:])] = value
    return "".join(lines)


def history(tmp_path: Path) -> tuple[RepoFactory, dict[str, str], Path]:
    """c0..c9 with two boundaries (c4: upstream edits the line next to patch 1's; c6: upstream changes the line
    patch 2 changes) and a rename at c8 (git follows it by itself); the stack made at c0 as format-patch files."""
    r = RepoFactory(tmp_path / "target")
    c = {"c0": r.commit("base", {"python/m.py": text(), "python/other.py": "a = 0\n"})}
    for i in (1, 2, 3):
        c[f"c{i}"] = r.commit(f"upstream {i}", {"python/other.py": f"a = {i}\n"})
    c["c4"] = r.commit("upstream: touch the line before patch 1's", {"python/m.py": text(l9="v9 = 'nine'\n")})
    c["c5"] = r.commit("upstream 5", {"python/other.py": "a = 5\n"})
    c["c6"] = r.commit("upstream: change the line patch 2 changes", {"python/m.py": text(l9="v9 = 'nine'\n", l25="v25 = 'x'\n")})
    c["c7"] = r.commit("upstream 7", {"python/other.py": "a = 7\n"})
    c["c8"] = r.commit("upstream: move the module", {"python/m.py": None, "python/n.py": text(l9="v9 = 'nine'\n", l25="v25 = 'x'\n")})
    c["c9"] = r.commit("upstream 9", {"python/other.py": "a = 9\n"})
    patches = tmp_path / "patches"
    r.make_patch(c["c0"], {"python/m.py": text(l10="v10 = 'patched'\n")}, patches, "patch one", name="0001-one.patch")
    r.make_patch(c["c0"], {"python/m.py": text(l10="v10 = 'patched'\n", l25="v25 = 'patched'\n")}, patches, "patch two",
                 name="0002-two.patch")
    # 0002 was made on top of c0 with 0001's change in its context: rebuild it on top of 0001, as format-patch would.
    scratch = tmp_path / "scratch"
    r.git("worktree", "add", "-q", "--detach", str(scratch), c["c0"])
    r.git("apply", "--index", str(patches / "0001-one.patch"), cwd=scratch)
    r.git("commit", "-qm", "patch one", cwd=scratch)
    (scratch / "python" / "m.py").write_text(text(l10="v10 = 'patched'\n", l25="v25 = 'patched'\n"))
    r.git("commit", "-qam", "patch two", cwd=scratch)
    (patches / "0002-two.patch").write_text(r.git("format-patch", "-1", "--stdout", "--full-index", "HEAD", cwd=scratch) + "\n")
    r.git("worktree", "remove", "--force", str(scratch))
    cfg = tmp_path / "perfbisect.toml"
    cfg.write_text(f"""
{target_table(r.path, tmp_path / "cache")}
[patches]
dir = "patches"

[workload]
kind = "command"
command = ["{{python}}", "-c", "print('{{\\"ops_per_s\\": 1}}')"]
metric = "ops_per_s"
""")
    return r, c, cfg


def carry(cfg: Path, *args: str):
    return run_command("patches", "carry", *args, "-c", str(cfg))


def resolve(worktree: Path, rel: str, content: str) -> None:
    (worktree / rel).write_text(content)


def test_two_boundaries_carried_one_resolution_flagged_and_a_rename_carried_by_git(tmp_path):
    r, c, cfg = history(tmp_path)
    check = run_command("patches", "check", f"good={c['c0']}", f"bad={c['c9']}", "-c", str(cfg))
    assert "6 conflict" in check.stdout and "to carry the stack over them: perfbisect patches carry" in check.stdout
    worktree = tmp_path / "cache" / "carry" / "worktree"

    first = carry(cfg, f"good={c['c0']}", f"bad={c['c9']}")
    assert first.returncode == 3, first.stderr
    assert f"0001-one.patch stops applying at {c['c4'][:10]} (4 commits into the range)" in first.stdout
    assert "resolve the conflicts in" in first.stdout and "python/m.py" in first.stdout
    assert "<<<<<<<" in (worktree / "python" / "m.py").read_text()  # left in place, as git rebase leaves them
    # Resolved as a user would: upstream's line 9 and the patch's line 10 both kept.
    resolve(worktree, "python/m.py", text(l9="v9 = 'nine'\n", l10="v10 = 'patched'\n"))
    second = carry(cfg, "--continue")
    assert second.returncode == 3, second.stderr
    assert f"0001-one.patch at {c['c4'][:10]}" in second.stdout and "resolved → " in second.stdout
    assert "DIFFERS" not in second.stdout.splitlines()[0]  # it adds and removes what the patch did
    assert f"0002-two.patch stops applying at {c['c6'][:10]}" in second.stdout
    # This time the resolution changes what the patch adds: flagged, in the output and in the file.
    resolve(worktree, "python/m.py", text(l9="v9 = 'nine'\n", l10="v10 = 'patched'\n", l25="v25 = 'both'\n"))
    third = carry(cfg, "--continue")
    assert third.returncode == 0, third.stdout + third.stderr
    flagged = next(line for line in third.stdout.splitlines() if line.startswith("0002-two.patch at"))
    assert "DIFFERS from the patch: adds 1 line" in flagged and "v25 = 'both'" in flagged
    variants = sorted((tmp_path / "patches" / "variants").glob("*.patch"))
    two = next(p for p in variants if p.name == f"0002-two@{c['c6'][:10]}.patch")
    assert "Perfbisect-Differs: adds 1 line" in two.read_text()
    # The rename at c8: git carried both patches by itself, and the range now applies end to end.
    assert third.stdout.count("carried by git") == 2 and f"at {c['c8'][:10]}" in third.stdout
    assert "the stack applies at every commit of the range (10 commits); 4 new versions written by this carry" in third.stdout
    assert len(variants) == 4
    after = run_command("patches", "check", f"good={c['c0']}", f"bad={c['c9']}", "-c", str(cfg)).stdout
    assert after.count("CONFLICT") == 0 and "the stack applies end to end" in after
    assert f"0002-two@{c['c6'][:10]}.patch (DIFFERS)" in after and f"0002-two@{c['c6'][:10]}.patch differs from the version it replaces: adds 1 line" in after
    plan = run_command("plan", f"good={c['c0']}", f"bad={c['c9']}", "-c", str(cfg))
    assert plan.returncode == 0 and "0 untestable" in plan.stdout, plan.stdout
    assert cfg.read_text().count("[[patches.variants]]") == 4 and not worktree.exists()


def test_abort_then_start_again_and_continue_refuses_what_is_unresolved(tmp_path):
    r, c, cfg = history(tmp_path)
    worktree = tmp_path / "cache" / "carry" / "worktree"
    assert carry(cfg, f"good={c['c0']}", f"bad={c['c9']}").returncode == 3
    status = carry(cfg, "--status")
    assert f"carrying 0001-one.patch over {c['c4'][:10]}" in status.stdout and str(worktree) in status.stdout
    again = carry(cfg, f"good={c['c0']}", f"bad={c['c9']}")
    assert again.returncode == 2 and "is in progress" in again.stderr and "--continue" in again.stderr
    unresolved = carry(cfg, "--continue")
    assert unresolved.returncode == 2 and "still in conflict" in unresolved.stderr and "python/m.py" in unresolved.stderr
    aborted = carry(cfg, "--abort")
    assert aborted.returncode == 0 and "dropped the carry of 0001-one.patch" in aborted.stdout
    assert not worktree.exists() and carry(cfg, "--status").stdout.strip() == "no carry in progress"
    assert "[[patches.variants]]" not in cfg.read_text()
    # Started again: the same boundary; resolved; the next one; stopped there (the user goes home), then on.
    assert carry(cfg, f"good={c['c0']}", f"bad={c['c9']}").returncode == 3
    resolve(worktree, "python/m.py", text(l9="v9 = 'nine'\n", l10="v10 = 'patched'\n"))
    assert carry(cfg, "--continue").returncode == 3
    kept = cfg.read_text().count("[[patches.variants]]")
    assert kept == 1
    assert carry(cfg, "--abort").stdout.count("the versions written before it stay") == 1
    assert cfg.read_text().count("[[patches.variants]]") == 1  # nothing written is lost by an abort
    restart = carry(cfg, f"good={c['c0']}", f"bad={c['c9']}")
    assert restart.returncode == 3 and f"0002-two.patch stops applying at {c['c6'][:10]}" in restart.stdout
    resolve(worktree, "python/m.py", text(l9="v9 = 'nine'\n", l10="v10 = 'patched'\n", l25="v25 = 'patched'\n"))
    done = carry(cfg, "--continue")
    # It adds what the patch added; upstream had changed the line it replaces, so it removes another: said.
    assert done.returncode == 0 and "DIFFERS from the patch: removes 1 line" in done.stdout, done.stdout
    assert "no longer adds" not in done.stdout and " adds " not in done.stdout.split("DIFFERS", 1)[1].splitlines()[0]


def test_claims_compare_added_and_removed_lines_context_aside():
    original = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n ctx\n-x = 1\n+x = 2\n ctx\n"
    moved = "diff --git a/n.py b/n.py\n--- a/n.py\n+++ b/n.py\n@@ -40,3 +40,3 @@\n other ctx\n-x = 1\n+x = 2\n more\n"
    assert claims(original, moved).same
    changed = claims(original, moved.replace("+x = 2", "+x = 3"))
    assert changed.added == ("x = 3",) and changed.dropped == ("x = 2",) and not changed.same
    assert "adds 1 line ('x = 3')" in changed.describe() and "no longer adds 1 line ('x = 2')" in changed.describe()


def test_a_branch_with_two_rebased_versions_gives_each_commit_the_version_based_nearest_to_it(tmp_path):
    """The user's stack is a branch: made on c2 (tagged stack-v1), rebased onto c6 past upstream's change to the
    line it patches at c5. With the earlier version named, every commit of c0..c9 has a version that applies."""
    r = RepoFactory(tmp_path / "target")
    c = {"c0": r.commit("base", {"python/m.py": text(), "python/other.py": "a = 0\n"})}
    for i in range(1, 10):
        files = {"python/other.py": f"a = {i}\n"}
        if i == 5:
            files = {"python/m.py": text(l10="v10 = 'upstream'\n")}
        c[f"c{i}"] = r.commit(f"upstream {i}", files)
    r.git("branch", "local", c["c2"])
    r.git("worktree", "add", "-q", str(tmp_path / "local"), "local")
    (tmp_path / "local" / "python" / "m.py").write_text(text(l10="v10 = 'patched'\n", l11="v11 = 'mine'\n"))
    r.git("commit", "-qam", "local: the hidden-state fix", cwd=tmp_path / "local")
    r.git("tag", "stack-v1", "local")
    # Rebased onto c6 as the user did it: upstream's line 10 kept, the fix moved to line 11 only.
    r.git("reset", "-q", "--hard", c["c6"], cwd=tmp_path / "local")
    (tmp_path / "local" / "python" / "m.py").write_text(text(l10="v10 = 'upstream'\n", l11="v11 = 'mine'\n"))
    r.git("commit", "-qam", "local: the hidden-state fix", cwd=tmp_path / "local")
    r.git("worktree", "remove", "--force", str(tmp_path / "local"))
    cfg = tmp_path / "perfbisect.toml"
    base_cfg = f"""
{target_table(r.path, tmp_path / "cache")}
[workload]
kind = "command"
command = ["{{python}}", "-c", "print('{{\\"ops_per_s\\": 1}}')"]
metric = "ops_per_s"

[patches]
branch = "local"
base = "main"
"""
    cfg.write_text(base_cfg.replace('base = "main"', f'base = "{c["c6"]}"'))
    only_newest = run_command("patches", "check", f"good={c['c0']}", f"bad={c['c9']}", "-c", str(cfg))
    assert "5 conflict" in only_newest.stdout, only_newest.stdout  # c0..c4: the rebased version does not apply
    cfg.write_text(base_cfg + 'versions = ["stack-v1"]\n')
    both = run_command("patches", "check", f"good={c['c0']}", f"bad={c['c9']}", "-c", str(cfg))
    assert both.returncode == 0 and "0 conflict" in both.stdout and "the stack applies end to end" in both.stdout, both.stdout
    v1 = r.rev("stack-v1")[:7]
    rows = [line for line in both.stdout.splitlines() if "applies" in line and ".patch" in line]
    assert rows[0].startswith(f"{c['c0'][:10]}..{c['c4'][:10]} (5 commits)  applies") and f"@{v1}.patch" in rows[0]
    assert rows[1].startswith(f"{c['c5'][:10]}..{c['c9'][:10]} (5 commits)  applies") and "@" not in rows[1]
    # A trial takes the same version: the worktree at c1 holds v1's change, at c8 the rebased one.
    db = tmp_path / "r.sqlite"
    for rev in (c["c1"], c["c8"]):
        assert run_command("measure", rev, "-n", "1", "-c", str(cfg), "--db", str(db)).returncode == 0
    import sqlite3

    con = sqlite3.connect(db)
    hashes = [h for (h,) in con.execute("select patch_hash from trials order by id")]
    con.close()
    assert len(set(hashes)) == 2


def test_a_file_upstream_deleted_stops_the_carry_with_gits_modify_delete_conflict(tmp_path):
    """Upstream deletes the file the patch edits (SGLang's Spec V1 worker at 28c1a3cb45): not carried by git — a
    modify/delete conflict has no markers, only the index says so; the user moves the change, and the new version
    says which file it edits now."""
    r = RepoFactory(tmp_path / "target")
    c0 = r.commit("base", {"python/old_worker.py": text(), "python/other.py": "a = 0\n"})
    c1 = r.commit("upstream 1", {"python/other.py": "a = 1\n"})
    c2 = r.commit("upstream: deprecate the old worker", {"python/old_worker.py": None,
                                                         "python/new_worker.py": "def run():\n    return 2\n"})
    c3 = r.commit("upstream 3", {"python/other.py": "a = 3\n"})
    patches = tmp_path / "patches"
    r.make_patch(c0, {"python/old_worker.py": text(l10="v10 = 'patched'\n")}, patches, "worker fix", name="0001-fix.patch")
    cfg = tmp_path / "perfbisect.toml"
    cfg.write_text(f'[target]\nrepo = {json.dumps(str(r.path))}\npython = {json.dumps(sys.executable)}\n'
                   f'cache_dir = {json.dumps(str(tmp_path / "cache"))}\n\n[patches]\ndir = "patches"\n\n'
                   '[workload]\nkind = "command"\ncommand = ["true"]\nmetric = "x"\n')
    first = carry(cfg, f"good={c0}", f"bad={c3}")
    assert first.returncode == 3 and "git carried" not in first.stdout, first.stdout
    assert "CONFLICT (modify/delete): python/old_worker.py" in first.stdout and "resolve its conflicts" in carry(cfg, "--status").stdout
    worktree = tmp_path / "cache" / "carry" / "worktree"
    (worktree / "python" / "old_worker.py").unlink()  # the user moves the change where the code went
    (worktree / "python" / "new_worker.py").write_text("def run():\n    return 2  # patched\n")
    done = carry(cfg, "--continue")
    assert done.returncode == 0, done.stdout + done.stderr
    variant = next((tmp_path / "patches" / "variants").glob("0001-fix@*.patch")).read_text()
    assert "Files: python/new_worker.py (the version it replaces: python/old_worker.py)" in variant
    assert "Perfbisect-Differs:" in variant and "old_worker.py |" not in variant.split("---\n", 1)[0]
    assert c1 and "DIFFERS" in done.stdout
