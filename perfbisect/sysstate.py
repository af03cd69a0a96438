"""System state: what the GPUs and CPUs were doing while a trial ran.

Small collectors in the pyperf style, each with ``name``, ``available()`` and ``collect()``:

- :class:`NvmlCollector` reads NVML through ``pynvml`` (package ``nvidia-ml-py``), imported lazily
  inside the collector so that importing perfbisect never loads the NVIDIA library;
- :class:`NvidiaSmiCollector` runs ``nvidia-smi --query-gpu`` (an argument list, never a shell
  string) where NVML is missing;
- :class:`ProcCollector` reads the CPU load and frequency from ``/proc``.

:func:`collect_snapshot` takes one reading with the best available GPU collector plus ``/proc``;
:class:`Sampler` samples in a daemon thread before, during (about 1 Hz) and after a trial and reduces
the readings to a :class:`~perfbisect.model.SystemSummary`. A missing collector is a note in the
summary, said once, never an exception.

Versions of torch, CUDA, NCCL and sglang come from the *target's* interpreter
(:func:`target_versions`): importing torch here would initialise CUDA in the measuring process and
perturb the very thing being measured.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import platform
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .errors import ConfigError, MachineBusy
from .model import GpuSample, SystemSnapshot, SystemSummary
from .procfs import stat_fields

# NVML clock-event ("throttle") reasons, in bit order (nvml.h nvmlClocksEventReason*).
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "GpuIdle"),
    (0x2, "ApplicationsClocksSetting"),
    (0x4, "SwPowerCap"),
    (0x8, "HwSlowdown"),
    (0x10, "SyncBoost"),
    (0x20, "SwThermalSlowdown"),
    (0x40, "HwThermalSlowdown"),
    (0x80, "HwPowerBrakeSlowdown"),
    (0x100, "DisplayClockSetting"),
)
GPU_IDLE = 0x1
SW_POWER_CAP = 0x4

ExcludePids = Iterable[int] | Callable[[], Iterable[int]]


def throttle_reason_names(mask: int | None) -> list[str]:
    """Names of the clock-event reasons set in ``mask`` (unknown bits as ``Unknown(0x...)``)."""
    if not mask:
        return []
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_REASONS:
        known |= bit
    if mask & ~known:
        names.append(f"Unknown(0x{mask & ~known:x})")
    return names


def is_throttled(mask: int | None) -> bool:
    """True when any reason other than GpuIdle holds the clocks down.

    SwPowerCap under load counts: on an H200 running flat out it moves the SM clock between
    1245 and 1575 MHz, which is exactly the session-to-session noise perfbisect must see.
    """
    return bool(mask and mask & ~GPU_IDLE)


@dataclass(frozen=True)
class GpuProcess:
    """A process holding a GPU, as the driver reports it."""

    gpu_index: int
    pid: int
    used_mib: float | None = None
    name: str = ""


@dataclass(frozen=True)
class CpuReading:
    """CPU load average and mean core frequency from /proc."""

    load_avg_1m: float | None = None
    cpu_mhz: float | None = None


# ---------------------------------------------------------------------------------------------
# Collectors


class ProcCollector:
    """CPU load (``/proc/loadavg``) and mean core frequency (``/proc/cpuinfo`` "cpu MHz")."""

    name = "proc"
    kind = "cpu"

    def __init__(self, proc_root: Path | str = "/proc") -> None:
        self.proc_root = Path(proc_root)
        self.unavailable_reason = ""
        self.notes: list[str] = []

    def available(self) -> bool:
        """True when /proc/loadavg can be read."""
        if (self.proc_root / "loadavg").is_file():
            return True
        self.unavailable_reason = f"{self.proc_root / 'loadavg'} does not exist (not Linux?)"
        return False

    def collect(self) -> CpuReading:
        """Read the 1-minute load average and the mean "cpu MHz" over cores."""
        load = None
        try:
            load = float((self.proc_root / "loadavg").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
        mhz = None
        try:
            values = []
            with open(self.proc_root / "cpuinfo", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if line.startswith("cpu MHz"):
                        values.append(float(line.split(":", 1)[1]))
            if values:
                mhz = sum(values) / len(values)
            else:
                self._note_once("proc: /proc/cpuinfo has no 'cpu MHz' lines; CPU frequency not recorded")
        except (OSError, ValueError):
            self._note_once("proc: /proc/cpuinfo unreadable; CPU frequency not recorded")
        return CpuReading(load_avg_1m=load, cpu_mhz=mhz)

    def _note_once(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def close(self) -> None:
        """Nothing to release."""


class NvmlCollector:
    """Per-GPU readings through NVML (``import pynvml`` happens here, lazily, never at import).

    ``nvml`` may be any object with pynvml's functions and constants: tests replay captured
    readings through one, and the fixture capture tool records through one.
    """

    name = "nvml"
    kind = "gpu"

    def __init__(self, nvml: Any = None) -> None:
        self._nvml = nvml
        self._initialised = False
        self._handles: list[Any] = []
        self._available: bool | None = None
        self.unavailable_reason = ""
        self.notes: list[str] = []

    # -- setup
    def _module(self) -> Any:
        if self._nvml is None:
            import pynvml  # lazily: importing perfbisect must never load the NVIDIA library

            self._nvml = pynvml
        return self._nvml

    def _init(self) -> None:
        if self._initialised:
            return
        nvml = self._module()
        nvml.nvmlInit()
        self._initialised = True
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]

    def available(self) -> bool:
        """True when pynvml imports, NVML initialises and reports at least one GPU."""
        if self._available is not None:
            return self._available
        try:
            self._init()
        except ImportError:
            self.unavailable_reason = "nvidia-ml-py (pynvml) is not installed"
            self._available = False
            return False
        except Exception as exc:  # noqa: BLE001 - NVMLError, OSError from a missing libnvidia-ml
            self.unavailable_reason = f"NVML did not initialise ({type(exc).__name__}: {exc})"
            self._available = False
            return False
        if not self._handles:
            self.unavailable_reason = "NVML reports no GPUs"
            self._available = False
            return False
        self._available = True
        return True

    def close(self) -> None:
        """Shut NVML down (it is reference-counted, so other users are unaffected)."""
        if self._initialised:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down must not mask the caller's outcome
                pass
            self._initialised = False
            self._handles = []
            self._available = None

    # -- reading
    def _read(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call one NVML function; a GPU that does not support it gives None (noted once)."""
        try:
            return fn(*args)
        except self._module().NVMLError as exc:
            text = str(exc)
            if "Not Supported" not in text and "not supported" not in text.lower():
                note = f"nvml: {what} unreadable ({text})"
                if note not in self.notes:
                    self.notes.append(note)
            return None

    def _reasons(self, handle: Any) -> int | None:
        nvml = self._module()
        fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons"
        )
        value = self._read("clock-event reasons", fn, handle)
        return None if value is None else int(value)

    def _memory(self, handle: Any) -> Any:
        nvml = self._module()
        # v2 excludes memory the driver reserves, which is what nvidia-smi reports as "used".
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None:
            try:
                return nvml.nvmlDeviceGetMemoryInfo(handle, version)
            except nvml.NVMLError:
                pass  # a driver without the v2 call: fall back to v1 below, quietly
        return self._read("memory", nvml.nvmlDeviceGetMemoryInfo, handle)

    def _processes_of(self, index: int, handle: Any) -> list[GpuProcess]:
        nvml = self._module()
        seen: dict[int, GpuProcess] = {}
        for what, fn_name in (
            ("compute processes", "nvmlDeviceGetComputeRunningProcesses"),
            ("graphics processes", "nvmlDeviceGetGraphicsRunningProcesses"),
        ):
            procs = self._read(what, getattr(nvml, fn_name), handle) or []
            for proc in procs:
                used = getattr(proc, "usedGpuMemory", None)
                pid = int(proc.pid)
                if pid not in seen:
                    seen[pid] = GpuProcess(
                        gpu_index=index,
                        pid=pid,
                        used_mib=None if used is None else round(used / 2**20, 1),
                    )
        return list(seen.values())

    def collect(self) -> tuple[GpuSample, ...]:
        """One reading of every GPU."""
        self._init()
        nvml = self._module()
        samples = []
        for index, handle in enumerate(self._handles):
            name = self._read("name", nvml.nvmlDeviceGetName, handle)
            if isinstance(name, bytes):
                name = name.decode(errors="replace")
            sm = self._read("SM clock", nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
            mem = self._read("memory clock", nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM)
            sm_max = self._read("max SM clock", nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM)
            mem_max = self._read(
                "max memory clock", nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_MEM
            )
            temp = self._read(
                "temperature", nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU
            )
            power_mw = self._read("power", nvml.nvmlDeviceGetPowerUsage, handle)
            limit_mw = self._read("power limit", nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
            pstate = self._read("performance state", nvml.nvmlDeviceGetPerformanceState, handle)
            pcie_gen = self._read("PCIe generation", nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle)
            pcie_width = self._read("PCIe width", nvml.nvmlDeviceGetCurrPcieLinkWidth, handle)
            memory = self._memory(handle)
            util = self._read("utilisation", nvml.nvmlDeviceGetUtilizationRates, handle)
            ecc = self._read(
                "ECC errors",
                nvml.nvmlDeviceGetTotalEccErrors,
                handle,
                nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                nvml.NVML_VOLATILE_ECC,
            )
            procs = self._processes_of(index, handle)
            samples.append(
                GpuSample(
                    index=index,
                    name=name or "",
                    sm_clock_mhz=_num(sm),
                    mem_clock_mhz=_num(mem),
                    sm_clock_max_mhz=_num(sm_max),
                    mem_clock_max_mhz=_num(mem_max),
                    temperature_c=_num(temp),
                    power_w=None if power_mw is None else power_mw / 1000.0,
                    power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
                    # NVML_PSTATE_UNKNOWN is 32
                    pstate=None if pstate is None or int(pstate) > 15 else f"P{int(pstate)}",
                    throttle_reasons=self._reasons(handle),
                    pcie_gen=None if pcie_gen is None else int(pcie_gen),
                    pcie_width=None if pcie_width is None else int(pcie_width),
                    memory_used_mib=None if memory is None else memory.used / 2**20,
                    memory_total_mib=None if memory is None else memory.total / 2**20,
                    utilization_pct=None if util is None else float(util.gpu),
                    ecc_errors=None if ecc is None else int(ecc),
                    processes=tuple(p.pid for p in procs),
                )
            )
        return tuple(samples)

    def processes(self) -> list[GpuProcess]:
        """Every process holding a GPU, with the memory it uses."""
        self._init()
        out: list[GpuProcess] = []
        for index, handle in enumerate(self._handles):
            out.extend(self._processes_of(index, handle))
        return out

    def driver_version(self) -> str | None:
        """The kernel driver's version, e.g. ``580.159.04``."""
        self._init()
        value = self._read("driver version", self._module().nvmlSystemGetDriverVersion)
        return value.decode() if isinstance(value, bytes) else value

    def cuda_driver_version(self) -> str | None:
        """The CUDA version the driver supports, e.g. ``13.0``."""
        self._init()
        value = self._read("CUDA driver version", self._module().nvmlSystemGetCudaDriverVersion)
        if value is None:
            return None
        value = int(value)
        return f"{value // 1000}.{(value % 1000) // 10}"


# The exact query the nvidia-smi fallback runs; the committed fixtures were captured with it.
SMI_GPU_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "pstate",
    "clocks_event_reasons.active",
    "pcie.link.gen.current",
    "pcie.link.width.current",
    "memory.used",
    "memory.total",
    "utilization.gpu",
    "ecc.errors.uncorrected.volatile.total",
    "driver_version",
)
# Drivers before 535 know the clock-event reasons only by their old name.
SMI_LEGACY_FIELD_NAMES = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}
SMI_APPS_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "process_name", "used_memory")


