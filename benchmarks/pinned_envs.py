"""What pinned environments cost: building one per pin set, finding it again, reading pins over a range.

Writes real wheels of a tiny package (``perfbisect.demo.wheels``), builds one environment per
version with each installer available here (the target interpreter's pip; uv), times a cache hit
(``EnvCache.ensure`` of a built set: reading ``env.json``), and times reading the pins of every
commit of a real git range of N commits with a pin bump every 10 commits (what ``plan`` adds).

    python benchmarks/pinned_envs.py [--versions 3] [--commits 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfbisect.demo.wheels import write_wheel
from perfbisect.measure.envs import EnvCache
from perfbisect.git.gitrepo import TargetRepo
from perfbisect.git.pins import PinReader, group_by_pins, read_pins


def _pip_python() -> str | None:
    for python in (getattr(sys, "_base_executable", None), shutil.which("python3")):
        if python and subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0:
            return python
    return None


def build_times(root: Path, python: str, versions: int) -> dict:
    wheels = root / "wheels"
    for v in range(versions):
        write_wheel(wheels, "tiny-kernel", f"1.{v}")
    cache = EnvCache(root / "envs", python, wheels, None, log_dir=root / "logs")
    built, hits, installer = [], [], ""
    for v in range(versions):
        pins = read_pins({"requirements.txt": f"tiny-kernel==1.{v}\n"}, ["tiny-kernel"])
        env = cache.ensure(pins)
        built.append(env.seconds)
        installer = env.installer
        start = time.perf_counter()
        assert cache.ensure(pins).cached
        hits.append(time.perf_counter() - start)
    return {"installer": installer, "build_s_median": statistics.median(built), "build_s_max": max(built),
            "cache_hit_ms_median": 1000 * statistics.median(hits)}


def pin_reading(root: Path, commits: int) -> dict:
    repo_dir = root / "repo"
    repo_dir.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}
    git = lambda *a: subprocess.run(["git", "-C", str(repo_dir), *a], check=True, capture_output=True, env=env)  # noqa: E731
    git("init", "-q", "-b", "main")
    (repo_dir / "python").mkdir()
    for i in range(commits):
        (repo_dir / "python" / "pyproject.toml").write_text(
            f'[project]\nname = "sglang"\nversion = "0"\ndependencies = ["sgl-kernel==0.3.{i // 10}", "torch==2.8.0"]\n')
        (repo_dir / "python" / "x.py").write_text(f"a = {i}\n")
        git("add", "-A")
        git("commit", "-qm", f"c{i}")
    repo = TargetRepo(repo_dir)
    shas = repo.first_parent_range("HEAD~" + str(commits - 1), "HEAD")
    start = time.perf_counter()
    groups = group_by_pins(shas, PinReader(repo, ("python/pyproject.toml",), ("sgl-kernel", "torch")))
    seconds = time.perf_counter() - start
    return {"commits": len(shas), "pin_sets": len(groups), "read_ms_per_commit": 1000 * seconds / len(shas)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=3)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: dict = {"load_avg_1m": os.getloadavg()[0], "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pip_python = _pip_python()
        if pip_python:
            out["pip"] = build_times(root / "pip", pip_python, args.versions)
        if os.environ.get("UV") or shutil.which("uv"):
            if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
                out["uv"] = build_times(root / "uv", sys.executable, args.versions)
        out["pins"] = pin_reading(root, args.commits)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"load average {out['load_avg_1m']:.1f} on {out['cores']} cores")
    for name in ("pip", "uv"):
        if name in out:
            r = out[name]
            print(f"{name:>3}: one environment per pin set built in {r['build_s_median']:.2f} s (median of {args.versions}, "
                  f"max {r['build_s_max']:.2f} s; installer {r['installer']}); cache hit {r['cache_hit_ms_median']:.2f} ms")
    p = out["pins"]
    print(f"pins of {p['commits']} commits read from git and grouped into {p['pin_sets']} pin sets: "
          f"{p['read_ms_per_commit']:.1f} ms per commit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
