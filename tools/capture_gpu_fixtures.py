"""Capture real GPU readings for perfbisect's sysstate tests (run it on a machine with an NVIDIA GPU).

    python tools/capture_gpu_fixtures.py OUT_DIR [--load-seconds 60] [--every 4] [--matrix 8192]

It records, idle, then under a bf16 matmul load (so clocks move and SwPowerCap appears), then
after it:

- ``nvidia-smi -q -x`` (idle and load) as XML;
- the exact ``nvidia-smi --query-gpu`` / ``--query-compute-apps`` the fallback collector runs;
- every NVML call the NVML collector makes, with its raw result (``nvml-readings.json``), so the
  tests can replay them through a fake pynvml;
- a live :class:`perfbisect.measure.sysstate.Sampler` run at 1 Hz during the load: its compact form, its
  summary and formatted lines (``sampler-live.json``);
- the target versions read through this interpreter, and a check that ``torch.cuda.nccl.version()``
  creates no CUDA context (``target-versions.json``).

Copy the files into tests/fixtures/gpu/ and commit them.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfbisect.measure import sysstate  # noqa: E402
from perfbisect.measure.host import host_fingerprint  # noqa: E402
from perfbisect.report.render import format_snapshot  # noqa: E402
from perfbisect.store.samples import compact  # noqa: E402
from perfbisect.measure.versions import target_versions  # noqa: E402

# The constants the NVML collector passes as arguments: the replaying fake needs their values.
NVML_CONSTANTS = (
    "NVML_CLOCK_SM",
    "NVML_CLOCK_MEM",
    "NVML_TEMPERATURE_GPU",
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
    "NVML_VOLATILE_ECC",
    "nvmlMemory_v2",
)

LOAD_SCRIPT = r"""
import sys, time, torch
seconds, n = float(sys.argv[1]), int(sys.argv[2])
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
end = time.time() + seconds
reps = 20
while time.time() < end:
    t = time.perf_counter()
    for _ in range(reps):
        c = a @ b
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    print(f"{time.time():.3f} {reps * 2 * n**3 / dt / 1e12:.1f}", flush=True)
"""

NCCL_CONTEXT_CHECK = r"""
import json, os, torch, pynvml
before = torch.cuda.is_initialized()
v = torch.cuda.nccl.version()
after = torch.cuda.is_initialized()
pynvml.nvmlInit()
pids = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    pids += [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
print(json.dumps({"nccl": ".".join(map(str, v)) if isinstance(v, tuple) else str(v),
                  "torch_cuda_initialized_before": before, "torch_cuda_initialized_after": after,
                  "own_pid_holds_gpu_context": os.getpid() in pids}))
"""


def jsonable(value: Any) -> Any:
    """NVML results (ctypes structs, pynvml's friendly objects, lists) as plain JSON values."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, ctypes.Structure):
        return {name: jsonable(getattr(value, name)) for name, *_ in value._fields_}
    if hasattr(value, "__dict__"):
        return {k: jsonable(v) for k, v in vars(value).items() if not k.startswith("_")}
    return repr(value)


class RecordedHandle:
    """A real NVML device handle plus the index it was asked for, so calls can be keyed by GPU."""

    def __init__(self, index: int, real: Any) -> None:
        self.index = index
        self.real = real


class RecordingNvml:
    """Forwards to the real pynvml and records each ``nvml*`` call's arguments and result."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self.setup: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []
        self._calls = self.setup

    def begin_sample(self, phase: str) -> None:
        sample = {"phase": phase, "t": round(time.time(), 3), "calls": []}
        self.samples.append(sample)
        self._calls = sample["calls"]

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._nvml, name)
        if not (callable(attr) and name.startswith("nvml")):
            return attr  # constants and the NVMLError class

        def call(*args: Any) -> Any:
            gpu = None
            plain, real = [], []
            for a in args:
                if isinstance(a, RecordedHandle):
                    gpu = a.index
                    real.append(a.real)
                else:
                    plain.append(jsonable(a))
                    real.append(a)
            entry: dict[str, Any] = {"fn": name, "gpu": gpu, "args": plain}
            try:
                result = attr(*real)
            except self._nvml.NVMLError as exc:
                entry["error"] = {"code": getattr(exc, "value", None), "text": str(exc)}
                self._calls.append(entry)
                raise
            if name == "nvmlDeviceGetHandleByIndex":
                entry["result"] = args[0]
                result = RecordedHandle(args[0], result)
            else:
                entry["result"] = jsonable(result)
            self._calls.append(entry)
            return result

        return call

    def dump(self) -> dict[str, Any]:
        return {
            "what": "every NVML call perfbisect.measure.sysstate.NvmlCollector made, with its raw result",
            "nvml_module_version": getattr(self._nvml, "__version__", None),
            "constants": {c: getattr(self._nvml, c) for c in NVML_CONSTANTS if hasattr(self._nvml, c)},
            "setup": self.setup,
            "samples": self.samples,
        }


def run(argv: list[str], timeout: float = 30.0) -> dict[str, Any]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr[-2000:]}
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": None, "stdout": "", "stderr": f"{type(exc).__name__}: {exc}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--load-seconds", type=float, default=60.0)
    parser.add_argument("--every", type=float, default=4.0, help="seconds between captures under load")
    parser.add_argument("--matrix", type=int, default=8192)
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    import pynvml

    recorder = RecordingNvml(pynvml)
    nvml = sysstate.NvmlCollector(nvml=recorder)
    smi = sysstate.NvidiaSmiCollector()
    print("nvml available:", nvml.available(), nvml.unavailable_reason)
    print("nvidia-smi available:", smi.available(), smi.unavailable_reason, "fields:", smi.fields)
    smi_samples: list[dict[str, Any]] = []

    def capture(phase: str) -> None:
        recorder.begin_sample(phase)
        try:
            gpus = nvml.collect()
            procs = nvml.processes()
            nvml.driver_version()
            nvml.cuda_driver_version()
            for g in gpus:
                print(f"[{phase}] nvml GPU{g.index} SM {g.sm_clock_mhz} MHz {g.power_w} W "
                      f"{g.temperature_c} C reasons {sysstate.throttle_reason_names(g.throttle_reasons)}"
                      f" procs {[(p.pid, p.used_mib) for p in procs]}")
        except Exception as exc:  # noqa: BLE001 - keep capturing the rest; the log says what broke
            print(f"[{phase}] nvml collect failed: {type(exc).__name__}: {exc}")
        gpu_cmd, apps_cmd = smi.gpu_query_command(), smi.apps_query_command()
        smi_samples.append(
            {"phase": phase, "t": round(time.time(), 3), "gpu": run(gpu_cmd), "apps": run(apps_cmd)}
        )
        print(f"[{phase}] smi: {smi_samples[-1]['gpu']['stdout'].strip()[:300]}")

    def xml(name: str) -> None:
        res = run(["nvidia-smi", "-q", "-x"])
        (out / name).write_text(res["stdout"] or res["stderr"])

    # idle
    xml("nvidia-smi-q-idle.xml")
    capture("idle")
    time.sleep(1.0)
    capture("idle")

    # load
    load_log = Path(tempfile.gettempdir()) / "perfbisect-matmul-load.log"
    with open(load_log, "w") as log:
        load = subprocess.Popen(
            [sys.executable, "-c", LOAD_SCRIPT, str(args.load_seconds), str(args.matrix)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    print("load pid", load.pid)
    deadline = time.time() + 30
    while time.time() < deadline and load.poll() is None and load_log.stat().st_size == 0:
        time.sleep(0.5)  # wait for the first matmul batch
    time.sleep(2.0)
    xml_done = False
    started = time.time()
    with sysstate.Sampler(interval_s=1.0, exclude_pids=[load.pid]) as sampler:
        while load.poll() is None:
            capture("load")
            if not xml_done and time.time() - started > 15:
                xml("nvidia-smi-q-load.xml")
                xml_done = True
            time.sleep(args.every)
    load.wait()
    summary = sampler.summary()
    lines = [f"{k}: {v}" for k, v in asdict(summary).items()]
    print("\n".join(lines))
    snaps = sampler.snapshots
    for s in snaps[len(snaps) // 2 : len(snaps) // 2 + 1]:
        print("\n".join(format_snapshot(s)))
    sampler_compact = compact(snaps)
    (out / "sampler-live.json").write_text(
        json.dumps(
            {
                "what": "a live Sampler(interval_s=1.0) run with default collectors during the matmul load",
                "load_pid": load.pid,
                "summary": asdict(summary),
                "summary_lines": lines,
                "middle_snapshot_lines": format_snapshot(snaps[len(snaps) // 2]),
                "thread_cpu_s": sampler.thread_cpu_s,
                "wall_s": (sampler.stopped_at or 0) - (sampler.started_at or 0),
                "compact": sampler_compact,
            },
            indent=1,
        )
    )
    print("compact bytes:", len(json.dumps(sampler_compact)))

    # after
    time.sleep(3.0)
    capture("after")
    if not xml_done:
        xml("nvidia-smi-q-load.xml")

    (out / "nvml-readings.json").write_text(json.dumps(recorder.dump(), indent=1))
    (out / "nvidia-smi-query.json").write_text(
        json.dumps(
            {
                "what": "exact nvidia-smi queries of perfbisect.measure.sysstate.NvidiaSmiCollector and their output",
                "gpu_command": smi.gpu_query_command(),
                "apps_command": smi.apps_query_command(),
                "samples": smi_samples,
            },
            indent=1,
        )
    )

    # versions
    versions: dict[str, Any] = {}
    try:
        versions["target_versions"] = target_versions(sys.executable)
    except Exception as exc:  # noqa: BLE001
        versions["target_versions_error"] = f"{type(exc).__name__}: {exc}"
    check = run([sys.executable, "-c", NCCL_CONTEXT_CHECK], timeout=120)
    try:
        versions["nccl_context_check"] = json.loads(check["stdout"].strip().splitlines()[-1])
    except (ValueError, IndexError):
        versions["nccl_context_check_error"] = check
    versions["host_fingerprint"] = host_fingerprint()
    (out / "target-versions.json").write_text(json.dumps(versions, indent=1))
    print(json.dumps(versions, indent=1))

    rates = []
    for line in load_log.read_text().splitlines():
        try:
            rates.append(float(line.split()[1]))
        except (IndexError, ValueError):
            print("load:", line)
    if len(rates) > 2:
        print(
            f"matmul load: {len(rates)} batches, mean {statistics.mean(rates):.0f} TFLOP/s, "
            f"min {min(rates):.0f}, max {max(rates):.0f}, CV {100 * statistics.stdev(rates) / statistics.mean(rates):.1f}%"
        )
    os.remove(load_log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
