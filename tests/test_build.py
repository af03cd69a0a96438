"""Build steps and the content-addressed cache, on real worktrees and real subprocesses."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from perfbisect.measure.build import BuildCache, run_build
from perfbisect.settings import BuildStep
from perfbisect.errors import BuildError
from perfbisect.git.gitrepo import TargetRepo
from perfbisect.git.worktrees import WorktreePool
from tests.repo_factory import RepoFactory

KERNEL_SRC = "sgl-kernel/csrc/moe.cu"
KERNEL_OUT = "sgl-kernel/build/kernel.so"

# A stand-in compiler: derives the "binary" from the source and counts its runs in a file outside
# the worktree, so the tests can see whether the step really ran.
COMPILE = (
    "import pathlib, sys\n"
    "src = pathlib.Path('sgl-kernel/csrc/moe.cu').read_text()\n"
    "out = pathlib.Path('sgl-kernel/build'); out.mkdir(parents=True, exist_ok=True)\n"
    "(out / 'kernel.so').write_text('compiled:' + src)\n"
    "with open(sys.argv[1], 'a') as fh: fh.write('run\\n')\n"
    "print('compiled', len(src), 'bytes')\n"
)


@pytest.fixture()
def setup(tmp_path):
    r = RepoFactory(tmp_path / "sglang")
    shas = {
        "c0": r.commit("base", {KERNEL_SRC: "kernel v1\n", "python/sglang/srt/engine.py": "a = 1\n", ".gitignore": "build/\n"}),
    }
    shas["py"] = r.commit("python only", {"python/sglang/srt/engine.py": "a = 2\n"})
    shas["kernel"] = r.commit("kernel change", {KERNEL_SRC: "kernel v2\n"})
    repo = TargetRepo(r.path)
    pool = WorktreePool(repo, tmp_path / "cache")
    counter = tmp_path / "kernel-runs.txt"
    steps = (
        BuildStep(
            name="sgl-kernel",
            command=("{python}", "-c", COMPILE, str(counter)),
            paths=("sgl-kernel/**",),
            artifacts=(KERNEL_OUT,),
        ),
        BuildStep(name="python", command=("{python}", "-c", "print('pip install -e python --no-deps')"), python_only=True),
    )
    cache = BuildCache(tmp_path / "cache" / "builds", max_bytes=10**6)
    return r, shas, pool, steps, cache, counter, tmp_path / "logs"


def _runs(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def test_cache_miss_then_hit_restores_artefacts(setup):
    r, shas, pool, steps, cache, counter, logs = setup
    wt = pool.checkout(shas["c0"])
    first = run_build(steps, wt, shas["c0"], "stack1", cache, sys.executable, logs)
    assert [s.cached for s in first.steps] == [False, False]
    assert first.steps[0].stored and _runs(counter) == 1
    assert first.steps[1].python_only and not first.steps[1].stored

    # A Python-only commit: the kernel key is unchanged, its artefact comes back after the clean.
    wt = pool.checkout(shas["py"])
    assert not (wt / KERNEL_OUT).exists()
    second = run_build(steps, wt, shas["py"], "stack1", cache, sys.executable, logs)
    assert second.steps[0].cached and second.steps[0].key == first.steps[0].key
    assert not second.steps[1].cached  # python-only steps without artefacts always run (cheap)
    assert _runs(counter) == 1
    assert (wt / KERNEL_OUT).read_text() == "compiled:kernel v1\n"
    assert second.hash != first.hash or second.steps[1].key != first.steps[1].key
    assert "cache hit" in Path(second.steps[0].log_path).read_text()

    # A kernel change is a miss and builds the new source.
    wt = pool.checkout(shas["kernel"])
    third = run_build(steps, wt, shas["kernel"], "stack1", cache, sys.executable, logs)
    assert not third.steps[0].cached and _runs(counter) == 2
    assert (wt / KERNEL_OUT).read_text() == "compiled:kernel v2\n"


def test_patch_stack_is_part_of_the_key(setup):
    r, shas, pool, steps, cache, counter, logs = setup
    wt = pool.checkout(shas["c0"])
    a = run_build(steps, wt, shas["c0"], "stack1", cache, sys.executable, logs)
    wt = pool.checkout(shas["c0"])
    b = run_build(steps, wt, shas["c0"], "stack2", cache, sys.executable, logs)
    assert a.steps[0].key != b.steps[0].key and not b.steps[0].cached and _runs(counter) == 2
    # A patch changing the kernel source changes the key even under the same stack hash: the key
    # is computed from the patched index, not the commit's tree.
    wt = pool.checkout(shas["c0"])
    (wt / KERNEL_SRC).write_text("kernel v1 patched\n")
    r.git("add", KERNEL_SRC, cwd=wt)
    c = run_build(steps, wt, shas["c0"], "stack1", cache, sys.executable, logs)
    assert c.steps[0].key != a.steps[0].key and not c.steps[0].cached


def test_logs_one_file_per_step_per_commit(setup):
    r, shas, pool, steps, cache, counter, logs = setup
    for name in ("c0", "py"):
        wt = pool.checkout(shas[name])
        run_build(steps, wt, shas[name], "s", cache, sys.executable, logs)
    files = sorted(str(p.relative_to(logs)) for p in logs.rglob("*.log"))
    assert files == sorted(
        [f"{shas['c0'][:12]}/01-sgl-kernel.log", f"{shas['c0'][:12]}/02-python.log", f"{shas['py'][:12]}/01-sgl-kernel.log", f"{shas['py'][:12]}/02-python.log"]
    )
    assert "compiled 10 bytes" in (logs / f"{shas['c0'][:12]}/01-sgl-kernel.log").read_text()


def test_failing_step_raises_with_log_tail(setup):
    r, shas, pool, steps, cache, counter, logs = setup
    wt = pool.checkout(shas["c0"])
    script = "import sys\nfor i in range(50): print(f'compile line {i}')\nsys.exit(3)"
    failing = (BuildStep(name="broken", command=("{python}", "-c", script), artifacts=("x",)),)
    with pytest.raises(BuildError) as err:
        run_build(failing, wt, shas["c0"], "s", cache, sys.executable, logs)
    e = err.value
    assert "exit status 3" in str(e) and "broken" in str(e) and shas["c0"][:10] in str(e)
    assert Path(e.log_path).is_file() and e.log_path in str(e)
    assert e.log_tail.splitlines()[-1] == "compile line 49"
    assert "compile line 19" not in e.log_tail and "compile line 20" in e.log_tail and len(e.log_tail.splitlines()) == 30


def test_command_not_found(setup):
    r, shas, pool, steps, cache, counter, logs = setup
    wt = pool.checkout(shas["c0"])
    missing = (BuildStep(name="cmake", command=("no-such-compiler-xyz", "--build")),)
    with pytest.raises(BuildError, match="command not found: 'no-such-compiler-xyz'"):
        run_build(missing, wt, shas["c0"], "s", cache, sys.executable, logs)


def test_timeout_stops_the_step(setup):
    r, shas, pool, steps, cache, counter, logs = setup
    wt = pool.checkout(shas["c0"])
    slow = (BuildStep(name="slow", command=("{python}", "-c", "import time; time.sleep(30)"), timeout_s=0.5),)
    start = time.monotonic()
    with pytest.raises(BuildError, match="timeout"):
        run_build(slow, wt, shas["c0"], "s", cache, sys.executable, logs)
    assert time.monotonic() - start < 10


def test_missing_declared_artefact(setup):
    r, shas, pool, steps, cache, counter, logs = setup
    wt = pool.checkout(shas["c0"])
    step = (BuildStep(name="noop", command=("{python}", "-c", "pass"), artifacts=("out/lib.so",)),)
    with pytest.raises(BuildError, match="did not produce the artefact 'out/lib.so'"):
        run_build(step, wt, shas["c0"], "s", cache, sys.executable, logs)


def test_cache_evicts_least_recently_used_even_when_the_clock_does_not_move(tmp_path, monkeypatch):
    # Every use lands in one clock tick (as on a filesystem that keeps mtimes to the second):
    # the order of uses must still decide what is evicted, with no sleep between them.
    monkeypatch.setattr(time, "time_ns", lambda: 1_700_000_000_000_000_000)
    wt = tmp_path / "wt"
    wt.mkdir()
    cache = BuildCache(tmp_path / "builds", max_bytes=2500)
    for key in ("a", "b"):
        (wt / "lib.so").write_bytes(key.encode() * 1000)
        cache.put(key, wt, ["lib.so"], None, {})
    assert cache.get("a") is not None  # 'a' is now the most recently used
    (wt / "lib.so").write_bytes(b"c" * 1000)
    cache.put("c", wt, ["lib.so"], None, {})
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None
    assert cache.total_bytes() == 2000
    # The next command opens the cache anew and carries the order on: 'a' used after 'c'.
    cache = BuildCache(tmp_path / "builds", max_bytes=2500)
    assert cache.get("a") is not None
    (wt / "lib.so").write_bytes(b"d" * 1000)
    cache.put("d", wt, ["lib.so"], None, {})
    assert cache.get("c") is None and cache.get("a") is not None and cache.get("d") is not None
    # Restoring brings back the exact bytes, also under a directory that does not exist yet.
    target = tmp_path / "other"
    target.mkdir()
    assert cache.restore(cache.get("a"), target) == ["lib.so"]
    assert (target / "lib.so").read_bytes() == b"a" * 1000


def test_cache_restore_never_writes_through_a_committed_symlink(setup, tmp_path):
    """A hostile commit makes the artefact's directory a symlink out of the worktree: the cached
    artefact is not restored through it (nothing lands outside); the step runs for real instead."""
    import dataclasses
    import os

    from perfbisect.measure.build import UnsafeRestore

    r, shas, pool, steps, cache, counter, logs = setup
    outside = tmp_path / "outside"
    outside.mkdir()
    step = dataclasses.replace(steps[0], paths=("sgl-kernel/csrc/**",))  # the symlink leaves the key alone
    wt = pool.checkout(shas["kernel"])
    built = run_build((step,), wt, shas["kernel"], "s", cache, sys.executable, logs)
    assert built.steps[0].stored
    os.symlink(outside, r.path / "sgl-kernel" / "build")
    evil = r.commit("hostile: build directory is a symlink")
    wt = pool.checkout(evil)
    entry = cache.get(built.steps[0].key)
    with pytest.raises(UnsafeRestore, match="symlink"):
        cache.restore(entry, wt)
    assert list(outside.iterdir()) == []
    again = run_build((step,), wt, evil, "s", cache, sys.executable, logs)
    assert not again.steps[0].cached and _runs(counter) == 2
    assert "build cache not used" in Path(again.steps[0].log_path).read_text()


def test_a_step_failing_on_a_full_disk_stops_the_run_instead_of_skipping_the_commit(setup):
    """ENOSPC is the machine's fault: InfrastructureError (exit 4), never a BuildError (a skip)."""
    from perfbisect.errors import InfrastructureError

    r, shas, pool, steps, cache, counter, logs = setup
    full = BuildStep(name="pip", command=("{python}", "-c",
                     "import sys; print('ERROR: Could not install packages due to an OSError: [Errno 28] "
                     "No space left on device'); sys.exit(1)"))
    wt = pool.checkout(shas["c0"])
    with pytest.raises(InfrastructureError, match="No space left on device") as err:
        run_build((full,), wt, shas["c0"], "s", cache, sys.executable, logs)
    assert not isinstance(err.value, BuildError) and err.value.exit_code == 4
    # An ordinary failure is still the commit's: a BuildError, so the commit is skipped.
    broken = BuildStep(name="compile", command=("{python}", "-c", "import sys; print('syntax error'); sys.exit(1)"))
    with pytest.raises(BuildError):
        run_build((broken,), wt, shas["c0"], "s", cache, sys.executable, logs)


