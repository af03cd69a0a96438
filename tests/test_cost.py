"""Issue #13: what a bisection costs, said in the terminal — through the real `perfbisect` CLI.

Estimates, budget question, progress lines and heartbeat, what was spent, `log ID`, the demo
directory's database, `compare` order, `plan` counts, `patches check` grouping, an endpoint conflict
in `plan`, and `--format markdown`. No duration or rate is asserted.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfbisect.engine import cost
from perfbisect.demo.target import make_demo_target
from perfbisect.settings import StatsConfig
from perfbisect.engine.stats import NoiseModel
from perfbisect.report.costs import forecast_method, spent_line
from perfbisect.report.markdown import md
from tests.cli_runner import run_command


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    # Seeded measurement: the bisections these tests finish end the same way on an idle and a busy machine.
    return make_demo_target(tmp_path_factory.mktemp("cost") / "demo", commits=12, seeded=True)


def _with_cost(demo, tmp_path: Path, table: str) -> Path:
    cfg = tmp_path / "perfbisect.toml"
    cfg.write_text(demo.config.read_text() + "\n[cost]\n" + table + "\n")
    return cfg


@pytest.fixture(scope="module")
def finished(demo, tmp_path_factory):
    """One bisection run with -q, --yes past a tiny budget, and a fast heartbeat."""
    tmp = tmp_path_factory.mktemp("finished")
    cfg = _with_cost(demo, tmp, "trial_minutes = 8.4\ngpus = 8\nbudget_gpu_hours = 0.5")
    db = tmp / "r.sqlite"
    proc = run_command("run", f"good={demo.good}", f"bad={demo.bad}", "-c", str(cfg), "--db", str(db), "-q", "--yes",
               env={"PERFBISECT_HEARTBEAT_S": "0.5"})
    assert proc.returncode == 0, proc.stderr
    return cfg, db, proc


def test_plan_estimates_from_config_and_counts_agree_with_rows(demo, tmp_path):
    cfg = _with_cost(demo, tmp_path, "trial_minutes = 8.4\ngpus = 8")
    proc = run_command("plan", f"good={demo.good}", f"bad={demo.bad}", "-c", str(cfg), "--db", str(tmp_path / "empty.sqlite"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    rows = [line for line in lines if re.match(r"^[0-9a-f]{10}  ", line)]
    measured = sum(1 for r in rows if "  measure  " in r)
    filtered = sum(1 for r in rows if "filtered:" in r)
    assert f"{len(rows)} commits: {measured} to measure, {filtered} filtered" in proc.stdout
    assert "bad endpoint" in rows[-1] and "  measure  " in rows[-1]
    est = next(line for line in lines if line.startswith("estimate: ~"))
    assert "GPU-hours" in est and "[cost] trial_minutes" in est and "× 8 GPUs" in est
    how = lines[lines.index(est) + 1]
    if "fitted formula" not in how:  # (the formula is the fallback of a machine too slow to simulate)
        assert "simulated runs of the search" in how and "assumed: 5 × stats.min_effect_pct" in how
        assert "prior: 5.0%" in how  # a fresh host: the search starts from the config's prior noise
    # --json carries the same estimate: the median of its simulations, with their 10th–90th range.
    db = str(tmp_path / "empty.sqlite")
    j = run_command("plan", f"good={demo.good}", f"bad={demo.bad}", "-c", str(cfg), "--db", db, "--json")
    assert j.returncode == 0, j.stderr
    e = json.loads(j.stdout)["estimate"]
    runs = e["simulated_trials"]
    assert runs == sorted(runs) and runs and e["method"].startswith(f"median of {len(runs)} simulated runs")
    assert e["trials_low"] <= e["trials"] <= e["trials_high"] <= e["max_trials"] == StatsConfig().max_trials_total
    assert min(runs) <= e["trials_low"] and e["trials_high"] <= max(runs)
    assert abs(e["trials"] - statistics.median(runs)) <= 0.5
    assert e["gpu_hours"] == pytest.approx(e["trials"] * 8.4 / 60 * 8)
    assert e["gpu_hours_low"] <= e["gpu_hours"] <= e["gpu_hours_high"]
    assert e["effect_pct"] == pytest.approx(15.0) and e["noise_pct"] == pytest.approx(5.0)
    assert e["seconds_to_estimate"] >= 0 and e["cpu_seconds_to_estimate"] >= 0
    if "fitted formula" in how:  # the text run's simulations hit the CPU budget (a very slow machine)
        assert est.startswith(f"estimate: ~{cost.expected_trials(e['candidates'], e['max_trials'])} trials, at most {e['max_trials']}")
    elif e["trials_high"] > e["trials_low"]:
        assert est.startswith(f"estimate: ~{e['trials']} trials ({e['trials_low']}–{e['trials_high']} in 80% of simulated runs)")
    else:
        assert est.startswith(f"estimate: ~{e['trials']} trials, at most {e['max_trials']}")
    told = run_command("plan", f"good={demo.good}", f"bad={demo.bad}", "-c", str(cfg), "--db", db, "--json", "--effect", "40")
    assert told.returncode == 0, told.stderr
    told_est = json.loads(told.stdout)["estimate"]
    assert told_est["effect_pct"] == pytest.approx(40.0) and told_est["effect_source"] == "given: --effect"
    bad = run_command("plan", f"good={demo.good}", f"bad={demo.bad}", "-c", str(cfg), "--db", db, "--effect", "140")
    assert bad.returncode == 2 and "--effect" in bad.stderr and "between 0 and 100" in " ".join(bad.stderr.split())
    assert "Traceback" not in bad.stderr




def test_forecast_structure_and_the_formula_fallback():
    settings, noise = StatsConfig(), NoiseModel.prior(3.0)
    a = cost.forecast_trials(6, settings, noise, cost.Effect(15.0, "given"), budget_s=60.0, reps=5)
    b = cost.forecast_trials(6, settings, noise, cost.Effect(15.0, "given"), budget_s=60.0, reps=5)
    assert a.runs == b.runs and len(a.runs) == 5  # seeded: the same simulations every time
    assert a.low <= a.trials <= a.high and all(c >= 2 for c in a.runs)
    far = cost.forecast_trials(100, settings, noise, cost.Effect(15.0, "given"), budget_s=60.0, reps=3)
    assert far.simulated_at == 32 and far.extended_by > 0 and len(far.runs) == 3
    assert "at 32 candidates" in forecast_method(far)
    none = cost.forecast_trials(20, settings, noise, cost.Effect(15.0, "given"), budget_s=0.0)
    assert none.runs == () and forecast_method(none).startswith("fitted formula")
    assert none.trials == none.low == none.high == cost.expected_trials(20, settings.max_trials_total)


def test_spent_wall_time_leaves_out_a_pause():
    def trial(start, end):
        return SimpleNamespace(started_at=start, finished_at=end)

    steady = [trial(1000.0 + 60 * i, 1050.0 + 60 * i) for i in range(4)]
    s = cost.spent(steady, gpus=2)
    assert s["wall_s"] == pytest.approx(230.0) and s["paused_s"] == 0.0
    assert s["gpu_hours"] == pytest.approx(4 * 50 / 3600 * 2)
    resumed = steady + [trial(steady[-1].finished_at + 7200 + 60 * i, steady[-1].finished_at + 7250 + 60 * i) for i in range(2)]
    r = cost.spent(resumed, gpus=2)
    assert r["wall_s"] == pytest.approx(230.0 + 110.0) and r["paused_s"] == pytest.approx(7200.0)
    assert "paused, not counted" in spent_line(r) and "paused" not in spent_line(s)


def test_plan_without_any_trial_cost_says_it_is_unknown(demo, tmp_path):
    proc = run_command("plan", f"good={demo.good}", f"bad={demo.bad}", "-c", str(demo.config), "--db", str(tmp_path / "e.sqlite"))
    assert proc.returncode == 0, proc.stderr
    assert "time unknown" in proc.stdout and "trial_minutes" in proc.stdout


def test_run_over_budget_without_a_terminal_refuses_with_exit_2(demo, tmp_path):
    cfg = _with_cost(demo, tmp_path, "trial_minutes = 8.4\ngpus = 8\nbudget_gpu_hours = 0.5")
    db = tmp_path / "r.sqlite"
    proc = run_command("run", f"good={demo.good}", f"bad={demo.bad}", "-c", str(cfg), "--db", str(db))
    assert proc.returncode == 2, proc.stderr
    text = " ".join(proc.stderr.split())
    assert text.startswith("Error: ") and "budget_gpu_hours" in text and "--yes" in text
    assert "Traceback" not in proc.stderr


def test_run_with_yes_heartbeat_and_spent(finished):
    _cfg, _db, proc = finished
    assert "still working: bisection #1: trial " in proc.stderr  # -q keeps a heartbeat
    assert re.search(rf"of at most {StatsConfig().max_trials_total} \(~\d+ expected\) · (endpoints|locating|second-change check|confirming)", proc.stderr)
    spent = next(line for line in proc.stdout.splitlines() if line.startswith("spent: "))
    used = int(re.search(r"observations used by the search: (\d+)", proc.stdout).group(1))
    run = int(re.search(r"^spent: (\d+) trials", spent).group(1))
    # The two counts agree, or say why they differ (issue #21: "trials used: 8" beside "spent: 9").
    want = "trials (all used by the search), " if run == used else f"({used} observations used by the search), "
    assert want in spent, spent
    assert "GPU-hours" in spent and "8 GPUs" in spent


def test_plan_learns_the_trial_cost_noise_and_effect_from_stored_trials(demo, finished):
    cfg, db, _ = finished
    proc = run_command("plan", f"good={demo.good}", f"bad={demo.bad}", "-c", str(cfg), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert "stored trials on this host" in proc.stdout
    how = next(line for line in proc.stdout.splitlines() if line.startswith("  how: "))
    assert "the endpoints' stored trials on this host" in how and "learned on this host by bisection #1" in how
    est = json.loads(run_command("plan", f"good={demo.good}", f"bad={demo.bad}", "-c", str(cfg), "--db", str(db), "--json").stdout)["estimate"]
    assert est["effect_source"].startswith("the endpoints' stored trials") and est["effect_pct"] > 0
    assert est["trial_s_source"].startswith("median of ")


def test_log_id_shows_one_bisection_in_detail(finished):
    cfg, db, _ = finished
    proc = run_command("log", "1", "-c", str(cfg), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("bisection #1 ") and "verdict: regressed" in out and "effect " in out
    assert "good endpoint" in out and "bad endpoint" in out and "← first bad commit" in out
    assert re.search(r"\d+ trials? ", out) and "report: " in out and "spent: " in out
    missing = run_command("log", "7", "-c", str(cfg), "--db", str(db))
    assert missing.returncode == 2 and "No bisection #7" in missing.stderr


def test_run_progress_lines_and_markdown_summary(demo, tmp_path):
    db = tmp_path / "r.sqlite"
    proc = run_command("run", f"good={demo.good}", f"bad={demo.bad}", "-c", str(demo.config), "--db", str(db), "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    # stderr is not a terminal: one plain status line per trial
    status = [line for line in proc.stderr.splitlines() if " of at most " in line]
    assert status and status[0].startswith("bisection #1: trial 1 of at most") and "endpoints" in status[0]
    assert any("best: " in s and " p=" in s for s in status) and all("elapsed" in s and "ETA" in s for s in status)
    out = proc.stdout
    assert out.startswith("### ") and "REGRESSED" in out and "| first bad commit | `" in out
    assert "| spent |" in out and "| report | `r-bisection-1.html` (" in out and str(tmp_path) not in out
    assert re.search(r"^\| interval \| 98% \[-[0-9.]+%, -[0-9.]+%\] \|$", out, re.M), out
    # perfbisect's own prose reads as written (issue #21: it was "\\-41\\.1% \\(B vs A\\)"); a subject is still escaped.
    explanation = out.strip().splitlines()[-1]
    assert "First bad commit" in explanation and "\\" not in explanation, explanation


def test_commands_in_the_demo_directory_find_the_demos_database(demo_run):
    root = demo_run.dir  # `perfbisect demo --dir root` (conftest, shared)
    log = run_command("log", cwd=root)
    assert log.returncode == 0, log.stderr
    assert log.stdout.startswith("bisection #1 ")
    assert run_command("log", "1", cwd=root).stdout.startswith("bisection #1 ")
    report = run_command("report", "latest", cwd=root)
    assert report.returncode == 0 and str(root / "reports") in report.stdout


def test_compare_prints_its_arguments_in_the_order_given(demo, tmp_path):
    db = tmp_path / "r.sqlite"
    a, b = demo.bad, demo.good  # deliberately the later commit first
    proc = run_command("compare", a, b, "-c", str(demo.config), "--db", str(db), "--max-trials", "2")
    assert proc.returncode in (0, 3), proc.stderr
    assert proc.stdout.splitlines()[0].startswith(f"{a[:10]} vs {b[:10]} ")
    log = run_command("log", "-c", str(demo.config), "--db", str(db))
    assert f"{a[:10]} vs {b[:10]}" in log.stdout
    md_out = run_command("compare", a, b, "-c", str(demo.config), "--db", str(db), "--max-trials", "2", "--format", "markdown")
    assert md_out.returncode in (0, 3), md_out.stderr
    text = md_out.stdout
    assert text.startswith("### ") and text.index(f"| A | `{a[:10]}`") < text.index(f"| B | `{b[:10]}`")


def test_check_format_markdown(demo, tmp_path):
    db = tmp_path / "r.sqlite"
    # One mode (the one the demo slowed): the summary's format is the question, not a second mode's
    # `same`, which takes the comparison's whole trial budget to settle.
    cfg = tmp_path / "perfbisect.toml"
    cfg.write_text(demo.config.read_text() + '\n[hook]\nmodes = ["eagle3"]\n')
    proc = run_command("check", demo.good, demo.bad, "-c", str(cfg), "--db", str(db), "--action", "check", "--format", "markdown")
    assert proc.returncode in (0, 3), proc.stderr
    assert proc.stdout.startswith("### ") and "perfbisect check" in proc.stdout and "| range | `" in proc.stdout


def test_format_is_checked(demo):
    proc = run_command("run", f"good={demo.good}", f"bad={demo.bad}", "-c", str(demo.config), "--format", "html")
    assert proc.returncode == 2 and "--format" in proc.stderr


def test_patches_check_groups_identical_rows(demo):
    proc = run_command("patches", "check", f"good={demo.good}", f"bad={demo.bad}", "-c", str(demo.config))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 3, proc.stdout  # 12 commits that all apply the same way: one row, the total, the verdict
    assert "(12 commits)  applies" in lines[0] and lines[1].startswith("12 commits: 12 apply")
    assert lines[2] == "the stack applies end to end"


def test_plan_exits_2_when_the_bad_endpoint_conflicts(tmp_path):
    target = make_demo_target(tmp_path / "demo", commits=10)
    patch = sorted((target.root / "patches").glob("*.patch"))[0].read_text()
    touched = re.search(r"^\+\+\+ b/(\S+)", patch, re.M).group(1)
    repo = target.root / "sglang"
    (repo / touched).write_text("# rewritten upstream: the patch no longer applies\n")
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "Rewrite a patched file"], check=True)
    proc = run_command("plan", f"good={target.good}", "bad=HEAD", "-c", str(target.config))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "SKIP" in proc.stdout.splitlines()[-3] or "patch conflict" in proc.stdout
    assert "does not apply at the bad endpoint" in " ".join(proc.stderr.split())


def test_markdown_escapes_repository_text():
    hostile = "Fix [click](http://x) <img src=x> | `code` *bold* #1\x1b[31m"
    text = md(hostile)
    assert "\\[click\\]\\(http" in text and "\\<img" in text and "\\|" in text and "\\`" in text
    assert "\x1b" not in text
