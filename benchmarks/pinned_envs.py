"""What pinned environments cost: building one per pin set, finding it again, reading pins over a range.

Writes real wheels of a tiny package (``perfbisect.demo.wheels``), builds one environment per
version with each installer available here (the target interpreter's pip; uv), times a cache hit
(``EnvCache.ensure`` of a built set: reading ``env.json``), and times reading the pins of every
commit of a real git range of N commits with a pin bump every 10 commits (what ``plan`` adds), the
same with a patch stack that edits the pin file (the pins read as patched), and what hashing the
wheels into the environment key costs: a wheel of ``--wheel-mb`` MB (an sgl-kernel wheel is a few
hundred) hashed the first time a key is computed, the key again (the digest remembered), and in the
next command (the digest read from ``<envs>/.wheel-digests.json``).

    python benchmarks/pinned_envs.py [--versions 3] [--commits 200] [--wheel-mb 400] [--json]
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


def key_hashing(root: Path, python: str, wheel_mb: int) -> dict:
    """Seconds to compute an environment key with a ``wheel_mb`` MB wheel: first (hashing it), again."""
    from perfbisect.measure import envs as envs_module

    wheels = root / "big-wheels"
    wheel = write_wheel(wheels, "sgl-kernel", "0.3.9")
    with wheel.open("ab") as f:  # bulk after the zip: its bytes are what is hashed, the size is what costs
        block = os.urandom(1 << 20)
        for _ in range(wheel_mb):
            f.write(block)
    cache = EnvCache(root / "hash-envs", python, wheels, None)
    pins = read_pins({"requirements.txt": "sgl-kernel==0.3.9\n"}, ["sgl-kernel"])
    cache.key(read_pins({"requirements.txt": "other==1\n"}, ["other"]))  # the interpreter probe, not timed
    envs_module._DIGESTS.clear()
    start = time.perf_counter()
    cache.key(pins)
    first = time.perf_counter() - start
    again, next_command = [], []
    for _ in range(20):
        start = time.perf_counter()
        cache.key(pins)
        again.append(time.perf_counter() - start)
        envs_module._DIGESTS.clear()  # as a new process: the digest comes from <envs>/.wheel-digests.json
        start = time.perf_counter()
        cache.key(pins)
        next_command.append(time.perf_counter() - start)
    size = wheel.stat().st_size
    return {"wheel_mb": size / 1e6, "first_key_s": first, "hash_mb_per_s": size / 1e6 / first,
            "again_key_ms_median": 1000 * statistics.median(again),
            "next_command_key_ms_median": 1000 * statistics.median(next_command)}


def pin_reading(root: Path, commits: int, patched: bool = False) -> dict:
    repo_dir = root / "repo"
    repo_dir.mkdir(parents=True)
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
    stack = None
    if patched:  # a local patch that edits the pin file (a line on top; it applies at every commit)
        from perfbisect.git.patches import PatchStack
        from perfbisect.settings import PatchesConfig

        git("checkout", "-q", "-b", "local", "HEAD")
        pyproject = repo_dir / "python" / "pyproject.toml"
        pyproject.write_text("# local build of sglang\n" + pyproject.read_text())
        git("commit", "-qam", "local: a setting")
        patches = root / "patches"
        patches.mkdir()
        git("format-patch", "-q", "-o", str(patches), "HEAD~1..HEAD")
        git("checkout", "-q", "main")
        stack = PatchStack.load(PatchesConfig(dir=patches), repo)
    start = time.perf_counter()
    groups = group_by_pins(shas, PinReader(repo, ("python/pyproject.toml",), ("sgl-kernel", "torch"), stack))
    seconds = time.perf_counter() - start
    return {"commits": len(shas), "pin_sets": len(groups), "read_ms_per_commit": 1000 * seconds / len(shas)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=3)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--wheel-mb", type=int, default=400)
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
        out["pins"] = pin_reading(root / "plain", args.commits)
        out["pins_patched"] = pin_reading(root / "patched", args.commits, patched=True)
        out["key_hashing"] = key_hashing(root, sys.executable, args.wheel_mb)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"load average {out['load_avg_1m']:.1f} on {out['cores']} cores")
    for name in ("pip", "uv"):
        if name in out:
            r = out[name]
            print(f"{name:>3}: one environment per pin set built in {r['build_s_median']:.2f} s (median of {args.versions}, "
                  f"max {r['build_s_max']:.2f} s; installer {r['installer']}); cache hit {r['cache_hit_ms_median']:.2f} ms")
    for name, how in (("pins", "read from git"), ("pins_patched", "read from git as a patch stack edits them")):
        p = out[name]
        print(f"pins of {p['commits']} commits {how} and grouped into {p['pin_sets']} pin sets: "
              f"{p['read_ms_per_commit']:.1f} ms per commit")
    h = out["key_hashing"]
    print(f"environment key with a {h['wheel_mb']:.0f} MB wheel: {h['first_key_s']:.2f} s the first time (the wheel read) "
          f"({h['hash_mb_per_s']:.0f} MB/s sha256), {h['again_key_ms_median']:.2f} ms after (median of 20), "
          f"{h['next_command_key_ms_median']:.2f} ms in the next command (the stored digest)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
