"""Speed of the git layer on an SGLang-sized repository (≥ 5,000 files, 10,000 commits, 40 MB).

Prints three timings (targets from issue #3):
  plan_s            plan_range over a 10,000-commit first-parent range with SGLang's path filters (≤ 10 s)
  next_commit_s     reused worktree → next commit → apply a 3-patch stack (median; ≤ 2 s)
  cache_hit_s       a build step whose key is cached: key + restore of its artefact (≤ 1 s)
and a few extras (plan with the patch check, first checkout, cache miss).

Usage: python benchmarks/git_plan.py [--dir DIR] [--json] [--artifact-mb 64]
The repository is generated once under DIR (default: $TMPDIR/perfbisect-bench) and reused.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_sglang_like_repo import ENGINE, DEEPSEEK, SCHEDULER, ensure_repo  # noqa: E402

from perfbisect.measure.build import BuildCache, run_build  # noqa: E402
from perfbisect.settings import SGLANG_IGNORE_PATHS, BuildStep, PatchesConfig  # noqa: E402
from perfbisect.git.gitrepo import TargetRepo  # noqa: E402
from perfbisect.git.pathfilter import PathFilter  # noqa: E402
from perfbisect.git.patches import PatchStack  # noqa: E402
from perfbisect.git.plan import plan_range  # noqa: E402
from perfbisect.git.worktrees import WorktreePool  # noqa: E402


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_patches(repo: Path, at: str, out: Path) -> Path:
    """Three format-patch files against ``at``, editing the ends of the hot files (like the user's stack)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.patch"):
        old.unlink()
    scratch = out.parent / "patch-scratch"
    if scratch.exists():
        _git(repo, "worktree", "remove", "--force", str(scratch))
    _git(repo, "worktree", "add", "-q", "--detach", str(scratch), at)
    try:
        for i, (path, line) in enumerate(
            [(DEEPSEEK, "    self.layers_to_capture = [2, n // 2, n - 3]  # EAGLE-3"),
             (ENGINE, "    os.environ.setdefault('NCCL_PROTO', 'LL')  # NCCL env propagation"),
             (SCHEDULER, "    os.environ.setdefault('NCCL_ALGO', 'Ring')  # NCCL env propagation")], 1
        ):
            f = scratch / path
            lines = f.read_text().splitlines()
            lines.insert(len(lines) - 5, line)
            f.write_text("\n".join(lines) + "\n")
            env = {**os.environ, "GIT_AUTHOR_NAME": "me", "GIT_AUTHOR_EMAIL": "me@x.invalid",
                   "GIT_COMMITTER_NAME": "me", "GIT_COMMITTER_EMAIL": "me@x.invalid"}
            subprocess.run(["git", "commit", "-q", "-am", f"local patch {i}"], cwd=scratch, check=True, env=env)
        _git(scratch, "format-patch", "-q", "--full-index", "-o", str(out), f"{at}..HEAD")
    finally:
        _git(repo, "worktree", "remove", "--force", str(scratch))
    return out


def run(base: Path, artifact_mb: int) -> dict:
    repo_dir = base / "sglang-like"
    t0 = time.perf_counter()
    shape = ensure_repo(repo_dir)
    generate_s = time.perf_counter() - t0
    n = shape["first_parent_commits"]
    repo = TargetRepo(repo_dir)
    good, bad = f"main~{n - 1}", "main"
    filters = PathFilter(SGLANG_IGNORE_PATHS)
    cache_dir = base / "cache"

    t = time.perf_counter()
    plan = plan_range(repo, good, bad, filters)
    plan_s = time.perf_counter() - t

    patch_dir = make_patches(repo_dir, "main~40", base / "patches")
    stack = PatchStack.load(PatchesConfig(dir=patch_dir), TargetRepo(repo_dir))
    fresh = TargetRepo(repo_dir)  # no cached history: the timing includes reading it again
    t = time.perf_counter()
    checked = plan_range(fresh, good, bad, filters, PatchStack.load(PatchesConfig(dir=patch_dir), fresh), check_patches=True)
    plan_checked_s = time.perf_counter() - t

    pool = WorktreePool(repo, cache_dir)
    pool.gc()
    pool = WorktreePool(repo, cache_dir)
    t = time.perf_counter()
    wt = pool.checkout(repo.resolve("main~30"))
    stack.apply(wt)
    first_checkout_s = time.perf_counter() - t
    steps_s = []
    for k in range(29, 19, -1):
        t = time.perf_counter()
        wt = pool.checkout(repo.resolve(f"main~{k}"))
        stack.apply(wt)
        steps_s.append(time.perf_counter() - t)

    # A kernel step whose artefact is artifact_mb MB; the first build is a miss, then hits.
    artefact = "sgl-kernel/build/sgl_kernel.so"
    script = (
        "import os, sys; os.makedirs('sgl-kernel/build', exist_ok=True); "
        f"open('{artefact}', 'wb').write(os.urandom({artifact_mb} * 1024 * 1024))"
    )
    steps = (BuildStep(name="sgl-kernel", command=("{python}", "-c", script), paths=("sgl-kernel/**",), artifacts=(artefact,)),)
    cache = BuildCache(cache_dir / "builds", max_bytes=4 * 1024**3)
    cache.clear()
    wt = pool.checkout(repo.resolve("main~20"))
    applied = stack.apply(wt)
    t = time.perf_counter()
    miss = run_build(steps, wt, "main~20", applied.hash, cache, sys.executable, base / "logs")
    miss_s = time.perf_counter() - t
    hits = []
    for _ in range(5):
        wt = pool.checkout(repo.resolve("main~20"))
        applied = stack.apply(wt)
        t = time.perf_counter()
        hit = run_build(steps, wt, "main~20", applied.hash, cache, sys.executable, base / "logs")
        hits.append(time.perf_counter() - t)
        assert hit.steps[0].cached and (wt / artefact).stat().st_size == artifact_mb * 1024 * 1024
    assert not miss.steps[0].cached

    return {
        "repo": {**shape, "generate_or_reuse_s": round(generate_s, 2)},
        "plan_commits": len(plan.entries),
        "plan_measured": len(plan.measured),
        "plan_filtered": len(plan.filtered),
        "plan_merges": sum(1 for e in plan.entries if e.merged_count),
        "plan_warnings": [w.pattern for w in plan.warnings],
        "plan_s": round(plan_s, 3),
        "plan_with_patch_check_s": round(plan_checked_s, 3),
        "plan_patch_conflicts": len(checked.skipped),
        "first_checkout_and_apply_s": round(first_checkout_s, 3),
        "next_commit_s": round(statistics.median(steps_s), 3),
        "next_commit_max_s": round(max(steps_s), 3),
        "cache_miss_s": round(miss_s, 3),
        "cache_hit_s": round(statistics.median(hits), 3),
        "cache_hit_max_s": round(max(hits), 3),
        "artifact_mb": artifact_mb,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Speed of perfbisect's git layer on an SGLang-sized repository.")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "perfbisect-bench")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--artifact-mb", type=int, default=64, help="size of the cached kernel artefact")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    result = run(args.dir.resolve(), args.artifact_mb)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    r = result["repo"]
    print(f"repository: {r['files']} files, {r['source_bytes'] / 1e6:.1f} MB source, {r['first_parent_commits']} first-parent commits, {r['merges']} merges")
    print(f"plan over {result['plan_commits']} commits (filters): {result['plan_s']:.2f} s  [target ≤ 10 s]"
          f"  measured {result['plan_measured']}, filtered {result['plan_filtered']}, merges {result['plan_merges']}")
    print(f"plan with patch check:           {result['plan_with_patch_check_s']:.2f} s")
    print(f"next commit + 3-patch stack:      {result['next_commit_s']:.3f} s median, {result['next_commit_max_s']:.3f} s max  [target ≤ 2 s]"
          f"  (first checkout {result['first_checkout_and_apply_s']:.2f} s)")
    print(f"build cache hit ({result['artifact_mb']} MB artefact): {result['cache_hit_s']:.3f} s median, {result['cache_hit_max_s']:.3f} s max  [target ≤ 1 s]"
          f"  (miss {result['cache_miss_s']:.2f} s)")


if __name__ == "__main__":
    main()
