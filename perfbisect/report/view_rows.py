"""The pieces every report view is built from: a commit's row and its link on the forge, a comparison's
row, what a set of trials cost in GPU-hours, whether they served, and the modes a metric needs.

``views`` (a bisection) and ``comparison_views`` (a comparison or a calibration) assemble them.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

from ..metrics import level_text
from ..model import Comparison, TrialResult, TrialStatus


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


def serves(trials: Sequence[TrialResult], config: Any = None) -> bool:
    """Whether the trials launched a server (help about server sessions applies), else a command workload.
    Without the config, trials that recorded server info or the env their server processes had."""
    workload = getattr(config, "workload", None)
    if workload is not None:
        return getattr(workload, "kind", "sglang") != "command"
    return any(t.server_info or t.env_checks for t in trials)


def _gpu_count(host: str) -> int:
    m = re.match(r"^(\d+)x", host or "")
    return int(m.group(1)) if m else 0


def gpu_hours_of(trials: Sequence[TrialResult]) -> tuple[float, str]:
    """What the trials cost: hours times the host's GPU count (machine-hours where it has none), and the unit."""
    hours = sum(max(0.0, t.finished_at - t.started_at) for t in trials if t.finished_at) / 3600.0
    gpus = max((_gpu_count(t.identity.host) for t in trials), default=0)
    return hours * (gpus or 1), "GPU-hours" if gpus else "machine-hours"


def commit_row(sha: str, info: Mapping[str, Any], trials: Sequence[TrialResult], role: str, measured: bool,
                variants: str) -> dict[str, Any]:
    """One commit of a report's commit table: what it is, its role, and its trials' values and identities."""
    return {
        "sha": sha, "short": sha[:10], "subject": info.get("subject", ""), "author": info.get("author", ""),
        "date": info.get("date", ""), "committed": info.get("committed", ""), "role": role, "measured": measured,
        "trials": len(trials), "ok": sum(1 for t in trials if t.status is TrialStatus.OK),
        # four significant digits: a median of 0.003705 s must not read 0.0
        "values": [float(f"{math.exp(t.summary):.4g}") for t in trials if t.summary is not None],
        "patch_hash": sorted({t.identity.patch_hash for t in trials}),
        "build_hash": sorted({t.identity.build_hash for t in trials}),
        "variants": variants,
    }


def comparison_row(label: str, cmp: Comparison | None) -> dict[str, Any] | None:
    if cmp is None:
        return None
    return {
        "label": label, "verdict": cmp.verdict.value, "effect_pct": cmp.effect_pct,
        "ci_low_pct": cmp.ci_low_pct, "ci_high_pct": cmp.ci_high_pct, "sigma_pct": cmp.sigma_b_pct,
        "sigma_source": cmp.sigma_source, "n_a": cmp.n_a, "n_b": cmp.n_b, "explanation": cmp.explanation,
        "level": level_text(cmp.level_pct) if cmp.level_pct is not None else None,
    }


def metric_modes(metric: str) -> tuple[str, ...]:
    """The modes a bisection metric needs (``ratio:SPEC/BASE`` needs two)."""
    if metric.startswith("ratio:"):
        spec, base = metric[len("ratio:"):].split("/", 1)
        return (base, spec)
    return (metric,)

