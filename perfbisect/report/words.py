"""Every sentence the search says: the engine answers with codes and numbers (``model.Reason``), this module words
them — why a trial was asked for (``measure_text``), what a check phase checks (``check_text``), the best answer on
the progress line (``best_text``), and an outcome's explanation, what stopped it and the machine's drift
(``explained``). A wording change is a change here, never an engine diff.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

from ..metrics import level_text, short_probability
from ..model import BisectOutcome, Reason

# What `stopped_by` adds when the budget ended with a check on the best answer still open (``settles`` reads it).
OPEN_CHECK_NOTE = "with a check on the best answer still open"

_PRICE_OF = {
    "pair": "confirming it against its parent",
    "ends": "the endpoints' trials",
    "gap": "measuring that pair again",
    "sides": "the trials that would show a second step on either side",
    "layout": "the layout re-check (at most)",
}


def _r(value: Any) -> Reason:
    """A nested reason, as the engine made it or as it was stored (a dict)."""
    if isinstance(value, Reason):
        return value
    return Reason(value["code"], value.get("numbers", {}))


# ----------------------------------------------------------------------------------------------------------------
# names


def named_text(named) -> str:
    """The best answer as progress names it: "abc (or one of the 3 untestable commits before it)", "two changes: at
    a and at b", "no change"."""
    parts = []
    for sha, skipped in named or ():
        name = sha[:10]
        if skipped == 1:
            name += " (or the untestable commit before it)"
        elif skipped:
            name += f" (or one of the {skipped} untestable commits before it)"
        parts.append(name)
    return _answer(parts) or "no change"


def sets_text(sets) -> str:
    """"abc", "one of {a, b}" (skipped neighbours), or "two changes: at a and at b" (a pair is one answer)."""
    return _answer(["one of {" + ", ".join(c[:10] for c in commits) + "}" if len(commits) > 1 else commits[0][:10]
                    for commits in sets])


def _answer(parts: list[str]) -> str:
    """One answer's changes named: a pair is "two changes: at a and at b"."""
    if len(parts) == 2:
        return f"two changes: at {parts[0]} and at {parts[1]}"
    return " and ".join(parts)


def steps_text(steps) -> str:
    return ", ".join(f"{sets_text((commits,))} ({step_pct:+.1f}%)" for commits, step_pct in steps)


def best_text(measure) -> str:
    """The best answer a trial was asked under, for the progress line ("" when the search has none yet)."""
    return "" if measure.best is None else named_text(measure.best)


# ----------------------------------------------------------------------------------------------------------------
# the checks: what must hold, where it stands


def _what(r: Reason) -> str:
    r = _r(r)
    if r.code == "direction":
        return "its direction is not certain yet"
    if r.code == "pure":
        return ("the commit and its parent must differ on their own trials beyond the spread of repeated trials of "
                "one build")
    if r.code == "trials":
        if r["second"]:
            return "a second trial of each side, so no single session carries the verdict"
        return (f"{r['need']} trials of each side: at {r['sigma_pct']:.1f}% noise per trial a {r['step_pct']:.1f}% "
                f"step needs that many before sessions that fell on one side of the noise cannot carry it")
    if r.code == "ends_before_naming":
        return f"each endpoint must carry {r['n']} trials before a small change is named"
    raise KeyError(r.code)


_WHERE: dict[str, Callable[[Reason], str]] = {
    "counts": lambda r: f"the parent has {r['parent']} and the commit {r['commit']} of {r['need']:g} trials each",
    "no_repeat": lambda r: "no build has a repeated trial yet",
    "z": lambda r: f"z {r['z']:.2f} against {r['need']:.2f} needed",
    "end_count": lambda r: f"the {r['side']} endpoint has {r['count']} of {r['n']} trials",
}


def _where(r: Reason) -> str:
    r = _r(r)
    return _WHERE[r.code](r)


# ----------------------------------------------------------------------------------------------------------------
# why a trial


def _search(r: Reason) -> str:
    return (f"{r['phase']}: best answer so far {named_text(r['best'])} at p={r['p']:.2f} (need {r['confidence']}); a "
            f"trial of this commit is expected to remove {max(r['bits'], 0.0):.2f} bits of uncertainty")


