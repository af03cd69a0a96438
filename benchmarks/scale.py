"""Scale: a real `perfbisect run` over 500 / 2,000 / 10,000-commit ranges (issue #23).

    python benchmarks/scale.py [--sizes 500,2000,10000] [--dir DIR] [--keep] [--json]

For each size a repository is written with one `git fast-import` stream: every commit edits one of 20
source files, and commit ``planted`` (about two thirds of the way, off any power of two) raises the
cost in ``cost.txt`` by 25%. The target is a `command` workload (like the test targets): a script that
reads ``cost.txt`` from the worktree and prints ``{"ops_per_s": 1000 / cost × (1 + N(0, 1%))}``, so a
trial is one short Python process. Then `perfbisect run good=<first> bad=<last> --json` runs in its own
process with a fresh database and node lock, and the benchmark reads:

* peak RSS of the perfbisect process: its ``VmHWM`` polled from /proc every 50 ms (the kernel's
  high-water mark, so a peak between two polls is not missed; ``ru_maxrss`` from ``wait4`` would not do:
  it keeps the size of the benchmark process the child was forked from);
* time to the first trial: launch → the first trial's ``started_at`` (range listing, plan, store);
* per decision, the wall-clock gap between one trial's end and the next one's start (storing the
  observation, the search's decision, checking out the next commit): median and largest;
* the search alone: the stored observations replayed prefix by prefix through ``SearchPolicy.next``
  in this process (the same settings and prior noise the run started from; it must choose the same
  commits), median and largest seconds per decision;
* trials, the verdict and whether the culprit is the planted commit.

Printed side by side, one column per size. Targets (issue #23): 10,000 commits in ≤ 600 MB peak and
≤ 1 s per decision, the planted commit named.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfbisect.engine.bisect import SearchPolicy  # noqa: E402
from perfbisect.engine.observations import Done  # noqa: E402
from perfbisect.model import Observation  # noqa: E402
from perfbisect.settings import StatsConfig  # noqa: E402
from perfbisect.engine.stats import NoiseModel  # noqa: E402
from tests.repo_factory import fast_history  # noqa: E402

BENCH = """\
import json, pathlib, random
cost = float(pathlib.Path('cost.txt').read_text())
print(json.dumps({'ops_per_s': 1000.0 / cost * (1.0 + random.gauss(0.0, 0.01))}))
"""
STEP = 1.25  # the planted commit's cost factor: −20% ops/s


def planted_index(n: int) -> int:
    """Where the regression goes: about two thirds in, off the midpoints a plain bisection tries first."""
    return int(n * 0.637) + 3


def write_repo(repo: Path, n: int, planted: int) -> list[str]:
    """A first-parent history of ``n`` commits written with one fast-import stream (tests.repo_factory's
    ``fast_history``); the first commit writes ``cost.txt`` = 1.0, the planted one STEP. Shas, oldest first."""
    if repo.exists():
        shutil.rmtree(repo)
    out = fast_history(repo, n, extra={0: {"cost.txt": "1.0\n"}, planted: {"cost.txt": f"{STEP}\n"}})
    assert len(out) == n, (len(out), n)
    return out


def write_config(base: Path, repo: Path) -> Path:
    bench = base / "bench.py"
    bench.write_text(BENCH)
    cfg = base / "perfbisect.toml"
    cfg.write_text(
        f"[target]\nrepo = {json.dumps(str(repo))}\npython = {json.dumps(sys.executable)}\n"
        f"cache_dir = {json.dumps(str(base / 'cache'))}\n\n"
        f"[workload]\nkind = \"command\"\ncommand = [\"{{python}}\", {json.dumps(str(bench))}]\n"
        f"metric = \"ops_per_s\"\nhigher_is_better = true\nwarmup = 0\nrequest_timeout_s = 60\n\n"
        f"[stats]\nmetric = \"baseline\"\n"
    )
    return cfg


def _hwm_kb(pid: int) -> int | None:
    """VmHWM of ``pid`` once it runs perfbisect (before its exec it is a copy of this process)."""
    try:
        if b"perfbisect.cli" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def run_bisection(base: Path, cfg: Path, good: str, bad: str) -> dict[str, Any]:
    """`perfbisect run` in its own process: its peak RSS, wall time, exit status and JSON result."""
    env = {**os.environ, "PERFBISECT_LOCK_DIR": str(base)}
    cmd = [sys.executable, "-m", "perfbisect.cli", "run", f"good={good}", f"bad={bad}", "-c", str(cfg),
           "--db", str(base / "results.sqlite"), "--json"]
    launched = time.time()
    proc = subprocess.Popen(cmd, cwd=base, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = [0]
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            kb = _hwm_kb(proc.pid)
            if kb:
                peak[0] = max(peak[0], kb)
            done.wait(0.05)

    out: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda k=k, f=f: out.__setitem__(k, f.read()), daemon=True)
               for k, f in (("stdout", proc.stdout), ("stderr", proc.stderr))]
    poller = threading.Thread(target=poll, daemon=True)
    for t in (*readers, poller):
        t.start()
    proc.wait()
    wall = time.time() - launched
    done.set()
    for t in (*readers, poller):
        t.join()
    try:
        result = json.loads(out.get("stdout", b"") or b"{}")
    except json.JSONDecodeError:
        result = {}
    return {"rc": proc.returncode, "launched": launched, "wall_s": wall, "hwm_mb": peak[0] / 1024, "result": result,
            "stderr_tail": out.get("stderr", b"").decode(errors="replace")[-2000:]}


def stored(db: Path) -> tuple[list[tuple[float, float]], list[tuple[int, str, float | None, str | None]]]:
    """(started_at, finished_at) of every trial in order, and the observations (seq, commit, value, flag)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        trials = con.execute("select started_at, finished_at from trials order by started_at").fetchall()
        obs = con.execute("select seq, commit_sha, value, flag from observations order by seq").fetchall()
    finally:
        con.close()
    return trials, obs


