"""Everything an HTML report shows, loaded from the results database into plain JSON-able values.

The store, the target repository (when it is still where the bisection ran) and a replay of the
search policy over the stored observations are read here; ``perfbisect.report`` only renders what
this module returns, so a report can be rebuilt at any time without rerunning anything.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .bisect import Done, Observation, SearchPolicy
from .settings import StatsConfig
from .errors import PerfbisectError, UsageError
from .model import BisectOutcome, Comparison, TrialResult, TrialStatus, Verdict
from .stats import NoiseModel
from .summary import speculative_health, trial_row

# Replaying the search re-fits the posterior once per step; past this many steps, steps are sampled
# evenly (the last one always kept) so a long bisection still renders in seconds.
MAX_REPLAY_STEPS = 60
REPLAY_BUDGET_S = 1.0
# System-state samples drawn per trial in the timeline (stride-sampled beyond this), and in all.
MAX_SAMPLES_PER_TRIAL = 24
MAX_SAMPLES = 2400
LOG_TAIL_LINES = 25

_FORGES = {
    "github.com": "https://github.com/{path}/commit/{sha}",
    "gitlab.com": "https://gitlab.com/{path}/-/commit/{sha}",
    "codeberg.org": "https://codeberg.org/{path}/commit/{sha}",
    "bitbucket.org": "https://bitbucket.org/{path}/commits/{sha}",
}
_REMOTE = re.compile(r"^(?:https://|ssh://git@|git@)([A-Za-z0-9.-]+)[:/]([A-Za-z0-9._-]+/[A-Za-z0-9._-]+?)(?:\.git)?/?$")


def commit_url(remote: str | None, sha: str) -> str | None:
    """A link to ``sha`` on a known forge, from the remote URL; None for anything else."""
    m = _REMOTE.match((remote or "").strip())
    if not m or m.group(1) not in _FORGES or not re.fullmatch(r"[0-9a-f]{7,40}", sha):
        return None
    return _FORGES[m.group(1)].format(path=m.group(2), sha=sha)


# ------------------------------------------------------------------------------------------------
# Repository facts (optional: the target may have moved since the bisection ran)


class _Repo:
    """Commit details from the target repository through ``gitrepo.TargetRepo``, or nothing."""

    def __init__(self, path: str | None):
        self.repo = None
        self.remote = None
        if not path or not Path(path).is_dir():
            return
        try:
            from .gitrepo import TargetRepo

            self.repo = TargetRepo(path)
            code, out, _ = self.repo.run("remote", "get-url", "origin")
            self.remote = out.strip() if code == 0 else None
        except (PerfbisectError, OSError):
            self.repo = None

    def commits(self, shas: Sequence[str]) -> dict[str, dict[str, Any]]:
        if self.repo is None or not shas:
            return {}
        out: dict[str, dict[str, Any]] = {}
        try:
            text = self.repo.git("show", "-s", "--format=%H%x1f%an%x1f%ae%x1f%aI%x1f%s%x1e", *dict.fromkeys(shas))
        except (PerfbisectError, OSError):
            return {}
        for record in text.split("\x1e"):
            parts = record.strip().split("\x1f")
            if len(parts) == 5:
                sha, name, email, date, subject = parts
                out[sha] = {"author": name, "email": email, "date": date, "subject": subject}
        return out

    def files(self, sha: str) -> list[str]:
        if self.repo is None:
            return []
        try:
            return list(self.repo.changed_paths(sha))
        except (PerfbisectError, OSError):
            return []

    def range(self, good: str, bad: str) -> list[str]:
        """Every first-parent commit of good..bad, oldest first (filtered ones included)."""
        if self.repo is None:
            return []
        try:
            return [c.sha for c in self.repo.first_parent_range(good, bad)]
        except (PerfbisectError, OSError):
            return []


def patch_variants(repo: _Repo, config: Any, shas: Sequence[str]) -> dict[str, str]:
    """Per commit, which patch files of the stack applied where a variant replaced the default one."""
    patches = getattr(config, "patches", None)
    if repo.repo is None or patches is None or not (patches.dir or patches.branch):
        return {}
    from .patches import PatchStack

    out: dict[str, str] = {}
    try:
        stack = PatchStack.load(patches, repo.repo)
    except (PerfbisectError, OSError):
        return {}
    try:
        for sha in shas:
            check = stack.check_at(sha)
            if not check.ok:
                out[sha] = "stack does not apply: " + check.conflict.describe()
            elif check.applied is not None:
                used = [Path(str(f)).name for _, f in check.applied.applied]
                out[sha] = "applied: " + ", ".join(used)
    except (PerfbisectError, OSError):
        pass
    finally:
        stack.cleanup()
    return out


# ------------------------------------------------------------------------------------------------
# Small helpers


def _exp(v: float | None) -> float | None:
    return math.exp(v) if v is not None else None


def _iso(t: float | None) -> str | None:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t else None


def _median(values: Iterable[float | None]) -> float | None:
    vs = sorted(v for v in values if v is not None)
    if not vs:
        return None
    m = len(vs) // 2
    return vs[m] if len(vs) % 2 else 0.5 * (vs[m - 1] + vs[m])


def _gpu_count(host: str) -> int:
    m = re.match(r"^(\d+)x", host or "")
    return int(m.group(1)) if m else 0


def _log_tail(path: str | None, lines: int = LOG_TAIL_LINES) -> str | None:
    if not path:
        return None
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 16384))
            text = fh.read().decode(errors="replace")
    except OSError:
        return None
    return "\n".join(text.splitlines()[-lines:])


def _comparison(label: str, cmp: Comparison | None) -> dict[str, Any] | None:
    if cmp is None:
        return None
    return {
        "label": label, "verdict": cmp.verdict.value, "effect_pct": cmp.effect_pct,
        "ci_low_pct": cmp.ci_low_pct, "ci_high_pct": cmp.ci_high_pct, "sigma_pct": cmp.sigma_b_pct,
        "sigma_source": cmp.sigma_source, "n_a": cmp.n_a, "n_b": cmp.n_b, "explanation": cmp.explanation,
    }


def _stats_config(settings: Mapping[str, Any]) -> StatsConfig:
    names = {f.name for f in dataclasses.fields(StatsConfig)}
    return StatsConfig(**{k: v for k, v in dict(settings or {}).items() if k in names})


def metric_modes(metric: str) -> tuple[str, ...]:
    """The modes a bisection metric needs (``ratio:SPEC/BASE`` needs two)."""
    if metric.startswith("ratio:"):
        spec, base = metric[len("ratio:"):].split("/", 1)
        return (base, spec)
    return (metric,)


def metric_unit(metric: str, config: Any = None) -> tuple[str, str]:
    """(unit, what it measures) of a bisection metric."""
    if metric.startswith("ratio:"):
        return "×", f"{metric[6:]} speed ratio"
    workload = getattr(config, "workload", None)
    if workload is not None and getattr(workload, "kind", "") == "command":
        return workload.metric, f"{metric} {workload.metric}"
    return "tok/s", f"{metric} decode throughput"


# ------------------------------------------------------------------------------------------------
# Trials: rows for charts and tables


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
        "within_cv_pct": row["within_cv_pct"],
        "accept_length": row["accept_length"],
        "cycle_ms": row["cycle_ms"],
        "ttft_ms": _median(1000 * r.ttft_s for r in t.usable_runs if r.ttft_s is not None),
        "itl_p50_ms": _median(r.itl_p50_ms for r in t.usable_runs),
        "itl_p99_ms": _median(r.itl_p99_ms for r in t.usable_runs),
        "started": _iso(t.started_at),
        "duration_s": (t.finished_at - t.started_at) if t.finished_at and t.started_at else None,
        "excluded": excluded.get(t.id or -1) or t.system.exclusion() or "",
        "sm_clock_mhz": t.system.sm_clock_mean_mhz,
        "temperature_c": t.system.temperature_max_c,
        "power_w": t.system.power_mean_w,
        "throttle": hex(t.system.throttle_reasons_seen) if t.system.throttle_reasons_seen else "",
    }


def state_samples(store: Any, trials: Sequence[TrialResult], budget: int = MAX_SAMPLES_PER_TRIAL) -> list[dict[str, Any]]:
    """Long-form system-state rows (time, variable, value) over every trial's sampled state."""
    from .store.samples import expand_compact

    rows: list[dict[str, Any]] = []
    from .store import queries

    budget = max(2, min(budget, MAX_SAMPLES // max(1, len(trials))))
    ids = [t.id for t in trials if t.id is not None]
    stored: dict[int, Any] = {}
    with store.session() as s:  # one transaction for all of them, not one per trial
        for tid in ids:
            stored[tid] = queries.trial_samples(s, tid)
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
            at = _iso(s.t)
            gpus = s.gpus
            values = {
                "SM clock (MHz)": _mean(g.sm_clock_mhz for g in gpus),
                "GPU temperature (°C)": _max(g.temperature_c for g in gpus),
                "GPU power (W, total)": _sum(g.power_w for g in gpus),
                "throttle reasons (bitmask)": _or(g.throttle_reasons for g in gpus),
                "CPU load (1 min)": s.load_avg_1m,
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
    if config is not None:
        for name, mode in getattr(config, "modes", {}).items():
            configured[name] = {**dict(config.server.env), **dict(mode.env)}
    checks: dict[tuple, dict[str, Any]] = {}
    for t in trials:
        for c in t.env_checks:
            proc = re.sub(r"--port \d+", "--port P", c.cmdline)[:160]
            key = (t.identity.mode, proc, c.missing, c.mismatched)
            row = checks.setdefault(key, {
                "mode": t.identity.mode, "process": proc, "ok": c.ok, "missing": list(c.missing),
                "mismatched": [f"{n}={a!r} (wanted {w!r})" for n, w, a in c.mismatched], "trials": 0,
            })
            row["trials"] += 1
    first = next((t for t in trials if t.server_info), None)
    server = {k: v for k, v in (first.server_info if first else {}).items() if isinstance(v, (str, int, float, bool))}
    return {"hosts": hosts, "versions": versions, "configured_env": configured, "env_checks": list(checks.values()),
            "server_info": dict(list(server.items())[:24])}


def failures(trials: Sequence[TrialResult]) -> list[dict[str, Any]]:
    """Trials that carry no evidence, with why and the tail of their server log."""
    out = []
    for t in trials:
        if t.status is TrialStatus.OK:
            continue
        out.append({"trial": t.id, "commit": t.identity.commit[:10], "mode": t.identity.mode, "status": t.status.value,
                    "error": t.error or "", "log": t.log_path or "", "tail": _log_tail(t.log_path) or ""})
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
        base_tok = _median(r["tok_s"] for r in base)
        spec_tok = _median(r["tok_s"] for r in spec)
        accept = _median(r["accept_length"] for r in spec)
        cycle = _median(r["cycle_ms"] for r in spec)
        runs = [r for t in ts for r in t.usable_runs]
        rows.append({
            "commit": sha[:10], "spec_tok_s": spec_tok, "baseline_tok_s": base_tok, "accept_length": accept,
            "cycle_ms": cycle, "ratio": (spec_tok / base_tok) if base_tok and spec_tok else None,
            "break_even": (base_tok * cycle / 1000.0) if base_tok and cycle else None,
            "ttft_p50_ms": _median(1000 * r.ttft_s for r in runs if r.ttft_s is not None),
            "itl_p50_ms": _median(r.itl_p50_ms for r in runs), "itl_p99_ms": _median(r.itl_p99_ms for r in runs),
            "lines": speculative_health(base_tok, spec),
        })
    return rows


# ------------------------------------------------------------------------------------------------
# The search's reasoning, replayed


def _coarse_to_fine(n: int, limit: int) -> list[int]:
    """Step numbers 1..n in an order that covers the whole search early: the last, the middle, quarters..."""
    order, seen = [], set()
    parts = 1
    while len(order) < min(n, limit):
        for j in range(parts, 0, -1):
            k = max(1, round(n * j / parts))
            if k not in seen:
                seen.add(k)
                order.append(k)
                if len(order) >= min(n, limit):
                    break
        if parts > 2 * n:
            break
        parts *= 2
    return order


def replay(record: Any, observations: Sequence[Any], noise: NoiseModel | None = None,
           higher_is_better: bool = True, max_steps: int = MAX_REPLAY_STEPS,
           budget_s: float = REPLAY_BUDGET_S) -> dict[str, Any]:
    """Posterior over commits after each step and why each next commit was chosen.

    The policy is a pure function of its settings and the observations, so replaying it prefix by
    prefix over the stored observations shows what it believed when it chose. The noise it started
    from is the configured prior unless given (a learned noise is not stored per bisection). Each
    step re-fits the posterior, so a long search is replayed coarse to fine (last step, middle,
    quarters...) until ``budget_s`` is spent, and the report says how many steps it shows.
    """
    settings = _stats_config(record.settings)
    noise = noise or NoiseModel.prior(settings.prior_sigma_pct)
    policy = SearchPolicy(list(record.commits), settings, noise, higher_is_better=higher_is_better)
    seen_post: list[Any] = []
    fit = policy._posterior

    def remembered(data: Any) -> Any:  # next() fits the full posterior first: keep it, don't fit twice
        post = fit(data)
        seen_post.append(post)
        return post

    policy._posterior = remembered  # type: ignore[method-assign]
    obs = [Observation(commit=o.commit, value=o.value, covariates=dict(o.covariates), seq=o.seq,
                       at=o.recorded_at or None, flag=o.flag) for o in observations]
    n = len(obs)
    deadline = time.monotonic() + budget_s
    done: dict[int, tuple[Any, Any]] = {}
    for k in _coarse_to_fine(n, max_steps):
        if done and time.monotonic() > deadline:
            break
        prefix = obs[:k]
        try:
            seen_post.clear()
            action = policy.next(prefix)
            post = seen_post[0] if seen_post else fit(policy._regroup(prefix))
        except (PerfbisectError, ValueError, FloatingPointError, np.linalg.LinAlgError):  # pragma: no cover
            continue
        done[k] = (post, action)
    steps, cells = [], []
    for k in sorted(done):
        post, action = done[k]
        mass = [0.0] * policy.n
        for key, p in post.groups.items():
            for b in key:
                mass[b] += p
        for i, p in enumerate(mass):
            if p >= 1e-3:
                cells.append({"step": k, "commit": record.commits[i][:10], "p": round(p, 3)})
        cells.append({"step": k, "commit": "no change", "p": round(post.p_none, 3)})
        last = obs[k - 1]
        nxt = {"commit": "", "phase": "done", "reason": "the search stopped: the outcome above"}
        if not isinstance(action, Done):
            nxt = {"commit": action.commit[:10], "phase": action.phase, "reason": action.reason}
        top = max(range(policy.n), key=lambda i: mass[i])
        steps.append({
            "step": k, "measured": last.commit[:10], "value": _exp(last.value), "flag": last.flag or "",
            "p_none": post.p_none, "top": record.commits[top][:10], "top_p": mass[top],
            **{"next_" + a: b for a, b in nxt.items()},
        })
    first = policy.next([]) if n else None
    opening = first.reason if first is not None and not isinstance(first, Done) else ""
    return {"steps": steps, "cells": cells, "sampled": len(done) < n, "shown": len(done), "total": n,
            "noise": noise.describe(), "opening": opening}


# ------------------------------------------------------------------------------------------------
# Verdict sentence


def _fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "?"
    if unit == "×":
        return f"{v:.3f}×"
    return f"{v:,.1f} {unit}" if abs(v) < 1000 else f"{v:,.0f} {unit}"


def verdict_view(out: BisectOutcome | None, status: str, commits: Mapping[str, dict], levels: dict[str, Any],
                 unit: str, what: str, trials: int, gpu_hours: float, gpu_label: str, alpha: float,
                 min_effect: float) -> dict[str, Any]:
    """The verdict in one sentence a colleague can repeat, plus its headline and class."""
    def name(sha: str) -> str:
        return f"{sha[:10]} “{commits.get(sha, {}).get('subject', '')}”" if commits.get(sha, {}).get("subject") else sha[:10]

    cost = f"{trials} trials, {gpu_hours:.2f} {gpu_label}"
    level_pct = 100 * (1 - 2 * alpha)
    if out is None:
        return {"cls": "inconclusive", "headline": "UNFINISHED",
                "sentence": f"This bisection has not finished ({status}); {cost} so far. Continue it with `perfbisect resume`."}
    before, after = levels.get("before"), levels.get("after")
    noise = f"noise {out.noise_sigma_pct:.1f}% per trial" if out.noise_sigma_pct else None
    if out.verdict is Verdict.REGRESSED and out.culprit:
        cmp = out.culprit_comparison or out.endpoint_comparison
        eff = out.effect_pct or 0.0
        delta = (after - before) if before is not None and after is not None else None
        absolute = f" ({delta:+,.1f} {unit}: {_fmt_value(before, unit)} → {_fmt_value(after, unit)})" if delta is not None else ""
        interval = f", {level_pct:g}% interval [{cmp.ci_low_pct:+.1f}%, {cmp.ci_high_pct:+.1f}%]" if cmp else ""
        sigma = f" against {noise}" if noise else (f" against noise {cmp.sigma_b_pct:.1f}% per trial" if cmp else "")
        who = name(out.culprit) if len(out.culprit_set) <= 1 else f"one of {len(out.culprit_set)} commits up to {name(out.culprit)}"
        sentence = f"{who} changed {what} by {eff:+.1f}%{absolute}{interval}{sigma}; {cost}."
        return {"cls": "regressed", "headline": "REGRESSION", "sentence": sentence}
    if out.verdict is Verdict.INCONCLUSIVE:
        best = ", ".join(s[:10] for s in out.best_answer) or "no change"
        prob = f" (probability {out.answer_probability:.2f})" if out.answer_probability is not None else ""
        why = "the trial budget ran out" if out.budget_exhausted else "the evidence did not settle it"
        bound = f" No regression ≥ {out.ruled_out_pct:.1f}% is ruled out." if out.ruled_out_pct is not None else ""
        per_trial = gpu_hours / trials if trials else 0.0
        more = (f" Each further trial costs about {per_trial:.3f} {gpu_label}; raise stats.max_trials_total "
                f"or narrow the range.") if trials else ""
        return {"cls": "inconclusive", "headline": "INCONCLUSIVE",
                "sentence": f"Inconclusive after {cost}: {why}. Best answer: {best}{prob}.{bound}{more}"}
    ends = out.endpoint_comparison
    eff = f" The endpoints differ by {ends.effect_pct:+.1f}% [{ends.ci_low_pct:+.1f}%, {ends.ci_high_pct:+.1f}%]" if ends else ""
    abs_part = f" ({_fmt_value(levels.get('good'), unit)} → {_fmt_value(levels.get('bad'), unit)})" if levels.get("good") else ""
    sigma = f", {noise}" if noise else ""
    if out.verdict is Verdict.IMPROVED:
        return {"cls": "improved", "headline": "NO REGRESSION (faster)",
                "sentence": f"No regression in {what}: the bad end is faster.{eff}{abs_part}{sigma}; {cost}."}
    ruled = f"No regression ≥ {out.ruled_out_pct:.1f}%" if out.ruled_out_pct is not None else f"No change ≥ {min_effect:g}%"
    return {"cls": "same", "headline": "NO REGRESSION beyond noise",
            "sentence": f"{ruled} in {what} between {out.good[:10]} and {out.bad[:10]}.{eff}{abs_part}{sigma}; {cost}."}


# ------------------------------------------------------------------------------------------------
# A bisection


def bisection_view(store: Any, bisection_id: int, config: Any = None, db_path: Path | None = None,
                   replay_budget_s: float = REPLAY_BUDGET_S) -> dict[str, Any]:
    """Everything the report of one bisection shows (the search replayed within ``replay_budget_s``)."""
    record = store.bisection(bisection_id)
    out: BisectOutcome | None = record.outcome
    repo = _Repo(record.target)
    candidates = list(record.commits)
    full = repo.range(record.good, record.bad) or candidates
    if not set(candidates) <= set(full):
        full = candidates
    extra = list(out.culprit_set) if out else []
    info = repo.commits(list(dict.fromkeys(full + extra)))
    trials = store.trials(bisection_id=bisection_id, status=None)
    observations = store.observations(bisection_id)
    excluded = {tid: o.flag for o in observations if o.flag for tid in o.trial_ids}
    modes = metric_modes(record.metric)
    unit, what = metric_unit(record.metric, config)
    higher = bool(getattr(getattr(config, "workload", None), "higher_is_better", True))
    settings = _stats_config(record.settings)

    points = [trial_point(t, info, excluded) for t in trials]
    pos = {s: i for i, s in enumerate(full)}
    cand_set = set(candidates)
    skipped = set(out.skipped) if out else {o.commit for o in observations if o.value is None}
    measured = {t.identity.commit for t in trials}
    culprit = out.culprit if out else None
    culprit_set = set(out.culprit_set) if out else set()
    variants = patch_variants(repo, config, [s for s in full if s in measured])
    commit_rows = []
    for sha in full:
        c = info.get(sha, {})
        ts = [t for t in trials if t.identity.commit == sha]
        role = []
        if sha == record.good:
            role.append("good")
        if sha == record.bad:
            role.append("bad")
        if sha == culprit:
            role.append("culprit")
        elif sha in culprit_set:
            role.append("culprit set")
        if sha in skipped:
            role.append("skipped")
        if sha not in cand_set:
            role.append("filtered")
        commit_rows.append({
            "sha": sha, "short": sha[:10], "subject": c.get("subject", ""), "author": c.get("author", ""),
            "date": c.get("date", ""), "role": ", ".join(role), "measured": sha in measured,
            "trials": len(ts), "ok": sum(1 for t in ts if t.status is TrialStatus.OK),
            "values": [round(math.exp(t.summary), 2) for t in ts if t.summary is not None],
            "patch_hash": sorted({t.identity.patch_hash for t in ts}),
            "build_hash": sorted({t.identity.build_hash for t in ts}),
            "variants": variants.get(sha, ""),
        })
    # Builds reused: a trial whose build hash an earlier trial already built (build cache or worktree reuse).
    seen: set[str] = set()
    reused = 0
    for t in sorted(trials, key=lambda t: t.started_at):
        if t.identity.build_hash in seen:
            reused += 1
        seen.add(t.identity.build_hash)

    # Levels before/after the change in the metric's own unit (single-mode metrics).
    levels: dict[str, Any] = {}
    metric_trials = [t for t in trials if t.identity.mode == modes[-1] and t.summary is not None
                     and not excluded.get(t.id or -1)]
    if len(modes) == 1 and metric_trials:
        def level(sel: list[TrialResult]) -> dict[str, Any] | None:
            logs = [t.summary for t in sel]
            if not logs:
                return None
            m = sum(logs) / len(logs)
            sd = out.noise_sigma_pct / 100 if out and out.noise_sigma_pct else (
                (sum((x - m) ** 2 for x in logs) / (len(logs) - 1)) ** 0.5 if len(logs) > 1 else 0.0)
            half = 2 * sd / math.sqrt(len(logs))
            return {"value": math.exp(m), "low": math.exp(m - half), "high": math.exp(m + half),
                    "band_low": math.exp(m - sd), "band_high": math.exp(m + sd), "n": len(logs)}
        ends = [t for t in metric_trials if t.identity.commit == record.good]
        bads = [t for t in metric_trials if t.identity.commit == record.bad]
        levels["good"] = (level(ends) or {}).get("value")
        levels["bad"] = (level(bads) or {}).get("value")
        if culprit and culprit in pos:
            cut = pos[culprit]
            b = level([t for t in metric_trials if pos.get(t.identity.commit, -1) < cut])
            a = level([t for t in metric_trials if pos.get(t.identity.commit, -1) >= cut])
            if b and a:
                levels["segments"] = [
                    {**b, "from": full[0][:10], "to": full[cut - 1][:10], "label": "before"},
                    {**a, "from": full[cut][:10], "to": full[-1][:10], "label": "from the culprit on"},
                ]
                levels["before"], levels["after"] = b["value"], a["value"]
        else:
            whole = level(metric_trials)
            if whole:
                levels["segments"] = [{**whole, "from": full[0][:10], "to": full[-1][:10], "label": "all commits"}]

    hours = sum(max(0.0, t.finished_at - t.started_at) for t in trials if t.finished_at) / 3600.0
    gpus = max((_gpu_count(t.identity.host) for t in trials), default=0)
    gpu_label = "GPU-hours" if gpus else "machine-hours (no GPU here)"
    verdict = verdict_view(out, record.status, info, levels, unit, what, out.trials_used if out else len(observations),
                           hours * (gpus or 1), gpu_label, settings.alpha, settings.min_effect_pct)

    def commit_card(sha: str) -> dict[str, Any]:
        c = info.get(sha, {})
        return {"sha": sha, "short": sha[:10], "subject": c.get("subject", ""), "author": c.get("author", ""),
                "email": c.get("email", ""), "date": c.get("date", ""), "files": repo.files(sha),
                "url": commit_url(repo.remote, sha)}

    try:
        with warnings.catch_warnings():  # early prefixes (one endpoint measured) make numpy warn on empty means
            warnings.simplefilter("ignore", RuntimeWarning)
            reasoning = replay(record, observations, higher_is_better=higher, budget_s=replay_budget_s)
    except PerfbisectError as exc:
        reasoning = {"steps": [], "cells": [], "sampled": False, "noise": "", "opening": "", "error": str(exc)}
    comparisons = [c for c in (
        _comparison("endpoints: bad vs good (evidence, not a second verdict)", out.endpoint_comparison if out else None),
        _comparison("from the culprit on vs before it", out.culprit_comparison if out else None),
    ) if c]
    for c in store.comparisons(1000, bisection_id=bisection_id):
        row = _comparison(f"compare #{c.id}: {c.b[:10]} vs {c.a[:10]} [{c.mode}]", c.comparison)
        if row:
            comparisons.append(row)
    db = str(db_path or store.path)
    config_path = getattr(config, "path", None)
    cfg = f" -c {config_path}" if config_path else ""
    reproduce = [
        f"perfbisect run good={record.good} bad={record.bad}{cfg} --db {db}",
        f"perfbisect report {bisection_id} --db {db}",
    ]
    if culprit:
        reproduce.append(f"git -C {record.target} show --stat {culprit}")
        reproduce.append(f"perfbisect compare {culprit}~1 {culprit} --mode {modes[-1]}{cfg} --db {db}")
    return {
        "kind": "bisection",
        "id": bisection_id,
        "title": f"perfbisect bisection #{bisection_id}: {record.good[:10]}..{record.bad[:10]} [{record.metric}]",
        "metric": record.metric, "modes": list(modes), "unit": unit, "what": what,
        "higher_is_better": higher,
        "good": record.good, "bad": record.bad, "target": record.target, "status": record.status,
        "started": _iso(record.started_at), "finished": _iso(record.finished_at),
        "verdict": verdict,
        "culprit": commit_card(culprit) if culprit else None,
        "culprit_set": [commit_card(s) for s in (out.culprit_set if out else ()) if s != culprit],
        "extra_changes": [commit_card(s) for s in (out.extra_changes if out else ())],
        "improvements": [commit_card(s) for s in (out.improvements if out else ())],
        "explanation": out.explanation if out else "", "lines": [],
        "drift_note": out.drift_note if out else None,
        "excluded": list(out.excluded) if out else [],
        "outcome": {
            "trials_used": out.trials_used if out else len(observations),
            "ruled_out_pct": out.ruled_out_pct if out else None,
            "budget_exhausted": out.budget_exhausted if out else False,
            "answer_probability": out.answer_probability if out else None,
            "best_answer": [s[:10] for s in out.best_answer] if out else [],
            "noise_sigma_pct": out.noise_sigma_pct if out else None,
            "drift_pct": out.drift_pct if out else None,
        },
        "gpu_hours": hours * (gpus or 1), "gpu_label": gpu_label,
        "commits": commit_rows, "order": [s[:10] for s in full],
        "points": points, "levels": levels, "culprit_short": culprit[:10] if culprit else None,
        "samples": state_samples(store, trials),
        "reasoning": reasoning,
        "speculative": speculative_rows(trials, full),
        "comparisons": comparisons,
        "builds_reused": reused, "builds": len(seen),
        "failures": failures(trials),
        "environment": environment(trials, config),
        "reproduce": reproduce,
        "db": db,
    }


# ------------------------------------------------------------------------------------------------
# A comparison, or a set of trials (calibrate)


def trials_view(store: Any, title: str, kind: str, trials: Sequence[TrialResult], *, comparison: Comparison | None = None,
                a: str | None = None, b: str | None = None, lines: Sequence[str] = (), config: Any = None,
                record_id: int | None = None, reproduce: Sequence[str] = (), db_path: Path | None = None) -> dict[str, Any]:
    """The report of a comparison (A vs B) or a calibration (N trials of one build)."""
    target = str(getattr(getattr(config, "target", None), "repo", "") or "")
    repo = _Repo(target)
    shas = list(dict.fromkeys([s for s in (a, b) if s] + [t.identity.commit for t in trials]))
    info = repo.commits(shas)
    points = [trial_point(t, info, {}) for t in trials]
    hours = sum(max(0.0, t.finished_at - t.started_at) for t in trials if t.finished_at) / 3600.0
    gpus = max((_gpu_count(t.identity.host) for t in trials), default=0)
    gpu_label = "GPU-hours" if gpus else "machine-hours (no GPU here)"
    mode = trials[0].identity.mode if trials else ""
    unit, what = metric_unit(mode, config)
    if comparison is not None:
        va = _median(p["value"] for p in points if p["sha"] == a)
        vb = _median(p["value"] for p in points if p["sha"] == b)
        absolute = f" ({_fmt_value(va, unit)} → {_fmt_value(vb, unit)})" if va and vb else ""
        cls = comparison.verdict.value
        sentence = (
            f"{(b or '')[:10]} vs {(a or '')[:10]}: {what} {comparison.effect_pct:+.1f}%{absolute}, interval "
            f"[{comparison.ci_low_pct:+.1f}%, {comparison.ci_high_pct:+.1f}%] against noise {comparison.sigma_b_pct:.1f}% "
            f"per trial ({comparison.sigma_source}); {comparison.n_a}+{comparison.n_b} trials, {hours * (gpus or 1):.2f} {gpu_label}."
        )
        verdict = {"cls": cls if cls in ("regressed", "improved", "same") else "inconclusive",
                   "headline": comparison.verdict.value.upper(), "sentence": sentence}
    else:
        verdict = {"cls": "same", "headline": "NOISE CALIBRATION",
                   "sentence": (lines[0] if lines else f"{len(trials)} trials") + f"; {len(trials)} trials, {hours * (gpus or 1):.2f} {gpu_label}."}
    order = [s[:10] for s in shas]
    return {
        "kind": kind, "id": record_id, "title": title, "good": a, "bad": b,
        "started": _iso(min((t.started_at for t in trials), default=None)),
        "finished": _iso(max((t.finished_at for t in trials), default=None)), "metric": mode, "modes": [mode], "unit": unit, "what": what,
        "verdict": verdict, "culprit": None, "culprit_set": [], "extra_changes": [], "improvements": [],
        "explanation": (comparison.explanation if comparison else ""), "lines": list(lines),
        "excluded": [f"trial #{p['trial']}: {p['excluded']}" for p in points if p["excluded"]],
        "gpu_hours": hours * (gpus or 1), "gpu_label": gpu_label,
        "commits": [{"sha": s, "short": s[:10], "subject": info.get(s, {}).get("subject", ""),
                     "author": info.get(s, {}).get("author", ""), "date": info.get(s, {}).get("date", ""),
                     "role": "A" if s == a else ("B" if s == b else ""), "measured": True,
                     "trials": sum(1 for t in trials if t.identity.commit == s),
                     "ok": sum(1 for t in trials if t.identity.commit == s and t.status is TrialStatus.OK),
                     "values": [round(math.exp(t.summary), 2) for t in trials if t.identity.commit == s and t.summary is not None],
                     "patch_hash": sorted({t.identity.patch_hash for t in trials if t.identity.commit == s}),
                     "build_hash": sorted({t.identity.build_hash for t in trials if t.identity.commit == s}),
                     "variants": ""} for s in shas],
        "order": order, "points": points, "levels": {}, "culprit_short": None,
        "samples": state_samples(store, trials), "reasoning": None,
        "speculative": speculative_rows(trials, shas),
        "comparisons": [c for c in (_comparison("B vs A", comparison),) if c],
        "builds_reused": 0, "builds": len({t.identity.build_hash for t in trials}),
        "failures": failures(trials), "environment": environment(trials, config),
        "reproduce": list(reproduce), "db": str(db_path or store.path), "outcome": {}, "drift_note": None,
    }


def comparison_view(store: Any, comparison_id: int, config: Any = None, db_path: Path | None = None) -> dict[str, Any]:
    """The report of one stored comparison."""
    record = next((c for c in store.comparisons(1 << 30) if c.id == comparison_id), None)
    if record is None:
        raise UsageError(
            f"No comparison #{comparison_id} in {store.path}. List the stored ones with `perfbisect log`."
        )
    by_id = {}
    for sha in (record.a, record.b):
        for t in store.trials(commit=sha, mode=record.mode, status=None):
            by_id[t.id] = t
    wanted = list(record.trial_ids_a) + list(record.trial_ids_b)
    trials = sorted((by_id[i] for i in wanted if i in by_id), key=lambda t: t.started_at)
    db = str(db_path or store.path)
    cfg = f" -c {config.path}" if getattr(config, "path", None) else ""
    return trials_view(
        store, f"perfbisect compare #{comparison_id}: {record.b[:10]} vs {record.a[:10]} [{record.mode}]", "comparison",
        trials, comparison=record.comparison, a=record.a, b=record.b, config=config, record_id=comparison_id,
        reproduce=[f"perfbisect compare {record.a} {record.b} --mode {record.mode}{cfg} --db {db}",
                   f"perfbisect report c{comparison_id} --db {db}"], db_path=db_path,
    )


# ------------------------------------------------------------------------------------------------
# The static site's index


def index_entries(views: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Index rows (newest first, each with its report's file name) and history points per mode.

    A history point is one commit's level in one report (geometric mean of its trial medians) with
    the noise band of that report (±1σ per trial), linked to the report.
    """
    entries: list[dict[str, Any]] = []
    history: dict[str, list[dict[str, Any]]] = {}
    for view in views:
        href = f"{view['kind']}-{view['id']}.html"
        first = min((p["started"] for p in view["points"] if p["started"]), default=None)
        culprit = view.get("culprit") or {}
        label = f"{'bisection' if view['kind'] == 'bisection' else 'compare'} #{view['id']}"
        ends = ((view.get("good") or "")[:10], (view.get("bad") or "")[:10]) if view["kind"] == "bisection" else None
        pair = " vs ".join(c["short"] for c in view["commits"][:2][::-1]) if view["kind"] != "bisection" else ""
        cmp = view["comparisons"][0] if view["comparisons"] else None
        effect = cmp["effect_pct"] if cmp else None
        if view["kind"] == "bisection" and len(view["comparisons"]) > 1:
            effect = view["comparisons"][1]["effect_pct"]
        entries.append({
            "href": href, "label": label, "date": view.get("started") or first or "", "metric": view["metric"],
            "range": f"{ends[0]}..{ends[1]}" if ends else pair, "verdict": view["verdict"]["headline"].lower(),
            "effect_pct": effect, "culprit": culprit.get("short", ""), "culprit_subject": culprit.get("subject", ""),
            "trials": len(view["points"]),
        })
        sigma = (view.get("outcome") or {}).get("noise_sigma_pct") or (cmp["sigma_pct"] if cmp else None)
        roles = {c["short"]: c["role"] for c in view["commits"]}
        subjects = {c["short"]: c["subject"] for c in view["commits"]}
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for p in view["points"]:
            if p["value"] and not p["excluded"]:
                groups.setdefault((p["mode"], p["commit"]), []).append(p)
        for (mode, commit), ps in groups.items():
            logs = [math.log(p["value"]) for p in ps]
            m = sum(logs) / len(logs)
            s = math.log1p(sigma / 100) if sigma else 0.0
            role = roles.get(commit, "") or "measured"
            history.setdefault(mode, []).append({
                "date": min(p["started"] for p in ps), "value": math.exp(m), "band_low": math.exp(m - s),
                "band_high": math.exp(m + s), "commit": commit, "subject": subjects.get(commit, ""),
                "end": role.split(",")[0] or "measured", "href": href, "label": label, "unit": view["unit"],
                "verdict": view["verdict"]["headline"].lower(),
            })
    entries.sort(key=lambda e: e["date"] or "", reverse=True)
    return entries, history