def _interleaved(r: Reason) -> str:
    story = (f"no change at all is likeliest (posterior {r['p_none']:.2f})" if r["no_change"]
             else "the bad end is, if anything, faster: no regression to locate")
    return (f"comparing the endpoints (interleaved good/bad, endpoint trial {r['trial']}): so far {r['effect_pct']:+.1f}%, "
            f"{story}" + (f"; no regression ≥ {r['ruled_out']:.1f}% already ruled out" if r["ruled_out"] is not None else ""))


def _confirm_pair(r: Reason) -> str:
    price, counting = r["price"], r["counting"]
    more = (f"; about {price:,} more trial{'s' if price != 1 else ''} of the pair at the difference and noise "
            f"measured so far" if price is not None and not counting else
            "" if counting else
            f"; at the difference and noise measured so far more trials would not get there — only a better "
            f"reading within the {r['left']} left would")
    return (f"confirming the change at {r['commit'][:10]} against its parent directly ({r['step_pct']:+.1f}% so far): "
            f"{_what(r['what'])} — {_where(r['where'])}{more}")


_MEASURE: dict[str, Callable[[Reason], str]] = {
    "endpoints.first": lambda r: "measuring the endpoints first (good, then bad)",
    "endpoints.waiting": lambda r: (f"comparing the endpoints (interleaved good/bad, endpoint trial {r['trial']}) while "
                                    f"the first results are out"),
    "endpoints.interleaved": _interleaved,
    "search": _search,
    "second_change.gap": lambda r: (
        f"second-change check: {named_text(r['best'])} holds {r['p']:.3f} of the posterior, but the {r['side']} "
        f"endpoint and the commit beside the change on its side differ by {r['gap']:.1f} standard errors; measuring "
        f"{r['commit'][:10]} again before one change is accepted"),
    "second_change.probe": lambda r: (
        f"second-change check: {named_text(r['best'])} holds {r['p']:.3f} of the posterior; measuring this side of "
        f"it so a second level step would show"),
    "confirm.pair": _confirm_pair,
    "confirm.endpoint": lambda r: (
        f"confirming the change at {named_text(r['best'])}: {_where(r['where'])}; no verdict rests on fewer than "
        f"{r['n']} on each side of the range"),
    "confirm.layout": lambda r: (
        f"confirming the change at {r['commit'][:10]} ({r['step_pct']:+.1f}%) under another layout: a change smaller "
        f"than {r['layout_check_pct']:g}% must survive a different environment size, worktree path and hash seed "
        f"before it is blamed ({r['so_far']} of at most {r['at_most']} trials of the pair so far)"),
}


def measure_text(measure) -> str:
    """Why the search asked for this trial."""
    return _MEASURE[measure.why.code](measure.why)


_CHECK: dict[str, Callable[[Reason], str]] = {
    "search": lambda r: ("whether a second change hides beside the located one"
                         if r["phase"] == "second-change check" else ""),
    "second_change.gap": lambda r: f"the {r['side']} endpoint against the commit beside the change",
    "second_change.probe": lambda r: "that a second step on either side of the change would show",
    "confirm.pair": lambda r: f"the change at {r['commit'][:10]} against its parent",
    "confirm.endpoint": lambda r: f"both endpoints' trials ({r['n']} each) before a small change is named",
    "confirm.layout": lambda r: f"the change at {r['commit'][:10]} under another layout",
}


def check_text(measure) -> str:
    """What a check phase is checking, in a few words (the status line); "" outside a check."""
    r = measure.why
    return _CHECK[r.code](r) if r.code in _CHECK else ""


# ----------------------------------------------------------------------------------------------------------------
# why a search ended


