"""Everything that turns results into text: what perfbisect's commands print (``format_*`` return
terminal lines, cli prints them), the ``--json`` object of a bisection (``outcome_json``), a run's
progress line, the machine's state over a set of trials, a build's drift against earlier days, what
the covariates explain, one system snapshot (``perfbisect doctor``) and a trial's system summary.

Pure functions of values the store hands back: no store access, no printing. The statistics (scipy)
are imported by the two lines that compute something, so that `perfbisect log` starts without them.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Sequence

from ..metrics import DECODE, Metric, describe_workload, level_text, pct_text, short_probability, stored_or_described
from ..model import BisectOutcome, Comparison, SystemSnapshot, TrialResult, Verdict, median
from ..metrics import trials_text
from ..store.codec import encode
from ..measure.sysstate import throttle_reason_names

if TYPE_CHECKING:
    from ..engine.stats import NoiseModel


def json_value(value: Any) -> Any:
    """Plain JSON values for a command's --json output (NaN and infinity become null)."""
    return encode(value, for_output=True)


def _pct_text(value: float | None, sign: bool = True) -> str:
    """A percentage for a line, or "n/a" where there is no number (never "+nan%")."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:+.1f}%" if sign else f"{value:.1f}%"


def effect_text(cmp: Comparison) -> str:
    """"-12.3% (99% interval [-15.0%, -9.6%])", or "effect n/a (too few trials)" when there is no estimate."""
    if cmp.effect_pct is None or not math.isfinite(cmp.effect_pct):
        return "effect n/a (too few trials to estimate)"
    level = f"{level_text(cmp.level_pct)} " if cmp.level_pct is not None else ""
    return f"{pct_text(cmp.effect_pct)} ({level}interval [{pct_text(cmp.ci_low_pct)}, {pct_text(cmp.ci_high_pct)}])"


def comparison_line(label: str, cmp: Comparison | None, verdict: bool = True) -> str | None:
    """One line: effect, interval, noise, trials, and (unless it is evidence for another verdict) its verdict.

    ``label`` reads "B vs A" (bad vs good, after vs before): the trial counts follow it, B's first."""
    if cmp is None:
        return None
    return (
        f"{label}: {effect_text(cmp)} "
        f"({cmp.n_b} vs {cmp.n_a} trials; noise {_pct_text(cmp.sigma_b_pct, sign=False)} per trial, {cmp.sigma_source})"
        + (f" → {cmp.verdict.value}" if verdict else "")
    )


