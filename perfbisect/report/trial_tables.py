"""Trials as rows for a report's charts and tables: per trial, system-state samples, environment, failures.

Plain values read from ``TrialResult`` records (and, for the state timeline, the samples the store
keeps per trial); ``views`` and ``comparison_views`` assemble them into a report's view.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any, Iterable, Mapping, Sequence

from ..runtime.logtail import log_tail
from ..layout import FIXED
from ..model import TrialResult, TrialStatus, median
from .render import speculative_health, trial_row
from .secrets import is_secret, redact

# System-state samples drawn per trial in the timeline (stride-sampled beyond this), and in all.
MAX_SAMPLES_PER_TRIAL = 24
MAX_SAMPLES = 2400
LOG_TAIL_LINES = 25


def iso_time(t: float | None) -> str | None:
    """Local time as ISO 8601 to the second, or None for no time."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t else None


def _log_tail(path: str | None, lines: int = LOG_TAIL_LINES) -> str | None:
    """The end of a trial's server log, or None when there is none to show (read as every log tail is)."""
    return (log_tail(path, lines, max_bytes=16384) or None) if path else None


def trial_point(t: TrialResult, commits: Mapping[str, dict], excluded: Mapping[int, str]) -> dict[str, Any]:
    """One trial as the charts see it."""
    info = commits.get(t.identity.commit, {})
    row = trial_row(t)
    return {
        "trial": t.id,
        "commit": t.identity.commit[:10],
        "sha": t.identity.commit,
        "subject": info.get("subject", ""),
        "mode": t.identity.mode,
        "status": t.status.value,
        "value": row["tok_s"],
        "runs": row["runs"],
        "flagged_runs": row["flagged"],
        "detected_warmup": row["detected_warmup"],
        "within_cv_pct": row["within_cv_pct"],
        "accept_length": row["accept_length"],
        "cycle_ms": row["cycle_ms"],
        "ttft_ms": median(1000 * r.ttft_s for r in t.usable_runs if r.ttft_s is not None),
        "itl_p50_ms": median(r.itl_p50_ms for r in t.usable_runs),
        "itl_p99_ms": median(r.itl_p99_ms for r in t.usable_runs),
        "started": iso_time(t.started_at),
        "duration_s": (t.finished_at - t.started_at) if t.finished_at and t.started_at else None,
        "excluded": excluded.get(t.id or -1) or t.system.exclusion() or "",
        "sm_clock_mhz": t.system.sm_clock_mean_mhz,
        "temperature_c": t.system.temperature_max_c,
        "power_w": t.system.power_mean_w,
        "throttle": hex(t.system.throttle_reasons_seen) if t.system.throttle_reasons_seen else "",
        "node": t.node or "",
        "job": t.job_id or "",
        "layout": t.layout.id if t.layout else "",
    }


def placements(trials: Sequence[TrialResult]) -> list[dict[str, Any]]:
    """Where each trial ran when a cluster ran them (the Slurm job and node); empty when all ran here."""
    if not any(t.job_id for t in trials):
        return []
    return [{"trial": t.id, "commit": t.identity.commit[:10], "mode": t.identity.mode, "status": t.status.value,
             "node": t.node or "(this machine)", "job": t.job_id or "", "started": iso_time(t.started_at),
             "error": t.error or ""} for t in trials]


