"""The search's reasoning, replayed: what the policy believed after each step and why it chose the next commit.

``bisect.SearchPolicy`` is a pure function of its settings, what it started from and the observations,
so running it prefix by prefix over a bisection's stored observations shows its posterior over commits
at every step. What it started from is stored with the bisection (``SearchStart``: the noise model,
the endpoint history, the metric's direction) and each observation keeps the node the search was told
measured it and the live decision that asked for it, so the replay is the search that ran and says so
(``matches_live``); each decision is stored and compared as ``words`` says it. The report (``views.bisection_view``) shows it as a heat map and a table, with
the levels and the drift the engine fitted (``engine_fit``); nothing is re-measured.

The replay's budget is work, not time: each step costs about trials² · commits units and a report
replays steps until ``REPLAY_WORK`` is spent (the last step, the outcome, is always replayed and not
counted), so the same database renders the same report on an idle
and on a busy machine. A CPU-time cap (``time.process_time``, far above what the work budget costs)
only guards against a pathological case, and the report says when it cut the replay.
"""

from __future__ import annotations

import math
import time
from typing import Any, Mapping, Sequence

import numpy as np

from . import words
from ..engine.bisect import SearchPolicy
from ..engine.change_posterior import level_step
from ..engine.kernel import fit, regroup
from ..engine.observations import Done, Measure
from ..engine.search_start import SearchStart, observations_of, policy_for, stats_config
from ..engine.stats import NoiseModel, t_quantile
from ..errors import PerfbisectError
from ..model import Observation

# Replaying the search re-fits the posterior once per step; past this many steps, steps are sampled
# evenly (the last one always kept) so a long bisection still renders in seconds.
MAX_REPLAY_STEPS = 60
# Work units a report's replay may spend: a step over k observations of n commits costs k²·n units (the
# posterior's whitened design and prefix sums per drift scale) plus 10,000·n (the look-ahead over commits).
# Measured here (64 commits, 50 to 600 observations): 5 to 15 M units per CPU second, so 5 M units is about
# a CPU-second; the index spends a tenth per report.


REPLAY_WORK = 5_000_000


INDEX_REPLAY_WORK = REPLAY_WORK // 10
# CPU seconds (time.process_time) after which a replay stops whatever work is left: a guard, never the rule.


REPLAY_CPU_CAP_S = 30.0


def decision_json(action: Measure | Done) -> dict[str, Any]:
    """A decision as stored with the observation it asked for, and as the replay compares it."""
    if isinstance(action, Done):
        out = action.outcome
        return {"commit": out.culprit or "", "phase": "done", "reason": out.verdict.value}
    return {"commit": action.commit, "phase": action.phase, "reason": words.measure_text(action)}


def same_decision(live: Mapping[str, Any], action: Measure | Done) -> bool:
    """Whether a stored decision is the one replayed (what it asked for; the context it was decided on aside)."""
    return {k: live.get(k) for k in ("commit", "phase", "reason")} == decision_json(action)


def decided_here(live: Mapping[str, Any], seq: int) -> bool:
    """Whether a stored decision was made on the observations before its own (``seq`` of them) with nothing in
    flight and no node asked for: what a one-at-a-time replay recomputes. A decision stored without its
    context (before migration 0008) is taken as such."""
    return live.get("after", seq) == seq and not live.get("pending") and live.get("host") is None


def check_in_context(policy: SearchPolicy, obs: Sequence[Observation], observations: Sequence[Any],
                     work: int) -> dict[str, Any]:
    """Replay each stored decision made in another context than a one-at-a-time search's — with results of
    later decisions landed first, or measurements in flight (``executors.loop.batch_decision``) — on the
    observations stored then, with the same measurements in flight and for the same node, and compare.
    ``work``: the units it may spend (``step_work`` each); the rest is counted as unchecked."""
    compared = mismatches = unchecked = spent = 0
    differ: list[int] = []
    for seq, o in enumerate(observations):
        live = getattr(o, "decision", None)
        if not live or decided_here(live, seq):
            continue
        after = int(live.get("after", seq))
        cost = step_work(after, policy.n)
        if spent + cost > work:
            unchecked += 1
            continue
        spent += cost
        pending = [(str(c), h) for c, h in live.get("pending") or ()]
        host = live.get("host")
        try:
            action = policy.next_batch(obs[:after], 1, pending=pending, hosts=[host])
        except (PerfbisectError, ValueError, FloatingPointError, np.linalg.LinAlgError):  # pragma: no cover
            unchecked += 1
            continue
        compared += 1
        picked = action[0] if isinstance(action, list) and action else action
        if isinstance(picked, list) or not same_decision(live, picked):  # [] : it would have waited
            mismatches += 1
            differ.append(seq)
    return {"compared": compared, "mismatches": mismatches, "unchecked": unchecked, "work": spent, "differ": differ}