def _why_exhausted(r: Reason) -> str:
    """What was open when the budget ended."""
    r = _r(r)
    code = r.code
    if code == "endpoints_unmeasured":
        return "the endpoints could not both be measured"
    if code == "best_holds":
        return f"the best answer holds {short_probability(r['p'], 3)}"
    if code == "decisive_capped":
        return (f"the commits that decide it reached stats.max_trials_per_commit and no other trial can move the "
                f"answer (the best would remove {max(r['bits'], 0.0):.3f} bits)")
    if code == "layout_not_rechecked":
        return (f"the change at {r['commit'][:10]} ({r['step_pct']:+.1f}%) is smaller than {r['layout_check_pct']:g}% "
                f"and has not been re-measured under another layout yet")
    if code == "check_open":
        change = (f"the change at {r['commit'][:10]} ({r['step_pct']:+.1f}%)" if r["commit"] is not None
                  else "the change")
        return f"{change} is located, but a check is still open: {_what(r['what'])} ({_where(r['where'])})"
    if code == "gap_unrechecked":
        return (f"one change was not accepted yet (an endpoint and the commit beside the change on its side differ by "
                f"{r['gap']:.1f} standard errors, to be measured again first)")
    if code == "side_thin":
        return "one change was not accepted yet (a side of it has too few trials to show a second level step)"
    if code == "no_change_uncertain":
        return "no change at all is likeliest but not certain"
    if code == "faster_unsettled":
        return "the bad end looks faster, but a regression of the tolerance is not ruled out yet"
    raise KeyError(code)


def _limit(r: Reason) -> str:
    if r["limit"] == "total":
        return f"stats.max_trials_total = {r['max_total']}"
    return f"stats.max_trials_per_commit = {r['max_per_commit']} (reached by the commits that decide it)"


def _bound(r: Reason) -> str:
    return (f" No regression ≥ {r['ruled_out']:.1f}% ({level_text(100 * (1 - r['alpha']))}, one-sided, from the "
            f"endpoints)." if r["ruled_out"] is not None else "")


def _exhausted(r: Reason) -> tuple[str, str]:
    limit = _limit(r)
    key = limit.split(" =")[0]
    more, tol, price_of = r["more"], r["tol"], r["price_of"]
    stopped = limit
    if price_of:
        stopped = f"{limit}, {OPEN_CHECK_NOTE}"
        what = _PRICE_OF[price_of]
        advice = (f" Settling it ({what}) would take about {more:,} more trials at the difference and noise measured "
                  f"so far; raise {key}." if more is not None else
                  f" At the difference and noise measured so far settling it ({what}) would take beyond "
                  f"100,000 more trials; quiet the benchmark, or raise {key}.")
    elif more is not None and tol > 0:
        advice = (f" Ruling out the tolerance of {tol:g}% would take about {more:,} more trials of the endpoints "
                  f"(interleaved) at the noise measured so far, the next trials differing by the "
                  f"{r['ahead_pct']:+.1f}% the posterior expects; raise {key}, or set stats.tolerance_pct to the "
                  f"regression that matters to you.")
    elif r["best"]:
        advice = f" Raise {key} or narrow the range around the best answer."
    else:
        advice = f" Raise {key}."
    best = sets_text(r["best"]) if r["best"] else "no change"
    top_p = r["top_p"]
    text = (f"The trial budget ran out ({limit}; {r['spent']} trials run) before the answer was clear: "
            f"{_why_exhausted(r['why'])}. Best answer: {best}"
            + (f" (probability {short_probability(top_p, 3)})" if top_p is not None else "") + "."
            + _bound(r) + advice)
    return text, stopped


def _futile_tolerance(r: Reason) -> tuple[str, str]:
    hopeful, left, more = r["hopeful"], r["left"], r["more"]
    limit = f"stats.max_trials_total = {r['max_total']}"
    need = ("more trials than any budget holds" if hopeful is None else
            f"{hopeful:,} more trials even on a hopeful reading of the noise, against {left} left")
    hope = ("" if hopeful is None else " (hopeful: the difference a standard error better than measured and no "
            "worse than none, the noise at the low end of its estimate)")
    ahead = r["ahead_pct"]
    text = (f"Stopped early, inconclusive: no change is the likelier story, but ruling out a regression of "
            f"{r['tol']:g}% (stats.tolerance_pct) would take {need} ({limit}; {r['spent']} trials run){hope} — at "
            f"{r['sigma_pct']:.1f}% noise per trial the endpoints differ by {r['effect_pct']:+.1f}%."
            + _bound(r)
            + (f" At the noise measured so far, the next trials differing by the {ahead:+.1f}% the posterior expects, "
               f"it would take about {more:,} more trials of the endpoints." if more else
               f" At the noise measured so far, the next trials differing by the {ahead:+.1f}% the posterior "
               f"expects, it would take beyond 100,000 more trials.")
            + " Spending the rest of the budget would not change that: set stats.tolerance_pct to the "
              "regression that matters to you (what this host can afford), quiet the benchmark, or raise "
              "stats.max_trials_total.")
    return text, f"futility: the tolerance needs {need} ({limit})"


