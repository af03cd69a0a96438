"""Results turned into text: a run's progress line, the machine's state over a set of trials, a
build's drift against earlier days, what the covariates explain, one system snapshot (``perfbisect
doctor``) and a trial's system summary.

Pure functions of values the store hands back; no store, no printing (``perfbisect.cli`` prints).
"""

from __future__ import annotations

import time
from typing import Sequence

from .model import RunResult, SystemSnapshot, SystemSummary, TrialResult
from .stats import NoiseModel, covariate_notes, history_shift
from .sysstate import throttle_reason_names


def format_run(run: RunResult) -> str:
    """One progress line for a run."""
    tag = "warm-up" if run.warmup else f"run {run.index}"
    if run.error:
        return f"{tag}: error: {run.error}"
    value = run.value or 0.0
    spec = ""
    if run.spec_accept_length:
        cycle = run.cycle_time_ms
        spec = f", accept {run.spec_accept_length:.2f}" + (f", cycle {cycle:.1f} ms" if cycle else "")
    flag = "" if run.complete else f"  FLAGGED: {run.output_tokens}/{run.requested_tokens} tokens, kept out of statistics"
    ttft = f", TTFT {run.ttft_s * 1000:.0f} ms" if run.ttft_s is not None else ""
    return f"{tag}: {value:.1f} tok/s{ttft}{spec}{flag}"


def state_lines(trials: Sequence[TrialResult]) -> list[str]:
    """What the machine did during these trials: clock range, temperature, throttling, other GPU users."""
    ok = [t.system for t in trials if t.system.samples]
    if not ok:
        return []
    lines = []
    clocks = [s.sm_clock_mean_mhz for s in ok if s.sm_clock_mean_mhz is not None]
    if clocks:
        lines.append(f"SM clock per trial {min(clocks):.0f}–{max(clocks):.0f} MHz over {len(clocks)} trials")
    temps = [s.temperature_max_c for s in ok if s.temperature_max_c is not None]
    if temps:
        lines.append(f"GPU temperature up to {max(temps):.0f} C")
    throttled = [s.throttled_fraction for s in ok if s.throttled_fraction is not None]
    if throttled and max(throttled) > 0:
        lines.append(f"throttled in {sum(1 for f in throttled if f > 0)} of {len(throttled)} trials (up to {100 * max(throttled):.0f}% of samples)")
    others = sorted({p for s in ok for p in s.other_gpu_processes})
    if others:
        lines.append(f"other GPU processes seen: {', '.join(map(str, others))}")
    if not clocks:
        lines.append("no GPU state recorded (no NVML or nvidia-smi here): differences cannot be attributed to clocks")
    return lines


def history_line(build: str, today: Sequence[TrialResult], stored: Sequence[TrialResult], noise: NoiseModel) -> str | None:
    """Same build measured on earlier days: a shift is system drift, not code.

    ``today``: this command's trials of the build (named ``build``); ``stored``: every stored trial
    of its commit and mode (today's among them), of which those of the same build on another day count.
    """
    ids = {t.id for t in today}
    day = time.strftime("%m-%d")
    earlier = []
    for t in stored:
        if t.id in ids or t.summary is None or t.identity.build_key != today[0].identity.build_key:
            continue
        when = time.strftime("%m-%d", time.localtime(t.started_at))
        if when != day:
            earlier.append((when, t.summary))
    values = [t.summary for t in today if t.summary is not None]
    if not earlier or not values:
        return None
    return history_shift(values, earlier, noise, build=build)


def attribution_line(trials: Sequence[TrialResult]) -> str | None:
    """What the machine's state explains of the differences between these trials (four usable at least)."""
    ok = [t for t in trials if t.summary is not None]
    if len(ok) < 4:
        return None
    _, notes = covariate_notes(
        [t.summary for t in ok], [t.system.as_covariates() for t in ok], [t.identity.build_key for t in ok], min_rows=4
    )
    return "; ".join(notes) if notes else None


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