# Writes the absolute path it was told ({worktree}) into its artefact, as a CMake cache or an RPATH would.
EMBED_PATH = (
    "import pathlib, sys\n"
    "out = pathlib.Path('sgl-kernel/build'); out.mkdir(parents=True, exist_ok=True)\n"
    "(out / 'paths.txt').write_text(sys.argv[1] + '\\n')\n"
    "with open(sys.argv[2], 'a') as fh: fh.write('run\\n')\n"
)


def test_artefacts_follow_a_commit_into_worktree_slots_of_other_path_lengths(setup, tmp_path):
    """A layout checks a commit out into slots whose paths differ in length: an artefact stored by
    its relative path comes back intact in any slot; one whose step was told the absolute path
    ({worktree}) is only restored into the slot it was built in. The build's identity is the same."""
    r, shas, _, steps, cache, counter, logs = setup
    pool = WorktreePool(TargetRepo(r.path), tmp_path / "slots", size=3)
    embed_runs = tmp_path / "embed-runs.txt"
    embed = BuildStep(name="cmake", command=("{python}", "-c", EMBED_PATH, "{worktree}", str(embed_runs)),
                      paths=("sgl-kernel/**",), artifacts=("sgl-kernel/build/paths.txt",))
    steps = (steps[0], embed)
    slot0 = pool.checkout(shas["c0"], slot=0)
    first = run_build(steps, slot0, shas["c0"], "s", cache, sys.executable, logs)
    slot2 = pool.checkout(shas["c0"], slot=2)
    assert len(str(slot2)) - len(str(slot0)) >= 40
    again = run_build(steps, slot2, shas["c0"], "s", cache, sys.executable, logs)
    assert again.steps[0].cached and _runs(counter) == 1  # path-free artefact: restored into the other slot
    assert (slot2 / KERNEL_OUT).read_text() == "compiled:kernel v1\n"
    assert not again.steps[1].cached and _runs(embed_runs) == 2  # told the path: built again there
    assert (slot2 / "sgl-kernel/build/paths.txt").read_text() == f"{slot2}\n"
    assert again.hash == first.hash and [s.key for s in again.steps] == [s.key for s in first.steps]
    back = run_build(steps, pool.checkout(shas["c0"], slot=0), shas["c0"], "s", cache, sys.executable, logs)
    assert back.steps[1].cached and _runs(embed_runs) == 2
    assert (slot0 / "sgl-kernel/build/paths.txt").read_text() == f"{slot0}\n"