def stored_start(record: Any, higher_is_better: bool = True) -> tuple[SearchStart, str]:
    """What the stored bisection started from, and a note when it is not stored (before migration 0006)."""
    if getattr(record, "search_start", None):
        return SearchStart.from_json(record.search_start), ""
    settings = stats_config(record.settings)
    note = ("this bisection was stored before its starting noise was (migration 0006): replayed from the "
            f"configured {settings.prior_sigma_pct:g}% prior, so a replayed reason may quote another σ")
    return SearchStart(NoiseModel.prior(settings.prior_sigma_pct), (), higher_is_better), note


def step_work(k: int, n: int) -> int:
    """Work units of replaying one step over ``k`` observations of ``n`` commits (see REPLAY_WORK)."""
    return k * k * n + 10_000 * n


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


def replay(record: Any, observations: Sequence[Any], higher_is_better: bool = True,
           max_steps: int = MAX_REPLAY_STEPS, work: int = REPLAY_WORK,
           cpu_cap_s: float = REPLAY_CPU_CAP_S) -> dict[str, Any]:
    """Posterior over commits after each step, why each next commit was chosen, and whether that is what ran.

    The policy starts from the stored ``SearchStart`` (``higher_is_better`` only for bisections stored
    before it was). Each step re-fits the posterior, so a long search is replayed coarse to fine (last
    step, middle, quarters...) until ``work`` units are spent; the report says how many steps it shows.
    Every replayed decision is compared with the live one stored beside the observation it asked for; one
    made with measurements in flight is replayed in that context (``check_in_context``, a budget of its own).
    ``_final`` is the posterior after the last step (not JSON: ``engine_fit`` reuses it, the caller drops it).
    """
    start, note = stored_start(record, higher_is_better)
    policy = policy_for(record, start)
    obs = observations_of(observations)
    n = len(obs)
    done, spent, capped = _replayed_steps(policy, obs, max_steps, work, cpu_cap_s)
    steps, cells, compared, mismatches = _step_rows(record, policy, obs, observations, done)
    batch = check_in_context(policy, obs, observations, work)
    compared += batch["compared"]
    mismatches += batch["mismatches"]
    first = policy.next([]) if n else None
    opening = words.measure_text(first) if first is not None and not isinstance(first, Done) else ""
    if batch["compared"] or batch["unchecked"]:
        note = (f"this search ran with measurements in flight (jobs on a cluster): each of its {batch['compared']} "
                f"decisions is replayed with what it was decided on (the results stored then and the jobs in flight) "
                f"and checked" + (f", {batch['unchecked']} left unchecked within the replay's work budget"
                                  if batch["unchecked"] else "")
                + "; the steps below show what the search, one trial at a time, decides after each result")
    elif not compared and any(getattr(o, "host", None) for o in observations) and not note:
        note = ("this search ran as batches of jobs on several nodes: the replay shows what the search, one trial "
                "at a time, decides after each result (the batches' own picks also counted the jobs in flight)")
    final = done[n][0] if n in done else None
    return {"steps": steps, "cells": cells, "sampled": len(done) < n, "shown": len(done), "total": n, "_final": final,
            "noise": start.noise.describe(), "opening": opening, "note": note, "work": spent + batch["work"],
            "cpu_capped": capped, "compared": compared, "mismatches": mismatches,
            "batch_mismatches": batch["differ"], "history": len(start.history)}


def _replayed_steps(policy: SearchPolicy, obs: Sequence[Observation], max_steps: int, work: int,
                    cpu_cap_s: float) -> tuple[dict[int, tuple[Any, Any]], int, bool]:
    """(posterior, decision) after each replayed prefix, coarse to fine within ``work``; the work spent; whether
    the CPU cap cut it."""
    n = len(obs)
    spent, cpu0, capped = 0, time.process_time(), False
    done: dict[int, tuple[Any, Any]] = {}
    for k in _coarse_to_fine(n, max_steps):
        cost = step_work(k, policy.n) if done else 0  # the last step (the outcome) is always shown
        if spent + cost > work:
            continue  # a cheaper (earlier) step may still fit
        if done and time.process_time() - cpu0 > cpu_cap_s:
            capped = True
            break
        spent += cost
        try:
            action, post = policy.next_and_posterior(obs[:k])
        except (PerfbisectError, ValueError, FloatingPointError, np.linalg.LinAlgError):  # pragma: no cover
            continue
        done[k] = (post, action)
    return done, spent, capped


def _step_rows(record: Any, policy: SearchPolicy, obs: Sequence[Observation], observations: Sequence[Any],
               done: dict[int, tuple[Any, Any]]) -> tuple[list[dict], list[dict], int, int]:
    """The report's rows of the replayed steps and heat-map cells, and how many live decisions taken one at a time
    were compared and differ."""
    n = len(obs)
    steps, cells = [], []
    compared = mismatches = 0
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
            nxt = {"commit": action.commit[:10], "phase": action.phase, "reason": words.measure_text(action)}
        live = observations[k].decision if k < n and getattr(observations[k], "decision", None) else None
        if live is not None and not decided_here(live, k):
            live = None  # decided with other results or jobs in flight: checked in its own context
        agrees = None
        if live is not None:
            compared += 1
            agrees = same_decision(live, action)
            mismatches += 0 if agrees else 1
        top = max(range(policy.n), key=lambda i: mass[i])
        steps.append({
            "step": k, "measured": last.commit[:10], "value": math.exp(last.value) if last.value is not None else None,
            "flag": last.flag or "", "host": last.host or "",
            "p_none": post.p_none, "top": record.commits[top][:10], "top_p": mass[top], "live_agrees": agrees,
            "live_commit": (live or {}).get("commit", "")[:10], "live_reason": (live or {}).get("reason", ""),
            **{"next_" + a: b for a, b in nxt.items()},
        })
    return steps, cells, compared, mismatches