def format_outcome(result: Any) -> list[str]:
    """Terminal lines for a finished bisection (``app.bisection.BisectResult``)."""
    out: BisectOutcome = result.outcome
    commits = result.commits
    lines = []

    def describe(sha: str) -> str:
        c = commits.get(sha)
        return f"{sha[:10]} {c.subject}" if c else sha[:10]

    head = {
        Verdict.REGRESSED: "REGRESSION",
        Verdict.IMPROVED: "IMPROVEMENT",
        Verdict.SAME: (f"NO REGRESSION ≥ {out.ruled_out_pct:.1f}%" if out.ruled_out_pct is not None
                       and math.isfinite(out.ruled_out_pct) else "NO CHANGE beyond noise"),
        Verdict.INCONCLUSIVE: "INCONCLUSIVE",
        Verdict.SKIPPED: "UNTESTABLE",
    }[out.verdict]
    lines.append(f"{head}  ({out.good[:10]}..{out.bad[:10]}, bisection #{result.bisection_id})")
    if out.named_culprit:
        lines.append(f"first bad commit: {describe(out.named_culprit)}")
    if out.culprit_merge:
        lines.append(f"  a merge: it brought {len(out.culprit_set) - 1} commits; one of them, or the merge itself, "
                     f"changed performance (bisect the merged branch to narrow it down):")
        lines.extend(f"  {describe(s)}" for s in out.culprit_set[1:])
    elif out.culprit_is_set:
        lines.append(f"first bad commit: one of these {len(out.culprit_set)} (untestable neighbours or a merged branch; "
                     f"none is blamed alone):")
        lines.extend(f"  {describe(s)}" for s in out.culprit_set)
    for sha in out.extra_changes:
        lines.append(f"another regression: {describe(sha)}")
    for sha in out.improvements:
        lines.append(f"improvement (not the culprit): {describe(sha)}")
    for sha in out.layout_sensitive:
        lines.append(f"layout-sensitive, not blamed: {describe(sha)}")
    if out.budget_exhausted:
        best = (" and at ".join(describe(s) for s in out.best_answer) if out.best_answer else "no change")
        if len(out.best_answer) == 2:
            best = f"two changes: at {best}"
        prob = (f" (probability {short_probability(out.answer_probability)}, given that something changed)"
                if out.answer_probability is not None and out.best_answer else "")
        stop = f" ({out.stopped_by})" if out.stopped_by else ""
        lines.append(f"budget exhausted{stop}: best answer {best}{prob}")
    elif out.verdict is Verdict.INCONCLUSIVE and out.stopped_by:
        lines.append(f"stopped early ({out.stopped_by})")
    more = getattr(result, "more", None)
    if more and (out.budget_exhausted or out.stopped_by):
        lines.append(f"to settle it: {more}")
    # (a `same` states its bound in the headline and its reason in the explanation: not a third time here)
    if (out.ruled_out_pct is not None and math.isfinite(out.ruled_out_pct)
            and out.verdict not in (Verdict.REGRESSED, Verdict.SAME)):
        tol = f" (tolerance {out.tolerance_pct:g}%, stats.tolerance_pct)" if out.tolerance_pct else ""
        lines.append(f"ruled out: no regression ≥ {out.ruled_out_pct:.1f}% between the endpoints "
                     f"(one-sided at 1 − stats.alpha, held over every look){tol}")
    for line in (
        # Evidence, not a second verdict: the bisection's verdict is the headline.
        comparison_line("endpoints (bad vs good)", out.endpoint_comparison, verdict=False),
        comparison_line("from the culprit on vs before it (drift and noise integrated out)", out.culprit_comparison),
    ):
        if line:
            lines.append(line)
    if out.regressed_path:
        from ..engine.regressed_path import lines as regressed_path_lines  # stats (scipy) only when there is one

        lines.extend(regressed_path_lines(out.regressed_path))
    env = getattr(result, "environment", None)
    if env:
        shown = ", ".join(env["moves"][:8]) + (f", and {len(env['moves']) - 8} more" if len(env["moves"]) > 8 else "")
        lines.append(f"environment moved at the culprit ({len(env['moves'])} package{'s' if len(env['moves']) != 1 else ''}): "
                     f"{shown}. Code or environment? The culprit's code in its parent's environment tells them apart: "
                     f"{' '.join(env['split'])}")
    if out.drift_note:
        lines.append(f"drift: {out.drift_note}")
    if out.excluded:
        lines.append(f"excluded trials (flagged, re-run): {len(out.excluded)}: {'; '.join(out.excluded[:3])}")
    for line in getattr(result, "state", ()):
        lines.append(f"system state: {line}")
    if out.skipped:
        lines.append(f"skipped (untestable, never blamed): {', '.join(s[:10] for s in out.skipped)}")
    if result.filtered:
        lines.append(f"not measured (only paths the filters ignore): {len(result.filtered)} commits")
    if out.explanation:
        lines.append(out.explanation)
    metric = stored_or_described(getattr(result, "metric", None))
    if not metric.higher_is_better:  # a + is worse: said once, as plainly as the README does
        what = ", ".join(x for x in (metric.label if metric.label != metric.name else "", metric.unit) if x)
        lines.append(f"metric: {metric.name} ({what + '; ' if what else ''}lower is better, so + is slower)")
    lines.append(f"observations used by the search: {out.trials_used}; results in {result.db_path}")
    return lines


def outcome_json(result: Any) -> dict[str, Any]:
    """The machine-readable result: verdict, culprit (full sha or null), effect_pct, db, evidence."""
    out: BisectOutcome = result.outcome
    data = json_value(out)
    culprit = result.commits.get(out.named_culprit) if out.named_culprit else None
    data.update(
        {
            "verdict": out.verdict.value,
            # the commit the text names: null only when untestable neighbours share the blame (culprit_set holds
            # them); a merge is named, the commits it brought beside it in culprit_set (culprit_merge)
            "culprit": out.named_culprit,
            "culprit_is_set": out.culprit_is_set,
            "metric": getattr(result, "metric", None),
            "culprit_subject": culprit.subject if culprit else None,
            "effect_pct": out.effect_pct,
            "db": str(result.db_path),
            "bisection_id": result.bisection_id,
            "to_settle": getattr(result, "more", None),
            "filtered": [c.sha for c in result.filtered],
            "system_state": list(getattr(result, "state", ())),
            "environment": getattr(result, "environment", None),  # what moved at the culprit ([environment])
            # "target", "speculative" or "unclear" (regressed_path holds the numbers); null when not asked
            "regressed": out.regressed_path.path if out.regressed_path else None,
        }
    )
    return json_value(data)