def _smi_value(text: str) -> str | None:
    text = text.strip()
    if not text or text.startswith("[") or text in ("N/A", "Not Supported"):
        return None
    return text


def _smi_float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _smi_int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text, 0)  # base 0: the reasons come as "0x0000000000000004"
    except ValueError:
        value = _smi_float(text)
        return None if value is None else int(value)


@dataclass(frozen=True)
class SmiGpuRow:
    """One parsed line of ``nvidia-smi --query-gpu``: the sample plus what GpuSample has no room for."""

    sample: GpuSample
    uuid: str | None
    driver_version: str | None


def parse_smi_gpu_csv(text: str, fields: Sequence[str] = SMI_GPU_FIELDS) -> list[SmiGpuRow]:
    """Parse ``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits`` output."""
    rows = []
    canonical = {v: k for k, v in SMI_LEGACY_FIELD_NAMES.items()}
    names = [canonical.get(f, f) for f in fields]
    for record in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not record or not record[0].strip():
            continue
        if len(record) != len(names):
            raise ValueError(
                f"nvidia-smi printed {len(record)} columns where {len(names)} were asked for: {record!r}"
            )
        raw = {name: _smi_value(value) for name, value in zip(names, record)}
        pstate = raw.get("pstate")
        sample = GpuSample(
            index=_smi_int(raw["index"]) or 0,
            name=raw.get("name") or "",
            sm_clock_mhz=_smi_float(raw.get("clocks.sm")),
            mem_clock_mhz=_smi_float(raw.get("clocks.mem")),
            sm_clock_max_mhz=_smi_float(raw.get("clocks.max.sm")),
            mem_clock_max_mhz=_smi_float(raw.get("clocks.max.mem")),
            temperature_c=_smi_float(raw.get("temperature.gpu")),
            power_w=_smi_float(raw.get("power.draw")),
            power_limit_w=_smi_float(raw.get("power.limit")),
            pstate=pstate,
            throttle_reasons=_smi_int(raw.get("clocks_event_reasons.active")),
            pcie_gen=_smi_int(raw.get("pcie.link.gen.current")),
            pcie_width=_smi_int(raw.get("pcie.link.width.current")),
            memory_used_mib=_smi_float(raw.get("memory.used")),
            memory_total_mib=_smi_float(raw.get("memory.total")),
            utilization_pct=_smi_float(raw.get("utilization.gpu")),
            ecc_errors=_smi_int(raw.get("ecc.errors.uncorrected.volatile.total")),
        )
        rows.append(SmiGpuRow(sample=sample, uuid=raw.get("uuid"), driver_version=raw.get("driver_version")))
    return rows


