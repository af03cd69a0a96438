"""How good is `perfbisect plan`'s estimate? Build the demo target, set the trial cost to the user's
8.4 minutes on 8 GPUs, and per seed:

1. `plan` on a fresh host (noise: the config's prior; regression: the default assumption) — and
   `plan --effect 15` (the user says what they saw: the demo plants −15%);
2. `run` (the real bisection): trials spent;
3. `plan` again — now the host has learned its noise and the endpoints have stored trials — and
   `plan --effect 15` (learned noise, the effect the user saw);
4. `run` again (a new bisection of the same range, starting from the learned noise): trials spent.

Each estimate is compared with the trials the following run spent: within 25%? inside the printed
range? Also prints how long `plan` took to estimate (the simulations' own seconds, from --json).

Usage:  python benchmarks/plan_estimate.py [--commits 36] [--seeds 7,8,9,10,11,12]
(two at once: give each its own PERFBISECT_LOCK_DIR, or the second finds the node lock held)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfbisect.demo.target import make_demo_target  # noqa: E402
from tests.cli_runner import run_command


def plan(target, cfg, *extra: str) -> dict:
    proc = run_command("plan", f"good={target.good}", f"bad={target.bad}", "-c", str(cfg), "--json", *extra, timeout=None)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return json.loads(proc.stdout)["estimate"]


def run(target, cfg) -> tuple[int, str]:
    t0 = time.monotonic()
    proc = run_command("run", f"good={target.good}", f"bad={target.bad}", "-c", str(cfg), "-q", "--yes", timeout=None)
    if "trials used: " not in proc.stdout:
        raise SystemExit(f"run failed (exit {proc.returncode}): {proc.stderr}")
    used = int(re.search(r"trials used: (\d+)", proc.stdout).group(1))
    return used, f"{proc.stdout.split()[0]} in {time.monotonic() - t0:.0f}s"


def judge(est: dict, used: int) -> str:
    err = 100.0 * (est["trials"] - used) / used
    inside = est["trials_low"] <= used <= est["trials_high"]
    return (f"{est['trials']} ({est['trials_low']}–{est['trials_high']}) vs {used}: {err:+.0f}% "
            f"{'✓' if abs(err) <= 25 else '✗'}25% {'in' if inside else 'out of'} range")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=36)
    ap.add_argument("--seeds", default="7,8,9,10,11,12")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in (int(s) for s in args.seeds.split(",")):
            target = make_demo_target(Path(tmp) / f"demo-{seed}", commits=args.commits, seed=seed)
            cfg = target.root / "perfbisect.toml"
            cfg.write_text(cfg.read_text() + "\n[cost]\ntrial_minutes = 8.4\ngpus = 8\n")
            fresh = plan(target, cfg)
            told = plan(target, cfg, "--effect", "15")
            used1, how1 = run(target, cfg)
            learned = plan(target, cfg)
            learned_told = plan(target, cfg, "--effect", "15")
            used2, how2 = run(target, cfg)
            rows.append((fresh, told, used1, learned, used2, learned_told))
            print(f"seed {seed} ({fresh['candidates']} candidates): "
                  f"fresh host {judge(fresh, used1)} | fresh, --effect 15 {judge(told, used1)} | "
                  f"learned host {judge(learned, used2)} | learned, --effect 15 {judge(learned_told, used2)} "
                  f"[{how1}; {how2}; estimates took "
                  + "/".join(f"{e['seconds_to_estimate']:.2f}s ({e['cpu_seconds_to_estimate']:.2f} CPU s)" for e in (fresh, told, learned, learned_told))
                  + f"; learned: {learned['effect_pct']:.1f}% at {learned['noise_pct']:.1f}% noise]",
                  flush=True)
    for name, e, u in (("fresh host", 0, 2), ("fresh, --effect 15", 1, 2), ("learned host", 3, 4), ("learned, --effect 15", 5, 4)):
        ok = sum(abs(r[e]["trials"] - r[u]) <= 0.25 * r[u] for r in rows)
        inside = sum(r[e]["trials_low"] <= r[u] <= r[e]["trials_high"] for r in rows)
        mean_e = sum(r[e]["trials"] for r in rows) / len(rows)
        mean_u = sum(r[u] for r in rows) / len(rows)
        print(f"{name}: within 25% in {ok}/{len(rows)} runs, spent inside the printed range in {inside}/{len(rows)}; "
              f"mean estimate {mean_e:.1f} vs spent {mean_u:.1f} ({100 * (mean_e - mean_u) / mean_u:+.0f}%)")


if __name__ == "__main__":
    main()