def replay_decisions(commits: list[str], obs: list[tuple[int, str, float | None, str | None]]) -> dict[str, Any]:
    """The search's own seconds per decision: the stored observations replayed through SearchPolicy."""
    settings = StatsConfig()
    policy = SearchPolicy(commits, settings, NoiseModel.prior(settings.prior_sigma_pct))
    seen = [Observation(commit=c, value=v, seq=s, flag=f) for s, c, v, f in obs]
    times, same = [], True
    for k in range(len(seen) + 1):
        t0 = time.perf_counter()
        action = policy.next(seen[:k])
        times.append(time.perf_counter() - t0)
        if k < len(seen) and (isinstance(action, Done) or action.commit != seen[k].commit):
            same = False
    return {"search_median_s": statistics.median(times), "search_max_s": max(times), "replay_same": same}


def measure_size(base: Path, n: int) -> dict[str, Any]:
    base.mkdir(parents=True, exist_ok=True)
    planted = planted_index(n)
    t0 = time.perf_counter()
    commits = write_repo(base / "repo", n, planted)
    build_s = time.perf_counter() - t0
    cfg = write_config(base, base / "repo")
    for old in (base / "results.sqlite", base / "cache"):
        if old.is_dir():
            shutil.rmtree(old)
        elif old.exists():
            old.unlink()
    r = run_bisection(base, cfg, commits[0], commits[-1])
    trials, obs = stored(base / "results.sqlite")
    gaps = [b[0] - a[1] for a, b in zip(trials, trials[1:]) if a[1] is not None]
    outcome = r["result"].get("outcome", r["result"])
    culprit = outcome.get("culprit") if isinstance(outcome, dict) else None
    row = {
        "commits": n, "repo_build_s": build_s, "rc": r["rc"], "peak_rss_mb": r["hwm_mb"],
        "first_trial_s": (trials[0][0] - r["launched"]) if trials else math.nan,
        "gap_median_s": statistics.median(gaps) if gaps else math.nan, "gap_max_s": max(gaps) if gaps else math.nan,
        "trials": len(trials), "wall_s": r["wall_s"],
        "verdict": outcome.get("verdict") if isinstance(outcome, dict) else None,
        "culprit_ok": culprit == commits[planted], "planted": commits[planted][:10],
        "culprit": (culprit or "")[:10],
    }
    row.update(replay_decisions(commits, obs))
    if r["rc"] != 0:
        row["stderr_tail"] = r["stderr_tail"]
    return row


ROWS = [
    ("commits", "commits in the range", "{:,}"),
    ("peak_rss_mb", "peak RSS of `run` (VmHWM), MB", "{:.0f}"),
    ("first_trial_s", "launch → first trial, s", "{:.1f}"),
    ("search_median_s", "search per decision (replayed), median s", "{:.3f}"),
    ("search_max_s", "search per decision (replayed), max s", "{:.3f}"),
    ("gap_median_s", "gap between trials (decision + store + checkout), median s", "{:.2f}"),
    ("gap_max_s", "gap between trials, max s", "{:.2f}"),
    ("trials", "trials", "{}"),
    ("wall_s", "wall time of `run`, s", "{:.0f}"),
    ("verdict", "verdict", "{}"),
    ("culprit_ok", "named the planted commit", "{}"),
    ("replay_same", "replay chose the same commits", "{}"),
    ("repo_build_s", "git fast-import of the repository, s", "{:.1f}"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="500,2000,10000")
    ap.add_argument("--dir", type=Path, default=None, help="where the repositories go (default: a temp dir, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the repositories and databases")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    base = args.dir or Path(tempfile.mkdtemp(prefix="perfbisect-scale-"))
    rows = []
    try:
        for n in sizes:
            rows.append(measure_size(base / f"n{n}", n))
            if not args.json:
                print(f"# {n:,} commits done: {rows[-1]['trials']} trials, peak {rows[-1]['peak_rss_mb']:.0f} MB",
                      file=sys.stderr)
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    width = max(len(label) for _, label, _ in ROWS)
    for key, label, fmt in ROWS:
        cells = [fmt.format(r.get(key)) if r.get(key) is not None else "-" for r in rows]
        print(f"{label:<{width}}  " + "  ".join(f"{c:>10}" for c in cells))
    for r in rows:
        if r.get("stderr_tail"):
            print(f"\n{r['commits']} commits: exit {r['rc']}\n{r['stderr_tail']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
