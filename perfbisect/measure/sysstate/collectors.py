"""Collectors in the pyperf style, each with ``name``, ``kind``, ``available()`` and ``collect()``,
and the :class:`CollectorSet` that picks the best available GPU and CPU ones.

- :class:`NvmlCollector` reads NVML through ``pynvml`` (package ``nvidia-ml-py``), imported lazily
  inside the collector so that importing perfbisect never loads the NVIDIA library;
- :class:`~perfbisect.measure.sysstate.nvidia_smi.NvidiaSmiCollector` (its own module) where NVML is missing;
- :class:`ProcCollector` reads the CPU load and frequency through psutil.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

from ...model import GpuSample, SystemSnapshot
from .nvidia_smi import NvidiaSmiCollector
from .readings import CpuReading, GpuProcess

# ---------------------------------------------------------------------------------------------
# Collectors


class ProcCollector:
    """CPU load (``psutil.getloadavg``) and mean core frequency (``psutil.cpu_freq(percpu=True)``).

    Named ``proc`` because snapshots already stored say ``source: "...+proc"``; psutil reads the
    same kernel files (``/proc/loadavg``, cpufreq in sysfs or ``/proc/cpuinfo`` "cpu MHz") on Linux.
    """

    name = "proc"
    kind = "cpu"

    def __init__(self) -> None:
        self.unavailable_reason = ""
        self.notes: list[str] = []

    def available(self) -> bool:
        """True when the load average can be read."""
        import psutil  # when first read, not at import, as perfbisect.runtime.liveness does

        try:
            psutil.getloadavg()
        except (OSError, AttributeError) as exc:
            self.unavailable_reason = f"the load average is unreadable ({type(exc).__name__}: {exc})"
            return False
        return True

    def collect(self) -> CpuReading:
        """Read the 1-minute load average and the mean current frequency over online cores."""
        import psutil

        load = None
        try:
            load = float(psutil.getloadavg()[0])
        except (OSError, AttributeError):
            pass
        mhz = None
        try:
            # An offline core reads 0.0: it is left out, as /proc/cpuinfo leaves it out.
            values = [f.current for f in psutil.cpu_freq(percpu=True) or () if f.current > 0]
        except (OSError, AttributeError, NotImplementedError, ValueError) as exc:
            # AttributeError: a platform where psutil has no cpu_freq; NotImplementedError: Linux
            # without a readable current-frequency file.
            self._note_once(f"proc: CPU frequency unreadable ({type(exc).__name__}); CPU frequency not recorded")
        else:
            if values:
                mhz = sum(values) / len(values)
            else:
                self._note_once("proc: the system reports no CPU frequency; CPU frequency not recorded")
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


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


# ---------------------------------------------------------------------------------------------
# The chosen set


def default_collectors() -> list[Any]:
    """NVML, then nvidia-smi, then the CPU's load and frequency: the first available GPU collector wins."""
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