def test_an_entry_of_an_older_perfbisect_is_ordered_by_its_stamp_files_mtime(tmp_path):
    # Older perfbisects left `used` empty and kept the last use in its mtime: such an entry is evicted
    # in that order among entries that carry a stamp, not first nor never.
    wt = tmp_path / "wt"
    wt.mkdir()
    cache = BuildCache(tmp_path / "builds", max_bytes=10_000)
    for key in ("old", "new"):
        (wt / "lib.so").write_bytes(key[0].encode() * 500)
        cache.put(key, wt, ["lib.so"], None, {})
    old = cache.entries_dir / "old"
    (old / "used").write_text("")
    new_stamp = int((cache.entries_dir / "new" / "used").read_text())
    os.utime(old / "used", ns=(new_stamp + 10**9, new_stamp + 10**9))  # used a second after 'new'
    reopened = BuildCache(tmp_path / "builds", max_bytes=1200)  # room for two of the three
    (wt / "lib.so").write_bytes(b"x" * 500)
    reopened.put("third", wt, ["lib.so"], None, {})
    assert reopened.get("new") is None and reopened.get("old") is not None


# A stand-in kernel build that reads whichever source directory it is given ({source}) and writes the
# "installed" package into the worktree, counting its runs outside it.
COMPILE_FROM = (
    "import pathlib, sys\n"
    "src = pathlib.Path(sys.argv[1])\n"
    "text = ''.join(p.read_text() for p in sorted(src.rglob('*.cu')))\n"
    "out = pathlib.Path('.perfbisect/kernel-site'); out.mkdir(parents=True, exist_ok=True)\n"
    "(out / 'kernel.so').write_text(f'built from {src}: {text}')\n"
    "with open(sys.argv[2], 'a') as fh: fh.write(str(src) + '\\n')\n"
)


