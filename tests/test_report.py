"""The HTML report: rendered from a real demo bisection, opened in a real headless Chromium.

The demo runs the real pipeline against the emulator; the escaping tests use a synthetic results
database (perfbisect.demo.results) over a real git repository whose commit subjects, directory
names and paths carry HTML, script and terminal-escape payloads.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from perfbisect.demo.results import make_results
from perfbisect.report.view_rows import commit_url
from perfbisect.report.report import inert
from tests.cli_runner import run_command

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian package `chromium`; .ci/run installs it)"
)

PAYLOADS = [
    "<script>alert('subject')</script>",
    '<img src=x onerror="alert(2)">',
    "\x1b[31mRED terminal\x1b[0m \x07bell",
    "quotes \" ' & ampersand </textarea>",
]


def chromium(url: str, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    """Headless Chromium, offline-minded flags, a fresh profile; console messages go to stderr."""
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=8000",
         *extra, url],
        capture_output=True, text=True, timeout=120,
    )


# Chromium's note that a ResizeObserver callback resized what it observes again within one frame: the
# charts fit their container on resize (report's page script), which a slow machine can land in one
# frame. Not an error of the page; every other console message is.
BENIGN_CONSOLE = ("ResizeObserver loop completed with undelivered notifications",)


def console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if ":CONSOLE" in line and not any(b in line for b in BENIGN_CONSOLE)]


@pytest.fixture(scope="module")
def demo(demo_run):
    """One real demo bisection (planted slowdown) through the CLI, with its report (conftest: shared)."""
    return demo_run.result


@pytest.fixture(scope="module")
def payload_results(tmp_path_factory):
    """A synthetic bisection whose commit subjects and paths hold HTML/script/terminal payloads."""
    base = tmp_path_factory.mktemp("payload") / "d<b>ir</b>\x1b[1m"
    subjects = [f"change {i}" for i in range(10)]
    subjects[5] = PAYLOADS[0] + " " + PAYLOADS[1]  # the culprit (commits // 2)
    subjects[6] = PAYLOADS[2]
    subjects[7] = PAYLOADS[3]
    return make_results(base, commits=10, trials=30, subjects=subjects, remote="javascript:alert(1)//github.com/a/b")


def test_demo_writes_its_report_and_names_it_in_json(demo):
    report = Path(demo["report"])
    assert report.is_absolute() and report.is_file()
    html = report.read_text()
    assert demo["culprit"] in html and "REGRESSION" in html
    # Self-contained and offline: no external script, stylesheet or image; the library inlined once.
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=\"?https?:", html)
    assert html.count("vegaEmbed=") + html.count("vegaEmbed =") <= 1 and "vega-lite" in html
    assert report.stat().st_size < 5 * 1024 * 1024


def test_report_command_latest_ids_and_errors(demo, tmp_path):
    db = demo["db"]
    out = tmp_path / "r.html"
    proc = run_command("report", "latest", "--db", db, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.is_file() and f"report: {out}" in proc.stdout
    assert demo["culprit"][:10] in proc.stdout and "%" in proc.stdout and "tok/s" in proc.stdout
    same = run_command("report", str(demo["bisection_id"]), "--db", db, "--json")
    assert json.loads(same.stdout)["verdict"]["cls"] == "regressed"
    missing = run_command("report", "c42", "--db", db)
    assert missing.returncode == 2 and "No comparison c42" in missing.stderr
    wrong = run_command("report", "x1", "--db", db)
    assert wrong.returncode == 2 and "give a bisection id" in wrong.stderr
    nodb = run_command("report", "--db", str(tmp_path / "none.sqlite"))
    assert nodb.returncode == 2 and "No results database" in nodb.stderr


def test_index_site_links_every_report(demo, tmp_path):
    site = tmp_path / "site"
    proc = run_command("report", "--index", str(site), "--db", demo["db"])
    assert proc.returncode == 0, proc.stderr
    index = (site / "index.html").read_text()
    name = f"bisection-{demo['bisection_id']}.html"
    assert f'href="{name}"' in index and (site / name).is_file()
    assert '"href"' in index  # history points link to their reports


def chart_specs(html: str) -> dict[str, dict]:
    """Every chart's Vega-Lite specification in a rendered report, by its element id."""
    return {m.group(1): json.loads(m.group(2)) for m in re.finditer(
        r'<script type="application/json" data-chart="([^"]+)">(.*?)</script>', html, re.S)}