# ------------------------------------------------------------------------------------------------
# measure / calibrate: per-trial tables with speculative health


def trial_row(trial: Any) -> dict[str, Any]:
    """The numbers one trial stands for: the median of its metric (``value``; ``tok_s`` is the same
    number under its old name), spread, TTFT, ITL p50/p99, accept length, cycle time, state."""
    runs = trial.usable_runs
    values = [r.value for r in runs if r.value]
    med = math.exp(trial.summary) if trial.summary is not None else None
    cv = None
    if len(values) >= 2:
        mean = sum(values) / len(values)
        cv = 100.0 * (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 / mean
    accept = median([r.spec_accept_length for r in runs if r.spec_accept_length])
    cycle = median([r.cycle_time_ms for r in runs if r.cycle_time_ms])
    return {
        "trial": trial.id,
        "commit": trial.identity.commit,
        "mode": trial.identity.mode,
        "status": trial.status.value,
        "value": med,
        "tok_s": med,
        "within_cv_pct": cv,
        "ttft_ms": median(1000 * r.ttft_s for r in runs if r.ttft_s is not None),
        "itl_p50_ms": median(r.itl_p50_ms for r in runs),
        "itl_p99_ms": median(r.itl_p99_ms for r in runs),
        "runs": len(runs),
        "flagged": len(trial.flagged_runs),
        "detected_warmup": len(trial.detected_warmup_runs),
        "accept_length": accept,
        "cycle_ms": cycle,
        "sm_clock_mhz": trial.system.sm_clock_mean_mhz,
        "throttled_fraction": trial.system.throttled_fraction,
        "error": trial.error,
        "layout": trial.layout.id if getattr(trial, "layout", None) else None,  # perfbisect/layout.py
        # [environment]: the environment it ran in (perfbisect/measure/envs.py) and its lock's resolution date
        "environment": (trial.versions or {}).get("environment") if getattr(trial, "versions", None) else None,
        "environment_resolved_as_of": (trial.versions or {}).get("environment_resolved_as_of") if getattr(trial, "versions", None) else None,
    }


def speculative_health(baseline_tok_s: float | None, spec_rows: list[dict[str, Any]]) -> list[str]:
    """Accept length, cycle time, spec/baseline ratio and the break-even accept length."""
    lines = []
    toks = [r["tok_s"] for r in spec_rows if r["tok_s"]]
    accept = median([r["accept_length"] for r in spec_rows if r["accept_length"]])
    cycle = median([r["cycle_ms"] for r in spec_rows if r["cycle_ms"]])
    if accept is not None and cycle is not None:
        lines.append(f"speculative: accept length {accept:.2f}, verify cycle {cycle:.1f} ms")
    if baseline_tok_s and toks:
        spec = median(toks)
        ratio = spec / baseline_tok_s
        lines.append(
            f"speculative / baseline: {spec:.1f} / {baseline_tok_s:.1f} tok/s = {ratio:.2f}×"
            + ("  (speculation is SLOWER than no speculation)" if ratio < 1 else "")
        )
        if cycle is not None:
            breakeven = baseline_tok_s * cycle / 1000.0
            lines.append(
                f"break-even accept length = baseline tok/s × cycle time = {baseline_tok_s:.1f} × {cycle / 1000:.4f} s "
                f"= {breakeven:.2f}" + (f" (measured {accept:.2f})" if accept else "")
            )
    return lines


def format_measure(result: Any, config: Any) -> list[str]:
    """Per-mode trial tables for `perfbisect measure`, with speculative health when both modes ran."""
    metric = describe_workload(config.workload)  # per mode: a ratio metric's parts are each in this unit
    lines = [f"{result.commit.short} {result.commit.subject}", f"metric: {metric.name} ({metric.label}, {metric.direction})"]
    baseline = None
    spec_rows: list[dict[str, Any]] = []
    for mode, trials in result.trials.items():
        rows = [trial_row(t) for t in trials]
        lines.append(f"[{mode}]")
        for r in rows:
            layout = f" [layout {r['layout']}]" if r["layout"] else ""
            if r["tok_s"] is None:
                lines.append(f"  trial #{r['trial']}{layout}: {r['status']}: {r['error']}")
                continue
            bits = [metric.format(r["value"]), f"{r['runs']} runs"]
            if r["within_cv_pct"] is not None:
                bits.append(f"within-trial CV {r['within_cv_pct']:.1f}%")
            if r["ttft_ms"] is not None and metric.name != "ttft_ms":
                bits.append(f"TTFT {r['ttft_ms']:.1f} ms")
            if r["itl_p50_ms"] is not None and r["itl_p99_ms"] is not None:
                bits.append(f"ITL p50 {r['itl_p50_ms']:.2f} ms, p99 {r['itl_p99_ms']:.2f} ms")
            if r["flagged"]:
                bits.append(f"{r['flagged']} flagged")
            if r["detected_warmup"]:
                bits.append(f"{r['detected_warmup']} slow leading run{'s' if r['detected_warmup'] > 1 else ''} counted as warm-up")
            if r["accept_length"]:
                bits.append(f"accept {r['accept_length']:.2f}")
            if r["sm_clock_mhz"]:
                bits.append(f"SM {r['sm_clock_mhz']:.0f} MHz")
            lines.append(f"  trial #{r['trial']}{layout}: " + ", ".join(bits))
        toks = [r["tok_s"] for r in rows if r["tok_s"]]
        if len(toks) >= 2:
            mean = sum(toks) / len(toks)
            sd = (sum((t - mean) ** 2 for t in toks) / (len(toks) - 1)) ** 0.5
            lines.append(f"  across trials: mean {metric.format(mean)}, between-trial CV {100 * sd / mean:.1f}% ({len(toks)} sessions)")
        if config.modes[mode].speculative:
            spec_rows.extend(rows)
        elif toks:
            baseline = median(toks)
    if spec_rows:
        # The spec/baseline ratio and break-even accept length are about decode tok/s only.
        lines.extend(speculative_health(baseline if metric.name == DECODE.name else None, spec_rows))
    return lines



def format_comparison(result: Any) -> list[str]:
    """`perfbisect compare` output: the verdict with its evidence, history and attribution."""
    cmp = result.comparison
    lines = [
        f"{result.a.short} vs {result.b.short} [{result.mode}]: {cmp.verdict.value.upper()}",
        comparison_line("effect (B vs A)", cmp) or "",
    ]
    metric = Metric.from_json(getattr(result, "metric", None))
    meds = [median([math.exp(t.summary) for t in ts if t.summary is not None])
            for ts in (getattr(result, "trials_a", ()), getattr(result, "trials_b", ()))]
    if metric is not None and all(v is not None for v in meds):
        lines.append(f"medians: A {metric.format(meds[0])}, B {metric.format(meds[1])} "
                     f"({metric.name}, {metric.direction})")
    if cmp.explanation:
        lines.append(cmp.explanation)
    lines.extend(result.history)
    if result.attribution:
        lines.append(result.attribution)
    return [line for line in lines if line]


def format_plan(plan: Any) -> list[str]:
    """`perfbisect plan`: one line per commit, what happens to it and why."""
    lines = []
    for e in plan.entries:
        mark = "measure" if e.measure else ("SKIP" if e.skipped else "-")
        variant = ""
        if e.patch_variants:
            alt = [f for name, f in e.patch_variants if not f.endswith(name)]
            if alt:
                variant = "  variants: " + ", ".join(alt)
        lines.append(f"{e.commit.short}  {mark:<7}  {e.reason:<40}  {e.commit.subject[:60]}{variant}")
    measured, filtered, skipped = len(plan.measured), len(plan.filtered), len(plan.skipped)  # as the rows say
    lines.append(f"{len(plan.entries)} commits: {measured} to measure, {filtered} filtered, {skipped} untestable (patch conflict or marked skipped)")
    if plan.filters_note:
        lines.append(f"filters: {plan.filters_note}")
    lines.extend(format_build_steps(getattr(plan, "build_steps", ())))
    lines.extend(format_environments(getattr(plan, "environments", ()), getattr(plan, "environments_note", "")))
    for w in plan.warnings:
        lines.append(f"warning: {w}")
    return lines


def format_build_steps(steps: Any) -> list[str]:
    """[[build.steps]] over the range: how each is cached, and for a step with sources which directory it
    builds at which commits (or that it has nothing to build there)."""
    if not steps:
        return []
    lines = [f"build steps: {len(steps)}"]
    for sp in steps:
        how = ("python only" if sp.python_only else
               "cached by the content of what it builds from" if sp.cached else "NOT CACHED: runs at every trial")
        if not sp.spans:
            lines.append(f"  {sp.name}  {', '.join(sp.paths)}  {how}")
            continue
        lines.append(f"  {sp.name}  {how}")
        for span in sp.spans:
            group = span.span()
            where = f"builds {span.source}/" if span.source else "no sources here: not run"
            lines.append(f"    {group}  {where}")
    return lines


def format_environments(groups: Any, note: str = "", *, moves_shown: int = 10) -> list[str]:
    """The range by environment ([environment]: one per uv lock): which commits each serves, its key packages,
    whether it is built, and what moves from the one before it, compiled packages first."""
    if not groups:
        return []
    locks = {g.lock_key for g in groups if g.lock_key}
    lines = [f"environments: {len(locks)} for {len(groups)} stretch{'es' if len(groups) != 1 else ''} of commits"
             + (f" ({note})" if note else "")]
    for g in groups:
        if g.problem:
            lines.append(f"  {g.span()}  UNTESTABLE: {g.problem}")
            continue
        if g.unavailable:
            lines.append(f"  {g.span()}  not resolved here: {g.unavailable}")
            continue
        state = f"built ({g.env})" if g.built else "installed on first use (or plan --prepare)"
        head = " · ".join(g.highlights())
        lines.append(f"  {g.span()}  {len(g.packages)} packages{'  ' + head if head else ''}  {state}")
        if g.moves:
            shown = [m.text() for m in g.moves[:moves_shown]]
            more = len(g.moves) - len(shown)
            subject = g.first_subject if len(g.first_subject) <= 60 else g.first_subject[:59] + "…"
            since = ""
            if getattr(g, "unresolved_between", 0):
                since = (f" since {g.moved_since[:10]}'s environment ({g.unresolved_between} commits between were not "
                         f"resolved here: some of these moved there)")
            lines.append(f"      at {g.commits[0][:10]} {subject}: {len(g.moves)} package"
                         f"{'s' if len(g.moves) != 1 else ''} moved{since}: " + ", ".join(shown)
                         + (f", and {more} more" if more > 0 else ""))
    return lines


def format_environment_preparation(prepared: Any) -> list[str]:
    """`plan --prepare`: per environment of the range, whether it was built, was cached, or cannot be."""
    lines = [f"prepared: {len(prepared)} environment group{'s' if len(prepared) != 1 else ''}"]
    for group, outcome in prepared:
        lines.append(f"  {group.span()}  {outcome}")
    return lines


def format_carry(report: Any) -> list[str]:
    """`perfbisect patches carry`: each boundary met and what became of it, then where the carry stands."""
    lines = []
    for b in report.boundaries:
        where = f"{b.commit.short} ({b.index} commits into the range) {b.commit.subject[:60]}"
        if b.variant:
            lines.append(f"{b.patch} at {where}: {b.outcome} → {b.variant}" + (f" — DIFFERS from the patch: {b.differs}" if b.differs else ""))
        else:
            lines.append(f"{b.patch} stops applying at {where}" + (f" — in {', '.join(b.files[:4])}" if b.files else ""))
    state = report.waiting
    if state is not None and state.conflicts:
        lines.append("git: " + "; ".join(state.conflicts[:4]))
    if state is not None:
        if state.resolved_by_git:
            lines.append(f"git carried {state.patch} over {state.boundary[:10]}"
                         + (" with a resolution you recorded before (rerere)" if state.reused else " by itself") + (
                "; the new version does not add and remove what the patch did:" if report.boundaries and report.boundaries[-1].differs
                else "; review it") + f" in {state.worktree} (`git -C {state.worktree} diff --cached HEAD`), then "
                f"`perfbisect patches carry --continue` (or --abort)")
        else:
            lines.append(f"resolve the conflicts in {state.worktree}" + (f" ({', '.join(report.unresolved[:6])})" if report.unresolved else "")
                         + ", with any editor or `git -C WORKTREE mergetool`; then `perfbisect patches carry --continue` "
                         "(or --abort: the versions written so far stay)")
    if report.applies:
        n = len(getattr(report, "earlier", ())) + len([b for b in report.boundaries if b.variant])
        lines.append(f"the stack applies at every commit of the range ({report.commits} commits)"
                     + (f"; {n} new version{'s' if n != 1 else ''} written by this carry and added to [[patches.variants]]" if n else "")
                     + f" ({report.seconds:.1f} s)")
    return lines


def format_patch_checks(checks: Any, differing: dict[str, str] | None = None) -> list[str]:
    """`perfbisect patches check`: per commit, applies (with which files) or conflicts (where); a version that says
    it differs from the one it replaces (``differing``: file name → how) is marked, and said once below."""
    differing = differing or {}
    lines = []
    bad = 0
    rows: list[list] = []  # consecutive commits with the same outcome share one row: [first, last, n, text]
    for c in checks:
        if c.ok:
            used = ", ".join(patch_file_name(f) + (" (DIFFERS)" if patch_file_name(f) in differing else "")
                             for _, f in (c.applied.applied if c.applied else ()))
            text = f"applies   {used}"
        else:
            bad += 1
            text = f"CONFLICT  {c.conflict.describe()}"
        if rows and rows[-1][3] == text:
            rows[-1][1], rows[-1][2] = c.commit, rows[-1][2] + 1
        else:
            rows.append([c.commit, c.commit, 1, text])
    for first, last, n, text in rows:
        where = first.short if n == 1 else f"{first.short}..{last.short} ({n} commits)"
        lines.append(f"{where}  {text}")
    lines.append(f"{len(checks)} commits: {len(checks) - bad} apply, {bad} conflict (those will be skipped, never blamed)")
    used = {patch_file_name(f) for c in checks if c.ok and c.applied for _, f in c.applied.applied}
    for name, how in sorted(differing.items()):
        if name in used:
            lines.append(f"  {name} differs from the version it replaces: {how}")
    if checks and not bad:
        lines.append("the stack applies end to end")
    elif bad:
        first = next(c for c in checks if not c.ok)
        lines.append(f"to carry the stack over them: perfbisect patches carry good={checks[0].commit.short} "
                     f"bad={checks[-1].commit.short} (the first boundary is {first.commit.short})")
    return lines


def patch_file_name(path: Any) -> str:
    from pathlib import Path

    return Path(str(path)).name


def observations_used(b: Any) -> int:
    """The observations a stored bisection's search used: its outcome's count, or (unfinished) those stored so far."""
    return b.outcome.trials_used if b.outcome is not None else b.observation_count


def format_log(bisections: Any, comparisons: Any) -> list[str]:
    """`perfbisect log`: past bisections and comparisons with their verdicts."""
    import time as _time

    lines = []
    for b in bisections:
        when = _time.strftime("%Y-%m-%d %H:%M", _time.localtime(b.started_at))
        verdict = b.verdict.value if b.verdict else b.status
        culprit = f" culprit {b.culprit[:10]}" if b.culprit else ""
        if b.outcome is not None and b.outcome.culprit_merge:
            culprit += f" (a merge of {len(b.outcome.culprit_set) - 1} commits)"
        elif b.outcome is not None and b.outcome.culprit_is_set:
            culprit = f" culprit one of {', '.join(s[:10] for s in b.outcome.culprit_set)}"
        lines.append(
            f"bisection #{b.id}  {when}  {b.good[:10]}..{b.bad[:10]}  [{b.metric}]  {verdict}{culprit}  "
            f"{trials_text(b.trial_count, observations_used(b))}"
        )
    for c in comparisons:
        when = _time.strftime("%Y-%m-%d %H:%M", _time.localtime(c.created_at))
        cmp = c.comparison
        lines.append(
            f"comparison c{c.id}  {when}  {c.a[:10]} vs {c.b[:10]}  [{c.mode}]  {cmp.verdict.value} "
            f"{effect_text(cmp)}"
        )
    if not lines:
        lines.append("no bisections or comparisons stored yet")
    return lines


def log_json(bisections: Any, comparisons: Any, config: Any = None) -> dict[str, Any]:
    """`perfbisect log --json`: each bisection and comparison with its verdict and its metric's description."""
    from ..metrics import stored_or_described

    return json_value({
        "bisections": [{
            "id": b.id, "good": b.good, "bad": b.bad, "mode": b.metric, "status": b.status,
            "verdict": b.verdict.value if b.verdict else None, "culprit": b.culprit,
            "culprit_set": list(b.outcome.culprit_set) if b.outcome is not None and b.outcome.culprit_is_set else [],
            "culprit_is_set": bool(b.outcome is not None and b.outcome.culprit_is_set),
            "effect_pct": b.outcome.effect_pct if b.outcome is not None else None,
            "trials": b.trial_count, "observations_used": observations_used(b), "started_at": b.started_at, "finished_at": b.finished_at, "target": b.target,
            "metric": stored_or_described(b.metric_info, config).as_json(),
        } for b in bisections],
        "comparisons": [{
            "id": c.id, "a": c.a, "b": c.b, "mode": c.mode, "verdict": c.comparison.verdict.value,
            "effect_pct": c.comparison.effect_pct, "ci_low_pct": c.comparison.ci_low_pct,
            "ci_high_pct": c.comparison.ci_high_pct, "level_pct": c.comparison.level_pct,
            "created_at": c.created_at, "metric": stored_or_described(c.metric_info, config).as_json(),
        } for c in comparisons],
    })


def state_lines(trials: Sequence[TrialResult], gpu_target: bool = True) -> list[str]:
    """What the machine did during these trials: clock range, temperature, throttling, other GPU users
    (nothing for a target given no GPU: a command workload on the CPU). The clock range is that of the trials
    that measured something: a trial cut short or failed sampled an idle or dying server (the H200 of round 6:
    856 MHz at 93 W beside 1980 MHz in every finished trial); other GPU users are shown from every trial."""
    ok = [t.system for t in trials if t.system.samples]
    if not ok or not gpu_target:
        return []
    lines = []
    measured = [t.system for t in trials if t.system.samples and t.summary is not None]
    clocks = [s.sm_clock_mean_mhz for s in measured if s.sm_clock_mean_mhz is not None]
    if clocks:
        lines.append(f"SM clock per trial {min(clocks):.0f}–{max(clocks):.0f} MHz over {len(clocks)} measured trials")
    temps = [s.temperature_max_c for s in ok if s.temperature_max_c is not None]
    if temps:
        lines.append(f"GPU temperature up to {max(temps):.0f} C")
    throttled = [s.throttled_fraction for s in ok if s.throttled_fraction is not None]
    if throttled and max(throttled) > 0:
        lines.append(f"throttled in {sum(1 for f in throttled if f > 0)} of {len(throttled)} trials (up to {100 * max(throttled):.0f}% of samples)")
    others = sorted({p for s in ok for p in s.other_gpu_processes})
    if others:
        lines.append(f"other GPU processes seen: {', '.join(map(str, others))}")
    if not any(s.sm_clock_mean_mhz is not None for s in ok):
        lines.append("no GPU state recorded (no NVML or nvidia-smi here): differences cannot be attributed to clocks")
    return lines


def history_line(build: str, today: Sequence[TrialResult], stored: Sequence[TrialResult], noise: NoiseModel,
                 metric: Metric | None = None) -> str | None:
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
    from ..engine.stats import history_shift

    return history_shift(values, earlier, noise, build=build, fmt=(metric or DECODE).format)


def attribution_line(trials: Sequence[TrialResult], higher_is_better: bool = True) -> str | None:
    """What the machine's state explains of the differences between these trials (four usable at least);
    ``higher_is_better``: which way is faster, for the sign an exogenous state's fit must have."""
    ok = [t for t in trials if t.summary is not None]
    if len(ok) < 4:
        return None
    from ..engine.covariates import covariate_notes

    _, notes = covariate_notes(
        [t.summary for t in ok], [t.system.as_covariates() for t in ok], [t.identity.build_key for t in ok], min_rows=4,
        higher_is_better=higher_is_better,
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
