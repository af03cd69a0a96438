"""How good is `perfbisect plan`'s estimate? Build the demo target, set the trial cost to the user's
8.4 minutes on 8 GPUs, run `plan` (estimate), then `run` (the real bisection), and compare the
estimated trials with the trials actually spent. Target: within 25%.

Usage:  python benchmarks/plan_estimate.py [--commits 36] [--seeds 7,8,9]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfbisect.demo.target import make_demo_target  # noqa: E402


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfbisect.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "300"})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=36)
    ap.add_argument("--seeds", default="7,8,9")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in (int(s) for s in args.seeds.split(",")):
            target = make_demo_target(Path(tmp) / f"demo-{seed}", commits=args.commits, seed=seed)
            cfg = target.root / "perfbisect.toml"
            cfg.write_text(cfg.read_text() + "\n[cost]\ntrial_minutes = 8.4\ngpus = 8\n")
            plan = cli("plan", f"good={target.good}", f"bad={target.bad}", "-c", str(cfg))
            est_line = next(line for line in plan.stdout.splitlines() if line.startswith("estimate:"))
            est = int(re.search(r"~(\d+) trials", est_line).group(1))
            hours = float(re.search(r"([\d.]+) GPU-hours", est_line).group(1))
            run = cli("run", f"good={target.good}", f"bad={target.bad}", "-c", str(cfg), "-q", "--yes")
            used = int(re.search(r"trials used: (\d+)", run.stdout).group(1))
            verdict = run.stdout.split()[0]
            err = 100.0 * (est - used) / used
            rows.append((seed, est, hours, used, used * 8.4 / 60 * 8, err, verdict))
            print(f"seed {seed}: estimate {est} trials ({hours:.1f} GPU-hours at 8.4 min × 8 GPUs); "
                  f"spent {used} trials ({used * 8.4 / 60 * 8:.1f} GPU-hours at that cost); "
                  f"error {err:+.0f}%; {verdict}", flush=True)
    mean_used = sum(r[3] for r in rows) / len(rows)
    mean_est = sum(r[1] for r in rows) / len(rows)
    print(f"mean: estimate {mean_est:.1f} vs spent {mean_used:.1f} trials ({100 * (mean_est - mean_used) / mean_used:+.0f}%); "
          f"worst single error {max(abs(r[5]) for r in rows):.0f}%")
    print("first line of the estimate:", est_line)


if __name__ == "__main__":
    main()