def trial_layers(spec: dict) -> list[dict]:
    """The trial points a chart draws (its layers named "trials", a concatenation's included)."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("name") == "trials":
                found.extend(node["data"]["values"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(spec)
    return found


def test_the_decided_modes_range_chart_holds_none_of_another_modes_trials(demo):
    """Issue #49: the which-path trials of `baseline` were drawn on the `eagle3` range chart in the same
    side colours, so the culprit's parent looked as slow as the bad side. Each mode has its own chart."""
    specs = chart_specs(Path(demo["report"]).read_text())
    decided = trial_layers(specs["chart-range"])
    assert decided and {p["mode"] for p in decided} == {"eagle3"}
    assert {p["mode"] for p in trial_layers(specs["chart-timeline"])} == {"eagle3"}
    others = {name: {p["mode"] for p in trial_layers(spec)} for name, spec in specs.items()
              if name.startswith("chart-range-")}
    assert list(others.values()) == [{"baseline"}], others  # the which-path trials, apart on their own chart
    assert "baseline trials measured at the culprit and its parent" in Path(demo["report"]).read_text()


def test_repository_text_is_inert(payload_results, tmp_path):
    from perfbisect.app import reports
    from perfbisect.store import open_store

    with open_store(payload_results.db) as store:
        path, view = reports.report(store, "latest", tmp_path / "payload.html")
    html = path.read_text()
    assert view["culprit"]["sha"] == payload_results.culprit
    for raw in ("<script>alert(", "<img src=x", "</textarea>", "<b>ir</b>", "\x1b", "\x07"):
        assert raw not in html, raw
    assert "&lt;script&gt;alert(" in html and "&lt;img src=x onerror=" in html
    assert "\\x1b[31mRED terminal" in html and "d&lt;b&gt;ir&lt;/b&gt;" in html
    assert view["culprit"]["url"] is None  # a remote that is not a known forge gives no link


