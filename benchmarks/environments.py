"""What each commit's environment costs: resolving a range's requirement sets with uv, installing one environment
per lock cold (an empty uv cache) and warm (the cache full, the environment gone), and finding a built one again.

Offline by default: a wheelhouse of ``--packages`` stub wheels (``perfbisect.demo.wheels``, ``--payload-mb`` of
data each) and a git range of ``--commits`` commits whose pyproject bumps one pin every 10 commits. With
``--sglang REPO --rev REV`` it also resolves and installs SGLang's own ``python/pyproject.toml`` at REV from the
real package index (needs the network; a CUDA environment is ~10 GB).

    python benchmarks/environments.py [--commits 200] [--packages 60] [--payload-mb 1] [--json]
    python benchmarks/environments.py --sglang /path/to/sglang --rev bba2fc4 --python python3.12
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from perfbisect.demo.wheels import write_wheel
from perfbisect.git.gitrepo import TargetRepo
from perfbisect.git.requirements import RequirementReader
from perfbisect.measure.environments import Environments
from perfbisect.measure.envs import EnvCache, _tree_bytes
from perfbisect.measure.resolver import Resolver
from perfbisect.settings import EnvironmentConfig


def _git(repo: Path, *args: str) -> str:
    import subprocess

    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@x", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


def _pyproject(deps: list[str]) -> str:
    return '[project]\nname = "engine"\nversion = "0"\nrequires-python = ">=3.10"\ndependencies = ' + json.dumps(deps) + "\n"


def _environments(root: Path, repo: Path, config: EnvironmentConfig, python: str) -> Environments:
    target = TargetRepo(repo)
    resolver = Resolver(config, python, root / "locks")
    return Environments(target, RequirementReader(target, config.requirements), resolver,
                        EnvCache(root / "envs", resolver), policy=config.resolve_date)


def offline(args: argparse.Namespace, work: Path) -> dict:
    wheels = work / "wheels"
    payload = "x" * int(args.payload_mb * 1024 * 1024)
    names = [f"pkg{i:03d}" for i in range(args.packages)]
    for name in names:
        for version in ("1.0", "1.1"):
            write_wheel(wheels, name, version, modules={f"{name}/__init__.py": f"__version__ = '{version}'\n",
                                                         f"{name}/blob.txt": payload})
    repo = work / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    pins = {n: "1.0" for n in names}
    for i in range(args.commits):
        if i and i % 10 == 0:
            pins[names[(i // 10) % len(names)]] = "1.1"
        (repo / "python").mkdir(exist_ok=True)
        (repo / "python" / "pyproject.toml").write_text(_pyproject([f"{n}=={v}" for n, v in pins.items()]))
        (repo / "code.py").write_text(f"x = {i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", f"commit {i}")
    config = EnvironmentConfig(requirements="python/pyproject.toml", find_links=(str(wheels),), no_index=True,
                               offline=True)
    target = TargetRepo(repo)
    commits = target.first_parent_range(_git(repo, "rev-list", "--max-parents=0", "HEAD"), "HEAD")
    out: dict = {"commits": len(commits), "packages": args.packages, "payload_mb": args.payload_mb}

    envs = _environments(work / "pb", repo, config, args.python)
    t = time.perf_counter()
    groups = envs.groups(envs.repo.first_parent_range(commits[0].sha, commits[-1].sha))  # as plan reads the range
    out["plan_resolve_s"] = time.perf_counter() - t
    out["locks"] = len({g.lock_key for g in groups if g.lock_key})
    envs = _environments(work / "pb", repo, config, args.python)  # a new command: locks read from disk
    t = time.perf_counter()
    envs.groups(envs.repo.first_parent_range(commits[0].sha, commits[-1].sha))
    out["plan_kept_s"] = time.perf_counter() - t

    os.environ["UV_CACHE_DIR"] = str(work / "uv-cache")
    t = time.perf_counter()
    env = envs.ensure(commits[0])
    out["install_cold_s"] = time.perf_counter() - t
    out["env_mb"] = _tree_bytes(env.path) / 1e6
    envs.cache.close()
    shutil.rmtree(env.path)
    t = time.perf_counter()
    env = envs.ensure(commits[0])
    out["install_warm_s"] = time.perf_counter() - t
    t = time.perf_counter()
    envs.ensure(commits[1])  # the same lock: found, not built
    out["hit_s"] = time.perf_counter() - t
    envs.close()
    return out


def sglang(args: argparse.Namespace, work: Path) -> dict:
    config = EnvironmentConfig(requirements="python/pyproject.toml")
    envs = _environments(work / "pb-sglang", Path(args.sglang), config, args.python)
    commit = envs.repo.resolve(args.rev)
    out: dict = {"rev": args.rev, "sha": commit.sha}
    t = time.perf_counter()
    lock = envs.lock(commit)
    out["resolve_s"] = time.perf_counter() - t
    out["packages"] = len(lock.packages)
    out["torch"] = lock.packages.get("torch")
    os.environ["UV_CACHE_DIR"] = str(work / "uv-cache-sglang")
    t = time.perf_counter()
    env = envs.cache.ensure(lock)
    out["install_cold_s"] = time.perf_counter() - t
    out["env_gb"] = _tree_bytes(env.path) / 1e9
    envs.cache.close()
    shutil.rmtree(env.path)
    t = time.perf_counter()
    envs.cache.ensure(lock)
    out["install_warm_s"] = time.perf_counter() - t
    out["uv_cache_gb"] = _tree_bytes(work / "uv-cache-sglang") / 1e9
    envs.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--packages", type=int, default=60)
    parser.add_argument("--payload-mb", type=float, default=1.0)
    parser.add_argument("--python", default=sys.executable, help="the target interpreter (default: this one)")
    parser.add_argument("--sglang", help="an SGLang checkout: also resolve and install its pyproject at --rev (network)")
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--keep", help="work here and keep it (default: a temporary directory)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="pb-bench-envs-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = {"offline": offline(args, work)} if not args.sglang else {"sglang": sglang(args, work)}
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    for part, numbers in result.items():
        print(f"[{part}]")
        for key, value in numbers.items():
            print(f"  {key:<16} {value:.2f}" if isinstance(value, float) else f"  {key:<16} {value}")


if __name__ == "__main__":
    main()
