"""Host checks: which machine this is, whether another process holds its GPUs, and whether a
stopped server's GPU memory came back.

``host_fingerprint`` names the GPU model, count and driver (or the CPU model without GPUs): trials
are pooled only on one fingerprint. ``wait_until_idle`` refuses (or waits out) a machine whose GPUs
another process holds, and a trial that waits says so in <cache_dir>/gpu-wait.json (``write_gpu_wait``;
``gpu_wait`` is what ``perfbisect status`` reads); ``gpu_memory_released`` is the server teardown's check.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..errors import MachineBusy
from ..settings import DEFAULT_WAIT_IDLE_S  # noqa: F401  (where callers look for it)
from ..runtime.liveness import owner_alive, process_owner
from ..runtime.locks import GPU_WAIT_FILE
from ..runtime.polling import poll_until
from .sysstate import CollectorSet, ExcludePids, GpuProcess, collect_snapshot, resolve_pids


def _cpu_model(proc_root: Path = Path("/proc")) -> str:
    """The CPU's marketing name, e.g. "AMD EPYC 9654 96-Core Processor" (part of the no-GPU fingerprint).

    Read from /proc/cpuinfo's "model name" because psutil has no API for the CPU model; elsewhere
    platform.processor() (often empty on Linux) or the machine type stands in.
    """
    try:
        for line in (proc_root / "cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


def _slug(text: str) -> str:
    return "-".join("".join(ch if ch.isalnum() or ch == "." else " " for ch in text).split())


def host_fingerprint(collectors: Sequence[Any] | None = None) -> str:
    """A short stable string naming the GPU model, count, driver and host (CPU model without GPUs).

    Trials are pooled only when this matches: e.g. ``1xNVIDIA-H200-drv580.159.04-3f2a9c1e``
    (the hash covers the hostname too).
    """
    cset = CollectorSet(collectors)
    try:
        snap = cset.snapshot()
        driver = cset.driver_version()
    finally:
        cset.close()
    host = socket.gethostname()
    if snap.gpus:
        models = sorted({g.name or "unknown-gpu" for g in snap.gpus})
        model = "+".join(_slug(m) for m in models)
        digest = hashlib.sha256(
            json.dumps([models, len(snap.gpus), driver, host]).encode()
        ).hexdigest()[:8]
        return f"{len(snap.gpus)}x{model}-drv{driver or 'unknown'}-{digest}"
    cpu = _cpu_model()
    digest = hashlib.sha256(json.dumps([host, cpu]).encode()).hexdigest()[:8]
    return f"nogpu-{_slug(cpu)}-{digest}"


def _process_name(pid: int) -> str:
    """The name of process ``pid`` ("" when it is gone or not ours to read)."""
    import psutil  # when first asked, not at import, as perfbisect.runtime.liveness does

    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):
        return ""


# Simulates busy GPUs where there are none (tests, demos): while this file exists, every pid in it
# counts as another process holding GPU 0. Real hosts are checked through sysstate.
FAKE_BUSY_ENV = "PERFBISECT_FAKE_GPU_BUSY_FILE"


def _simulated_busy() -> list[GpuProcess] | None:
    """The processes FAKE_BUSY_ENV's file names (None when it is not set)."""
    fake = os.environ.get(FAKE_BUSY_ENV)
    if not fake:
        return None
    try:
        words = Path(fake).read_text().split()
    except OSError:
        return []
    return [GpuProcess(gpu_index=0, pid=int(w) if w.isdigit() else 0, name="simulated", used_mib=None)
            for w in words] or [GpuProcess(gpu_index=0, pid=0, name="simulated", used_mib=None)]


def _busy(exclude_pids: ExcludePids, collectors: Sequence[Any] | None) -> tuple[list[GpuProcess], bool]:
    """Processes holding GPUs other than the excluded ones, and whether GPUs could be checked."""
    simulated = _simulated_busy() if collectors is None else None
    if simulated is not None:
        return simulated, True
    cset = CollectorSet(collectors)
    try:
        if cset.gpu is None:
            return [], False
        procs = cset.processes()
    finally:
        cset.close()
    own = resolve_pids(exclude_pids)
    out = []
    for p in procs:
        if p.pid in own:
            continue
        name = _process_name(p.pid) or p.name
        out.append(replace(p, name=name))
    return sorted(out, key=lambda p: (p.gpu_index, p.pid)), True


def gpu_busy_processes(
    exclude_pids: ExcludePids = (),
    collectors: Sequence[Any] | None = None,
) -> list[tuple[int, int, str]]:
    """(gpu index, pid, process name or "") of every other process holding a GPU."""
    procs, _ = _busy(exclude_pids, collectors)
    return [(p.gpu_index, p.pid, p.name) for p in procs]


