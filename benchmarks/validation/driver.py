"""Carry out a round: prepare a batch's working folder, run its perfbisect runs one after another through the
command line (each with its own fresh database and cache directory), or run one of its simulations.

Only perfbisect's command line is used here (``perfbisect calibrate``, ``perfbisect run --json``): what a user
types, so a round checks the tool as shipped."""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import configs
from .rounds import BENCH_FROM_TOOL, ROOT, VALIDATE_PUBLIC_PROJECT, WORKLOADS, Round, Run

SIGMA_B = re.compile(r"between-session noise σ_b: ([0-9.]+)%")


def default_perfbisect() -> str:
    """This checkout's perfbisect (its uv environment), else the one on PATH."""
    here = ROOT / ".venv" / "bin" / "perfbisect"
    return str(here) if here.exists() else (shutil.which("perfbisect") or "perfbisect")


def bench_from_tool() -> str:
    """tools/validate_public_project.py's workload (its BENCH), the text every round wrote to bench_perfbisect.py."""
    spec = importlib.util.spec_from_file_location("validate_public_project", VALIDATE_PUBLIC_PROJECT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.BENCH


def write_workloads(rnd: Round, workdir: Path | None) -> Path:
    """Every workload the round's groups name, into <round workdir>/work (tomli's bench with its document)."""
    work = rnd.workloads_dir(workdir)
    work.mkdir(parents=True, exist_ok=True)
    for name in sorted({g["workload"] for g in rnd.groups.values()}):
        if name == BENCH_FROM_TOOL:
            (work / name).write_text(bench_from_tool(), encoding="utf-8")
        else:
            shutil.copyfile(WORKLOADS / name, work / name)
    if (work / "bench_tomli_inline.py").exists():
        shutil.copyfile(WORKLOADS / "tomli_inline.toml", work / "tomli_inline.toml")
    return work


def prepare(rnd: Round, batch: dict[str, Any], workdir: Path | None, python: str | None,
            sources: dict[str, str]) -> Path:
    """The batch's folder: clones of its projects, the workloads, one config per run; folders for databases and
    output. A project is cloned from ``sources[key]`` when given (a local clone or mirror), else from its url."""
    top = rnd.workdir(batch, workdir)
    for sub in ("cfg", "db", "out"):
        (top / sub).mkdir(parents=True, exist_ok=True)
    write_workloads(rnd, workdir)
    for key in sorted({rnd.groups[g]["project"] for g in batch["groups"]}):
        dest = top / key
        if dest.exists():
            print(f"{dest}: there already, left as it is")
            continue
        source = sources.get(key) or rnd.projects[key]["url"]
        if subprocess.run(["git", "clone", "-q", source, str(dest)]).returncode != 0:
            raise SystemExit(f"could not clone {key} from {source}: pass --source {key}=PATH (a local clone or mirror)")
        print(f"{dest}: cloned from {source}")
    for run in rnd.runs(batch):
        path = top / "cfg" / f"{run.name}.toml"
        path.write_text(configs.render(rnd, batch, run, workdir, python), encoding="utf-8")
        print(f"{path}  cache {configs.cache_dir(rnd, batch, run, workdir)}")
    return top


def _load() -> list[str]:
    try:
        return Path("/proc/loadavg").read_text().split()[:3]
    except OSError:  # pragma: no cover (not Linux)
        return [f"{x:.2f}" for x in os.getloadavg()]


def _utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_one(rnd: Round, run: Run, top: Path, perfbisect: str) -> dict[str, Any]:
    """One run: ``calibrate`` first where its group says so, then ``run --json``; its record for runs.jsonl."""
    group = rnd.groups[run.group]
    cfg, db, out = top / "cfg" / f"{run.name}.toml", top / "db" / f"{run.name}.sqlite", top / "out"
    if not cfg.exists():
        raise SystemExit(f"{cfg} is missing: run `prepare` for this batch first")
    if db.exists():
        raise SystemExit(f"{db} exists: every run starts from a fresh database (move it away to run again)")
    rec: dict[str, Any] = {"name": run.name, "start_utc": _utc(), "load_before": _load()}
    cal = group.get("calibrate")
    if cal:
        t0 = time.time()
        with open(out / f"{run.name}.calibrate.txt", "w") as so, open(out / f"{run.name}.calibrate.log", "w") as se:
            rc = subprocess.run([perfbisect, "calibrate", cal["commit"], "--trials", str(cal["trials"]), "-c", str(cfg),
                                 "--db", str(db)], stdout=so, stderr=se, cwd=top).returncode
        rec["calibrate_rc"], rec["calibrate_wall_s"] = rc, round(time.time() - t0, 1)
        m = SIGMA_B.search((out / f"{run.name}.calibrate.txt").read_text())
        rec["calib_sigma_b"] = m.group(1) + "%" if m else None
        rec["load_after_calibrate"] = _load()
    t0 = time.time()
    with open(out / f"{run.name}.json", "w") as so, open(out / f"{run.name}.log", "w") as se:
        rc = subprocess.run([perfbisect, "run", f"good={group['good']}", f"bad={group['bad']}", "-c", str(cfg),
                             "--db", str(db), "--json"], stdout=so, stderr=se, cwd=top).returncode
    rec.update(rc=rc, wall_s=round(time.time() - t0, 1), end_utc=_utc(), load_after=_load())
    return rec


def run_batch(rnd: Round, batch: dict[str, Any], workdir: Path | None, perfbisect: str, only: list[str],
              background: bool) -> int:
    """The batch's runs in order (``only``: these names), each appended to out/runs.jsonl as it ends.
    ``background``: start the batch's background commands first (the load it ran beside) and stop them after."""
    top = rnd.workdir(batch, workdir)
    runs = [r for r in rnd.runs(batch) if not only or r.name in only]
    unknown = set(only) - {r.name for r in rnd.runs(batch)}
    if unknown:
        raise SystemExit(f"batch {batch['name']} has no runs {sorted(unknown)}")
    loads = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for cmd in batch.get("background", [])] if background else []
    worst = 0
    try:
        for run in runs:
            rec = run_one(rnd, run, top, perfbisect)
            with open(top / "out" / "runs.jsonl", "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(json.dumps(rec), flush=True)
            worst = max(worst, rec["rc"])
    finally:
        for p in loads:  # only the processes started here, each by its own handle
            p.terminate()
            p.wait(timeout=30)
    return worst


def simulation_argv(sim: dict[str, Any]) -> list[str]:
    return [sys.executable, str(ROOT / sim["script"]), *sim.get("args", [])]


def run_simulation(sim: dict[str, Any], out: Path) -> int:
    """The simulation's script with its arguments and environment; its stdout into ``out`` (a folder: the kept
    output's file name there)."""
    if "script" not in sim:
        raise SystemExit(f"simulation {sim['name']}: how it ran was not recorded ({sim.get('notes', '')})")
    out.mkdir(parents=True, exist_ok=True)
    dest = out / Path(sim["output"]).name
    env = {**os.environ, **sim.get("env", {})}
    print(f"{' '.join(simulation_argv(sim))} > {dest}", flush=True)
    with open(dest, "w") as so:
        return subprocess.run(simulation_argv(sim), stdout=so, env=env, cwd=ROOT).returncode