def parse_smi_apps_csv(text: str, uuid_to_index: Mapping[str, int]) -> list[GpuProcess]:
    """Parse ``nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory`` output."""
    out = []
    for record in csv.reader(io.StringIO(text), skipinitialspace=True):
        if len(record) != len(SMI_APPS_FIELDS) or not record[0].strip():
            continue  # "No running processes found" and blank lines
        uuid, pid, pname, used = (v.strip() for v in record)
        pid_value = _smi_int(_smi_value(pid))
        if pid_value is None or uuid not in uuid_to_index:
            continue
        out.append(
            GpuProcess(
                gpu_index=uuid_to_index[uuid],
                pid=pid_value,
                used_mib=_smi_float(_smi_value(used)),
                name=pname if _smi_value(pname) else "",
            )
        )
    return out


class NvidiaSmiCollector:
    """Per-GPU readings from ``nvidia-smi --query-gpu`` where NVML's Python binding is missing."""

    name = "nvidia-smi"
    kind = "gpu"

    def __init__(self, executable: str = "nvidia-smi", timeout_s: float = 10.0) -> None:
        self.executable = executable
        self.timeout_s = timeout_s
        self.fields: tuple[str, ...] = SMI_GPU_FIELDS
        self.unavailable_reason = ""
        self.notes: list[str] = []
        self._available: bool | None = None
        self._last_rows: list[SmiGpuRow] = []

    def gpu_query_command(self) -> list[str]:
        """The argument list of the GPU query."""
        return [self.executable, "--query-gpu=" + ",".join(self.fields), "--format=csv,noheader,nounits"]

    def apps_query_command(self) -> list[str]:
        """The argument list of the process query."""
        return [
            self.executable,
            "--query-compute-apps=" + ",".join(SMI_APPS_FIELDS),
            "--format=csv,noheader,nounits",
        ]

    def _run(self, argv: list[str]) -> str:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=self.timeout_s, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:300]}"
            )
        return proc.stdout

    def _query_gpus(self) -> list[SmiGpuRow]:
        try:
            text = self._run(self.gpu_query_command())
        except RuntimeError as exc:
            legacy = tuple(SMI_LEGACY_FIELD_NAMES.get(f, f) for f in self.fields)
            if "field" not in str(exc).lower() or legacy == self.fields:
                raise
            self.fields = legacy  # an older driver: ask again with the old field names
            text = self._run(self.gpu_query_command())
        rows = parse_smi_gpu_csv(text, self.fields)
        self._last_rows = rows
        return rows

    def available(self) -> bool:
        """True when nvidia-smi runs and lists at least one GPU."""
        if self._available is not None:
            return self._available
        if shutil.which(self.executable) is None:
            self.unavailable_reason = f"{self.executable} not found on PATH"
            self._available = False
            return False
        try:
            rows = self._query_gpus()
        except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            self.unavailable_reason = f"{self.executable} failed ({exc})"
            self._available = False
            return False
        if not rows:
            self.unavailable_reason = f"{self.executable} lists no GPUs"
            self._available = False
            return False
        self._available = True
        return True

    def processes(self) -> list[GpuProcess]:
        """Every compute process holding a GPU, with its memory and name."""
        rows = self._last_rows or self._query_gpus()
        uuid_to_index = {r.uuid: r.sample.index for r in rows if r.uuid}
        return parse_smi_apps_csv(self._run(self.apps_query_command()), uuid_to_index)

    def collect(self) -> tuple[GpuSample, ...]:
        """One reading of every GPU (two nvidia-smi calls: GPUs, then compute processes)."""
        rows = self._query_gpus()
        uuid_to_index = {r.uuid: r.sample.index for r in rows if r.uuid}
        procs = parse_smi_apps_csv(self._run(self.apps_query_command()), uuid_to_index)
        by_gpu: dict[int, list[int]] = {}
        for p in procs:
            by_gpu.setdefault(p.gpu_index, []).append(p.pid)
        return tuple(
            replace(r.sample, processes=tuple(by_gpu.get(r.sample.index, ()))) for r in rows
        )

    def driver_version(self) -> str | None:
        """The kernel driver's version from the last query."""
        rows = self._last_rows or self._query_gpus()
        return rows[0].driver_version if rows else None

    def cuda_driver_version(self) -> str | None:
        """Not in nvidia-smi's query fields: None."""
        return None

    def close(self) -> None:
        """Nothing to release."""