def engine_fit(record: Any, observations: Sequence[Any], outcome: Any, higher_is_better: bool = True,
               post: Any = None) -> dict[str, Any]:
    """The levels and drift the engine fitted on every stored observation (log scale converted to units).

    ``segments``: per segment of the answer's hypothesis (the culprit's and any further change; none for
    `same`), its commit range, level, 1−2α interval and ±1σ per-trial band; ``steps``: each change's step
    from ``changepoint.level_step`` as the verdict sized it. ``drift``: when the engine's own test says
    the machine drifted (the drift-scale posterior puts ≥ 0.5 off ρ = 0, as ``bisect`` reports it), the
    fitted path at each usable observation's seq, and each segment's level plus drift there. ``post``:
    the posterior on every observation when the caller has it (``replay``'s ``_final``), else fitted here.
    """
    start, _ = stored_start(record, higher_is_better)
    policy = policy_for(record, start)
    obs = observations_of(observations)
    data = regroup(obs, policy.index, alpha=policy.settings.alpha, higher_is_better=policy.higher_is_better)
    if not data.values[0] or not data.values[-1]:
        return {"segments": [], "steps": [], "drift": None}
    post = post if post is not None else fit(data, policy.fit_params)
    commits = list(record.commits)
    key: tuple[int, ...] = ()
    if outcome is not None and outcome.culprit in commits:
        key, _ = post.answer()
        if commits.index(outcome.culprit) not in key:
            key = (commits.index(outcome.culprit),)
    elif outcome is not None and outcome.best_answer and all(s in commits for s in outcome.best_answer):
        key = tuple(commits.index(s) for s in outcome.best_answer)
    # (a long range's sparse posterior finds the hypotheses whose bins hold the answer itself: post.top)
    if not getattr(post, "sparse", False) and not any(k == key for k in post.keys):
        key = ()
    h = post.top(key)
    settings = stats_config(record.settings)
    tq = t_quantile(1.0 - settings.alpha, post.dof)
    sigma = math.sqrt(float(post.s2[h]))
    bounds = [0, int(post.b1[h]), int(post.b2[h]), post.n]
    segments = []
    for s in range(3):
        lo, hi = bounds[s], bounds[s + 1]
        if lo >= hi:
            continue
        level = float(post.beta[h][s])
        se = math.sqrt(float(post.s2[h]) * max(float(post.cov[h][s, s]), 0.0))
        segments.append({"index": s, "from": commits[lo], "to": commits[hi - 1], "value": math.exp(level),
                         "low": math.exp(level - tq * se), "high": math.exp(level + tq * se),
                         "band_low": math.exp(level - sigma), "band_high": math.exp(level + sigma),
                         "n": sum(len(data.values[i]) for i in range(lo, hi)), "log": level})
    steps = []
    for a, b in zip(segments, segments[1:]):
        d, se = (float(x) for x in level_step(post.beta[h], post.cov[h].T, post.s2[h], a["index"], b["index"]))
        steps.append({"at": b["from"], "step_pct": 100 * math.expm1(d), "se": se})
    drift = None
    if post.fits and post.rho_weights[0] < 0.5 and post.evidence is not None:
        path = post.drift_path(post.evidence)
        if path is not None:
            ordered = sorted(enumerate(obs), key=lambda io: (io[1].seq, io[0]))
            ht = post.top()
            top_bounds = np.asarray([int(post.b1[ht]), int(post.b2[ht])])
            rows = []
            for pos, d in zip(post.evidence.time, path):
                o = ordered[int(pos)][1]
                rows.append({"seq": o.seq, "commit": o.commit, "drift_pct": 100 * math.expm1(float(d)),
                             "levels": [math.exp(float(post.beta[ht][s]) + float(d)) for s in range(3)]})
            tb = [0, *[int(b) for b in top_bounds], post.n]
            drift = {"rows": rows, "span_pct": 100 * math.expm1(float(path.max() - path.min())),
                     "segments": [{"index": s, "from": commits[tb[s]], "to": commits[tb[s + 1] - 1]}
                                  for s in range(3) if tb[s] < tb[s + 1]],
                     "p_drift": 1.0 - float(post.rho_weights[0])}
    return {"segments": segments, "steps": steps, "drift": drift, "sigma_pct": 100 * math.expm1(sigma),
            "level_pct": 100 * (1 - 2 * settings.alpha)}


__all__ = ["INDEX_REPLAY_WORK", "MAX_REPLAY_STEPS", "REPLAY_CPU_CAP_S", "REPLAY_WORK", "decision_json", "engine_fit",
           "replay", "same_decision", "step_work", "stored_start"]
