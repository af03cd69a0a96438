"""What a report's reader can see, checked in the DOM of a real headless Chromium, and the report's replay
of the search checked against the decisions the live search made.

A probe script is added to a copy of each report: it waits for every chart to draw
(``window.perfbisectCharts``), measures the page and the charts' SVG (widths, axis labels, legend
labels, mark colours) and writes the result into a ``data-probe`` attribute that ``--dump-dom`` returns.
Reports come from the session's real demo bisection (tests/conftest.py), a real comparison, a real
command-workload bisection, and a synthetic database whose machine drifts (perfbisect.demo.results).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from perfbisect.report.report import ROLE_COLORS, SIDE_COLORS
from tests.test_report import needs_chromium, probe_page
from tests.cli_runner import run_command

PROBE = """<script>
window.perfbisectCharts.then(function () { setTimeout(function () {
  function texts(root, sel) { return Array.prototype.map.call(root.querySelectorAll(sel), function (e) { return e.textContent; }); }
  function fills(root, sel) { return Array.from(new Set(Array.prototype.map.call(root.querySelectorAll(sel), function (e) { return (e.getAttribute("fill") || "").toLowerCase(); }))); }
  var out = { scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
              text: document.body.innerText, charts: {} };
  document.querySelectorAll(".chart").forEach(function (c) {
    var svg = c.querySelector("svg"), box = svg ? svg.getBoundingClientRect() : null;
    var right = 0;
    c.querySelectorAll(".role-mark path").forEach(function (p) { right = Math.max(right, p.getBoundingClientRect().right); });
    out.charts[c.id] = {
      svgLeft: box && box.left, svgRight: box && box.right, marksRight: right,
      xLabels: texts(c, ".role-axis-label text"), legend: texts(c, ".role-legend-label text"),
      culpritLabel: texts(c, ".culprit_label_marks text"), gapLabel: texts(c, ".gap_label_marks text"), driftPaths: c.querySelectorAll(".drift_marks path").length,
      trialFills: fills(c, ".trials_marks path"), historyFills: fills(c, ".history_marks path"),
      failed: c.textContent.indexOf("chart failed to render") >= 0,
    };
  });
  document.body.setAttribute("data-probe", JSON.stringify(out));
}, 50); });
</script>"""


def probe(report: Path, tmp: Path, width: int) -> dict:
    """Open a copy of ``report`` with the probe at ``width`` CSS pixels and return what the probe measured."""
    return probe_page(report, tmp, width, PROBE, "data-probe")


def _copy_db(src: Path, dst: Path) -> Path:
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    return dst


# ------------------------------------------------------------------------------------------------
# The replay is the search that ran


def test_the_reports_replay_makes_the_live_decisions(demo_run, tmp_path):
    """Every decision the demo's live search logged beside its observation is the one the report's replay
    makes from what is stored (starting noise, nodes, history); the last step stops with the stored verdict."""
    from perfbisect.engine.search_start import SearchStart, observations_of, policy_for
    from perfbisect.report.replay import decision_json, replay, stored_start
    from perfbisect.store import open_store

    db = _copy_db(Path(demo_run.result["db"]), tmp_path / "demo.sqlite")
    with open_store(db) as store:
        bid = demo_run.result["bisection_id"]
        record = store.bisection(bid)
        stored = store.observations(bid)
    assert record.search_start is not None
    start = SearchStart.from_json(record.search_start)
    live = [o.decision for o in stored]
    assert all(d is not None for d in live), "every measured observation keeps the decision that asked for it"
    # the replay, every step, no budget
    out = replay(record, stored, max_steps=10 ** 6, work=10 ** 15)
    assert out["shown"] == len(stored) and out["compared"] == len(stored) - 1
    assert out["mismatches"] == 0, [s for s in out["steps"] if s["live_agrees"] is False]
    assert out["noise"] == start.noise.describe()
    # and step by step, the full decisions (commit, phase, reason) including the first one, each stored with what
    # it was decided on: the k observations before it, nothing in flight, no node (a local search)
    policy = policy_for(record, stored_start(record)[0])
    obs = observations_of(stored)
    for k, o in enumerate(stored):
        assert o.decision == {**decision_json(policy.next(obs[:k])), "after": k, "pending": [], "host": None}, k
    final = policy.next(obs)
    assert decision_json(final)["phase"] == "done"
    assert final.outcome.verdict == record.outcome.verdict and final.outcome.culprit == record.outcome.culprit


def test_the_replay_starts_from_the_stored_noise_not_todays_prior(demo_run, tmp_path):
    """A stored start (noise σ, dof, source) is what the replay uses: changing the configured prior in the
    stored settings does not change a replayed reason, changing the stored start does."""
    from perfbisect.report.replay import replay
    from perfbisect.store import open_store

    db = _copy_db(Path(demo_run.result["db"]), tmp_path / "demo.sqlite")
    bid = demo_run.result["bisection_id"]
    with open_store(db) as store:
        record = store.bisection(bid)
        stored = store.observations(bid)
    base = replay(record, stored, max_steps=10 ** 6, work=10 ** 15)
    from dataclasses import replace

    other_prior = replace(record, settings={**record.settings, "prior_sigma_pct": 17.0})
    assert replay(other_prior, stored, max_steps=10 ** 6, work=10 ** 15)["steps"] == base["steps"]
    start = json.loads(json.dumps(record.search_start))
    start["noise"]["sigma_b"] *= 4
    start["noise"]["source"] = "a wider start"
    moved = replay(replace(record, search_start=start), stored, max_steps=10 ** 6, work=10 ** 15)
    assert "a wider start" in moved["noise"] and moved["mismatches"] > 0


def test_the_replay_budget_is_work_so_every_machine_shows_the_same_steps(tmp_path):
    """A long search is shown at the steps a fixed amount of work buys: the same steps on every run."""
    from perfbisect.demo.results import make_results
    from perfbisect.report.replay import replay, step_work
    from perfbisect.store import open_store

    r = make_results(tmp_path / "long", commits=24, trials=90)
    with open_store(r.db) as store:
        record = store.bisection(r.bisection_ids[0])
        stored = store.observations(record.id)
    work = 3 * step_work(45, 24)
    first = replay(record, stored, work=work)
    again = replay(record, stored, work=work)
    assert first["sampled"] and 1 < first["shown"] < 90 and first["steps"][-1]["step"] == 90
    assert [s["step"] for s in first["steps"]] == [s["step"] for s in again["steps"]]
    assert first["work"] == again["work"] <= work
    assert "migration 0006" in first["note"]  # a database without a stored start says what it replays from


# ------------------------------------------------------------------------------------------------
# What the reader sees (Chromium)


@needs_chromium
@pytest.mark.parametrize("width", [1400, 900])
def test_demo_report_charts_fit_show_the_sides_and_name_the_culprit(demo_run, tmp_path, width):
    page = probe(Path(demo_run.result["report"]), tmp_path, width)
    culprit = demo_run.result["culprit"][:10]
    assert page["scrollWidth"] <= page["innerWidth"], page["scrollWidth"]  # no sideways scroll
    for name, chart in page["charts"].items():
        assert not chart["failed"], name
        assert chart["svgRight"] <= page["innerWidth"] + 0.5, (name, chart["svgRight"])
        assert chart["marksRight"] <= chart["svgRight"] + 0.5, (name, "the last trial is clipped")
        assert not any(label.endswith("…") for label in chart["legend"]), chart["legend"]
    rng, timeline = page["charts"]["chart-range"], page["charts"]["chart-timeline"]
    assert culprit in rng["xLabels"] and rng["culpritLabel"] == [f"culprit {culprit}"]
    for chart in (rng, timeline):
        assert {"before the culprit", "the culprit and after"} <= set(chart["legend"])
        assert {SIDE_COLORS["before the culprit"], SIDE_COLORS["the culprit and after"]} <= set(chart["trialFills"])
    assert timeline["driftPaths"] == 0  # the demo's machine held steady: no drift is drawn that was not fitted


@needs_chromium
def test_a_fitted_drift_is_drawn_with_both_sides(tmp_path):
    """A machine slowing 1% per trial under a planted step: the model fits drift, the timeline draws it
    per side, and the text says how far it went."""
    from perfbisect.app import reports
    from perfbisect.demo.results import make_results
    from perfbisect.store import open_store

    r = make_results(tmp_path / "drift", commits=16, trials=40, drift_pct_per_trial=-1.0, sigma_pct=1.0, seed=5)
    with open_store(r.db) as store:
        path, view = reports.report(store, "latest", tmp_path / "drift.html")
    assert view["drift_lines"] and view["levels"]["p_drift"] >= 0.5
    page = probe(path, tmp_path, 900)
    timeline = page["charts"]["chart-timeline"]
    assert timeline["driftPaths"] >= 2  # one fitted line per side
    assert {SIDE_COLORS["before the culprit"], SIDE_COLORS["the culprit and after"]} <= set(timeline["trialFills"])
    assert "fitted level plus the drift" in page["text"]
    assert page["scrollWidth"] <= page["innerWidth"]


@needs_chromium
def test_an_interrupted_bisection_shows_its_gap_as_a_labelled_band(tmp_path):
    """Issue #49: a bisection interrupted for 2 h 10 min and resumed left an unexplained jump on the time
    axis. The timeline shades the gap and labels it."""
    from perfbisect.app import reports
    from perfbisect.demo.results import make_results
    from perfbisect.store import open_store

    r = make_results(tmp_path / "gap", commits=16, trials=40)
    with sqlite3.connect(r.db) as con:
        middle = con.execute("select min(started_at) + (max(started_at) - min(started_at)) / 2 from trials").fetchone()[0]
        con.execute("update trials set started_at = started_at + 7800, finished_at = finished_at + 7800 "
                    "where started_at > ?", (middle,))
    with open_store(r.db) as store:
        path, view = reports.report(store, "latest", tmp_path / "gap.html")
    assert [g["label"] for g in view["gaps"]] == ["interrupted 2 h 10 min"]
    page = probe(path, tmp_path, 900)
    assert page["charts"]["chart-timeline"]["gapLabel"] == ["interrupted 2 h 10 min"]
    assert "grey band (interrupted 2 h 10 min) marks when the bisection stood still" in page["text"]
    assert page["charts"]["chart-range"]["gapLabel"] == []  # the range has no time axis


@needs_chromium
def test_index_history_is_per_commit_with_fixed_role_colours(demo_run, compared_demo, tmp_path):
    db = _copy_db(Path(demo_run.result["db"]), tmp_path / "demo.sqlite")
    site = tmp_path / "site"
    proc = run_command("report", "--index", str(site), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    page = probe(site / "index.html", tmp_path, 900)
    assert page["scrollWidth"] <= page["innerWidth"]
    charts = list(page["charts"].values())
    assert charts
    for chart in charts:
        commits = [t for t in chart["xLabels"] if re.fullmatch(r"[0-9a-f]{10}", t)]
        assert commits, chart["xLabels"]  # commits on the axis, not wall-clock ticks
        assert not [t for t in chart["xLabels"] if re.fullmatch(r"\d\d:\d\d", t)]
        assert set(chart["historyFills"]) <= set(ROLE_COLORS.values())
        assert set(chart["legend"]) <= set(ROLE_COLORS)
    # The bisected mode's history has both ends and the culprit; the other mode (measured only at the
    # culprit and its parent, to say which path regressed) has the culprit.
    assert any({"good", "bad", "culprit"} <= set(chart["legend"]) for chart in charts), [c["legend"] for c in charts]
    assert all("culprit" in chart["legend"] for chart in charts)
    # The same role keeps its colour on another database's index (a comparison: A and B).
    site2 = tmp_path / "site2"
    proc = run_command("report", "--index", str(site2), "--db", str(compared_demo.db_copy(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    other = probe(site2 / "index.html", tmp_path, 1400)
    for chart in other["charts"].values():
        assert set(chart["historyFills"]) <= {ROLE_COLORS["A"], ROLE_COLORS["B"]}


@needs_chromium
def test_compare_report_shows_a_and_b_without_bisection_help(compared_demo, tmp_path):
    report = Path(compared_demo.result["report"])
    page = probe(report, tmp_path, 900)
    assert page["scrollWidth"] <= page["innerWidth"]
    timeline = page["charts"]["chart-timeline"]
    assert {"A", "B"} <= set(timeline["legend"])
    assert {SIDE_COLORS["A"], SIDE_COLORS["B"]} <= set(timeline["trialFills"])
    text = page["text"]
    assert "A in blue, B in red" in text
    for bisection_only in ("blue bands", "the culprit", "Ticks on the axis"):
        assert bisection_only not in text, bisection_only


@needs_chromium
def test_command_target_report_has_no_server_help(tmp_path):
    """A command workload runs no server: its report says nothing of server sessions or server processes."""
    from perfbisect.demo.target import make_demo_target

    target = make_demo_target(tmp_path / "demo", commits=6)
    script = tmp_path / "bench.py"
    script.write_text(
        "import json, pathlib, re\n"
        "text = pathlib.Path('python/sglang/srt/model_executor/decode.py').read_text()\n"
        "step = float(re.search(r'DECODE_STEP_MS = ([0-9.]+)', text).group(1))\n"
        "print(json.dumps({'tok_s': 1000.0 / step}))\n"
    )
    text = target.config.read_text()
    text = text.replace('[workload]\nkind = "sglang"', f'[workload]\nkind = "command"\ncommand = ["{{python}}", "{script}"]\nmetric = "tok_s"')
    text = text.replace('metric = "eagle3"', 'metric = "baseline"')
    config = tmp_path / "perfbisect.toml"
    config.write_text(text)
    proc = run_command("run", f"good={target.good}", f"bad={target.bad}", "-c", str(config), "--db", str(tmp_path / "r.sqlite"),
               "--json", timeout=540)
    from perfbisect.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION

    # whatever the verdict (a busy machine may leave it inconclusive), the bisection wrote its report
    assert proc.returncode in (EXIT_OK, EXIT_REGRESSION, EXIT_INCONCLUSIVE), proc.stderr
    page = probe(Path(json.loads(proc.stdout)["report"]), tmp_path, 900)
    assert page["scrollWidth"] <= page["innerWidth"]
    for server_words in ("server session", "server's processes"):
        assert server_words not in page["text"], server_words


def test_screenshot_script_refuses_a_missing_browser(tmp_path):
    """tools/screenshots.py names the browser it could not find and how to point it at one."""
    proc = subprocess.run([sys.executable, "tools/screenshots.py", "--chromium", str(tmp_path / "no-chromium"),
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 2 and "no-chromium" in proc.stderr and "--chromium" in proc.stderr
    assert not list(tmp_path.glob("*.png"))
    assert shutil.which("python3")


WRITE_STARTED_BISECTION = """
import sys
from perfbisect.model import Observation
from perfbisect.config import load_config
from perfbisect.engine.search_start import SearchStart
from perfbisect.engine.stats import NoiseModel
from perfbisect.store import open_store
config, db, good, bad = sys.argv[1:5]
cfg = load_config(config)
start = SearchStart(NoiseModel(0.031, 6.0, "a start stored with this bisection"), (Observation(good, 6.3, day="11-30"),), True)
with open_store(db) as store:
    print(store.begin_bisection(good=good, bad=bad, commits=[good, bad], metric=cfg.stats.metric, settings=cfg.stats,
                                target=str(cfg.target.repo), search_start=start.as_json()))