def _futile_confirm(r: Reason) -> tuple[str, str]:
    limit = (f"stats.max_trials_total = {r['max_total']}" if not r["max_per_commit"] else
             f"stats.max_trials_total = {r['max_total']}, stats.max_trials_per_commit = {r['max_per_commit']}")
    hope = (f" even on a hopeful reading (the next trials as lucky a run as 1 in {r['luck']}, the noise at the low "
            f"end of its estimate)" if r["hopeful"] else "")
    size = f" ({r['step_pct']:+.1f}%)" if r["step_pct"] is not None else ""
    price = r["price"]
    cost = (f" At the difference and noise measured so far it would take about {price:,} more trials."
            if price is not None else
            f" At the difference and noise measured so far it would take beyond {r['price_limit']:,} more trials.")
    left = r["left"]
    trials_left = f"{left} trial{'s' if left != 1 else ''}"
    what, where = _what(r["what"]), _where(r["where"])
    text = (f"Stopped early, inconclusive: the change at {sets_text(r['best'])}{size} holds "
            f"{short_probability(r['top_p'], 3)} of the posterior, but it is not named until {what}, and it stands at "
            f"{where}: the {trials_left} left in the budget ({limit}) cannot get it there{hope}." + cost
            + " Spending the rest of the budget would not change the verdict: raise stats.max_trials_total, or "
              "quiet the benchmark.")
    return text, f"confirmation: {what} cannot be settled within the {trials_left} left ({limit})"


def _regressed(r: Reason) -> str:
    noise = r["noise"]
    if "before_pct" in noise:
        noise_text = (f"noise {noise['pct']:.1f}% per trial over the range: {noise['before_pct']:.1f}% per trial "
                      f"before it and {noise['after_pct']:.1f}% from it on, each side weighed by its own")
    else:
        noise_text = f"noise {noise['pct']:.1f}% per trial"
    text = (f"First bad commit {sets_text((r['first'],))}: the level steps from the commits before it to the commits "
            f"from it on ({r['n_before']} vs {r['n_after']} trials, {noise_text}). Posterior probability of this "
            f"answer {r['p']:.3f} given that something changed; of no change at all {r['p_none']:.1g}, after "
            f"{r['trials']} trials.")
    if r["further"]:
        text += f" A further regression: {steps_text(r['further'])}."
    if r["improvements"]:
        text += f" An improvement was also located (not the culprit): {steps_text(r['improvements'])}."
    if r.get("unsettled"):
        price = r["unsettled_price"]
        text += (f" A later change was also located, {steps_text(r['unsettled'])}, and is not named: "
                 f"{_what(r['unsettled_check'])}, which the budget could not settle"
                 + (f" (about {price:,} more trials would)" if price is not None else "")
                 + "; the first bad commit stands whatever it turns out to be.")
    if r["doubt"] is not None:
        text += (f" A second, smaller change elsewhere keeps {r['doubt']:.2f} of the whole posterior and further trials "
                 f"are not expected to settle it (each < {r['min_gain_bits']:g} bits): the first bad commit stands.")
    return text


def _same_no_change(r: Reason) -> str:
    return (f"No regression beyond noise: no change of {r['min_effect_pct']:g}% or more anywhere in the range holds "
            f"{r['p_none']:.3f} of the posterior after {r['trials']} trials"
            + (f"; no regression ≥ {r['ruled_out']:.1f}% ({level_text(100 * (1 - r['alpha']))}, one-sided)"
               if r["ruled_out"] is not None else "")
            + ".")


