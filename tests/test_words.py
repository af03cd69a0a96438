"""The engine answers with reason codes; report/words.py writes the sentences. Every code the engine can emit has
its words, and an outcome stored in the database words the same when it is read back."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from perfbisect.engine.bisect import SearchPolicy
from perfbisect.engine.observations import Done
from perfbisect.engine.stats import NoiseModel
from perfbisect.model import BisectOutcome, Observation, Reason, Verdict
from perfbisect.report import words
from perfbisect.settings import StatsConfig
from perfbisect.store import codec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from simulated_target import SimulatedTarget  # noqa: E402


def _codes() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "perfbisect" / "engine").glob("*.py"):
        found |= set(re.findall(r'Reason\(\s*"([a-z_.]+)"', path.read_text()))
        # codes chosen by a conditional: Reason("a" if ... else "b")
        found |= set(re.findall(r'Reason\(\s*"[a-z_.]+" if .*? else "([a-z_.]+)"', path.read_text()))
    return found


def test_every_reason_code_the_engine_emits_is_worded():
    codes = _codes()
    assert {"search", "confirm.pair", "regressed", "exhausted", "futile.confirm", "faster_unsettled"} <= codes
    source = (ROOT / "perfbisect" / "report" / "words.py").read_text()
    unworded = sorted(c for c in codes if f'"{c}"' not in source)
    assert not unworded, f"reason codes report/words.py does not word: {unworded}"


def _run(steps: dict[int, float], n: int, sigma: float, seed: int, **settings) -> tuple[list, BisectOutcome]:
    cs = [f"{j:02d}" + "cd" * 19 for j in range(n)]
    cfg = StatsConfig(**settings)
    policy = SearchPolicy(cs, cfg, NoiseModel.prior(cfg.prior_sigma_pct))
    target = SimulatedTarget(steps, n, sigma, seed=seed)
    obs: list[Observation] = []
    asked = []
    while True:
        act = policy.next(obs)
        if isinstance(act, Done):
            return asked, act.outcome
        asked.append(act)
        j = cs.index(act.commit)
        obs.append(Observation(act.commit, target.trial(j, len(obs)), seq=len(obs)))


@pytest.mark.parametrize("steps,n,sigma,settings,verdict", [
    ({9: -8.0}, 16, 2.0, {}, Verdict.REGRESSED),
    ({}, 8, 2.0, {}, Verdict.SAME),
    ({5: -4.0}, 12, 4.0, {"max_trials_total": 14}, Verdict.INCONCLUSIVE),
])
def test_a_stored_outcome_words_as_it_did_when_the_search_ended(steps, n, sigma, settings, verdict):
    asked, outcome = _run(steps, n, sigma, seed=3, **settings)
    assert outcome.verdict is verdict and outcome.reason is not None and outcome.explanation == ""
    said = words.explained(outcome)
    assert said.explanation and said.explanation != outcome.explanation
    # the engine's values through the store's JSON (nested reasons and names become dicts and lists) and back
    stored = codec.load(BisectOutcome, json.loads(json.dumps(codec.encode(outcome))))
    again = words.explained(stored)
    assert (again.explanation, again.stopped_by, again.drift_note) == (said.explanation, said.stopped_by, said.drift_note)
    # every trial's reason is worded, and a check phase says what it checks
    for act in asked:
        assert words.measure_text(act)
        if act.phase in ("second-change check", "confirming") and act.why.code != "search":
            assert words.check_text(act)


def test_an_outcome_stored_before_reasons_were_codes_keeps_its_own_words():
    old = BisectOutcome(Verdict.SAME, "a" * 40, "b" * 40, explanation="No regression beyond noise.", stopped_by=None)
    assert words.explained(old) is old


def test_a_nested_reason_stored_as_a_dict_words_like_the_value():
    r = Reason("exhausted", {"why": {"code": "best_holds", "numbers": {"p": 0.9871}}, "limit": "total",
                             "max_total": 40, "max_per_commit": 0, "spent": 40, "best": [["c" * 40]], "top_p": 0.9871,
                             "ruled_out": None, "alpha": 0.01, "price_of": None, "more": None, "tol": 0.0,
                             "drift": None, "history": [], "trials": 40})
    out = words.explained(BisectOutcome(Verdict.INCONCLUSIVE, "a" * 40, "b" * 40, reason=r))
    assert out.explanation.startswith("The trial budget ran out (stats.max_trials_total = 40; 40 trials run)")
    assert "the best answer holds 0.987" in out.explanation and "Best answer: cccccccccc (probability 0.987)" in out.explanation
    assert out.stopped_by == "stats.max_trials_total = 40"