def test_a_step_with_sources_follows_the_kernel_sources_where_they_moved_and_is_cached_by_their_content(tmp_path):
    """SGLang's kernels lived in sgl-kernel/ and live in python/sglang/kernels/aot/ since 2026-07-28:
    one step with both sources builds whichever exists, keyed on that directory's content only, so
    Python-only commits on either side restore the build, the move itself builds once, and a commit
    with neither has nothing to build (the step does not run, the commit is not skipped)."""
    r = RepoFactory(tmp_path / "sglang")
    shas = {"old": r.commit("base", {"sgl-kernel/csrc/moe.cu": "moe v1\n", "python/sglang/srt/engine.py": "a = 1\n",
                                     ".gitignore": ".perfbisect/\n"})}
    shas["old-py"] = r.commit("python only", {"python/sglang/srt/engine.py": "a = 2\n"})
    shas["moved"] = r.commit("Move kernels into python/sglang/kernels/aot (#32648)",
                             {"sgl-kernel/csrc/moe.cu": None, "python/sglang/kernels/aot/csrc/moe.cu": "moe v1\n"})
    shas["new-py"] = r.commit("python only again", {"python/sglang/srt/engine.py": "a = 3\n"})
    shas["new-kernel"] = r.commit("kernel change", {"python/sglang/kernels/aot/csrc/moe.cu": "moe v2\n"})
    shas["none"] = r.commit("drop the kernels", {"python/sglang/kernels/aot/csrc/moe.cu": None})
    pool = WorktreePool(TargetRepo(r.path), tmp_path / "cache")
    counter = tmp_path / "runs.txt"
    step = BuildStep(name="kernel", command=("{python}", "-c", COMPILE_FROM, "{source}", str(counter)),
                     sources=("python/sglang/kernels/aot", "sgl-kernel/"), artifacts=(".perfbisect/kernel-site",))
    cache = BuildCache(tmp_path / "cache" / "builds", max_bytes=10**6)
    out = {}
    for name, sha in shas.items():
        wt = pool.checkout(sha)
        out[name] = run_build((step,), wt, sha, "stack", cache, sys.executable, tmp_path / "logs").steps[0]
        if not out[name].absent:
            out[name + ":built"] = (wt / ".perfbisect/kernel-site/kernel.so").read_text()
    assert [out[n].source for n in shas] == ["sgl-kernel", "sgl-kernel", "python/sglang/kernels/aot",
                                             "python/sglang/kernels/aot", "python/sglang/kernels/aot", None]
    # Built: the first commit, the move (another directory), the kernel change — nothing else.
    assert counter.read_text().splitlines() == ["sgl-kernel", "python/sglang/kernels/aot", "python/sglang/kernels/aot"]
    assert out["old-py"].cached and out["old-py"].key == out["old"].key
    assert out["new-py"].cached and out["new-py"].key == out["moved"].key != out["old"].key
    assert not out["new-kernel"].cached and out["new-kernel:built"] == "built from python/sglang/kernels/aot: moe v2\n"
    assert out["old-py:built"] == "built from sgl-kernel: moe v1\n"
    assert out["none"].absent and not out["none"].cached and "none of its sources" in Path(out["none"].log_path).read_text()