def default_collectors() -> list[Any]:
    """NVML, then nvidia-smi, then /proc: the first available GPU collector wins."""
    return [NvmlCollector(), NvidiaSmiCollector(), ProcCollector()]


class CollectorSet:
    """The collectors chosen for one sampling session, and the notes about what is missing.

    Picks the first available GPU collector (``kind == "gpu"``) and the first available CPU one
    (``kind == "cpu"``). Each problem is noted once: a collector that fails every second for ten
    minutes gives one note, not six hundred.
    """

    def __init__(self, collectors: Sequence[Any] | None = None) -> None:
        self._owned = collectors is None
        self.collectors = list(default_collectors() if collectors is None else collectors)
        self.notes: list[str] = []
        self._lock = threading.Lock()
        self.gpu: Any = None
        self.cpu: Any = None
        skipped = []
        for c in self.collectors:
            kind = getattr(c, "kind", "gpu")
            if kind == "gpu" and self.gpu is None:
                if c.available():
                    self.gpu = c
                else:
                    skipped.append(f"{c.name}: {getattr(c, 'unavailable_reason', '') or 'unavailable'}")
            elif kind == "cpu" and self.cpu is None:
                if c.available():
                    self.cpu = c
                else:
                    self.note(f"{c.name} unavailable ({getattr(c, 'unavailable_reason', '')}): CPU load not recorded")
        if self.gpu is None:
            why = "; ".join(skipped) if skipped else "none configured"
            self.note(f"no GPU collector available ({why}): GPU clocks, power and throttling not recorded")
        elif skipped:
            self.note(f"using {self.gpu.name} for GPU state ({'; '.join(skipped)})")

    @property
    def source(self) -> str:
        """Which collectors feed the snapshots, e.g. ``nvml+proc``."""
        return "+".join(c.name for c in (self.gpu, self.cpu) if c is not None)

    def note(self, text: str) -> None:
        """Record a note unless it was already said."""
        with self._lock:
            if text not in self.notes:
                self.notes.append(text)

    def _collect(self, collector: Any) -> Any:
        try:
            return collector.collect()
        except Exception as exc:  # noqa: BLE001 - a sampler must outlive a flaky collector
            self.note(
                f"{collector.name} failed: {type(exc).__name__}: {exc} (later failures not repeated)"
            )
            return None
        finally:
            for text in getattr(collector, "notes", ()):
                self.note(text)

    def snapshot(self) -> SystemSnapshot:
        """One reading from every chosen collector."""
        t = time.time()
        gpus: tuple[GpuSample, ...] = ()
        cpu = CpuReading()
        if self.gpu is not None:
            gpus = self._collect(self.gpu) or ()
        if self.cpu is not None:
            cpu = self._collect(self.cpu) or CpuReading()
        return SystemSnapshot(
            t=t, gpus=tuple(gpus), load_avg_1m=cpu.load_avg_1m, cpu_mhz=cpu.cpu_mhz, source=self.source
        )

    def processes(self) -> list[GpuProcess]:
        """Processes holding GPUs, from the chosen GPU collector ([] without one)."""
        if self.gpu is None or not hasattr(self.gpu, "processes"):
            return []
        return list(self.gpu.processes())

    def driver_version(self) -> str | None:
        """The driver version from the chosen GPU collector, or None."""
        if self.gpu is None or not hasattr(self.gpu, "driver_version"):
            return None
        try:
            return self.gpu.driver_version()
        except Exception as exc:  # noqa: BLE001 - a missing version is a note, not a failure
            self.note(f"{self.gpu.name}: driver version unreadable ({exc})")
            return None

    def close(self) -> None:
        """Release the collectors this set created itself."""
        if self._owned:
            for c in self.collectors:
                close = getattr(c, "close", None)
                if close is not None:
                    close()