def _same_tolerance(r: Reason) -> str:
    return (f"No regression ≥ {r['ruled_out']:.1f}% ({level_text(100 * (1 - r['alpha']))}, one-sided), inside the "
            f"tolerance of {r['tol']:g}% (stats.tolerance_pct), after {r['trials']} trials; "
            + (f"no change is the likelier story (posterior {r['p_none']:.2f})" if r["no_change"]
               else "the bad end is, if anything, faster")
            + ".")


_OUTCOME: dict[str, Callable[[Reason], "str | tuple[str, str]"]] = {
    "endpoint_untestable": lambda r: (
        f"The {r['side']} endpoint {r['commit'][:10]} cannot be tested (a patch conflict, a failed build, or no trial "
        f"that produced a number: `perfbisect log` shows why), so there is nothing to bisect against. Pick an "
        f"endpoint that builds and can be measured."),
    "same.no_change": _same_no_change,
    "same.tolerance": _same_tolerance,
    "improved.endpoints": lambda r: (
        f"The bad endpoint is faster than the good one (probability {r['p_better']:.3f} of a gain beyond "
        f"{r['min_effect_pct']:g}%): no regression to bisect."),
    "improved.located": lambda r: (
        f"The only change located is an improvement: {steps_text(r['steps'])}. No regression to blame."),
    "layout_sensitive": lambda r: (
        f"Layout-sensitive, not blamed: the change located at {steps_text(r['steps'])} does not survive a change of "
        f"layout — with the trials of one layout left out, the step shrinks below half its size or turns around. "
        f"Environment size, worktree path length and hash seed move timings by several percent without any code "
        f"change on the hot path (Mytkowicz et al., ASPLOS 2009); measure this commit with its parent again, or "
        f"raise stats.layout_check_pct only if you know the benchmark is layout-proof."),
    "regressed": _regressed,
    "exhausted": _exhausted,
    "futile.tolerance": _futile_tolerance,
    "futile.confirm": _futile_confirm,
}


def _drift_text(d: Mapping) -> str:
    return (f"The machine drifted during the bisection (a level path spanning about {d['span_pct']:.1f}% over "
            f"{d['spent']} trials, probability {d['p_moved']:.2f} that it moved at all): the model weighs trials far "
            f"apart in time less and lets neighbouring trials carry the contrasts.")


def _state_sentences(out: BisectOutcome) -> str:
    """What an outcome's explanation adds about the trials themselves: the system state they track, and the trials
    the runner flagged and the search left out."""
    text = ""
    if out.state_notes:
        text += " System state: " + "; ".join(out.state_notes) + "."
    if out.excluded:
        text += (
            f" Excluded {len(out.excluded)} trial(s) the runner flagged (like nvbench, a throttled or "
            f"contended trial is re-run, not averaged in): " + "; ".join(out.excluded[:5])
            + ("; …" if len(out.excluded) > 5 else "") + "."
        )
    return text


def explain(out: BisectOutcome) -> str:
    """The outcome's explanation, from its reason (an outcome stored before reasons were codes keeps its own)."""
    return explained(out).explanation


def explained(out: BisectOutcome) -> BisectOutcome:
    """The outcome with its ``explanation``, ``stopped_by`` and ``drift_note`` written from its reason; an outcome
    without one (stored before reasons were codes) as it is."""
    r = out.reason
    if r is None:
        return out
    r = _r(r)
    said = _OUTCOME[r.code](r)
    text, stopped = said if isinstance(said, tuple) else (said, None)
    notes = [_drift_text(r["drift"])] if r.get("drift") else []
    notes += list(r.get("history") or ())
    return replace(out, explanation=text + _state_sentences(out), stopped_by=stopped,
                   drift_note="; ".join(notes) if notes else None)


def settles(outcome: BisectOutcome) -> str:
    """What an outcome's ``more_trials`` would settle, for the line that prices it: the check on the best answer that
    was still open when the search stopped, or ruling out the tolerance."""
    stop = outcome.stopped_by or ""
    if stop.startswith("confirmation") or OPEN_CHECK_NOTE in stop:
        return "settling the check still open on the best answer"
    return f"ruling out a regression of {outcome.tolerance_pct:g}%" if outcome.tolerance_pct else "settling it"


__all__ = ["OPEN_CHECK_NOTE", "best_text", "check_text", "explain", "explained", "measure_text", "named_text",
           "settles", "sets_text"]
