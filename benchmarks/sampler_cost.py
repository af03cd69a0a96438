"""What perfbisect's system-state sampler costs: CPU at 1 Hz, and storage of a 10-minute 8-GPU trial.

    python benchmarks/sampler_cost.py [--collectors proc,nvml,nvidia-smi] [--duration 30] [--json]

For each collector set it runs a real :class:`perfbisect.measure.sysstate.Sampler` for ``--duration``
seconds and reports the sampling thread's own CPU time (plus the CPU of child processes, which is
where nvidia-smi's cost lands) as a percentage of one core, and the mean time of one snapshot.
Then it builds a 10-minute, 8-GPU, 1 Hz trial with moving clocks, power and temperatures and reports
the size of its compact stored form (JSON, and gzipped for reference).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfbisect.measure import sysstate  # noqa: E402
from perfbisect.model import GpuSample, SystemSnapshot  # noqa: E402
from perfbisect.store.samples import compact  # noqa: E402


def collectors_for(name: str) -> list[Any]:
    """The collector list a benchmark name stands for."""
    if name == "proc":
        return [sysstate.ProcCollector()]
    if name == "nvml":
        return [sysstate.NvmlCollector(), sysstate.ProcCollector()]
    if name == "nvidia-smi":
        return [sysstate.NvidiaSmiCollector(), sysstate.ProcCollector()]
    raise SystemExit(f"unknown collector set {name!r}: use proc, nvml or nvidia-smi")


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_cpu(name: str, duration_s: float, interval_s: float) -> dict[str, Any]:
    """Run a Sampler for duration_s with one collector set and report its CPU cost."""
    collectors = collectors_for(name)
    gpu = next((c for c in collectors if c.kind == "gpu"), None)
    if gpu is not None and not gpu.available():
        return {"collectors": name, "skipped": gpu.unavailable_reason}
    # Time single snapshots first (outside the measured window).
    cset = sysstate.CollectorSet(collectors)
    t = time.perf_counter()
    reps = 10
    for _ in range(reps):
        cset.snapshot()
    snapshot_ms = 1000 * (time.perf_counter() - t) / reps
    children_before = children_cpu_s()
    process_before = time.process_time()
    with sysstate.Sampler(interval_s=interval_s, collectors=collectors) as sampler:
        time.sleep(duration_s)
    wall = (sampler.stopped_at or 0) - (sampler.started_at or 0)
    children = children_cpu_s() - children_before
    thread_cpu = sampler.thread_cpu_s
    return {
        "collectors": name,
        "source": sampler.snapshots[-1].source,
        "interval_s": interval_s,
        "wall_s": round(wall, 2),
        "samples": len(sampler.snapshots),
        "sampler_thread_cpu_s": round(thread_cpu, 4),
        "child_process_cpu_s": round(children, 4),
        "process_cpu_s": round(time.process_time() - process_before, 4),
        "cpu_pct_of_one_core": round(100 * (thread_cpu + children) / wall, 3),
        "snapshot_ms": round(snapshot_ms, 2),
        "notes": list(sampler.notes),
    }


def synthetic_trial(n_gpus: int = 8, seconds: int = 600, seed: int = 7) -> list[SystemSnapshot]:
    """A 1 Hz trial whose clocks, power, temperature and memory move every second on every GPU."""
    rng = random.Random(seed)
    template = GpuSample(
        index=0, name="NVIDIA H200", sm_clock_max_mhz=1980, mem_clock_max_mhz=3201,
        power_limit_w=700.0, pstate="P0", pcie_gen=5, pcie_width=16, memory_total_mib=143771.0,
        ecc_errors=0,
    )
    t0 = time.time()
    snaps = []
    for i in range(seconds):
        gpus = []
        for g in range(n_gpus):
            capped = rng.random() < 0.6
            gpus.append(
                replace(
                    template,
                    index=g,
                    sm_clock_mhz=rng.uniform(1245, 1575) if capped else 1980.0,
                    mem_clock_mhz=3201.0,
                    temperature_c=55 + rng.uniform(0, 15),
                    power_w=rng.uniform(600, 700),
                    throttle_reasons=0x4 if capped else 0x0,
                    memory_used_mib=120000 + rng.uniform(0, 2000),
                    utilization_pct=float(rng.randint(90, 100)),
                    processes=(4242 + g,),
                )
            )
        snaps.append(
            SystemSnapshot(
                t=t0 + i + rng.uniform(0, 0.01), gpus=tuple(gpus), load_avg_1m=rng.uniform(1, 4),
                cpu_mhz=rng.uniform(2000, 3500), source="nvml+proc",
            )
        )
    return snaps


def storage() -> dict[str, Any]:
    """Size of the compact form of a 10-minute 8-GPU trial."""
    snaps = synthetic_trial()
    blob = json.dumps(compact(snaps), separators=(",", ":")).encode()
    return {
        "trial": "600 s x 8 GPUs at 1 Hz, every varying field moving each second",
        "compact_json_bytes": len(blob),
        "compact_json_gzip_bytes": len(gzip.compress(blob)),
        "under_1_mb": len(blob) < 1_000_000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collectors", default="proc", help="comma list of: proc, nvml, nvidia-smi")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per collector set")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    result = {
        "cpu": [measure_cpu(n.strip(), args.duration, args.interval) for n in args.collectors.split(",")],
        "storage": storage(),
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for r in result["cpu"]:
        if "skipped" in r:
            print(f"{r['collectors']:>10}: skipped ({r['skipped']})")
            continue
        print(
            f"{r['collectors']:>10}: {r['cpu_pct_of_one_core']:.3f}% of one core at {r['interval_s']} s "
            f"({r['samples']} samples in {r['wall_s']} s; thread {r['sampler_thread_cpu_s']} s CPU, "
            f"children {r['child_process_cpu_s']} s; one snapshot {r['snapshot_ms']} ms)"
        )
    s = result["storage"]
    print(
        f"storage: {s['trial']}: {s['compact_json_bytes']:,} bytes compact JSON "
        f"({s['compact_json_gzip_bytes']:,} gzipped)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
