"""Terminal lines for system state: one snapshot (``perfbisect doctor``) and a trial's summary.

Lines only; printing is the CLI's business.
"""

# No `from __future__ import annotations` here on purpose: this part may be joined with other
# rendering code in one module, where a __future__ import is only legal as the first statement.
import time

from .model import SystemSnapshot, SystemSummary
from .sysstate import throttle_reason_names


def _fmt_reading(value: float | None, unit: str = "", digits: int = 0) -> str:
    return "?" if value is None else f"{value:.{digits}f}{unit}"


def format_snapshot(snapshot: SystemSnapshot) -> list[str]:
    """Terminal lines for one snapshot: a host line, then one line per GPU."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(snapshot.t))
    lines = [
        f"{stamp}  [{snapshot.source or 'no collectors'}]  load {_fmt_reading(snapshot.load_avg_1m, '', 2)}"
        f"  cpu {_fmt_reading(snapshot.cpu_mhz, ' MHz')}"
    ]
    if not snapshot.gpus:
        lines.append("  no GPU readings")
    for g in snapshot.gpus:
        parts = [
            f"SM {_fmt_reading(g.sm_clock_mhz)}/{_fmt_reading(g.sm_clock_max_mhz)} MHz",
            f"mem {_fmt_reading(g.mem_clock_mhz)}/{_fmt_reading(g.mem_clock_max_mhz)} MHz",
            f"{_fmt_reading(g.temperature_c)} C",
            f"{_fmt_reading(g.power_w)}/{_fmt_reading(g.power_limit_w)} W",
            g.pstate or "P?",
            f"util {_fmt_reading(g.utilization_pct, '%')}",
            f"mem {_fmt_reading(g.memory_used_mib)}/{_fmt_reading(g.memory_total_mib)} MiB",
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
        f"{summary.samples} samples: SM {_fmt_reading(summary.sm_clock_mean_mhz)} MHz mean"
        f" ({_fmt_reading(summary.sm_clock_min_mhz)}-{_fmt_reading(summary.sm_clock_max_mhz)}),"
        f" {_fmt_reading(summary.temperature_mean_c)} C mean (max {_fmt_reading(summary.temperature_max_c)}),"
        f" {_fmt_reading(summary.power_mean_w)} W mean, load {_fmt_reading(summary.load_avg_1m, '', 2)}"
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
