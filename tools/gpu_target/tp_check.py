#!/usr/bin/env python3
"""perfbisect against the tensor-parallel server (tp_server.py): does the worker env check read each
worker's environment, and does the per-GPU sampling cover every GPU?

    python3 tp_check.py --work /tmp/pbtp --out $OUT [--tp 2] [--backend nccl]

Makes a one-commit target repository and a perfbisect.toml with two modes, both setting
NCCL_PROTO=Simple and NCCL_DEBUG=WARN in `[modes.NAME] env`:
  tp       every rank gets both: the env check must find them in rank 0 and in every worker
  tp-drop  the same, but the server starts worker 1 without NCCL_DEBUG (--drop-env NCCL_DEBUG; not
           NCCL_PROTO, which ranks must agree on or the all-reduce hangs): the check must report
           exactly that worker and that variable, and nothing else
runs `perfbisect measure HEAD -n 1` (both modes, real trials stored in SQLite), then reads the
stored trials back and writes to --out:
  measure.log    perfbisect's progress (its "configured env did not reach pid ..." warnings)
  env-check.txt  per trial: every process of the server's group, its command line, what was missing
  gpus.txt       per trial: the GPUs the sampler read, with samples, mean utilisation, power, memory
  server-*.log   the servers' logs: each rank's pid, device and the NCCL_* it saw
  summary.json   the checks as booleans, for the validation note
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}

CONFIG = """\
[target]
repo = {repo}
python = {python}

[server]
command = [{python}, {server}, "--tp", "{tp}", "--backend", "{backend}", "--host", "{{host}}", "--port", "{{port}}"]
ready_path = "/health"
ready_timeout_s = 300
ready_poll_s = 0.5
shutdown_grace_s = 20

[server.env]
NCCL_NVLS_ENABLE = "0"          # the device's rule: NVLink multicast stays off
PYTHONUNBUFFERED = "1"

[modes.tp]
args = []
env = {{ NCCL_PROTO = "Simple", NCCL_DEBUG = "WARN" }}

[modes.tp-drop]
args = ["--drop-env", "NCCL_DEBUG"]
env = {{ NCCL_PROTO = "Simple", NCCL_DEBUG = "WARN" }}

[workload]
kind = "openai-completions"
model = "pb-gpu-tp"
max_tokens = 256
warmup = 1
runs = 3
request_timeout_s = 120

[stats]
metric = "tp"
"""


def q(value) -> str:
    return json.dumps(str(value))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/pbtp"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--backend", default="nccl")
    p.add_argument("--python", default=sys.executable)
    args = p.parse_args()
    work, out = args.work.resolve(), args.out.resolve()
    if work.exists():
        shutil.rmtree(work)
    repo = work / "target"
    repo.mkdir(parents=True)
    out.mkdir(parents=True, exist_ok=True)
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, env={**os.environ, **ENV})
    git("init", "-q", "-b", "main")
    (repo / "README.md").write_text("TP target for perfbisect's worker env check\n")
    git("add", "-A")
    git("commit", "-qm", "tp target")
    config = work / "perfbisect.toml"
    config.write_text(CONFIG.format(repo=q(repo), python=q(args.python), server=q(HERE / "tp_server.py"),
                                    tp=args.tp, backend=args.backend))
    db = work / "results.sqlite"
    proc = subprocess.run([args.python, "-m", "perfbisect.cli", "measure", "HEAD", "-n", "1", "-c", str(config),
                           "--db", str(db)], capture_output=True, text=True, timeout=420,
                          env={**os.environ, "COLUMNS": "200"})
    (out / "measure.log").write_text(f"$ perfbisect measure HEAD -n 1 (exit {proc.returncode})\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n", flush=True)

    from perfbisect.store import open_store
    from perfbisect.store.samples import expand_compact

    summary = {"measure_exit": proc.returncode, "tp": args.tp, "backend": args.backend, "trials": []}
    env_lines, gpu_lines = [], []
    with open_store(db, recover=False) as store:
        for t in store.trials(status=None):
            mode = t.identity.mode
            env_lines.append(f"trial #{t.id} [{mode}] {t.status.value}: {len(t.env_checks)} processes in the server's group")
            for c in t.env_checks:
                state = "ok" if c.ok else "MISSING " + ", ".join(c.missing) + "".join(
                    f" {n}={a!r} (wanted {w!r})" for n, w, a in c.mismatched)
                env_lines.append(f"  pid {c.pid}: {state}   {c.cmdline[:150]}")
            workers = [c for c in t.env_checks if "--rank" in c.cmdline]
            leader = [c for c in t.env_checks if "tp_server.py" in c.cmdline and "--rank" not in c.cmdline]
            data = store.trial_samples(t.id)
            snaps = expand_compact(data) if data else []
            per_gpu: dict[int, list] = {}
            for s in snaps:
                for g in s.gpus:
                    per_gpu.setdefault(g.index, []).append(g)
            gpu_lines.append(f"trial #{t.id} [{mode}]: {len(snaps)} snapshots, GPUs sampled: {sorted(per_gpu)}")
            for index, gs in sorted(per_gpu.items()):
                def mean(attr):
                    vals = [getattr(g, attr) for g in gs if getattr(g, attr) is not None]
                    return round(sum(vals) / len(vals), 1) if vals else None
                procs = sorted({p for g in gs for p in g.processes})
                gpu_lines.append(f"  GPU {index} {gs[0].name}: {len(gs)} samples, utilisation {mean('utilization_pct')}%, "
                                 f"power {mean('power_w')} W, SM {mean('sm_clock_mhz')} MHz, memory used "
                                 f"{mean('memory_used_mib')} MiB, processes {procs}")
            summary["trials"].append({
                "trial": t.id, "mode": mode, "status": t.status.value,
                "tok_s": (t.usable_runs[0].decode_tok_s if t.usable_runs else None),
                "processes": len(t.env_checks), "workers": len(workers), "leaders": len(leader),
                "missing": {str(c.pid): list(c.missing) for c in t.env_checks if c.missing},
                "workers_missing": [c.pid for c in workers if c.missing],
                "gpus_sampled": sorted(per_gpu), "snapshots": len(snaps),
            })
            if t.log_path and Path(t.log_path).is_file():
                shutil.copy(t.log_path, out / f"server-{mode}.log")
    (out / "env-check.txt").write_text("\n".join(env_lines) + "\n")
    (out / "gpus.txt").write_text("\n".join(gpu_lines) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print("\n".join(env_lines + gpu_lines))
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