def test_vendored_files_match_their_checksum_record():
    """templates/vendor/SHA256SUMS names every vendored file with its SHA-256 (what
    tools/vendor_vega.sh wrote): a file changed by hand, added or dropped without the record fails."""
    import hashlib

    from perfbisect.resources import data_dir

    vendor = data_dir("templates") / "vendor"
    recorded = {}
    for line in (vendor / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        recorded[name.lstrip("*")] = digest
    present = {p.name for p in vendor.iterdir() if p.is_file() and p.name not in ("SHA256SUMS", "README.md")}
    assert sorted(recorded) == sorted(present)
    assert {n: hashlib.sha256((vendor / n).read_bytes()).hexdigest() for n in present} == recorded


def test_commit_links_only_for_known_forges():
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert commit_url("https://github.com/sgl-project/sglang.git", sha) == f"https://github.com/sgl-project/sglang/commit/{sha}"
    assert commit_url("git@gitlab.com:group/proj.git", sha) == f"https://gitlab.com/group/proj/-/commit/{sha}"
    assert commit_url("javascript:alert(1)//github.com/a/b", sha) is None
    assert commit_url("https://example.com/a/b", sha) is None
    assert commit_url("https://github.com/a/b", "not-a-sha") is None
    assert inert({"k\x1b": ["\x1b[0m", 1.0, float("nan")]}) == {"k\\x1b": ["\\x1b[0m", 1.0, None]}


def test_the_report_never_runs_git():
    """A report renders from the store and the ``model.RepoFacts`` its use case read from the target
    (``git.commit_facts``), never from the target's git: no module of the report imports the git layer."""
    import ast

    report = Path(__file__).resolve().parent.parent / "perfbisect" / "report"
    found = []
    for path in sorted(report.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                names = [a.name for a in node.names]
                if (module.startswith("perfbisect.git") or (node.level == 2 and module.split(".")[0] == "git")
                        or (node.level == 2 and not module and "git" in names)):
                    found.append(f"{path.name}:{node.lineno}")
            elif isinstance(node, ast.Import) and any(a.name.startswith("perfbisect.git") for a in node.names):
                found.append(f"{path.name}:{node.lineno}")
    assert found == []


@needs_chromium
def test_demo_report_renders_in_chromium(demo, tmp_path):
    report = Path(demo["report"])
    url = report.as_uri()
    dom = chromium(url, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_messages(dom.stderr) == []  # no errors, no warnings: the page logs nothing when it works
    page = dom.stdout
    for chart in ("chart-range", "chart-timeline", "chart-posterior"):
        block = page.split(f'id="{chart}"', 1)[1][:200000]
        assert re.search(r"<svg[^>]*class=\"marks\"", block), f"{chart} drew nothing"
        assert "chart failed to render" not in block
    assert demo["culprit"] in page and "REGRESSION" in page
    shot_dir = Path(os.environ.get("PERFBISECT_SCREENSHOT_DIR", tmp_path))
    shot = shot_dir / "demo-report.png"
    png = chromium(url, tmp_path, f"--screenshot={shot}", "--window-size=1280,2400", "--hide-scrollbars")
    assert png.returncode == 0 and shot.is_file() and shot.stat().st_size > 20000, png.stderr[-2000:]


@needs_chromium
def test_payloads_stay_text_in_chromium(payload_results, tmp_path):
    from perfbisect.app import reports
    from perfbisect.store import open_store

    with open_store(payload_results.db) as store:
        path, _ = reports.report(store, "latest", tmp_path / "payload.html")
    dom = chromium(path.as_uri(), tmp_path, "--dump-dom")
    assert dom.returncode == 0
    assert console_messages(dom.stderr) == []
    page = dom.stdout
    assert '<img src="x"' not in page and "<script>alert(" not in page
    assert "&lt;script&gt;alert('subject')&lt;/script&gt;" in page  # shown as text


def test_compare_and_calibrate_write_reports(compared_demo, tmp_path):
    # `compare GOOD PLANTED --max-trials 6 --json` on a 10-commit demo (conftest, shared with test_pipeline):
    # the planted 15% step is decided within 6 trials a side
    target, result = compared_demo.target, compared_demo.result
    db = compared_demo.db_copy(tmp_path)
    assert result["verdict"] == "regressed", result["explanation"]
    html = Path(result["report"]).read_text()
    assert Path(result["report"]).is_absolute() and target.planted in html and "B vs A" in html
    cal = run_command("calibrate", "HEAD", "-n", "2", "-m", "baseline", "-c", str(target.config), "--db", str(db), "--json")
    assert cal.returncode == 0, cal.stderr
    report = Path(json.loads(cal.stdout)["report"])
    assert report.is_file() and "NOISE CALIBRATION" in report.read_text()
    text = run_command("report", f"c{result['comparison_id']}", "--db", str(db))
    assert text.returncode == 0 and "report: " in text.stdout


def test_a_comparison_has_one_name_the_report_command_accepts(compared_demo, tmp_path):
    """Issue #49: `perfbisect log` listed "compare #2", the report said "compare #2" while `perfbisect
    report` takes `c2` (and reads "#2" as a bisection). The log, the report and the index say "comparison c2"."""
    db = compared_demo.db_copy(tmp_path)
    cid = compared_demo.result["comparison_id"]
    name = f"comparison c{cid}"
    log = run_command("log", "--db", str(db))
    assert log.returncode == 0 and log.stdout.startswith(name), log.stdout
    report = run_command("report", f"c{cid}", "--db", str(db), "-o", str(tmp_path / "c.html"))
    assert report.returncode == 0, report.stderr
    site = tmp_path / "site"
    assert run_command("report", "--index", str(site), "--db", str(db)).returncode == 0
    for html in ((tmp_path / "c.html").read_text(), (site / "index.html").read_text()):
        assert name in html and "compare #" not in html


def test_every_place_counts_a_bisections_trials_in_the_same_words(demo, tmp_path):
    """Issue #49: "28 vs 22 trials for one bisection" — `perfbisect log` counted every trial, the report
    the observations the search used. Each place now gives both, in the same words."""
    import sqlite3

    from perfbisect.metrics import trials_text

    with sqlite3.connect(f"file:{demo['db']}?mode=ro", uri=True) as con:
        total = con.execute("select count(*) from trials").fetchone()[0]
    assert total > demo["trials_used"]  # the demo's which-path trials are not the search's
    words = trials_text(total, demo["trials_used"])
    assert words == f"{total} trials ({demo['trials_used']} observations used by the search)"
    log = run_command("log", "--db", demo["db"])
    assert words in log.stdout, log.stdout
    site = tmp_path / "site"
    assert run_command("report", "--index", str(site), "--db", demo["db"]).returncode == 0
    index = (site / "index.html").read_text()
    assert words in index and "level (tok/s) · ↓ worse" in index  # the history chart's value axis too
    assert words in Path(demo["report"]).read_text()
    assert trials_text(9, 9) == "9 trials (all used by the search)" and trials_text(1) == "1 trial"


def test_a_bisection_without_any_measurement_still_renders(tmp_path):
    """An unfinished bisection, or one whose every trial failed, has no points: the report says so."""
    from perfbisect.app import reports
    from perfbisect.store import open_store

    with open_store(tmp_path / "r.sqlite") as store:
        bid = store.begin_bisection(good="a" * 40, bad="b" * 40, commits=["a" * 40, "b" * 40], metric="baseline",
                                    settings={"metric": "baseline"}, target=str(tmp_path / "gone"))
        path, view = reports.report(store, str(bid), tmp_path / "empty.html")
    html = path.read_text()
    assert view["verdict"]["headline"] == "UNFINISHED" and "No trial produced a number" in html


# ------------------------------------------------------------------------------------------------
# At a 900 px window: nothing wider than the page, and the verdict box says which path regressed

LAYOUT_PROBE = """<script>
window.perfbisectCharts.then(function () { setTimeout(function () {
  var d = document.documentElement, verdict = document.getElementById("verdict");
  var tables = Array.prototype.map.call(document.querySelectorAll("table"), function (t) {
    var box = t.getBoundingClientRect(), head = t.querySelector("th");
    return { id: t.id, head: head ? head.textContent : "", right: box.right, width: t.scrollWidth,
             room: t.parentElement.clientWidth };
  });
  document.body.setAttribute("data-layout", JSON.stringify({
    scrollWidth: d.scrollWidth, clientWidth: d.clientWidth, tables: tables,
    verdict: verdict ? verdict.innerText : "" }));
}, 50); });
</script>"""


def probe_page(report: Path, tmp: Path, width: int, script: str, attr: str) -> dict:
    """Open a copy of ``report`` with ``script`` inserted before its last ``</body>`` at ``width`` CSS pixels
    in headless Chromium; the JSON the script left in the ``attr`` attribute once every chart drew."""
    import html as html_lib

    head, tail = report.read_text().rsplit("</body>", 1)  # the last one: the inlined library holds the string too
    copy = tmp / f"{attr}-{width}-{report.name}"
    copy.write_text(head + script + "</body>" + tail)
    dom = chromium(copy.as_uri(), tmp, "--dump-dom", f"--window-size={width},2400")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_messages(dom.stderr) == [], console_messages(dom.stderr)
    m = re.search(rf'{attr}="([^"]*)"', dom.stdout)
    assert m, "the probe never ran: the charts did not finish drawing"
    return json.loads(html_lib.unescape(m.group(1)))


WORDS_PROBE = """<script>
window.perfbisectCharts.then(function () { setTimeout(function () {
  // Every word of every table cell (a hash, a number, a subject's word; not a path, which may wrap at
  // 48+ characters), and whether it was laid out on one line: a range over it has one client rect. A
  // word of prose may break at its own hyphen ("second-" "change"), as print does; one holding a digit
  // (a date, a layout id, a version) may not.
  var broken = [], seen = 0, walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  function check(node, index, word) {
    var r = document.createRange(); r.setStart(node, index); r.setEnd(node, index + word.length);
    var lines = Array.prototype.filter.call(r.getClientRects(), function (b) { return b.width > 0; }).length;
    seen++;
    if (lines > 1) broken.push(word);
  }
  while (walker.nextNode()) {
    var node = walker.currentNode;
    if (!node.parentElement.closest("td, th")) continue;
    var re = /\\S+/g, m;
    while ((m = re.exec(node.data))) {
      if (m[0].length >= 48) continue;
      if (!/[0-9]/.test(m[0]) && m[0].indexOf("-") > 0) {
        var at = m.index;
        m[0].split("-").forEach(function (part) { if (part) check(node, at, part); at += part.length + 1; });
      } else {
        check(node, m.index, m[0]);
      }
    }
  }
  document.body.setAttribute("data-words", JSON.stringify({ seen: seen, broken: broken,
    scrollWidth: document.documentElement.scrollWidth, clientWidth: document.documentElement.clientWidth }));
}, 50); });
</script>"""


def layout_probe(report: Path, tmp: Path, width: int) -> dict:
    """Open a copy of ``report`` at ``width`` CSS pixels; what the page measured once every chart drew."""
    return probe_page(report, tmp, width, LAYOUT_PROBE, "data-layout")


def _fits(page: dict) -> None:
    # clientWidth, not innerWidth: the vertical scrollbar takes its width from the page
    assert page["scrollWidth"] <= page["clientWidth"], (page["scrollWidth"], page["clientWidth"])
    for t in page["tables"]:
        assert t["right"] <= page["clientWidth"] + 0.5, t  # no table reaches past the window
        assert t["width"] <= t["room"] + 0.5, t  # nor is cut off inside its box


@needs_chromium
def test_a_report_with_real_world_paths_has_no_sideways_scroll_at_900_px(tmp_path):
    """What a trial records holds long unbroken strings (a Hugging Face snapshot path, a worktree slot of
    perfbisect's longest name, its configured env): at a 900 px window the page still does not scroll
    sideways and every table, the search's "why each next commit" included, fits."""
    import sqlite3

    from perfbisect.app import reports
    from perfbisect.git.worktrees import slot_name
    from perfbisect.store import open_store

    r = make_results(tmp_path / "long", commits=16, trials=40)
    model = ("/home/engineer/.cache/huggingface/hub/models--meta-llama--Llama-3.1-70B-Instruct/snapshots/"
             "0e9e39f249a16976918f6564b8830bc894c89659")
    info = {"version": "0.5.6", "model_path": model, "tokenizer_path": model,
            "emulator_worktree": str(tmp_path / "perfbisect" / "worktrees" / slot_name(7))}
    with sqlite3.connect(r.db) as con:
        con.execute("UPDATE trials SET server_info = ?", (json.dumps(info),))
    with open_store(r.db) as store:
        path, view = reports.report(store, "latest", tmp_path / "long.html")
    assert view["reasoning"]["steps"], "the report shows the search's reasoning table"
    assert model in path.read_text()
    _fits(layout_probe(path, tmp_path, 900))


@needs_chromium
def test_the_verdict_box_says_which_path_regressed_and_the_demo_report_fits_900_px(demo, tmp_path):
    page = layout_probe(Path(demo["report"]), tmp_path, 900)
    _fits(page)
    verdict = " ".join(page["verdict"].split())
    assert "REGRESSION" in verdict
    # the demo plants a slower verify cycle: the speculative path, the baseline unchanged
    assert "Which path: speculative path regressed (baseline unchanged" in verdict, verdict


@needs_chromium
@pytest.mark.parametrize("width", [1400, 900])
def test_table_cells_never_break_a_word_or_a_hash(demo, tmp_path, width):
    """Issue #49: table columns broke hashes and words mid-way (``overflow-wrap: anywhere``) to fit 900 px.
    A hash, number or word is laid out on one line; a wide table scrolls inside its own box instead."""
    site = tmp_path / "site"
    assert run_command("report", "--index", str(site), "--db", demo["db"]).returncode == 0
    for page in (Path(demo["report"]), site / "index.html"):
        words = probe_page(page, tmp_path, width, WORDS_PROBE, "data-words")
        assert words["seen"] > (50 if page.name != "index.html" else 10), words
        assert words["broken"] == [], (page.name, words["broken"])
        assert words["scrollWidth"] <= words["clientWidth"], words  # the page itself never scrolls sideways


def test_the_index_orders_commits_by_history_not_by_when_they_were_measured():
    """Issue #49: the index's commit axis must follow history. Two ranges bisected in either order, and a
    comparison of a commit between them, lie oldest first on one axis."""
    from perfbisect.report.site_index import commit_order

    def rows(names, day0):
        return [{"sha": n * 4, "committed": f"2026-01-{day0 + i:02d}T12:00:00+02:00"} for i, n in enumerate(names)]
    older = {"kind": "bisection", "started": "", "commits": rows("abcd", 1)}
    newer = {"kind": "bisection", "started": "", "commits": rows("wxyz", 10)}
    between = {"kind": "comparison", "started": "", "commits": [*rows("m", 7), older["commits"][1]]}
    want = ["a", "b", "c", "d", "m", "w", "x", "y", "z"]
    for first, second in ((older, newer), (newer, older)):
        views = [{**first, "started": "2026-02-01T10:00:00"}, {**second, "started": "2026-02-02T10:00:00"},
                 {**between, "started": "2026-02-03T10:00:00"}]
        order = commit_order(views)
        assert [s[0] for s in sorted(order, key=order.get)] == want
    # Without dates (the repository is gone), each range keeps its own history order.
    bare = [{"kind": "bisection", "started": "", "commits": [{"sha": s} for s in ("p", "q", "r")]},
            {"kind": "bisection", "started": "", "commits": [{"sha": s} for s in ("q", "s", "r")]}]
    order = commit_order(bare)
    assert order["p"] < order["q"] < order["s"] < order["r"]


def test_effects_in_seconds_read_in_ms_and_every_value_axis_says_which_way_is_worse(demo):
    """Issue #49: a latency regression read "+0.003705 s"; it reads "+3.71 ms". Each chart's value axis
    says which way is worse."""
    from perfbisect.metrics import readable
    from perfbisect.model import BisectOutcome, Comparison, Verdict
    from perfbisect.report.verdict_text import verdict_view

    step = Comparison(Verdict.REGRESSED, 8.2, 6.0, 10.4, 1.0, "measured", 6, 7)
    out = BisectOutcome(Verdict.REGRESSED, "a" * 40, "b" * 40, culprit="c" * 40, effect_pct=8.2,
                        culprit_comparison=step, trials_used=13)
    view = verdict_view(out, "done", {}, {"before": 0.045180, "after": 0.048885}, "s", "lat_s latency (lower is better)",
                        13, 0.1, "GPU-hours", 0.01, 2.0, total=19)
    assert "(+3.71 ms: 45.2 ms → 48.9 ms)" in view["sentence"], view["sentence"]
    assert "19 trials (13 observations used by the search)" in view["sentence"]
    assert readable(-0.0000123, "s", sign=True) == "-12.3 µs" and readable(1234.5, "ms") == "1.23 s"
    assert readable(-86.96, "tok/s", sign=True) == "-86.96 tok/s"  # a unit that is not a time: as before
    specs = chart_specs(Path(demo["report"]).read_text())  # tok/s: higher is better, so down is worse
    titles = [specs["chart-range"]["layer"][-1]["encoding"]["y"]["title"],
              specs["chart-timeline"]["vconcat"][0]["layer"][-1]["encoding"]["y"]["title"]]
    assert all(t.endswith("· ↓ worse") and "(tok/s)" in t for t in titles), titles


def test_the_load_panel_starts_at_zero_with_room_above_a_steady_load(demo):
    """Issue #49: an idle machine's load (0.46–0.55) was autoscaled into a panel-high zigzag. Each state
    panel starts at 0 and ends above its largest value, the load's at 1 task or more; the unit is named."""
    timeline = chart_specs(Path(demo["report"]).read_text())["chart-timeline"]
    panel = timeline["vconcat"][1]
    rows = panel["data"]["values"]
    load = [r["value"] for r in rows if r.get("value") is not None and r["var"].startswith("CPU load")]
    assert load and {r["var"] for r in rows if r["var"].startswith("CPU load")} == {"CPU load (runnable tasks, 1-min average)"}
    ceiling = [r["ceiling"] for r in rows if r.get("ceiling") is not None and r["var"].startswith("CPU load")]
    assert ceiling == [max(1.0, 1.25 * max(load))]
    for layer in panel["spec"]["layer"]:
        assert layer["encoding"]["y"]["scale"]["zero"] is True
