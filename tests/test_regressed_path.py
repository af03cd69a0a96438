"""Which path a speculative culprit regressed: decided on stored trial values (no server, no timing),
so the answers below do not depend on how busy the machine is."""

from __future__ import annotations

import math

import pytest

from perfbisect.model import RunResult, TrialIdentity, TrialResult, TrialStatus
from perfbisect.engine.regressed_path import decide, lines, log_odds_speculative, path_odds
from perfbisect.settings import StatsConfig
from perfbisect.engine.stats import NoiseModel

PARENT, CULPRIT = "a" * 40, "b" * 40
MODES = [("baseline", False), ("eagle3", True)]
TOKENS = 257


def trial(commit: str, mode: str, tok_s: float, accept: float | None = None) -> TrialResult:
    """One trial of five identical runs; a speculative one carries verify counts for its accept length."""
    verify = round(TOKENS / accept) if accept else None
    runs = tuple(
        RunResult(index=i, warmup=False, requested_tokens=TOKENS, output_tokens=TOKENS, decode_tok_s=tok_s,
                  spec_verify_ct=verify, spec_accept_length=(TOKENS / verify) if verify else None)
        for i in range(5)
    )
    ident = TrialIdentity(commit=commit, patch_hash="p", build_hash="b" + commit[:4], mode=mode, mode_hash=mode,
                          workload_hash="w", host="h")
    return TrialResult(identity=ident, status=TrialStatus.OK, runs=runs, started_at=1.0, finished_at=2.0)


def trials(base_before, base_after, spec_before, spec_after, accept=(2.4, 2.4)):
    out = [trial(PARENT, "baseline", v) for v in base_before] + [trial(CULPRIT, "baseline", v) for v in base_after]
    out += [trial(PARENT, "eagle3", v, accept[0]) for v in spec_before]
    out += [trial(CULPRIT, "eagle3", v, accept[1]) for v in spec_after]
    return out


NOISE = NoiseModel.prior(2.0, dof=20)


def run_decide(ts, **kw):
    return decide(ts, spec_mode="eagle3", modes=MODES, before=PARENT, after=CULPRIT, noise=NOISE,
                  settings=StatsConfig(), **kw)


def test_only_eagle3_slower_is_the_speculative_path():
    # The demo's planted change: verify cycle 4.0 → 4.7 ms, baseline 500 tok/s on both sides.
    ts = trials([498, 502, 500], [501, 497, 500], [600, 606, 596], [511, 515, 508])
    rp = run_decide(ts)
    assert rp.path == "speculative"
    assert rp.summary.startswith("speculative path regressed (baseline unchanged; accept length 2.40 → 2.40, verify cycle")
    assert rp.cycle_before_ms == pytest.approx(4.0, rel=0.02) and rp.cycle_after_ms == pytest.approx(4.7, rel=0.02)
    # Break-even accept length = baseline tok/s × verify cycle: 500 × 4.0 ms = 2.0 → 500 × 4.7 ms = 2.35.
    assert rp.break_even_before == pytest.approx(2.0, rel=0.02) and rp.break_even_after == pytest.approx(2.35, rel=0.02)
    assert set(rp.moved) == {"spec_tok_s", "ratio", "break_even", "cycle_ms"}
    assert "baseline_tok_s" not in rp.moved and "accept_length" not in rp.moved
    text = "\n".join(lines(rp))
    assert f"break-even accept length {rp.break_even_before:.2f} → {rp.break_even_after:.2f}" in text
    assert "[baseline]" in text and "[eagle3]" in text


def test_both_modes_slower_alike_is_the_target_model():
    # A slower target forward: baseline 500 → 417 tok/s and the verify cycle 4.0 → 4.8 ms (both −16.7%).
    ts = trials([498, 502, 500], [417, 415, 419], [600, 606, 596], [500, 497, 503])
    rp = run_decide(ts)
    assert rp.path == "target"
    assert rp.summary.startswith("target model regressed (baseline -16.")
    assert "baseline_tok_s" in rp.moved and "spec_tok_s" in rp.moved and "cycle_ms" in rp.moved
    # The break-even did not move: a slower target slows both sides of the trade alike.
    assert "break_even" not in rp.moved and "ratio" not in rp.moved
    assert rp.break_even_before == pytest.approx(rp.break_even_after, rel=0.02)


