"""Helper processes for the shared-store tests (tests/test_pg_store.py).

``python -m tests.store_writer DB NAME TRIALS RUNS GO``: one concurrent writer. Waits until the file
GO exists (so every writer starts at once), then stores one bisection with TRIALS trials of RUNS runs
each and one observation per trial, every write its own transaction, as a bisection does; prints
{"bisection": id, "trials": [ids]} as JSON.

``python -m tests.store_writer hold URL OWNER``: a perfbisect "on another host": its store's owner
is OWNER (held by its owner lock, as any process's is), it leaves a bisection and a trial with two
runs running, prints their ids, and exits normally when its stdin closes.

``python -m tests.store_writer resume URL ID GO``: resumes bisection ID once GO exists (two of them
race for one interrupted bisection).

``python -m tests.store_writer node URL NODE``: holds NODE's lock in the shared store until killed
or its stdin closes; prints its pid and host.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from perfbisect.model import RunResult, TrialIdentity, TrialStatus
from perfbisect.store import TrialPurpose, open_store


def main(db: str, name: str, trials: int, runs: int, go: Path) -> None:
    while not go.exists():
        time.sleep(0.01)
    with open_store(db) as store:  # the database may be empty: the writers migrate it at once too
        commits = [f"{name}-{i:03d}".ljust(40, "0") for i in range(trials)]
        bid = store.begin_bisection(commits[0], commits[-1], commits, "decode_tok_s", {"writer": name})
        ids = []
        for seq, commit in enumerate(commits):
            ident = TrialIdentity(commit, "p", f"build-{name}", "baseline", "mh", "wl", f"host-{name}")
            tid = store.begin_trial(ident, TrialPurpose.BISECT, bisection_id=bid)
            for i in range(runs):
                store.add_run(tid, RunResult(index=i, warmup=False, requested_tokens=64, output_tokens=64,
                                             decode_tok_s=100.0 + seq + i / 10))
            store.finish_trial(tid, TrialStatus.OK)
            store.add_observation(bid, seq, commit, float(seq), [tid])
            ids.append(tid)
    print(json.dumps({"bisection": bid, "trials": ids}))


def hold(url: str, owner: str) -> None:
    from perfbisect.store import Store, locate, make_engine
    from perfbisect.store.shared import OwnerLock

    location = locate(url)
    engine = make_engine(location)
    store = Store(location, engine, owner_lock=OwnerLock(engine, owner))
    assert store.owner == owner
    bid = store.begin_bisection("a" * 40, "b" * 40, ["a" * 40, "b" * 40], "decode_tok_s")
    ident = TrialIdentity("b" * 40, "p", "build", "baseline", "mh", "wl", "node-b")
    tid = store.begin_trial(ident, TrialPurpose.BISECT, bisection_id=bid)
    for i in range(2):
        store.add_run(tid, RunResult(index=i, warmup=False, requested_tokens=64, output_tokens=64, decode_tok_s=99.0))
    print(json.dumps({"bisection": bid, "trial": tid}), flush=True)
    sys.stdin.read()
    store.close()


def node(url: str, name: str) -> None:
    import os
    import socket

    with open_store(url) as store:
        lock = store.node_lock(name)
        lock.acquire()
        print(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}), flush=True)
        sys.stdin.read()
        lock.release()


def resume(url: str, bisection_id: int, go: Path) -> None:
    """Resume a bisection as soon as GO exists; print "resumed" or the refusal, keep the store
    (and the bisection) a moment so a racing resumer sees this owner alive."""
    from perfbisect.errors import StoreError

    with open_store(url) as store:
        while not go.exists():
            time.sleep(0.005)
        try:
            store.resume_bisection(bisection_id)
            print(json.dumps({"resumed": True}), flush=True)
        except StoreError as exc:
            print(json.dumps({"resumed": False, "error": str(exc)}), flush=True)
        time.sleep(2.0)


if __name__ == "__main__":
    if sys.argv[1] == "resume":
        resume(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
    elif sys.argv[1] == "hold":
        hold(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "node":
        node(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]))
