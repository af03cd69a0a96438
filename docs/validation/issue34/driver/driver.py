"""Round 8 driver: every run with its own fresh database (db/NAME.sqlite) and cache dir (from cfg/NAME.toml)."""
import datetime
import json
import re
import subprocess
import sys
import time
from pathlib import Path

R = Path("/work/validation/issue34")
PB = "/work/main/.venv/bin/perfbisect"
OUT = R / "out"
REG = ("85442b8032cb7bae72866dfd7782234a98dd2fb7", "d8e3b31b734926ebbcaff654279f6855a73e052f")
TOMLI = ("0b158821", "a678e6fd")
AA = ("d8e3b31b734926ebbcaff654279f6855a73e052f", "78c2a5e4f5c04fd782a5729d93892c3a3eafe365")

runs = [(f"reg-{k}", REG) for k in range(1, 4)]
runs += [(f"aa-{k}", AA) for k in range(1, 4)]
runs += [("tomli-1", TOMLI), ("aacal-1", AA)]
if len(sys.argv) > 1:
    runs = [r for r in runs if r[0] in sys.argv[1:]]


def load():
    return Path("/proc/loadavg").read_text().split()[:3]


def utc():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


meta = OUT / "runs.jsonl"
for name, (good, bad) in runs:
    cfg, db = R / "cfg" / f"{name}.toml", R / "db" / f"{name}.sqlite"
    assert not db.exists(), db
    rec = {"name": name, "start_utc": utc(), "load_before": load()}
    if name.startswith("aacal"):
        t0 = time.time()
        with open(OUT / f"{name}.calibrate.txt", "w") as so, open(OUT / f"{name}.calibrate.log", "w") as se:
            rc = subprocess.run([PB, "calibrate", "d8e3b31b73", "--trials", "5", "-c", str(cfg), "--db", str(db)],
                                stdout=so, stderr=se, cwd=R).returncode
        rec["calibrate_rc"], rec["calibrate_wall_s"] = rc, round(time.time() - t0, 1)
        m = re.search(r"between-session noise σ_b: ([0-9.]+)%", (OUT / f"{name}.calibrate.txt").read_text())
        rec["calib_sigma_b"] = m.group(1) + "%" if m else None
        rec["load_after_calibrate"] = load()
    t0 = time.time()
    with open(OUT / f"{name}.json", "w") as so, open(OUT / f"{name}.log", "w") as se:
        rc = subprocess.run([PB, "run", f"good={good}", f"bad={bad}", "-c", str(cfg), "--db", str(db), "--json"],
                            stdout=so, stderr=se, cwd=R).returncode
    rec.update(rc=rc, wall_s=round(time.time() - t0, 1), end_utc=utc(), load_after=load())
    with open(meta, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps(rec), flush=True)
