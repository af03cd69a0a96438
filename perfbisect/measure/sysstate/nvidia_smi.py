"""The nvidia-smi fallback: per-GPU readings from ``nvidia-smi --query-gpu`` (an argument list, never
a shell string) where NVML's Python binding is missing, and the CSV parsers behind it."""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from ...model import GpuSample
from .readings import GpuProcess

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
