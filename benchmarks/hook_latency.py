"""How long does the post-`git pull` hook keep a pull waiting?

Builds the demo target, a bare upstream and a clone with perfbisect's hook (real git), then makes
``--pulls`` pulls, each bringing one new upstream commit, and times:

- the whole ``git pull`` with the hook installed, and the same pulls without it (the difference is
  what the hook costs a pull);
- the hook alone: ``.git/hooks/post-merge 0`` run as git runs it, until it returns to the caller.

The check each pull starts is kept waiting (busy GPUs simulated through the busy-check seam), so
the numbers are the hook's cost, not a check competing with it; the waiting worker is stopped at
the end. Target: median hook time ≤ 0.5 s.

    python benchmarks/hook_latency.py [--pulls 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfbisect.hook import check, checkqueue, hook  # noqa: E402
from perfbisect.config import load_config  # noqa: E402
from tests.hook_setup import git, make_pull_setup  # noqa: E402


def _pulls(setup, n: int, env: dict[str, str], tag: str) -> list[float]:
    times = []
    for i in range(n):
        setup.push_commit("python/sglang/srt/managers/scheduler.py", f"\n\ndef {tag}_{i}():\n    pass\n", f"{tag} {i}")
        start = time.perf_counter()
        git(setup.clone, "pull", "-q", env=env)
        times.append(time.perf_counter() - start)
    return times


def _hook_alone(setup, n: int, env: dict[str, str]) -> list[float]:
    script = setup.clone / ".git" / "hooks" / "post-merge"
    times = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run([str(script), "0"], cwd=setup.clone, env={**os.environ, **env}, capture_output=True,
                       stdin=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pulls", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pb-hook-bench-") as tmp:
        root = Path(tmp)
        os.environ.setdefault("PERFBISECT_LOCK_DIR", str(root / "lock"))
        setup = make_pull_setup(root)
        git(setup.clone, "reset", "-q", "--hard", setup.target.bad)
        busy = root / "gpu-busy"
        busy.write_text("1\n")
        env = {check.FAKE_BUSY_ENV: str(busy)}
        without = _pulls(setup, args.pulls, env, "plain")
        hook.install(setup.clone, setup.config, python=sys.executable)
        with_hook = _pulls(setup, args.pulls, env, "hooked")
        alone = _hook_alone(setup, args.pulls, env)
        cfg = load_config(setup.config)
        queued = len(checkqueue.status(cfg)["queued"])
        pid = checkqueue.status(cfg)["worker"]["pid"]
        if pid:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while checkqueue.status(cfg)["worker"]["pid"] and time.monotonic() < deadline:
                time.sleep(0.1)
    result = {
        "pulls": args.pulls,
        "pull_without_hook_median_s": statistics.median(without),
        "pull_with_hook_median_s": statistics.median(with_hook),
        "hook_cost_median_s": statistics.median(with_hook) - statistics.median(without),
        "hook_alone_median_s": statistics.median(alone),
        "hook_alone_max_s": max(alone),
        "pull_with_hook_max_s": max(with_hook),
        "queued_while_the_check_waited": queued,
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{args.pulls} pulls, one new upstream commit each (real git, demo target):")
    print(f"  git pull without the hook   median {result['pull_without_hook_median_s'] * 1000:7.1f} ms")
    print(f"  git pull with the hook      median {result['pull_with_hook_median_s'] * 1000:7.1f} ms"
          f"   (max {result['pull_with_hook_max_s'] * 1000:.1f} ms)")
    print(f"  → the hook costs a pull     median {result['hook_cost_median_s'] * 1000:7.1f} ms")
    print(f"  the hook alone              median {result['hook_alone_median_s'] * 1000:7.1f} ms"
          f"   (max {result['hook_alone_max_s'] * 1000:.1f} ms)   target ≤ 500 ms")
    print(f"  pulls queued behind the waiting check: {queued}")


if __name__ == "__main__":
    main()
