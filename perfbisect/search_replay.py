"""The search's reasoning, replayed: what the policy believed after each step and why it chose the next commit.

``bisect.SearchPolicy`` is a pure function of its settings and the observations, so running it prefix
by prefix over a bisection's stored observations shows its posterior over commits at every step. The
report (``evidence.bisection_view``) shows these as a heat map and a table; nothing is re-measured.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Mapping, Sequence

import numpy as np

from .bisect import Done, Observation, SearchPolicy
from .settings import StatsConfig
from .errors import PerfbisectError
from .stats import NoiseModel

# Replaying the search re-fits the posterior once per step; past this many steps, steps are sampled
# evenly (the last one always kept) so a long bisection still renders in seconds.
MAX_REPLAY_STEPS = 60
REPLAY_BUDGET_S = 1.0


def stats_config(settings: Mapping[str, Any]) -> StatsConfig:
    """The stats settings a bisection stored, as a StatsConfig (keys this version lacks are dropped)."""
    names = {f.name for f in dataclasses.fields(StatsConfig)}
    return StatsConfig(**{k: v for k, v in dict(settings or {}).items() if k in names})


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
    settings = stats_config(record.settings)
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
                       at=o.recorded_at or None, flag=o.flag, layout=o.layout) for o in observations]
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
        mass = post.change_mass()
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
            "step": k, "measured": last.commit[:10], "value": math.exp(last.value) if last.value is not None else None, "flag": last.flag or "",
            "p_none": post.p_none, "top": record.commits[top][:10], "top_p": mass[top],
            **{"next_" + a: b for a, b in nxt.items()},
        })
    first = policy.next([]) if n else None
    opening = first.reason if first is not None and not isinstance(first, Done) else ""
    return {"steps": steps, "cells": cells, "sampled": len(done) < n, "shown": len(done), "total": n,
            "noise": noise.describe(), "opening": opening}


__all__ = ["MAX_REPLAY_STEPS", "REPLAY_BUDGET_S", "replay", "stats_config"]
