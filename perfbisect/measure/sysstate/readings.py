"""The small values every collector shares: clock-event ("throttle") reasons, a GPU process, a CPU
reading, and which pids a summary leaves out."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterable

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


def resolve_pids(exclude_pids: ExcludePids) -> set[int]:
    """The excluded pids (calling ``exclude_pids`` when it is a callable), plus perfbisect's own."""
    pids = exclude_pids() if callable(exclude_pids) else exclude_pids
    return {int(p) for p in pids} | {os.getpid()}
