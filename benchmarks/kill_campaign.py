"""Kill campaign: SIGKILL `perfbisect run`/`resume` at random points and check nothing is lost.

    python benchmarks/kill_campaign.py [--kills 50] [--seed 1] [--json]

Three demo targets (``perfbisect.demo.target.make_demo_target``), one per configuration:

* ``mode``    — the demo's own config (metric = the speculative mode, emulator servers);
* ``ratio``   — the same with ``[stats] metric = "ratio:eagle3/baseline"`` (both modes per commit);
* ``command`` — a ``command`` workload (no server): a script that reads the verify-cycle time from
  the checked-out worktree, so the planted commit is the one to find.

Round-robin over the configurations, the script starts ``perfbisect run good=G bad=B`` (or
``perfbisect resume`` after a kill) in its own session, waits a seeded uniform random time, and
SIGKILLs the perfbisect process only (its children are left to PR_SET_PDEATHSIG and pidfile
reaping). After each kill it reads the SQLite file read-only and scans /proc for processes of the
campaign (cmdline or cwd under the campaign directory, or the demo emulator). A bisection that ends
before its kill is checked and replaced by a fresh one (new database). After ``--kills`` kills the
last bisection of each configuration is resumed to completion with ``--json``.

Figures:
* runs lost: stored runs that disappear between two looks (the count must never decrease), plus
  ``PRAGMA integrity_check`` failures;
* completed trials repeated: OK ``bisect`` trials that no observation of their bisection uses
  (a finished trial measured again instead of being reused);
* processes left 1 s after a kill (processes whose cmdline, cwd or environment names the campaign
  directory — emulators, their workers, command workloads, builds), and processes from earlier kills still alive while the next
  command runs (and after the last one finished);
* each finished bisection's culprit vs the planted commit; wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfbisect.demo.target import make_demo_target  # noqa: E402

COMMAND_SCRIPT = """\
import json, os, pathlib, random, re, time
text = pathlib.Path('python/sglang/srt/speculative/eagle_worker.py').read_text()
verify_ms = float(re.search(r'VERIFY_CYCLE_MS = ([0-9.]+)', text).group(1))
accept = float(re.search(r'SPEC_ACCEPT_LENGTH = ([0-9.]+)', text).group(1))
time.sleep(0.4)  # a measured invocation takes a while: kills can land inside it
noise = random.gauss(0.0, 0.02)
print(json.dumps({'tok_s': 1000.0 * accept / verify_ms * (1.0 + noise)}))
"""


def build_configs(base: Path, commits: int) -> list[dict[str, Any]]:
    configs = []
    for name in ("mode", "ratio", "command"):
        target = make_demo_target(base / name / "demo", commits=commits)
        text = target.config.read_text()
        if name == "ratio":
            assert 'metric = "eagle3"' in text
            text = text.replace('metric = "eagle3"', 'metric = "ratio:eagle3/baseline"')
        elif name == "command":
            script = base / name / "bench.py"
            script.write_text(COMMAND_SCRIPT)
            assert '[workload]\nkind = "sglang"' in text
            text = text.replace(
                '[workload]\nkind = "sglang"',
                f'[workload]\nkind = "command"\ncommand = ["{{python}}", "{script}"]\nmetric = "tok_s"',
            )
            text = text.replace('metric = "eagle3"', 'metric = "baseline"')
        cfg = base / name / "perfbisect.toml"
        cfg.write_text(text)
        configs.append({"name": name, "target": target, "config": cfg, "dir": base / name})
    return configs


def db_counts(db: Path) -> dict[str, Any]:
    """Runs, trials, bisections and integrity of a results file, read-only."""
    if not db.exists():
        return {"runs": 0, "trials": 0, "bisections": 0, "integrity": "ok"}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        if "runs" not in tables:
            return {"runs": 0, "trials": 0, "bisections": 0, "integrity": "ok"}
        return {
            "runs": con.execute("select count(*) from runs").fetchone()[0],
            "run_ids": {r[0] for r in con.execute("select id from runs")},
            "trials": con.execute("select count(*) from trials").fetchone()[0],
            "bisections": con.execute("select count(*) from bisections").fetchone()[0],
            "integrity": con.execute("pragma integrity_check").fetchone()[0],
        }
    finally:
        con.close()


def repeated_trials(db: Path) -> dict[str, int]:
    """OK bisect trials that no observation uses, and repeated (commit, mode) measurements."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        used: set[int] = set()
        for (ids,) in con.execute("select trial_ids from observations"):
            used.update(json.loads(ids) if isinstance(ids, str) else ids)
        ok = con.execute(
            "select id, commit_sha, mode from trials where purpose = 'bisect' and status = 'ok'"
        ).fetchall()
        unused = [t for t in ok if t[0] not in used]
        statuses: dict[str, int] = {}
        for (st,) in con.execute("select status from trials"):
            statuses[st] = statuses.get(st, 0) + 1
        return {"ok_bisect_trials": len(ok), "unused_ok_trials": len(unused),
                "observations": con.execute("select count(*) from observations").fetchone()[0],
                "trial_status": statuses}
    finally:
        con.close()


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def campaign_processes(base: Path, exclude: set[int]) -> dict[int, tuple[str, str]]:
    """pid → (start time, cmdline) of live processes that belong to the campaign."""
    found = {}
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me or pid in exclude:
            continue
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z" or not raw:
            continue
        cmd = raw.replace(b"\0", b" ").decode(errors="replace")
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        try:  # the demo's server env names a file under the campaign directory: emulator workers too
            environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        except OSError:
            environ = ""
        # Only this campaign's processes (other demo emulators on the machine are not ours).
        if str(base) in cmd or cwd.startswith(str(base)) or str(base) in environ:
            st = _start_time(pid)
            if st is not None:
                found[pid] = (st, cmd[:160])
    return found