"""


def test_resume_continues_from_the_stored_start_and_its_report_replays_it(tmp_path):
    """A bisection started (by a process now gone) from a stored noise model and history is resumed from
    those, not from today's prior; each decision of the resumed search is stored, and the report's replay
    makes the same ones."""
    from perfbisect.demo.target import make_demo_target
    from perfbisect.report.replay import replay
    from perfbisect.store import open_store

    target = make_demo_target(tmp_path / "demo", commits=2)
    db = tmp_path / "r.sqlite"
    made = subprocess.run([sys.executable, "-c", WRITE_STARTED_BISECTION, str(target.config), str(db), target.good,
                           target.bad], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    bid = int(made.stdout.strip())
    proc = run_command("resume", str(bid), "-c", str(target.config), "--db", str(db), "--json", timeout=540)
    assert proc.returncode in (0, 1, 3), proc.stderr
    assert "noise model (as this bisection started)" in proc.stderr and "a start stored with this bisection" in proc.stderr
    with open_store(db) as store:
        record = store.bisection(bid)
        stored = store.observations(bid)
    assert stored and all(o.decision for o in stored)
    out = replay(record, stored, max_steps=10 ** 6, work=10 ** 15)
    assert out["compared"] == len(stored) - 1 and out["mismatches"] == 0
    assert "a start stored with this bisection" in out["noise"] and out["history"] == 1


# ------------------------------------------------------------------------------------------------
# Printing: Chromium driven over its DevTools pipe (--remote-debugging-pipe: fd 3 in, fd 4 out), with
# the print media emulated at the width of an A4 page's printable area (718 CSS px at 12 mm margins).

PRINT_PROBE = """window.perfbisectCharts.then(function () {
  var body = document.body.getBoundingClientRect();
  var heads = Array.prototype.map.call(document.querySelectorAll("h2, h3"), function (h) {
    var keep = h.closest(".keep");
    return { text: h.textContent, avoidAfter: getComputedStyle(h).breakAfter === "avoid",
             keptWith: keep ? getComputedStyle(keep).breakInside === "avoid" : false };
  });
  return JSON.stringify({ scrollWidth: document.documentElement.scrollWidth, innerWidth: innerWidth, body: body.width,
    charts: Array.prototype.map.call(document.querySelectorAll(".chart svg"), function (s) { return s.getBoundingClientRect().width; }),
    heads: heads });
})"""


def print_probe(url: str, tmp: Path, width: int = 718) -> dict:
    """Open ``url`` with the print media emulated at ``width`` CSS px and return what PRINT_PROBE measured."""
    import os
    import time

    from tests.test_report import CHROMIUM

    commands_r, commands_w = os.pipe()
    replies_r, replies_w = os.pipe()

    def child() -> None:  # Chromium reads commands on fd 3 and writes replies on fd 4
        for fd, to in ((commands_r, 3), (replies_w, 4)):
            if fd == to:
                os.set_inheritable(fd, True)
            else:
                os.dup2(fd, to)

    proc = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             f"--user-data-dir={tmp / 'print-profile'}", "--remote-debugging-pipe", "about:blank"],
                            close_fds=False, preexec_fn=child, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(commands_r)
    os.close(replies_w)
    out, inp = os.fdopen(commands_w, "wb", buffering=0), os.fdopen(replies_r, "rb", buffering=0)
    state = {"buf": b"", "id": 0}

    def send(method: str, params: dict | None = None, session: str | None = None) -> dict:
        state["id"] += 1
        msg = {"id": state["id"], "method": method, "params": params or {}, **({"sessionId": session} if session else {})}
        out.write(json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in state["buf"]:
                chunk = inp.read(65536)
                assert chunk, "Chromium closed its DevTools pipe"
                state["buf"] += chunk
            raw, state["buf"] = state["buf"].split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == state["id"]:
                assert "error" not in reply, reply["error"]
                return reply["result"]

    try:
        target = send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        send("Emulation.setEmulatedMedia", {"media": "print"}, session)
        send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": False},
             session)
        send("Page.navigate", {"url": url}, session)
        for _ in range(600):  # the page's scripts define the promise once the library has loaded
            found = send("Runtime.evaluate", {"expression": "typeof window.perfbisectCharts", "returnByValue": True}, session)
            if found["result"].get("value") == "object":
                break
            time.sleep(0.1)
        result = send("Runtime.evaluate", {"expression": PRINT_PROBE, "awaitPromise": True, "returnByValue": True}, session)
        send("Browser.close")
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()
        inp.close()
    return json.loads(result["result"]["value"])


@needs_chromium
def test_printed_report_uses_the_page_width_and_keeps_headings_with_their_charts(demo_run, tmp_path):
    page = print_probe(Path(demo_run.result["report"]).as_uri(), tmp_path)
    assert page["scrollWidth"] <= page["innerWidth"], page  # nothing wider than the page: no shrink-to-fit
    assert page["charts"] and all(w >= 0.95 * page["body"] for w in page["charts"]), page  # charts span the page
    for head in page["heads"]:
        assert head["avoidAfter"] or head["keptWith"], head  # no heading alone at the bottom of a page
