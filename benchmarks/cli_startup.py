"""How long do the commands a user types after every pull take to start and answer?

Times ``perfbisect status``, ``perfbisect log`` and ``perfbisect --help`` in a demo directory (its
perfbisect.toml and results.sqlite), and what the hook's detached worker imports before its first
state, each ``--reps`` times as a fresh process, and prints the median wall time; then runs each once under ``python -X importtime`` and names the heavy libraries it
imported (scipy, Alembic, numpy, jinja2, SQLAlchemy, GitPython, httpx).
Targets (issue #22): status ≤ 0.5 s, log ≤ 1.0 s on the idle 2-core machine; no scipy or Alembic on
either path.

Bytecode is cached (one untimed run first, with writing .pyc allowed): what an installed perfbisect
does, since pip and uv compile at install. ``--source DIR`` times another checkout of perfbisect with
the same interpreter (its directory goes first on PYTHONPATH), e.g. main before a change.

    python benchmarks/cli_startup.py [--demo DIR] [--reps 3] [--source DIR] [--json]

Without ``--demo`` a demo is built first (`perfbisect demo`, about half a minute).
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

HEAVY = ("scipy", "alembic", "numpy", "jinja2", "sqlalchemy", "git", "httpx")
COMMANDS = {"status": ["status"], "log": ["log"], "--help": ["--help"]}
# What the detached worker a pull starts imports before it writes its first state ("waiting: ...").
WORKER = ["-c", "import perfbisect.hook.hookworker, perfbisect.hook.check, perfbisect.report.console"]
TARGETS_S = {"status": 0.5, "log": 1.0}


def _env(source: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(source), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _cli(args: list[str], demo: Path, env: dict[str, str], importtime: bool = False) -> subprocess.CompletedProcess:
    flags = ["-X", "importtime"] if importtime else []
    program = args if args is WORKER else ["-m", "perfbisect.cli", *args]
    return subprocess.run([sys.executable, *flags, *program], cwd=demo, env=env,
                          capture_output=True, text=True, timeout=300)


def heavy_imports(stderr: str) -> list[str]:
    """The heavy top-level libraries in an ``-X importtime`` log."""
    seen = set()
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        name = line.rpartition("|")[2].strip()
        if name.split(".")[0] in HEAVY:
            seen.add(name.split(".")[0])
    return sorted(seen)


def measure(demo: Path, reps: int, source: Path | None) -> dict[str, dict]:
    env = _env(source)
    results = {}
    for name, args in {**COMMANDS, "hook worker": WORKER}.items():
        first = _cli(args, demo, env)  # writes the bytecode cache; untimed
        if first.returncode != 0:
            raise SystemExit(f"perfbisect {' '.join(args)} failed in {demo}: {first.stderr.strip()[-400:]}")
        walls = []
        for _ in range(reps):
            t0 = time.perf_counter()
            _cli(args, demo, env)
            walls.append(time.perf_counter() - t0)
        heavy = heavy_imports(_cli(args, demo, env, importtime=True).stderr)
        results[name] = {"median_s": statistics.median(walls), "runs_s": walls, "heavy_imports": heavy,
                         "target_s": TARGETS_S.get(name)}
    return results


def build_demo(into: Path) -> Path:
    demo = into / "demo"
    done = subprocess.run([sys.executable, "-m", "perfbisect.cli", "demo", "--dir", str(demo), "--quiet", "--json"],
                          capture_output=True, text=True, timeout=1800)
    if done.returncode not in (0, 3):  # a regression found or inconclusive: either way a database to read
        raise SystemExit(f"perfbisect demo failed: {done.stderr.strip()[-400:]}")
    return demo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", type=Path, help="a directory `perfbisect demo --dir` made (default: build one)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--source", type=Path, help="time this checkout of perfbisect instead (PYTHONPATH)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="pb-cli-startup-") as tmp:
        demo = args.demo or build_demo(Path(tmp))
        results = measure(demo.resolve(), args.reps, args.source.resolve() if args.source else None)
    if args.json:
        print(json.dumps({"load_avg_1m": load, "cpus": os.cpu_count(), "commands": results}, indent=2))
        return
    print(f"{os.cpu_count()} CPUs, load average {load:.2f} at the start; median of {args.reps} runs, bytecode cached")
    print(f"{'command':<12} {'median':>8} {'target':>8}  heavy libraries imported")
    for name, r in results.items():
        target = f"{r['target_s']:.1f} s" if r["target_s"] else "-"
        print(f"{name:<12} {r['median_s']:>6.2f} s {target:>8}  {', '.join(r['heavy_imports']) or 'none'}")


if __name__ == "__main__":
    main()
