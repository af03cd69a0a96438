"""How fast do several processes store results at once, on a SQLite file and on PostgreSQL?

Starts N writer processes (``tests/store_writer.py``: each a bisection of T trials × R runs plus one
observation per trial, every write its own committed transaction, as a bisection does) against one
fresh database, released together, and prints the wall time, committed writes per second and the
row counts (which must equal N·T trials, N·T·R runs, N·T observations). PostgreSQL runs on a
throwaway cluster (``tests/pg_server.py``; needs initdb/pg_ctl).

    python benchmarks/store_writers.py [--writers 4] [--trials 25] [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfbisect.store import open_store  # noqa: E402
from tests.pg_server import PgCluster, find_pg_bin  # noqa: E402


def race(db: str, writers: int, trials: int, runs: int, tmp: Path) -> dict:
    open_store(db).close()  # the schema first: the timed part is opening the store and writing
    go = tmp / f"go-{time.monotonic_ns()}"
    procs = [
        subprocess.Popen([sys.executable, "-m", "tests.store_writer", db, f"w{i}", str(trials), str(runs), str(go)],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(writers)
    ]
    time.sleep(2.0)  # every writer imported and waiting at the gate
    start = time.monotonic()
    go.touch()
    for p in procs:
        out, err = p.communicate(timeout=900)
        if p.returncode != 0:
            raise SystemExit(f"a writer failed: {err}")
    wall = time.monotonic() - start
    with open_store(db, recover=False) as store:
        n_trials = len(store.trials(status=None))
        n_runs = sum(len(t.runs) for t in store.trials(status=None))
        n_obs = sum(len(store.observations(b.id)) for b in store.bisections(1 << 20))
    writes = writers * (1 + trials * (runs + 3))  # a bisection; per trial: begin, runs, finish, observation
    return {"wall_s": round(wall, 2), "writes_per_s": round(writes / wall, 1), "trials": n_trials, "runs": n_runs,
            "observations": n_obs, "expected": [writers * trials, writers * trials * runs, writers * trials]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--trials", type=int, default=25)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = race(str(Path(tmp) / "r.sqlite"), a.writers, a.trials, a.runs, Path(tmp))
        bindir = find_pg_bin()
        if bindir is None:
            results["postgresql"] = {"skipped": "no initdb/pg_ctl found"}
        else:
            cluster = PgCluster(bindir).start()
            try:
                results["postgresql"] = race(cluster.create_database("bench"), a.writers, a.trials, a.runs, Path(tmp))
            finally:
                cluster.stop()
    if a.json:
        print(json.dumps(results, indent=2))
    else:
        for name, r in results.items():
            print(f"{name:11s} {r}")


if __name__ == "__main__":
    main()