def layouts(trials: Sequence[TrialResult]) -> dict[str, Any] | None:
    """Each trial's layout (worktree slot, env padding, hash seed: perfbisect/layout.py) with a line
    that sums them up; None when no trial recorded one (stored before layouts were)."""
    recorded = [t for t in trials if t.layout is not None]
    if not recorded:
        return None
    rows = [{"trial": t.id, "commit": t.identity.commit[:10], "mode": t.identity.mode, "status": t.status.value,
             "value": trial_row(t)["value"], "layout": t.layout.id, "slot": t.layout.slot,
             "env_pad": t.layout.env_pad, "hash_seed": t.layout.hash_seed} for t in trials if t.layout is not None]
    distinct = {t.layout for t in recorded}
    if distinct == {FIXED}:
        note = (f"All {len(recorded)} trials ran under the fixed layout ({FIXED.id}: worktree slot 0, no environment "
                f"padding, PYTHONHASHSEED as configured): [layout] randomize = false.")
    else:
        pads = [t.layout.env_pad for t in recorded]
        slots = sorted({t.layout.slot for t in recorded})
        seeds = {t.layout.hash_seed for t in recorded} - {None}
        note = (f"{len(recorded)} trials under {len(distinct)} layouts: worktree slots {', '.join(map(str, slots))}, "
                f"{min(pads)}–{max(pads)} bytes of environment padding, "
                + (f"{len(seeds)} hash seeds." if seeds else "PYTHONHASHSEED as configured."))
    unrecorded = len(trials) - len(recorded)
    if unrecorded:
        note += f" {unrecorded} older trial(s) recorded none."
    return {"note": note, "rows": rows}