def collect_snapshot(collectors: Sequence[Any] | None = None) -> SystemSnapshot:
    """One reading of the machine with the best available GPU collector plus /proc."""
    cset = CollectorSet(collectors)
    try:
        return cset.snapshot()
    finally:
        cset.close()


# ---------------------------------------------------------------------------------------------
# Sampler and summary


def _resolve_pids(exclude_pids: ExcludePids) -> set[int]:
    pids = exclude_pids() if callable(exclude_pids) else exclude_pids
    return {int(p) for p in pids} | {os.getpid()}


def _parent_pid(pid: int, proc_root: Path = Path("/proc")) -> int | None:
    """Parent pid from /proc/<pid>/stat."""
    fields = stat_fields(pid, proc_root)
    try:
        return int(fields[1]) if fields else None
    except (ValueError, IndexError):
        return None


def descends_from(pid: int, ancestor: int, proc_root: Path = Path("/proc")) -> bool:
    """True when ``pid`` is ``ancestor`` or one of its descendants (walks /proc parent links)."""
    seen = 0
    while pid and pid > 1 and seen < 64:
        if pid == ancestor:
            return True
        parent = _parent_pid(pid, proc_root)
        if parent is None:
            return False
        pid, seen = parent, seen + 1
    return pid == ancestor


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(
    snapshots: Sequence[SystemSnapshot],
    notes: Sequence[str] = (),
    exclude_pids: ExcludePids = (),
) -> SystemSummary:
    """Reduce snapshots to means/min/max, throttled fraction, reasons seen and other GPU processes."""
    sm = [g.sm_clock_mhz for s in snapshots for g in s.gpus if g.sm_clock_mhz is not None]
    temps = [g.temperature_c for s in snapshots for g in s.gpus if g.temperature_c is not None]
    power = [g.power_w for s in snapshots for g in s.gpus if g.power_w is not None]
    loads = [s.load_avg_1m for s in snapshots if s.load_avg_1m is not None]
    with_reasons = 0
    throttled = 0
    seen = 0
    for s in snapshots:
        masks = [g.throttle_reasons for g in s.gpus if g.throttle_reasons is not None]
        if not masks:
            continue
        with_reasons += 1
        for m in masks:
            seen |= m
        if any(is_throttled(m) for m in masks):
            throttled += 1
    own = _resolve_pids(exclude_pids)
    others = sorted({p for s in snapshots for g in s.gpus for p in g.processes} - own)
    return SystemSummary(
        samples=len(snapshots),
        sm_clock_mean_mhz=_mean(sm),
        sm_clock_min_mhz=min(sm) if sm else None,
        sm_clock_max_mhz=max(sm) if sm else None,
        temperature_mean_c=_mean(temps),
        temperature_max_c=max(temps) if temps else None,
        power_mean_w=_mean(power),
        throttled_fraction=throttled / with_reasons if with_reasons else None,
        throttle_reasons_seen=seen,
        load_avg_1m=_mean(loads),
        other_gpu_processes=tuple(others),
        notes=tuple(notes),
    )