def still_alive(procs: dict[int, tuple[str, str]]) -> dict[int, str]:
    return {pid: cmd for pid, (st, cmd) in procs.items() if _start_time(pid) == st and _state(pid) != "Z"}


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def cli_argv(cfg: dict[str, Any], db: Path, first: bool, json_out: bool = False) -> list[str]:
    t = cfg["target"]
    argv = [sys.executable, "-m", "perfbisect.cli"]
    argv += ["run", f"good={t.good}", f"bad={t.bad}"] if first else ["resume"]
    argv += ["-c", str(cfg["config"]), "--db", str(db)]
    return argv + (["--json"] if json_out else [])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--commits", type=int, default=12, help="commits of each demo target")
    ap.add_argument("--min-wait", type=float, default=0.5)
    ap.add_argument("--max-wait", type=float, default=8.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the campaign directory")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    t0 = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="pb-kill-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    configs = build_configs(base, args.commits)
    for cfg in configs:
        cfg.update(db_index=0, first=True, last={"runs": 0, "run_ids": set()}, kills=0, completed_before_kill=0,
                   bisections=[])
        cfg["db"] = cfg["dir"] / "r0.sqlite"

    figures: dict[str, Any] = {
        "kills": 0, "runs_lost": 0, "integrity_failures": 0, "left_after_kill": 0,
        "left_after_next_command": 0, "run_count_decreases": 0, "nonzero_exits": [],
        "leftovers": [],
    }
    pending: dict[int, tuple[str, str]] = {}  # processes seen after earlier kills
    logs = base / "logs"
    logs.mkdir()
    k = 0

    def check_db(cfg: dict[str, Any]) -> None:
        counts = db_counts(cfg["db"])
        if counts["integrity"] != "ok":
            figures["integrity_failures"] += 1
        before = cfg["last"].get("run_ids", set())
        now = counts.get("run_ids", set())
        lost = before - now
        figures["runs_lost"] += len(lost)
        if counts["runs"] < cfg["last"]["runs"]:
            figures["run_count_decreases"] += 1
        cfg["last"] = counts

    def finish(cfg: dict[str, Any], proc: subprocess.Popen, out_path: Path, killed: bool) -> None:
        """A bisection ended on its own: record its verdict and start a fresh one next time."""
        try:
            result = json.loads(out_path.read_text())
        except ValueError:
            result = {}
        culprit, verdict, from_db = result.get("culprit"), result.get("verdict"), False
        if not result:
            # Killed after the verdict was stored but before it was printed: `resume` then finds no
            # unfinished bisection (exit 2); the verdict is in the database.
            con = sqlite3.connect(f"file:{cfg['db']}?mode=ro", uri=True)
            row = con.execute("select status, verdict, culprit from bisections order by id desc limit 1").fetchone()
            con.close()
            if row and row[0] == "done":
                verdict, culprit, from_db = row[1], row[2], True
        planted = cfg["target"].planted
        rep = repeated_trials(cfg["db"])
        cfg["bisections"].append({
            "db": cfg["db"].name, "exit": proc.returncode, "verdict": verdict, "from_db": from_db,
            "culprit": culprit, "planted": planted, "correct": culprit == planted, **rep,
        })
        cfg["db_index"] += 1
        cfg["db"] = cfg["dir"] / f"r{cfg['db_index']}.sqlite"
        cfg["first"] = True
        cfg["last"] = {"runs": 0, "run_ids": set()}

    while k < args.kills:
        cfg = configs[k % len(configs)]
        # Nothing stored yet (killed before the bisection row landed): `run` again, not `resume`.
        first = cfg["first"] or db_counts(cfg["db"])["bisections"] == 0
        out_path = logs / f"{k:03d}-{cfg['name']}.json"
        with out_path.open("w") as out, (logs / f"{k:03d}-{cfg['name']}.err").open("w") as err:
            proc = subprocess.Popen(cli_argv(cfg, cfg["db"], first, json_out=True), cwd=cfg["dir"], env=env,
                                    stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        wait = rng.uniform(args.min_wait, args.max_wait)
        try:
            proc.wait(timeout=wait)
            ended = True
        except subprocess.TimeoutExpired:
            ended = False
        # Leftovers of earlier kills must be gone now that the next command has run for `wait` s.
        left = still_alive(pending)
        figures["left_after_next_command"] += len(left)
        if left:
            figures["leftovers"].append({"when": f"next command {k}", "procs": list(left.values())})
        pending = {}
        if ended:
            check_db(cfg)
            if proc.returncode not in (0, 3):  # (2 with the verdict already stored: see finish())
                figures["nonzero_exits"].append({"k": k, "config": cfg["name"], "exit": proc.returncode,
                                                 "stderr": (logs / f"{k:03d}-{cfg['name']}.err").read_text()[-400:]})
            cfg["completed_before_kill"] += 1
            finish(cfg, proc, out_path, killed=False)
            continue  # no kill happened; try again (the loop counts kills only)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        cfg["first"] = False
        k += 1
        cfg["kills"] += 1
        figures["kills"] += 1
        time.sleep(1.0)
        procs = campaign_processes(base, exclude=set())
        figures["left_after_kill"] += len(procs)
        if procs:
            figures["leftovers"].append({"when": f"1 s after kill {k} ({cfg['name']}, {wait:.1f} s)",
                                         "procs": [c for _, c in procs.values()]})
        pending = procs
        check_db(cfg)

    # Let the last bisection of each configuration finish.
    for cfg in configs:
        first = cfg["first"] or db_counts(cfg["db"])["bisections"] == 0
        out_path = logs / f"final-{cfg['name']}.json"
        with out_path.open("w") as out, (logs / f"final-{cfg['name']}.err").open("w") as err:
            proc = subprocess.Popen(cli_argv(cfg, cfg["db"], first, json_out=True), cwd=cfg["dir"], env=env,
                                    stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
            time.sleep(1.0)
            left = still_alive(pending)
            figures["left_after_next_command"] += len(left)
            if left:
                figures["leftovers"].append({"when": f"final {cfg['name']}", "procs": list(left.values())})
            pending = {}
            proc.wait(timeout=600)
        check_db(cfg)
        if proc.returncode not in (0, 3):
            figures["nonzero_exits"].append({"k": "final", "config": cfg["name"], "exit": proc.returncode,
                                             "stderr": (logs / f"final-{cfg['name']}.err").read_text()[-400:]})
        finish(cfg, proc, out_path, killed=False)
    time.sleep(1.0)
    after_all = campaign_processes(base, exclude=set())
    figures["left_after_last_command"] = len(after_all)
    if after_all:
        figures["leftovers"].append({"when": "after the last command", "procs": [c for _, c in after_all.values()]})

    bisections = [dict(b, config=c["name"]) for c in configs for b in c["bisections"]]
    figures.update(
        seed=args.seed,
        commits=args.commits,
        kills_per_config={c["name"]: c["kills"] for c in configs},
        bisections_finished=len(bisections),
        culprits_correct=sum(b["correct"] for b in bisections),
        completed_trials_repeated=sum(b["unused_ok_trials"] for b in bisections),
        bisections=bisections,
        wall_s=round(time.monotonic() - t0, 1),
        dir=str(base),
    )
    if args.json:
        print(json.dumps(figures, indent=2, default=str))
    else:
        print(f"kills: {figures['kills']} ({', '.join(f'{n} {v}' for n, v in figures['kills_per_config'].items())}); "
              f"seed {args.seed}; waits uniform {args.min_wait}–{args.max_wait} s; {args.commits}-commit demo targets")
        print(f"runs lost: {figures['runs_lost']} (run-count decreases {figures['run_count_decreases']}, "
              f"integrity_check failures {figures['integrity_failures']})")
        print(f"completed trials repeated: {figures['completed_trials_repeated']} "
              f"(OK bisect trials not used by any observation)")
        print(f"processes left 1 s after a kill: {figures['left_after_kill']}; "
              f"still alive while the next command runs: {figures['left_after_next_command']}; "
              f"after the last command: {figures['left_after_last_command']}")
        for b in bisections:
            print(f"  {b['config']:8s} {b['db']:12s} exit {b['exit']} {b['verdict']!s:12s} culprit "
                  f"{(b['culprit'] or 'none')[:10]} planted {(b['planted'] or 'none')[:10]} "
                  f"{'✓' if b['correct'] else '✗'}{' (verdict read from the db)' if b['from_db'] else ''}  ok bisect trials {b['ok_bisect_trials']}, unused {b['unused_ok_trials']}, "
                  f"trials {b['trial_status']}")
        print(f"bisections finished: {len(bisections)}, culprit = planted: {figures['culprits_correct']}")
        if figures["nonzero_exits"]:
            print(f"non-zero exits: {figures['nonzero_exits']}")
        for item in figures["leftovers"]:
            print(f"leftover: {item}")
        print(f"wall time: {figures['wall_s']} s")
    if not args.keep:
        import shutil
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