def test_plan_shows_where_a_step_with_sources_builds_and_warns_of_an_uncached_compiled_step(tmp_path):
    from perfbisect.app.planning import plan
    from perfbisect.app.workspace import Workspace
    from perfbisect.config import parse_config
    from perfbisect.report.render import format_plan, json_value

    r = RepoFactory(tmp_path / "sglang")
    good = r.commit("base", {"sgl-kernel/csrc/moe.cu": "v1\n", "python/sglang/a.py": "a = 1\n"})
    r.commit("py", {"python/sglang/a.py": "a = 2\n"})
    moved = r.commit("move", {"sgl-kernel/csrc/moe.cu": None, "python/sglang/kernels/aot/moe.cu": "v1\n"})
    bad = r.commit("py again", {"python/sglang/a.py": "a = 3\n"})
    cfg = parse_config({
        "target": {"repo": str(r.path), "python": sys.executable},
        "server": {"command": ["{python}", "-m", "server", "--port", "{port}"]},
        "build": {"steps": [
            {"name": "kernel", "sources": ["python/sglang/kernels/aot", "sgl-kernel"], "command": ["make", "-C", "{source}"],
             "artifacts": ["{source}/build"]},
            {"name": "old-kernel", "command": ["make", "-C", "sgl-kernel"], "paths": ["sgl-kernel/**"]},
        ]},
    }, tmp_path / "perfbisect.toml", tmp_path)
    with Workspace.open(cfg, tmp_path / "results.db") as ws:
        result = plan(ws, good, bad, check_patches=False)
    kernel, old = result.build_steps
    assert [(s.source, len(s.commits)) for s in kernel.spans] == [("sgl-kernel", 2), ("python/sglang/kernels/aot", 2)]
    assert kernel.spans[1].commits[0] == moved and kernel.cached and not old.cached
    text = "\n".join(format_plan(result))
    assert f"{good[:10]}..{result.commits[1].sha[:10]} (2 commits)  builds sgl-kernel/" in text
    assert "NOT CACHED: runs at every trial" in text
    assert any(w.kind == "build-step-uncached" and "'old-kernel'" in w.message for w in result.warnings)
    data = json_value(result)
    assert data["build_steps"][0]["spans"][1] == {"source": "python/sglang/kernels/aot", "commits": [moved, bad]}
