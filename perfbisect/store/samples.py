"""The compact on-disk form of the sampler's system-state time series (``trials.system_samples``).

Columnar per GPU, rounded, run-length encoded where that is shorter: ten minutes of eight GPUs at
1 Hz stay well under 1 MB. Pure Python over the model's dataclasses; no SQLAlchemy here.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping, Sequence

from ..model import GpuSample, SystemSnapshot


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