class Sampler:
    """Samples the machine before, during (every ``interval_s``, daemon thread) and after a block::

        with Sampler() as sampler:
            run_the_trial()
        summary = sampler.summary()
        stored = compact(sampler.snapshots)

    ``exclude_pids`` (pids, or a callable returning them at summary time, e.g. the server's process
    group) are not reported as other GPU processes; perfbisect's own pid never is.
    """

    def __init__(
        self,
        interval_s: float = 1.0,
        collectors: Sequence[Any] | None = None,
        exclude_pids: ExcludePids = (),
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.interval_s = interval_s
        self._collectors = collectors
        self._exclude = exclude_pids
        self._set: CollectorSet | None = None
        self._snapshots: list[SystemSnapshot] = []
        self._own: set[int] = set()  # GPU pids seen to descend from this process
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.thread_cpu_s = 0.0  # CPU time the sampling thread used (its own clock)
        self.started_at: float | None = None
        self.stopped_at: float | None = None

    def __enter__(self) -> "Sampler":
        self._set = CollectorSet(self._collectors)
        self.started_at = time.time()
        self._append(self._set.snapshot())  # "before"
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="perfbisect-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 30.0)
        if self._set is not None:
            self._append(self._set.snapshot())  # "after"
            self._set.close()
        self.stopped_at = time.time()

    def _append(self, snap: SystemSnapshot) -> None:
        # GPU processes that are perfbisect's own children (its server and workers, a command
        # workload) are recognised while they live: after teardown their parentage is gone, and
        # reporting them as "other GPU processes" would flag every trial as contended.
        me = os.getpid()
        own = {p for g in snap.gpus for p in g.processes if p not in self._own and descends_from(p, me)}
        with self._lock:
            self._snapshots.append(snap)
            self._own.update(own)

    def _loop(self) -> None:
        assert self._set is not None
        while not self._stop.wait(self.interval_s):
            self._append(self._set.snapshot())
            self.thread_cpu_s = time.thread_time()

    @property
    def snapshots(self) -> tuple[SystemSnapshot, ...]:
        """Every snapshot so far: the first is "before", the last (after exit) is "after"."""
        with self._lock:
            return tuple(self._snapshots)

    @property
    def notes(self) -> tuple[str, ...]:
        """What could not be recorded, each said once."""
        return tuple(self._set.notes) if self._set is not None else ()

    def summary(self, since: float | None = None, until: float | None = None) -> SystemSummary:
        """Summary over the snapshots taken in [since, until] (unix times; default: all)."""
        snaps = [
            s
            for s in self.snapshots
            if (since is None or s.t >= since) and (until is None or s.t <= until)
        ]
        own = set(self._own)
        exclude = self._exclude
        return summarize(snaps, notes=self.notes, exclude_pids=lambda: own | _resolve_pids(exclude))


# ---------------------------------------------------------------------------------------------
# Compact storage: columnar per GPU, rounded, run-length encoded where that is shorter

COMPACT_VERSION = 1
_GPU_ROUNDING: dict[str, int | None] = {  # decimals kept; None: stored as is
    "name": None,
    "sm_clock_mhz": 0,
    "mem_clock_mhz": 0,
    "sm_clock_max_mhz": 0,
    "mem_clock_max_mhz": 0,
    "temperature_c": 0,
    "power_w": 1,
    "power_limit_w": 1,
    "pstate": None,
    "throttle_reasons": None,
    "pcie_gen": None,
    "pcie_width": None,
    "memory_used_mib": 0,
    "memory_total_mib": 0,
    "utilization_pct": 0,
    "ecc_errors": None,
    "processes": None,
}
_GPU_FIELDS = tuple(f.name for f in fields(GpuSample) if f.name != "index")
assert set(_GPU_FIELDS) == set(_GPU_ROUNDING), "compact form must cover every GpuSample field"


def _round(value: Any, digits: int | None) -> Any:
    if value is None or digits is None:
        return list(value) if isinstance(value, tuple) else value
    return int(round(value)) if digits == 0 else round(float(value), digits)


def _encode_column(values: list[Any]) -> Any:
    runs: list[list[Any]] = []
    for v in values:
        if runs and runs[-1][0] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    # Run-length pairs cost about twice a plain value: use them only when they pay.
    return {"rle": runs} if len(runs) * 2 < len(values) else values


def _decode_column(column: Any) -> list[Any]:
    if isinstance(column, dict):
        return [v for v, n in column["rle"] for _ in range(n)]
    return list(column)


def compact(snapshots: Sequence[SystemSnapshot]) -> dict[str, Any]:
    """A JSON-able, rounded, columnar form of snapshots (10 min x 8 GPUs at 1 Hz: well under 1 MB)."""
    if not snapshots:
        return {"v": COMPACT_VERSION, "n": 0}
    t0 = round(snapshots[0].t, 3)  # offsets are taken from the stored t0, so times keep ms precision
    gpu_ids = sorted({g.index for s in snapshots for g in s.gpus})
    gpus: dict[str, Any] = {}
    for gid in gpu_ids:
        per_snapshot = [next((g for g in s.gpus if g.index == gid), None) for s in snapshots]
        cols: dict[str, Any] = {
            # 1 where this GPU was read in that snapshot (a failed collector leaves gaps)
            "present": _encode_column([0 if g is None else 1 for g in per_snapshot]),
        }
        for name in _GPU_FIELDS:
            cols[name] = _encode_column(
                [None if g is None else _round(getattr(g, name), _GPU_ROUNDING[name]) for g in per_snapshot]
            )
        gpus[str(gid)] = cols
    return {
        "v": COMPACT_VERSION,
        "n": len(snapshots),
        "t0": t0,
        "dt_ms": _encode_column([int(round((s.t - t0) * 1000)) for s in snapshots]),
        "source": _encode_column([s.source for s in snapshots]),
        "load_avg_1m": _encode_column([_round(s.load_avg_1m, 2) for s in snapshots]),
        "cpu_mhz": _encode_column([_round(s.cpu_mhz, 0) for s in snapshots]),
        "gpus": gpus,
    }


def expand_compact(data: Mapping[str, Any]) -> list[SystemSnapshot]:
    """Snapshots back from :func:`compact` (values as rounded there)."""
    if data.get("v") != COMPACT_VERSION:
        raise ValueError(f"unknown compact system-state version {data.get('v')!r}")
    n = data["n"]
    if n == 0:
        return []
    dts = _decode_column(data["dt_ms"])
    sources = _decode_column(data["source"])
    loads = _decode_column(data["load_avg_1m"])
    mhz = _decode_column(data["cpu_mhz"])
    gpu_cols = {
        int(gid): {name: _decode_column(col) for name, col in cols.items()}
        for gid, cols in data["gpus"].items()
    }
    out = []
    for i in range(n):
        gpus = []
        for gid in sorted(gpu_cols):
            cols = gpu_cols[gid]
            if not cols["present"][i]:
                continue
            values = {name: cols[name][i] for name in _GPU_FIELDS}
            values["processes"] = tuple(values["processes"] or ())
            values["name"] = values["name"] or ""
            gpus.append(GpuSample(index=gid, **values))
        out.append(
            SystemSnapshot(
                t=data["t0"] + dts[i] / 1000.0,
                gpus=tuple(gpus),
                load_avg_1m=loads[i],
                cpu_mhz=mhz[i],
                source=sources[i],
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# Host identity, busy machines, teardown check


def _cpu_model(proc_root: Path = Path("/proc")) -> str:
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


def _process_name(pid: int, proc_root: Path) -> str:
    try:
        return (proc_root / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def _busy(
    exclude_pids: ExcludePids, collectors: Sequence[Any] | None, proc_root: Path
) -> tuple[list[GpuProcess], bool]:
    """Processes holding GPUs other than the excluded ones, and whether GPUs could be checked."""
    cset = CollectorSet(collectors)
    try:
        if cset.gpu is None:
            return [], False
        procs = cset.processes()
    finally:
        cset.close()
    own = _resolve_pids(exclude_pids)
    out = []
    for p in procs:
        if p.pid in own:
            continue
        name = _process_name(p.pid, proc_root) or p.name
        out.append(replace(p, name=name))
    return sorted(out, key=lambda p: (p.gpu_index, p.pid)), True


def gpu_busy_processes(
    exclude_pids: ExcludePids = (),
    collectors: Sequence[Any] | None = None,
    proc_root: Path | str = "/proc",
) -> list[tuple[int, int, str]]:
    """(gpu index, pid, process name or "") of every other process holding a GPU."""
    procs, _ = _busy(exclude_pids, collectors, Path(proc_root))
    return [(p.gpu_index, p.pid, p.name) for p in procs]


def _describe_busy(procs: Sequence[GpuProcess]) -> str:
    parts = []
    for p in procs:
        mem = f", {p.used_mib:.0f} MiB" if p.used_mib is not None else ""
        parts.append(f"GPU {p.gpu_index}: pid {p.pid} ({p.name or 'name unreadable'}{mem})")
    return "; ".join(parts)


def wait_until_idle(
    timeout_s: float,
    poll_s: float = 5.0,
    progress: Callable[[list[tuple[int, int, str]], float], None] | None = None,
    exclude_pids: ExcludePids = (),
    collectors: Sequence[Any] | None = None,
    proc_root: Path | str = "/proc",
) -> float:
    """Wait until no other process holds a GPU; return the seconds waited, or raise MachineBusy.

    ``timeout_s=0`` checks once. Without a GPU collector there is nothing to check: returns 0.
    """
    start = time.monotonic()
    while True:
        procs, checked = _busy(exclude_pids, collectors, Path(proc_root))
        waited = time.monotonic() - start
        if not checked or not procs:
            return waited
        if progress is not None:
            progress([(p.gpu_index, p.pid, p.name) for p in procs], waited)
        if waited + poll_s > timeout_s:
            gpus = sorted({p.gpu_index for p in procs})
            raise MachineBusy(
                f"Other processes hold the GPUs ({_describe_busy(procs)}); benchmarking now would "
                f"measure them too (waited {waited:.0f} s). Stop them (e.g. `kill "
                f"{' '.join(str(p.pid) for p in procs)}`), pick other GPUs than "
                f"{', '.join(map(str, gpus))}, or pass --wait-idle SECONDS to wait for them to finish."
            )
        time.sleep(poll_s)


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


# ---------------------------------------------------------------------------------------------
# Versions, read from the target's interpreter

# Runs inside the target's Python. Importing torch there is fine (a separate, short-lived process);
# CUDA_VISIBLE_DEVICES is emptied for it so that nothing in it can create a context on the GPUs.
VERSIONS_SCRIPT = r"""
import json, sys
from importlib import metadata
out = {"python": sys.version.split()[0]}
def dist(*names):
    for n in names:
        try:
            return metadata.version(n)
        except Exception:
            pass
    return None
for key, names in (("torch", ("torch",)), ("sglang", ("sglang",)),
                   ("sgl-kernel", ("sgl-kernel", "sgl_kernel")),
                   ("flashinfer", ("flashinfer-python", "flashinfer")),
                   ("transformers", ("transformers",))):
    v = dist(*names)
    if v:
        out[key] = v
if "torch" in out:
    try:
        import torch
        if torch.version.cuda:
            out["cuda"] = str(torch.version.cuda)
        try:
            # ncclGetVersion is a plain library call: it creates no CUDA context.
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
            out["nccl_source"] = "torch"
        except Exception:
            pass
    except Exception as exc:
        out["torch_import_error"] = type(exc).__name__ + ": " + str(exc)[:200]
if "nccl" not in out:
    for n in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"):
        v = dist(n)
        if v:
            out["nccl"] = v
            out["nccl_source"] = n
            break
print("PERFBISECT_VERSIONS " + json.dumps(out))
"""


def target_versions(
    python: str,
    cwd: Path | None = None,
    collectors: Sequence[Any] | None = None,
    timeout_s: float = 180.0,
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """torch, CUDA, NCCL, sglang, sgl-kernel, flashinfer, transformers and python versions of the
    target's interpreter, plus the driver from NVML/nvidia-smi; a missing package has no entry.

    ``extra_env`` is what the server gets (PYTHONPATH to the checkout): the versions are those the
    server imports."""
    env = dict(os.environ, **(extra_env or {}), CUDA_VISIBLE_DEVICES="")
    try:
        proc = subprocess.run(
            [python, "-c", VERSIONS_SCRIPT],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        raise ConfigError(
            f"The target interpreter {python!r} cannot be run ({exc.strerror or exc}). Set "
            "[target] python in perfbisect.toml to the Python that runs SGLang, e.g. "
            "/path/to/venv/bin/python."
        ) from None
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"The target interpreter {python!r} did not report its package versions within "
            f"{timeout_s:.0f} s. Check that `{python} -c 'import torch'` works quickly, or set "
            "[target] python to the right interpreter."
        ) from None
    line = next(
        (ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("PERFBISECT_VERSIONS ")),
        None,
    )
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr or proc.stdout).strip()[-400:]
        raise ConfigError(
            f"The target interpreter {python!r} could not report its package versions (exit "
            f"{proc.returncode}): {tail}. Set [target] python in perfbisect.toml to a Python 3 "
            "interpreter that runs SGLang."
        )
    found = json.loads(line.split(" ", 1)[1])
    versions = {str(k): str(v) for k, v in found.items() if v is not None}
    cset = CollectorSet(collectors)
    try:
        driver = cset.driver_version()
        if driver:
            versions["driver"] = driver
        cuda_driver = getattr(cset.gpu, "cuda_driver_version", None)
        if cuda_driver is not None:
            value = cuda_driver()
            if value:
                versions["cuda_driver"] = value
    finally:
        cset.close()
    return versions


# ---------------------------------------------------------------------------------------------
# Formatting (lines; printing is the CLI's business)


def _fmt(value: float | None, unit: str = "", digits: int = 0) -> str:
    return "?" if value is None else f"{value:.{digits}f}{unit}"


def format_snapshot(snapshot: SystemSnapshot) -> list[str]:
    """Terminal lines for one snapshot: a host line, then one line per GPU."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(snapshot.t))
    lines = [
        f"{stamp}  [{snapshot.source or 'no collectors'}]  load {_fmt(snapshot.load_avg_1m, '', 2)}"
        f"  cpu {_fmt(snapshot.cpu_mhz, ' MHz')}"
    ]
    if not snapshot.gpus:
        lines.append("  no GPU readings")
    for g in snapshot.gpus:
        parts = [
            f"SM {_fmt(g.sm_clock_mhz)}/{_fmt(g.sm_clock_max_mhz)} MHz",
            f"mem {_fmt(g.mem_clock_mhz)}/{_fmt(g.mem_clock_max_mhz)} MHz",
            f"{_fmt(g.temperature_c)} C",
            f"{_fmt(g.power_w)}/{_fmt(g.power_limit_w)} W",
            g.pstate or "P?",
            f"util {_fmt(g.utilization_pct, '%')}",
            f"mem {_fmt(g.memory_used_mib)}/{_fmt(g.memory_total_mib)} MiB",
            f"PCIe gen{g.pcie_gen if g.pcie_gen is not None else '?'} x{g.pcie_width if g.pcie_width is not None else '?'}",
        ]
        reasons = throttle_reason_names(g.throttle_reasons)
        if g.throttle_reasons is None:
            parts.append("throttle ?")
        else:
            parts.append(f"throttle {','.join(reasons) if reasons else 'none'}")
        if g.ecc_errors:
            parts.append(f"ECC uncorrected {g.ecc_errors}")
        if g.processes:
            parts.append("pids " + ",".join(str(p) for p in g.processes))
        lines.append(f"  GPU{g.index} {g.name}: " + ", ".join(parts))
    return lines


def format_summary(summary: SystemSummary) -> list[str]:
    """Terminal lines for a trial's system summary."""
    lines = [
        f"{summary.samples} samples: SM {_fmt(summary.sm_clock_mean_mhz)} MHz mean"
        f" ({_fmt(summary.sm_clock_min_mhz)}-{_fmt(summary.sm_clock_max_mhz)}),"
        f" {_fmt(summary.temperature_mean_c)} C mean (max {_fmt(summary.temperature_max_c)}),"
        f" {_fmt(summary.power_mean_w)} W mean, load {_fmt(summary.load_avg_1m, '', 2)}"
    ]
    frac = summary.throttled_fraction
    reasons = throttle_reason_names(summary.throttle_reasons_seen)
    lines.append(
        f"throttled {('?' if frac is None else f'{100 * frac:.0f}%')} of samples;"
        f" reasons seen: {', '.join(reasons) if reasons else 'none'}"
    )
    if summary.other_gpu_processes:
        lines.append("other GPU processes: " + ", ".join(map(str, summary.other_gpu_processes)))
    lines.extend(f"note: {n}" for n in summary.notes)
    return lines


def _num(value: Any) -> float | None:
    return None if value is None else float(value)
