"""For each stored bisection: is its verdict one whose own checks passed?

Per results database (the last bisection in it): (1) the search replayed — a ``SearchPolicy`` built from what the
bisection stored (its candidate commits, its [stats] settings, the noise and endpoint history it started from) asked
``next`` after every prefix of the stored observations, each answer compared with the live decision stored beside
the observation it asked for (a decision made with trials in flight is asked again with ``next_batch`` and the same
trials in flight), and the last answer, on all of them, must be the stored verdict; (2) ``budget_exhausted`` and
``stopped_by`` from the stored outcome; (3) for a named culprit, an outside check that does not use the engine: the
culprit's and its parent's own stored trials and Welch's t-test between them (one-sided, scipy), with the pooled
effect in percent.

Only the engine's public API: the policy a stored bisection built (``engine.search_start.policy_for``) and its
``next``/``next_batch``; the stored decisions are compared as the report's replay compares them
(``report.replay``: ``decision_json``, ``same_decision``, ``decided_here``). The database is read with sqlite3, as
the rows are stored.
"""

from __future__ import annotations

import json
import math
import sqlite3
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from perfbisect.engine.bisect import SearchPolicy
from perfbisect.engine.observations import Done
from perfbisect.engine.search_start import policy_for
from perfbisect.errors import PerfbisectError
from perfbisect.model import Observation
from perfbisect.report.replay import decided_here, same_decision, stored_start

REPLAY_FAILS = (PerfbisectError, ValueError, FloatingPointError, np.linalg.LinAlgError)


def policy_of(commits: Sequence[str], settings: Mapping[str, Any], start: Mapping[str, Any] | None) -> SearchPolicy:
    """The search policy as the bisection built it, from its stored rows: its commits and [stats], and the noise
    model, endpoint history and direction it stored as its start (``report.replay.stored_start``: one stored before
    it kept them gets the prior of its settings, no history, higher is better)."""
    record = SimpleNamespace(commits=list(commits), settings=settings, search_start=start)
    return policy_for(record, stored_start(record)[0])


def replay(policy: SearchPolicy, obs: Sequence[Observation], live: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
    """``next`` after every prefix 1…n of ``obs``; each compared with the live decision ``live[k]`` made there."""
    n = len(obs)
    shown = compared = mismatches = 0
    final = None
    for k in range(1, n + 1):
        try:
            with warnings.catch_warnings():  # a prefix with one endpoint measured makes numpy warn on empty means
                warnings.simplefilter("ignore", RuntimeWarning)
                action = policy.next(obs[:k])
        except REPLAY_FAILS:
            continue
        shown += 1
        if k == n:
            final = action
        d = live[k] if k < n else None
        if d and decided_here(d, k):
            compared += 1
            mismatches += 0 if same_decision(d, action) else 1
    for seq, d in enumerate(live):  # decisions made with other results landed first or trials in flight
        if not d or decided_here(d, seq):
            continue
        after = int(d.get("after", seq))
        pending = [(str(c), h) for c, h in d.get("pending") or ()]
        try:
            action = policy.next_batch(obs[:after], 1, pending=pending, hosts=[d.get("host")])
        except REPLAY_FAILS:
            continue
        compared += 1
        picked = action[0] if isinstance(action, list) and action else action
        mismatches += 1 if isinstance(picked, list) or not same_decision(d, picked) else 0
    return {"shown": shown, "total": n, "compared": compared, "mismatches": mismatches, "final": final}


def check(path: Path) -> str:
    """The line of one database."""
    if not path.is_file():
        raise SystemExit(f"{path}: no such results database")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    commits, settings, start, outcome, verdict, culprit = con.execute(
        "select commits, settings, search_start, outcome, verdict, culprit from bisections order by id desc limit 1"
    ).fetchone()
    commits, out = json.loads(commits), json.loads(outcome)
    rows = con.execute("select commit_sha, value, covariates, seq, recorded_at, flag, host, layout, decision "
                       "from observations where bisection_id = (select max(id) from bisections) order by seq").fetchall()
    con.close()
    obs = [Observation(commit=c, value=v, covariates=json.loads(cv), seq=s, at=at or None, flag=f, host=h, layout=lay)
           for c, v, cv, s, at, f, h, lay, _ in rows]
    live = [json.loads(d) if d else None for *_, d in rows]
    rp = replay(policy_of(commits, json.loads(settings), json.loads(start) if start else None), obs, live)
    final = rp["final"]
    again = final.outcome.verdict.value if isinstance(final, Done) else f"not done: {getattr(final, 'phase', None)}"
    line = (f"{path.name}: verdict {verdict}; replayed {rp['shown']}/{rp['total']} steps, "
            f"{rp['compared']} live decisions compared, {rp['mismatches']} differ; final step recomputed: {again}; "
            f"budget_exhausted {out.get('budget_exhausted')}, stopped_by {out.get('stopped_by')}")
    if culprit:
        i = commits.index(culprit)
        vals: dict[str, list[float]] = {}
        for o in obs:
            if o.value is not None and not o.flag:
                vals.setdefault(o.commit, []).append(o.value)
        # the parent is the nearest earlier commit with trials (filtered commits carry none)
        j = next(k for k in range(i - 1, -1, -1) if commits[k] in vals)
        a, b = vals[commits[j]], vals[culprit]
        t = stats.ttest_ind(b, a, equal_var=False, alternative="less" if out["effect_pct"] < 0 else "greater")
        eff = 100 * (math.exp(sum(b) / len(b) - sum(a) / len(a)) - 1)
        line += (f"; culprit {culprit[:10]} vs parent {commits[j][:10]}: {len(b)} vs {len(a)} trials, "
                 f"{eff:+.1f}%, Welch t {t.statistic:.2f}, one-sided p {t.pvalue:.2g}")
    return line