def test_a_lower_accept_length_is_the_speculative_path_and_marked():
    ts = trials([500, 501, 499], [500, 499, 501], [600, 603, 598], [500, 502, 499], accept=(2.4, 2.0))
    rp = run_decide(ts)
    assert rp.path == "speculative" and "accept length 2.4" in rp.summary and "→ 2.0" in rp.summary
    assert "accept_length" in rp.moved and "cycle_ms" not in rp.moved


def test_half_the_loss_on_the_baseline_is_unclear_and_says_what_to_measure():
    # Baseline −8% against EAGLE-3's −16%, with noise that cannot tell 0 from −16 for it: no name.
    ts = trials([500, 530, 470], [460, 490, 430], [600, 636, 564], [504, 534, 474])
    rp = run_decide(ts)
    assert rp.path == "unclear"
    assert rp.summary.startswith("could not tell which path regressed")
    assert f"perfbisect compare {PARENT[:10]} {CULPRIT[:10]} --mode baseline" in rp.summary


def test_no_baseline_mode_or_no_trials_is_unclear_not_a_guess():
    ts = [t for t in trials([500] * 3, [500] * 3, [600] * 3, [510] * 3) if t.identity.mode == "eagle3"]
    rp = decide(ts, spec_mode="eagle3", modes=[("eagle3", True)], before=PARENT, after=CULPRIT, noise=NOISE,
                settings=StatsConfig())
    assert rp.path == "unclear" and "no non-speculative mode" in rp.summary
    rp = run_decide(ts)
    assert rp.path == "unclear" and "baseline has no usable trials" in rp.summary


def test_the_odds_are_a_bayes_factor_between_the_two_answers():
    se = 0.01
    PATH_ODDS = path_odds(StatsConfig())
    assert PATH_ODDS == 100  # 1 / stats.alpha
    # The baseline's change equal to the speculative mode's: the target hypothesis is favoured.
    assert log_odds_speculative(-0.15, se, -0.15, se) < -math.log(PATH_ODDS)
    # No baseline change: the speculative hypothesis.
    assert log_odds_speculative(0.0, se, -0.15, se) > math.log(PATH_ODDS)
    # Halfway with wide errors: neither.
    assert abs(log_odds_speculative(-0.075, 0.05, -0.15, 0.05)) < math.log(PATH_ODDS)


def test_the_answer_reaches_the_terminal_json_and_markdown():
    from dataclasses import replace
    from types import SimpleNamespace

    from perfbisect.report.markdown import bisection_markdown
    from perfbisect.model import BisectOutcome, Commit, Verdict
    from perfbisect.report.render import format_outcome, outcome_json

    rp = run_decide(trials([498, 502, 500], [501, 497, 500], [600, 606, 596], [511, 515, 508]))
    out = replace(BisectOutcome(verdict=Verdict.REGRESSED, good=PARENT, bad=CULPRIT, culprit=CULPRIT, effect_pct=-15.0),
                  regressed_path=rp)
    commit = Commit(sha=CULPRIT, subject="Speculative: reuse the draft buffer", parents=(PARENT,))
    result = SimpleNamespace(outcome=out, commits={CULPRIT: commit}, filtered=[], db_path="r.sqlite", bisection_id=1)
    text = "\n".join(format_outcome(result))
    assert "which path: speculative path regressed (baseline unchanged; accept length 2.40 → 2.40" in text
    assert "break-even accept length" in text
    data = outcome_json(result)
    assert data["regressed"] == "speculative" and data["regressed_path"]["moved"] == list(rp.moved)
    assert data["regressed_path"]["break_even_after"] == pytest.approx(rp.break_even_after)
    md = bisection_markdown(result, None, None)
    assert "| which path | **speculative**: speculative path regressed" in md
    assert f"| break-even accept length | {rp.break_even_before:.2f} → {rp.break_even_after:.2f} |" in md
