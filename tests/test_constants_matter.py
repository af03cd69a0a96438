"""benchmarks/constants_matter.py: what it changes, that it puts back what it changed, and that its memo of the default
run's posteriors and look-ahead picks changes no row (issue #51)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import constants_matter as cm  # noqa: E402
from perfbisect.engine import endings, gates, kernel, pair_checks  # noqa: E402


def test_numbers_are_halved_and_doubled_ints_rounded_half_up_and_off_only_where_zero_switches_the_rule_off() -> None:
    values = {name: {p.label: p.value for p in cm.tuning_perturbations(name)}
              for name in ("min_trials_at_change", "robust_min_trials", "small_step_trials", "no_change_prior",
                           "two_change_prior", "pure_alpha", "layout_keep")}
    assert values["min_trials_at_change"] == {"×0.5": 1, "×2": 4}
    assert values["robust_min_trials"] == {"×0.5": 3, "×2": 10}
    assert values["small_step_trials"] == {"×0.5": 2, "×2": 6}
    assert values["no_change_prior"] == {"×0.5": 0.25, "×2": 0.75}  # a prior of 1 would leave the rest none
    assert values["two_change_prior"] == {"×0.5": 0.05, "×2": 0.2}
    assert values["pure_alpha"] == {"×0.5": 0.0015, "×2": 0.006, "off": 0.0}
    assert values["layout_keep"] == {"×0.5": 0.25, "×2": 1.0}


def test_a_rule_the_cell_reaches_moves_its_runs_and_the_memo_changes_no_row(capsys) -> None:
    rows = []
    for extra in ([], ["--no-memo"]):
        assert cm.main(["--fields", "small_step_sigmas,locate_min_gain_bits", "--cells", "M1,S1", "--json", *extra]) == 0
        rows.append(json.loads(capsys.readouterr().out)["rows"])
    assert rows[0] == rows[1]
    moved = {(r["constant"], r["change"]): r["cells"] for r in rows[0]}
    assert moved[("small_step_sigmas", "off")] == {"M1": [1, 0]}
    assert moved[("small_step_sigmas", "×2")] == {"S1": [1, 0]}
    assert moved[("locate_min_gain_bits", "×0.5")] == {}  # needs a per-commit cap to act


def test_module_constants_and_the_memoised_functions_are_put_back(capsys) -> None:
    posterior, best_trial = kernel.posterior, gates.best_trial
    assert cm.main(["--fields", "none,PRICE_LIMIT", "--cells", "M1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["value"] for r in doc["rows"]] == ["50000", "200000"]
    assert endings.PRICE_LIMIT == pair_checks.PRICE_LIMIT == 100_000
    assert kernel.posterior is posterior and gates.best_trial is best_trial
    assert "changepoint.OUTLIER_SHARE" in doc["skipped"]
