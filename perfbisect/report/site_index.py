"""The static site's index: one row per report, newest first, and per mode a history of every measured
commit's level across reports on one per-commit axis (``index_entries``), from the reports' views.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Mapping, Sequence


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
        label = report_name(view)
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
            "culprit_set": [c["short"] for c in view.get("culprit_set") or ()] if view.get("culprit_is_set") else [],
            "trials": view.get("trials_text") or f"{len(view['points'])} trials",
        })
        sigma = (view.get("outcome") or {}).get("noise_sigma_pct") or (cmp["sigma_pct"] if cmp else None)
        roles = {c["short"]: c["role"] for c in view["commits"]}
        subjects = {c["short"]: c["subject"] for c in view["commits"]}
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for p in view["points"]:
            if p["value"] and not p["excluded"]:
                groups.setdefault((p["mode"], p["sha"]), []).append(p)
        for (mode, sha), ps in groups.items():
            commit = sha[:10]
            logs = [math.log(p["value"]) for p in ps]
            m = sum(logs) / len(logs)
            s = math.log1p(sigma / 100) if sigma else 0.0
            role = roles.get(commit, "") or "measured"
            history.setdefault(mode, []).append({
                "date": min(p["started"] for p in ps), "value": math.exp(m), "band_low": math.exp(m - s),
                "band_high": math.exp(m + s), "commit": commit, "subject": subjects.get(commit, ""),
                "end": role.split(",")[0] or "measured", "role": history_role(role), "sha": sha,
                "href": href, "label": label, "unit": view["unit"], "higher_is_better": view.get("higher_is_better"),
                "verdict": view["verdict"]["headline"].lower(),
            })
    entries.sort(key=lambda e: e["date"] or "", reverse=True)
    order = commit_order(views)
    for points in history.values():
        for p in points:
            p["x"] = order.get(p["sha"], len(order))
        points.sort(key=lambda p: (p["x"], p["date"] or ""))
    return entries, history


def report_name(view: Mapping[str, Any]) -> str:
    """What a report is called, in the words `perfbisect log` uses and `perfbisect report` accepts:
    "bisection #3" (`report 3`), "comparison c2" (`report c2`), "calibration #1"."""
    if view["kind"] == "comparison":
        return f"comparison c{view['id']}"
    return f"{view['kind']} #{view['id']}"


# Roles a history point can have, in legend order (report.ROLE_COLORS gives each a fixed colour).
HISTORY_ROLES = ("good", "bad", "culprit", "culprit set", "measured", "A", "B")


def history_role(role: str) -> str:
    """The one role a history point is drawn as: culprit before bad, an end before measured."""
    parts = [r.strip() for r in role.split(",") if r.strip()]
    for r in ("culprit", "culprit set", "good", "bad", "A", "B"):
        if r in parts:
            return r
    return "measured"


def commit_order(views: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """One oldest-first history order of every commit the views measured, for a per-commit history axis (as
    asv and Bencher plot), whatever order the views were measured in: each bisection's range is in history
    order (git's, or the stored candidates'), and those orders are kept; commits they leave unordered (two
    ranges apart, a comparison's commits) go by commit date, then as first seen."""
    after: dict[str, set[str]] = {}
    before_count: dict[str, int] = {}
    when: dict[str, float] = {}
    seen: dict[str, int] = {}
    for view in views:
        shas = [c["sha"] for c in view["commits"]]
        for c in view["commits"]:
            seen.setdefault(c["sha"], len(seen))
            t = commit_time(c.get("committed") or c.get("date") or "")
            if t is not None:
                when.setdefault(c["sha"], t)
        if view["kind"] != "bisection":
            continue  # a comparison's B vs A says nothing of which came first
        for a, b in zip(shas, shas[1:]):
            if b not in after.setdefault(a, set()):
                after[a].add(b)
                before_count[b] = before_count.get(b, 0) + 1

    def rank(sha: str) -> tuple[float, int]:
        return (when.get(sha, math.inf), seen[sha])
    ready = sorted((s for s in seen if not before_count.get(s)), key=rank)
    merged: list[str] = []
    while ready:
        sha = ready.pop(0)
        merged.append(sha)
        for nxt in after.get(sha, ()):
            before_count[nxt] -= 1
            if not before_count[nxt]:
                ready.append(nxt)
        ready.sort(key=rank)
    merged += sorted((s for s in seen if s not in set(merged)), key=rank)  # ranges that disagree: never dropped
    return {sha: i for i, sha in enumerate(merged)}


def commit_time(text: str) -> float | None:
    """A commit's ISO date (git's %cI or %aI) as a timestamp; None when unknown or unreadable."""
    try:
        return datetime.fromisoformat(text.strip()).timestamp() if text.strip() else None
    except ValueError:
        return None