def state_samples(store: Any, trials: Sequence[TrialResult], budget: int = MAX_SAMPLES_PER_TRIAL) -> list[dict[str, Any]]:
    """Long-form system-state rows (time, variable, value) over every trial's sampled state."""
    from ..store.samples import expand_compact

    rows: list[dict[str, Any]] = []
    from ..store import trial_queries

    budget = max(2, min(budget, MAX_SAMPLES // max(1, len(trials))))
    ids = [t.id for t in trials if t.id is not None]
    stored: dict[int, Any] = {}
    with store.session() as s:  # one transaction for all of them, not one per trial
        for tid in ids:
            stored[tid] = trial_queries.trial_samples(s, tid)
    for t in trials:
        if t.id is None:
            continue
        try:
            data = stored.get(t.id)
            snaps = expand_compact(data) if data else []
        except (ValueError, KeyError, TypeError):
            continue
        stride = max(1, math.ceil(len(snaps) / budget))
        for s in snaps[::stride]:
            at = iso_time(s.t)
            gpus = s.gpus
            values = {
                "SM clock (MHz)": _mean(g.sm_clock_mhz for g in gpus),
                "GPU temperature (°C)": _max(g.temperature_c for g in gpus),
                "GPU power (W, total)": _sum(g.power_w for g in gpus),
                "throttle reasons (bitmask)": _or(g.throttle_reasons for g in gpus),
                "CPU load (runnable tasks, 1-min average)": s.load_avg_1m,
            }
            for var, v in values.items():
                if v is not None:
                    rows.append({"t": at, "var": var, "value": v, "trial": t.id, "mode": t.identity.mode,
                                 "commit": t.identity.commit[:10]})
    return rows


def _mean(vs: Iterable[float | None]) -> float | None:
    xs = [v for v in vs if v is not None]
    return sum(xs) / len(xs) if xs else None


def _max(vs: Iterable[float | None]) -> float | None:
    xs = [v for v in vs if v is not None]
    return max(xs) if xs else None


def _sum(vs: Iterable[float | None]) -> float | None:
    xs = [v for v in vs if v is not None]
    return sum(xs) if xs else None


def _or(vs: Iterable[int | None]) -> int | None:
    xs = [int(v) for v in vs if v is not None]
    out = 0
    for x in xs:
        out |= x
    return out if xs else None


def environment(trials: Sequence[TrialResult], config: Any = None) -> dict[str, Any]:
    """Host fingerprint, versions, and configured env against what reached each worker."""
    hosts = sorted({t.identity.host for t in trials})
    versions: dict[str, list[str]] = {}
    for t in trials:
        for k, v in (t.versions or {}).items():
            versions.setdefault(str(k), [])
            if str(v) not in versions[str(k)]:
                versions[str(k)].append(str(v))
    configured: dict[str, dict[str, str]] = {}
    secret_names = tuple(getattr(getattr(config, "server", None), "secret_env", ()) or ())
    redacted: set[str] = set()
    if config is not None:
        for name, mode in getattr(config, "modes", {}).items():
            shown, hidden = redact({**dict(config.server.env), **dict(mode.env)}, secret_names)
            configured[name] = shown  # type: ignore[assignment]
            redacted.update(hidden)
    checks: dict[tuple, dict[str, Any]] = {}
    for t in trials:
        for c in t.env_checks:
            proc = re.sub(r"--port \d+", "--port P", c.cmdline)[:160]
            key = (t.identity.mode, proc, c.missing, c.mismatched)
            row = checks.setdefault(key, {
                "mode": t.identity.mode, "process": proc, "ok": c.ok, "missing": list(c.missing),
                "mismatched": [f"{n}=REDACTED (not the configured value)" if is_secret(n, secret_names)
                               else f"{n}={a!r} (wanted {w!r})" for n, w, a in c.mismatched], "trials": 0,
            })
            row["trials"] += 1
    first = next((t for t in trials if t.server_info), None)
    server = {k: v for k, v in (first.server_info if first else {}).items() if isinstance(v, (str, int, float, bool))}
    server, hidden = redact(server, secret_names)  # a server's api_key among its arguments
    redacted.update(hidden)
    return {"hosts": hosts, "versions": versions, "configured_env": configured, "env_checks": list(checks.values()),
            "server_info": dict(list(server.items())[:24]), "redacted": sorted(redacted)}


def failures(trials: Sequence[TrialResult]) -> list[dict[str, Any]]:
    """Trials that carry no evidence, with why and the tail of their server log."""
    out = []
    for t in trials:
        if t.status is TrialStatus.OK:
            continue
        out.append({"trial": t.id, "commit": t.identity.commit[:10], "mode": t.identity.mode, "status": t.status.value,
                    "error": t.error or "", "log": t.log_path or "", "tail": _log_tail(t.log_path) or "",
                    "where": f"job {t.job_id} on {t.node}" if t.job_id else ""})
    return out


def speculative_rows(trials: Sequence[TrialResult], order: Sequence[str]) -> list[dict[str, Any]]:
    """Per commit: accept length, cycle time, spec/baseline ratio, break-even, TTFT and ITL."""
    spec_modes = {t.identity.mode for t in trials for r in t.usable_runs if r.spec_verify_ct}
    if not spec_modes:
        return []
    rows = []
    pos = {s: i for i, s in enumerate(order)}
    by_commit: dict[str, list[TrialResult]] = {}
    for t in trials:
        if t.summary is not None:
            by_commit.setdefault(t.identity.commit, []).append(t)
    for sha in sorted(by_commit, key=lambda s: pos.get(s, 1 << 30)):
        ts = by_commit[sha]
        base = [trial_row(t) for t in ts if t.identity.mode not in spec_modes]
        spec = [trial_row(t) for t in ts if t.identity.mode in spec_modes]
        if not spec:
            continue
        base_tok = median(r["tok_s"] for r in base)
        spec_tok = median(r["tok_s"] for r in spec)
        accept = median(r["accept_length"] for r in spec)
        cycle = median(r["cycle_ms"] for r in spec)
        runs = [r for t in ts for r in t.usable_runs]
        rows.append({
            "commit": sha[:10], "spec_tok_s": spec_tok, "baseline_tok_s": base_tok, "accept_length": accept,
            "cycle_ms": cycle, "ratio": (spec_tok / base_tok) if base_tok and spec_tok else None,
            "break_even": (base_tok * cycle / 1000.0) if base_tok and cycle else None,
            "ttft_p50_ms": median(1000 * r.ttft_s for r in runs if r.ttft_s is not None),
            "itl_p50_ms": median(r.itl_p50_ms for r in runs), "itl_p99_ms": median(r.itl_p99_ms for r in runs),
            "lines": speculative_health(base_tok, spec),
        })
    return rows


__all__ = ["environment", "failures", "iso_time", "layouts", "speculative_rows", "state_samples", "trial_point"]