def _describe_busy(procs: Sequence[GpuProcess]) -> str:
    parts = []
    for p in procs:
        mem = f", {p.used_mib:.0f} MiB" if p.used_mib is not None else ""
        parts.append(f"GPU {p.gpu_index}: pid {p.pid} ({p.name or 'name unreadable'}{mem})")
    return "; ".join(parts)


def describe_busy(procs: Sequence[tuple[int, int, str]]) -> str:
    """"pid 4242 python on GPU 0, ..." for (gpu, pid, name) triples."""
    return ", ".join(f"pid {pid}" + (f" {name}" if name else "") + f" on GPU {gpu}" for gpu, pid, name in procs)


def wait_until_idle(
    timeout_s: float,
    poll_s: float = 5.0,
    progress: Callable[[list[tuple[int, int, str]], float], None] | None = None,
    exclude_pids: ExcludePids = (),
    collectors: Sequence[Any] | None = None,
) -> float:
    """Wait until no other process holds a GPU; return the seconds waited, or raise MachineBusy.

    ``timeout_s=0`` checks once. Without a GPU collector there is nothing to check: returns 0.
    """
    busy: list[GpuProcess] = []
    waited = 0.0

    def idle() -> bool:
        procs, checked = _busy(exclude_pids, collectors)
        busy[:] = procs if checked else []
        return not busy

    def still_busy(elapsed: float) -> None:
        nonlocal waited
        waited = elapsed
        if progress is not None:
            progress([(p.gpu_index, p.pid, p.name) for p in busy], elapsed)

    start = time.monotonic()
    # Give up as soon as the next check would land past timeout_s: that is, once the seconds
    # waited reach timeout_s - poll_s (a zero or short timeout checks once).
    if poll_until(idle, timeout_s - poll_s, poll_s, on_wait=still_busy):
        return time.monotonic() - start
    gpus = sorted({p.gpu_index for p in busy})
    raise MachineBusy(
        f"Other processes hold the GPUs ({_describe_busy(busy)}); benchmarking now would "
        f"measure them too (waited {waited:.0f} s). Stop them (e.g. `kill "
        f"{' '.join(str(p.pid) for p in busy)}`), pick other GPUs than "
        f"{', '.join(map(str, gpus))}, or pass --wait-idle SECONDS to wait for them to finish."
    )


def write_gpu_wait(cache_dir: Path, who: str, waited: float, bound: float) -> None:
    """Record that this process's next trial waits for GPUs others hold (``perfbisect status`` shows it)."""
    path = Path(cache_dir) / GPU_WAIT_FILE
    state = {"owner": process_owner(), "pid": os.getpid(), "who": who, "waited_s": round(waited),
             "bound_s": bound, "since": time.time() - waited}
    try:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, path)
    except OSError:
        pass  # status is a courtesy: a read-only cache directory must not stop the wait


def clear_gpu_wait(cache_dir: Path) -> None:
    (Path(cache_dir) / GPU_WAIT_FILE).unlink(missing_ok=True)


def gpu_wait(cache_dir: Path) -> dict | None:
    """The trial waiting for GPUs in this cache directory, if its perfbisect is still alive."""
    try:
        state = json.loads((Path(cache_dir) / GPU_WAIT_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not owner_alive(str(state.get("owner", ""))):
        return None
    return state


def gpu_memory_used_mib(collectors: Sequence[Any] | None = None) -> dict[int, float]:
    """Memory used per GPU index now ({} without a GPU collector): a teardown baseline."""
    snap = collect_snapshot(collectors)
    return {g.index: g.memory_used_mib for g in snap.gpus if g.memory_used_mib is not None}


def gpu_memory_released(
    baseline_used_mib: float | Mapping[int, float],
    tolerance_mib: float,
    collectors: Sequence[Any] | None = None,
) -> Callable[[], bool]:
    """A check for server teardown: True once GPU memory is back within tolerance of the baseline.

    ``baseline_used_mib`` is per GPU index (from :func:`gpu_memory_used_mib`) or one number for the
    total over all GPUs. Without a GPU collector nothing can be checked and the check says True.
    """

    def released() -> bool:
        used = gpu_memory_used_mib(collectors)
        if not used:
            return True
        if isinstance(baseline_used_mib, Mapping):
            return all(
                used.get(i, 0.0) <= base + tolerance_mib for i, base in baseline_used_mib.items()
            ) and all(i in baseline_used_mib or u <= tolerance_mib for i, u in used.items())
        return sum(used.values()) <= float(baseline_used_mib) + tolerance_mib

    return released
