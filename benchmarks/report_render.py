"""How long the HTML report takes to render and how much it weighs (issue #11 targets).

    python benchmarks/report_render.py [--commits 64] [--trials 600] [--bisections 50] [--json]

1. A synthetic results database (perfbisect.demo.results: a real git repository, trials with runs,
   sampled GPU state, env checks, observations, an outcome) of ``--commits`` commits and
   ``--trials`` trials in one bisection: time ``perfbisect report`` (load, replay of the search,
   render) and the file's size. Targets: ≤ 3 s, ≤ 5 MB.
2. ``--bisections`` bisections of 12 trials each: time ``perfbisect report --index`` (every report
   plus the index with its history charts). Target: ≤ 10 s.

Setup (building the repository and database) is not timed. The machine's load average is printed
with the numbers: on a shared 2-core machine the replay's posterior fits dominate the time and slow with
load, but the steps replayed do not (the replay's budget is work units, report.replay.REPLAY_WORK); CPU
seconds (time.process_time) are printed beside the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfbisect.app import reports  # noqa: E402
from perfbisect.demo.results import make_results  # noqa: E402
from perfbisect.store import open_store  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=64)
    parser.add_argument("--trials", type=int, default=600)
    parser.add_argument("--bisections", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    out: dict = {"load_avg_1m": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        big = make_results(Path(tmp) / "big", commits=args.commits, trials=args.trials)
        with open_store(big.db) as store:
            t0, c0 = time.perf_counter(), time.process_time()
            path, view = reports.report(store, "latest", Path(tmp) / "big.html")
            out["report_s"] = time.perf_counter() - t0
            out["report_cpu_s"] = time.process_time() - c0
        out["replay_work"] = view["reasoning"]["work"]
        out["report_mb"] = path.stat().st_size / 1e6
        out["replayed_steps"] = f"{view['reasoning']['shown']} of {view['reasoning']['total']}"

        many = make_results(Path(tmp) / "many", commits=args.commits, trials=12 * args.bisections,
                            bisections=args.bisections)
        with open_store(many.db) as store:
            t0, c0 = time.perf_counter(), time.process_time()
            index = reports.report_index(store, Path(tmp) / "site")
            out["index_s"] = time.perf_counter() - t0
            out["index_cpu_s"] = time.process_time() - c0
        out["index_files"] = len(list(index.parent.glob("*.html")))
        out["site_mb"] = sum(p.stat().st_size for p in index.parent.glob("*.html")) / 1e6

    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"load average (1 min) at start: {out['load_avg_1m']:.2f}")
    print(f"report, {args.commits} commits / {args.trials} trials: {out['report_s']:.2f} s (target ≤ 3 s; "
          f"{out['report_cpu_s']:.2f} CPU s), {out['report_mb']:.2f} MB (target ≤ 5 MB); search replayed at "
          f"{out['replayed_steps']} steps ({out['replay_work']:,} work units)")
    print(f"index over {args.bisections} bisections: {out['index_s']:.2f} s (target ≤ 10 s; {out['index_cpu_s']:.2f} CPU s), "
          f"{out['index_files']} files, {out['site_mb']:.1f} MB in all")


if __name__ == "__main__":
    main()
