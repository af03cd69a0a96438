"""System state: what the GPUs and CPUs were doing while a trial ran.

- :mod:`.collectors`: :class:`NvmlCollector` (``pynvml``, imported lazily inside the collector so
  that importing perfbisect never loads the NVIDIA library), :class:`ProcCollector` (CPU load and
  frequency, through psutil), and :class:`CollectorSet`, which picks the first available GPU
  collector and the CPU one;
- :mod:`.nvidia_smi`: :class:`NvidiaSmiCollector`, ``nvidia-smi --query-gpu`` (an argument list,
  never a shell string) where NVML is missing, and its CSV parsers;
- :mod:`.sampler`: :class:`Sampler` samples in a daemon thread before, during (about 1 Hz) and after
  a trial, and :func:`summarize` reduces the readings to a :class:`~perfbisect.model.SystemSummary`.
  A missing collector is a note in the summary, said once, never an exception;
- :mod:`.readings`: the shared small values (throttle reasons, GPU processes, CPU readings).

Elsewhere: host checks (fingerprint, busy GPUs, memory release) are :mod:`perfbisect.measure.host`, the
target's package versions :mod:`perfbisect.measure.versions`, the compact stored form of the samples
:mod:`perfbisect.store.samples`, and terminal lines :mod:`perfbisect.report.render`.
"""

from .collectors import CollectorSet, NvmlCollector, ProcCollector, collect_snapshot, default_collectors
from .nvidia_smi import (
    SMI_APPS_FIELDS,
    SMI_GPU_FIELDS,
    SMI_LEGACY_FIELD_NAMES,
    NvidiaSmiCollector,
    SmiGpuRow,
    parse_smi_apps_csv,
    parse_smi_gpu_csv,
)
from .readings import (
    GPU_IDLE,
    SW_POWER_CAP,
    THROTTLE_REASONS,
    CpuReading,
    ExcludePids,
    GpuProcess,
    is_throttled,
    resolve_pids,
    throttle_reason_names,
)
from .sampler import Sampler, descends_from, summarize

__all__ = [
    "GPU_IDLE",
    "SMI_APPS_FIELDS",
    "SMI_GPU_FIELDS",
    "SMI_LEGACY_FIELD_NAMES",
    "SW_POWER_CAP",
    "THROTTLE_REASONS",
    "CollectorSet",
    "CpuReading",
    "ExcludePids",
    "GpuProcess",
    "NvidiaSmiCollector",
    "NvmlCollector",
    "ProcCollector",
    "Sampler",
    "SmiGpuRow",
    "collect_snapshot",
    "default_collectors",
    "descends_from",
    "is_throttled",
    "parse_smi_apps_csv",
    "parse_smi_gpu_csv",
    "resolve_pids",
    "summarize",
    "throttle_reason_names",
]
