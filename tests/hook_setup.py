"""A bare "upstream" and a clone with perfbisect's hook, measured by the seeded demo workload (tests and benchmarks).

``make_pull_setup(root)`` builds the demo target, pushes its history to a bare upstream, clones it,
moves the clone back to the first commit (so a `git pull` brings the whole history, the planted
slowdown included) and writes a perfbisect.toml for the clone. Real git, argument lists only.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from perfbisect.demo.target import DemoTarget, demo_config_text, make_demo_target

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(repo: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=check,
                          env={**os.environ, **GIT_ENV, **(env or {})}, stdin=subprocess.DEVNULL)


@dataclass
class PullSetup:
    target: DemoTarget
    upstream: Path
    clone: Path
    config: Path
    work: Path  # a second clone that pushes new commits to upstream

    @property
    def cache_dir(self) -> Path:
        """Where perfbisect keeps this clone's state: the config's target.cache_dir (the demo's
        config names its own directory)."""
        from perfbisect.config import load_config

        return load_config(self.config).cache_dir

    @property
    def state_dir(self) -> Path:
        return self.cache_dir / "hook"

    def history(self) -> list[dict]:
        path = self.state_dir / "history.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def wait_for_checks(self, n: int, timeout: float = 900.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = self.history()
            if len(done) >= n:
                return done
            time.sleep(0.2)
        log = self.state_dir / "check.log"
        raise AssertionError(f"{n} checks not finished after {timeout} s; log:\n{log.read_text() if log.exists() else '(none)'}")

    def push_commit(self, rel: str, text: str, subject: str) -> str:
        """Commit ``text`` appended to ``rel`` in the work clone and push it upstream; returns its sha."""
        path = self.work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as fh:
            fh.write(text)
        git(self.work, "add", "-A")
        git(self.work, "commit", "-qm", subject)
        git(self.work, "push", "-q", "origin", "HEAD:main")
        return git(self.work, "rev-parse", "HEAD").stdout.strip()


def make_pull_setup(root: Path, *, commits: int = 10, hook_table: str = "", start_at_good: bool = True,
                    runs: int = 3, max_tokens: int = 48) -> PullSetup:
    root = Path(root)
    target = make_demo_target(root / "demo", commits=commits, runs=runs, max_tokens=max_tokens)
    upstream = root / "upstream.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(target.repo), str(upstream)], check=True,
                   capture_output=True, env={**os.environ, **GIT_ENV})
    clone = root / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream), str(clone)], check=True, capture_output=True,
                   env={**os.environ, **GIT_ENV})
    git(clone, "config", "pull.rebase", "false")
    if start_at_good:
        git(clone, "reset", "-q", "--hard", target.good)
    work = root / "work"
    subprocess.run(["git", "clone", "-q", str(upstream), str(work)], check=True, capture_output=True,
                   env={**os.environ, **GIT_ENV})
    config = root / "perfbisect.toml"
    text = demo_config_text(
        repo=clone, patches=target.patches, seed=7, session_sigma=0.02, run_sigma=0.01, drift_per_session=0.0,
        drift_file=root / "drift-counter", max_tokens=max_tokens, runs=runs, warmup=1,
        # Seeded measurement (perfbisect/demo/seeded.py): a check's verdict and culprit do not depend on
        # the machine's load; the hook, queue, worker and check are what these tests are about.
        seeded_state=root / "seeded-counters",
    )
    config.write_text(text + "\n[hook]\n" + (hook_table or "idle_s = 0\n"))
    return PullSetup(target=target, upstream=upstream, clone=clone, config=config, work=work)
