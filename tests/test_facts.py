"""Answers that state the right facts (issue #21): a metric's unit and direction come from one description
stored with each bisection and comparison, everywhere it is shown — terminal, JSON, markdown, `log` and
the report (opened in headless Chromium) — even without the config that produced it.

Each metric is a real `command` target (tests/test_targets.py's project, with the key renamed) bisected
through the real CLI. Nothing here depends on how the search goes beyond "the planted change is found",
which a 25% step under 1% noise settles; no duration or rate is asserted.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from perfbisect.metrics import level_text, pct_text, unit_of_key
from tests.repo_factory import RepoFactory
from tests.cli_runner import run_cli
from tests.test_report import CHROMIUM, chromium, needs_chromium

BENCH = """\
import json, pathlib, random
rate = float(pathlib.Path("rate.txt").read_text().strip())
print(json.dumps({KEY: rate * SCALE * random.gauss(1.0, 0.01)}))
"""

# key, unit the key states, higher is better, scale of the printed values
METRICS = [
    ("ops_per_s", "ops/s", True, 1000.0),
    ("req_per_sec", "req/s", True, 1.0),
    ("p50_latency_ms", "ms", False, 0.1),
    ("wall_s", "s", False, 1.9e-7),  # ~1.9e-5 s: small numbers keep their significant digits
    ("score", "", True, 1.0),  # a key that states no unit has none
]


def project(path: Path, key: str, higher: bool, scale: float) -> tuple[Path, list[str], Path]:
    """c0..c5, the change at c3: 25% worse (a rate falls, a time rises)."""
    r = RepoFactory(path / "proj")
    bench = BENCH.replace("KEY", json.dumps(key)).replace("SCALE", repr(scale))
    rates = ["100"] * 3 + (["75"] * 3 if higher else ["125"] * 3)
    shas = [r.commit("c0 base", {"bench.py": bench, "rate.txt": rates[0] + "\n"})]
    for i, rate in enumerate(rates[1:], start=1):
        shas.append(r.commit(f"c{i} rate {rate}", {"rate.txt": rate + "\n", f"src/m{i}.py": f"x = {i}\n"}))
    config = path / "perfbisect.toml"
    config.write_text(
        f"[target]\nrepo = {json.dumps(str(r.path))}\npython = {json.dumps(sys.executable)}\n"
        f'[workload]\nkind = "command"\ncommand = ["{{python}}", "bench.py"]\nmetric = "{key}"\nwarmup = 0\n'
        f"higher_is_better = {'true' if higher else 'false'}\n[stats]\nmax_trials_total = 60\n"
    )
    return config, shas, r.path


def test_units_are_read_off_the_key_rates_before_times():
    assert [unit_of_key(k) for k, *_ in METRICS] == [u for _, u, *_ in METRICS]
    assert unit_of_key("decode_tok_s") == "tok/s" and unit_of_key("items_per_second") == "items/s"
    assert unit_of_key("elapsed_seconds") == "s" and unit_of_key("throughput") == ""
    # a counted thing before "_s" is a rate, as "tok_s" is (packaging's "ops_s" printed as seconds in round 8);
    # any other word before it is a time
    assert unit_of_key("ops_s") == "ops/s" and unit_of_key("wall_ops_s") == "ops/s" and unit_of_key("req_s") == "req/s"
    assert unit_of_key("latency_s") == "s" and unit_of_key("wall_s") == "s" and unit_of_key("stops_s") == "s"


def test_levels_and_huge_effects_read_as_people_state_them():
    assert [level_text(x) for x in (99.0, 98.0, 99.963, 99.7901, 95.0, 99.9)] == ["99%", "98%", "99.9%", "99.5%", "95%", "99.9%"]
    assert pct_text(751980.4) == "×7,521" and pct_text(-41.1) == "-41.1%" and pct_text(250.0) == "+250.0%"


@pytest.mark.parametrize("key,unit,higher,scale", METRICS, ids=[m[0] for m in METRICS])
def test_a_metric_speaks_its_own_unit_everywhere(tmp_path, key, unit, higher, scale):
    config, shas, repo = project(tmp_path, key, higher, scale)
    db = tmp_path / "results.sqlite"
    direction = "higher is better" if higher else "lower is better"

    # Terminal: each run's value and the closing line in the metric's unit, never seconds or tok/s.
    proc = run_cli("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    runs = re.findall(r"^  run 0: (.*)$", proc.stderr, re.M)
    assert runs, proc.stderr
    times = ("s", "ms", "µs", "ns")  # a time reads in the unit that fits it (issue #49): 18.9 µs, not 0.0000189 s
    for shown in runs:
        if unit in times:
            assert shown.rsplit(" ", 1)[-1] in times, shown
        elif unit:
            assert shown.endswith(f" {unit}"), shown
        else:
            assert re.fullmatch(r"[0-9.,]+", shown), shown  # no unit, not "(score)" or "s"
    assert "tok/s" not in proc.stdout + proc.stderr
    closing = proc.stdout.strip().splitlines()[-1]
    assert closing.startswith("REGRESSION") and f"culprit {shas[3][:10]}" in closing, proc.stdout
    delta = re.search(r"\(([-+][0-9.,]+)( [^,)]*)?(, lower is better)?\) 98% \[", closing)
    shown_unit = (delta.group(2) or "").strip() if delta else None
    assert delta and (shown_unit in times if unit in times else shown_unit == unit), closing
    assert bool(delta.group(3)) == (not higher), closing  # "(…, lower is better)" where it is
    assert delta.group(1).startswith("-" if higher else "+"), closing
    if key == "wall_s":  # 1.9e-5 s × 25%: in µs with significant digits, never "+0.0 s" or "+0.0000047 s"
        assert shown_unit == "µs" and not delta.group(1).startswith("+0.0"), closing
    spent = next(line for line in proc.stdout.splitlines() if line.startswith("spent:"))
    assert "machine-hours" in spent and "GPU" not in spent, spent  # a command target holds no GPU

    # JSON: the description, the culprit, the unit.
    data = json.loads(run_cli("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(db),
                          "--json").stdout)
    assert data["metric"]["unit"] == unit and data["metric"]["higher_is_better"] is higher
    assert data["culprit"] == shas[3] and data["culprit_is_set"] is False

    # Markdown (a comparison: its own stored description).
    md = run_cli("compare", shas[0], shas[-1], "-c", str(config), "--db", str(db), "--max-trials", "3",
             "--format", "markdown")
    assert md.returncode in (0, 3), md.stderr
    row = next(line for line in md.stdout.splitlines() if line.startswith("| metric |"))
    assert f"`{key}`" in row and direction in row and ((f", {unit}" in row) if unit else row.count(",") == 1), row
    medians = next(line for line in md.stdout.splitlines() if line.startswith("| medians |"))
    values = re.fullmatch(r"\| medians \| A (.*?), B (.*) \|", medians)
    assert values, medians
    for value in values.groups():
        shown = (r" (s|ms|µs|ns)" if unit in times else f" {re.escape(unit)}") if unit else ""
        assert re.fullmatch(r"[0-9.,]+" + shown, value), medians

    # Without the config: a fresh directory, only --db. `log`, `log ID` and the reports read the stored description.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    moved = elsewhere / "copy.sqlite"
    shutil.copy(db, moved)
    listed = json.loads(run_cli("log", "--db", str(moved), "--json", cwd=elsewhere).stdout)
    assert {b["metric"]["unit"] for b in listed["bisections"]} == {unit}
    assert {c["metric"]["unit"] for c in listed["comparisons"]} == {unit}
    assert all(b["metric"]["higher_is_better"] is higher for b in listed["bisections"])
    detail = run_cli("log", "1", "--db", str(moved), cwd=elsewhere)
    assert detail.returncode == 0, detail.stderr
    assert f"metric: {key} ({key}{', ' + unit if unit else ''}, {direction})" in detail.stdout, detail.stdout
    medians = re.findall(r"median (\S+)( \S+)?  ", detail.stdout)
    assert medians and all((m[1].strip() in times if unit in times else m[1] == f" {unit}") if unit else m[1] == ""
                           for m in medians), detail.stdout
    assert "median 0.0 " not in detail.stdout and "median 0.0\n" not in detail.stdout
    assert "decode" not in detail.stdout and "tok/s" not in detail.stdout

    for which in ("1", "c1"):
        report = run_cli("report", which, "--db", str(moved), "--json", cwd=elsewhere)
        assert report.returncode == 0, report.stderr
        path = Path(json.loads(report.stdout)["report"])
        assert path.name.startswith("copy-"), path  # named after its database: two databases never collide
        html = path.read_text()
        assert "decode throughput" not in html and "tok/s" not in html
        if CHROMIUM:
            dom = chromium(path.as_uri(), tmp_path, "--dump-dom")
            assert dom.returncode == 0, dom.stderr[-2000:]
            sentence = dom.stdout.split('<div class="sentence">', 1)[1].split("</div>", 1)[0]
            assert direction in sentence, sentence
            if unit:
                assert f" {unit}" in sentence, sentence
            header = re.search(r"<th>trial medians([^<]*)</th>", dom.stdout).group(1)
            assert header == (f" ({unit})" if unit else ""), header


@needs_chromium
def test_report_text_states_levels_and_counts_in_label_order(tmp_path):
    config, shas, repo = project(tmp_path, "ops_per_s", True, 1000.0)
    db = tmp_path / "results.sqlite"
    proc = run_cli("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    ends, step = data["endpoint_comparison"], data["culprit_comparison"]
    text = run_cli("log", "1", "--db", str(db)).stdout
    assert "no build steps" not in text  # the log shows trials, the report's note is below
    dom = chromium(Path(data["report"]).as_uri(), tmp_path, "--dump-dom").stdout
    evidence = dom.split('id="evidence"', 1)[1]
    rows = re.findall(r"<tr><td>([^<]*)</td><td class=\"num\">[^<]*</td><td>([^<]*)</td>.*?<td>(\d+) vs (\d+)</td>",
                      evidence, re.S)
    by_label = {label.split(":")[0]: (interval, int(first), int(second)) for label, interval, first, second in rows}
    # "bad vs good": the bad end's trials first; "from the culprit on vs before it": after first.
    assert by_label["endpoints"][1:] == (ends["n_b"], ends["n_a"]), by_label
    assert by_label["from the culprit on vs before it"][1:] == (step["n_b"], step["n_a"]), by_label
    assert all(interval.startswith("98% [") for interval, *_ in by_label.values()), by_label
    note = dom.split('id="builds-note"', 1)[1].split("</p>", 1)[0]
    assert "No build steps" in note and "reused" not in note.replace("nothing was built or reused", ""), note
    sentence = dom.split('<div class="sentence">', 1)[1].split("</div>", 1)[0]
    assert "98% interval [" in sentence and re.search(r"\d+ trials( \([^)]*\))?, [0-9.]+ machine-hours", sentence), sentence


# ------------------------------------------------------------------------------------------------
# Friction: locks scoped to what a run uses, --json failures, --help, commands CI needs


HOLDER = """\
import fcntl, os, sys, time
fds = []
for name, mode in (a.split("=") for a in sys.argv[2:]):
    fd = os.open(os.path.join(sys.argv[1], name), os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_SH if mode == "sh" else fcntl.LOCK_EX)
    if mode == "ex":
        os.write(fd, f"{os.getpid()}\\nanother project's perfbisect\\n".encode())
    fds.append(fd)
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def holder(tmp_path):
    """Another process (another project's perfbisect, as far as the lock files say) holding locks."""
    import subprocess

    procs = []

    def hold(lock_dir: Path, *locks: str) -> subprocess.Popen:
        lock_dir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_dir), *locks], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "held"
        procs.append(proc)
        return proc

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_cpu_run_is_not_blocked_by_another_projects_node_lock(tmp_path, holder):
    locks = tmp_path / "locks"
    other = holder(locks, "perfbisect-gpu-node.lock=ex")
    config, shas, repo = project(tmp_path, "ops_per_s", True, 1000.0)
    env = {"PERFBISECT_LOCK_DIR": str(locks)}
    proc = run_cli("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(tmp_path / "r.sqlite"),
               "--json", env=env)
    assert proc.returncode == 0, proc.stderr  # a command target holds its repository's lock only
    assert json.loads(proc.stdout)["culprit"] == shas[3]
    assert other.poll() is None


def test_a_gpu_run_is_refused_with_the_lock_dir_and_wait_named_and_one_json_error(tmp_path, holder):
    from perfbisect.demo.target import make_demo_target

    target = make_demo_target(tmp_path / "demo", commits=10)
    locks = tmp_path / "locks"
    other = holder(locks, "perfbisect-gpu-node.lock=ex")
    proc = run_cli("measure", "HEAD", "-c", str(target.config), "--db", str(tmp_path / "r.sqlite"), "--json",
               env={"PERFBISECT_LOCK_DIR": str(locks)})
    assert proc.returncode == 4, (proc.stdout, proc.stderr)
    error = json.loads(proc.stdout)  # exactly one JSON object on stdout
    assert error["exit_code"] == 4 and error["kind"] == "LockHeld"
    for text in (error["error"], " ".join(proc.stderr.split())):
        assert f"pid {other.pid}" in text and "PERFBISECT_LOCK_DIR" in text and "--wait" in text, text
        assert "kill" not in text


def test_runs_on_different_gpus_share_the_node(tmp_path, holder, monkeypatch):
    from perfbisect.runtime.locks import LockHeld, exclusive, gpus_of

    assert gpus_of([{"CUDA_VISIBLE_DEVICES": "2,0"}, {}]) == ("0", "2") and gpus_of([{}]) is None
    assert gpus_of([{"CUDA_VISIBLE_DEVICES": "GPU-5d1c"}]) is None  # not an index: the whole node
    locks = tmp_path / "locks"
    holder(locks, "perfbisect-gpu-node.lock=sh", "perfbisect-gpu-0.lock=ex")  # a run given GPU 0
    monkeypatch.setenv("PERFBISECT_LOCK_DIR", str(locks))
    with exclusive(tmp_path / "a", repo="a", gpus=("1",)):  # GPU 1: proceeds beside it
        pass
    with pytest.raises(LockHeld, match="GPU 0"):
        with exclusive(tmp_path / "b", repo="b", gpus=("0", "1")):
            pass
    with pytest.raises(LockHeld, match="GPU node"):  # every GPU: waits for any other run
        with exclusive(tmp_path / "c", repo="c"):
            pass


def test_json_failures_are_one_json_object(tmp_path):
    for args, code, kind in (
        (["run", "good=a", "bad=b", "-c", str(tmp_path / "missing.toml")], 2, "ConfigError"),
        (["run", "--bogus"], 2, "UsageError"),
        (["log", "--db", str(tmp_path / "none.sqlite")], 2, "UsageError"),
    ):
        proc = run_cli(*args, "--json", cwd=tmp_path)
        assert proc.returncode == code, (args, proc.stderr)
        data = json.loads(proc.stdout)
        assert data["exit_code"] == code and data["kind"] == kind and data["error"], data
        assert proc.stderr.strip(), "the paragraph stays on stderr too"


def test_help_keeps_bracketed_config_names_and_shows_no_bool():
    shown = {command: run_cli(*command.split(), "--help").stdout for command in ("run", "skip", "check", "log", "compare")}
    joined = " ".join(" ".join(text.split()) for text in shown.values())
    for name in ("[store] url", "[cost] budget_gpu_hours", "[filters] skip", "[hook] action"):
        assert name in joined, name
    assert "<bool>" not in joined
    assert "--fail-on-regression" in shown["compare"] and "--json" in shown["log"]


def test_ci_commands_compare_fails_on_regression_doctor_and_log_speak_json(tmp_path):
    config, shas, repo = project(tmp_path, "ops_per_s", True, 1000.0)
    db = tmp_path / "r.sqlite"
    proc = run_cli("compare", shas[0], shas[-1], "-c", str(config), "--db", str(db), "--max-trials", "4",
               "--fail-on-regression")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)  # B is 25% slower: the CI job fails
    assert re.search(r"medians: A [0-9,]+ ops/s, B [0-9,]+ ops/s \(ops_per_s, higher is better\)", proc.stdout)
    assert re.search(r"effect \(B vs A\): -\d+\.\d% \(99\.9% interval", proc.stdout), proc.stdout
    same = run_cli("compare", shas[0], shas[1], "-c", str(config), "--db", str(db), "--max-trials", "4",
               "--fail-on-regression")
    assert same.returncode in (0, 3), same.stderr
    doctor = run_cli("doctor", "-c", str(config), "--db", str(db), "--json")
    data = json.loads(doctor.stdout)
    assert doctor.returncode == (2 if not data["ok"] else 0) and data["findings"]
    messages = " ".join(f["message"] for f in data["findings"])
    assert "nvidia-ml-py" not in messages  # a command target is not told to install a GPU library
    log = json.loads(run_cli("log", "-c", str(config), "--db", str(db), "--json").stdout)
    assert [c["verdict"] for c in log["comparisons"]][-1] == "regressed" and log["bisections"] == []


def test_demo_variants_keep_their_folders_and_log_finds_them(tmp_path, private_node_lock):
    first = run_cli("demo", "--commits", "10", "--seeded", "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    planted = json.loads(first.stdout)
    drift = run_cli("demo", "--commits", "10", "--seeded", "--drift-only", "--json", cwd=tmp_path)
    assert drift.returncode in (0, 3), drift.stderr
    second = json.loads(drift.stdout)
    assert Path(planted["demo_dir"]) == tmp_path / ".perfbisect" / "demo"
    assert Path(second["demo_dir"]) == tmp_path / ".perfbisect" / "demo-drift"
    assert (tmp_path / ".perfbisect" / "demo" / "results.sqlite").is_file() and Path(planted["report"]).is_file()
    log = run_cli("log", cwd=tmp_path)  # at the repository root, right after the demos: no config here
    assert log.returncode == 0, log.stderr
    assert log.stdout.startswith("bisection #1 ") and "demo-drift" in log.stderr
    assert "-c CONFIG or --db PATH" in log.stderr


def _run_in_a_terminal(args: list[str], columns: int, timeout: float = 240) -> tuple[int, str]:
    """``perfbisect ARGS`` with stderr on a pseudo-terminal ``columns`` wide; (exit status, what it drew)."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import subprocess
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([sys.executable, "-m", "perfbisect.cli", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=slave, env={**env, "TERM": "xterm"})
    os.close(slave)
    out = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(master)
    return proc.returncode, out.decode("utf-8", "replace")


def test_the_live_line_fits_80_columns_and_its_eta_says_when_it_is_a_floor(tmp_path):
    config, shas, repo = project(tmp_path, "ops_per_s", True, 1000.0)
    code, drawn = _run_in_a_terminal(["run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config),
                                      "--db", str(tmp_path / "r.sqlite")], columns=80)
    assert code == 0, drawn[-3000:]
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]", "", drawn)
    rows = [row for row in re.split(r"\r\n|\r|\n", plain) if row.strip()]
    live = [row for row in rows if "/~" in row and "ETA" in row]
    assert live, plain[-3000:]
    assert max(len(row) for row in live) <= 80, max(live, key=len)
    # The detail under it names the benchmark while it runs (not "preparing worktree" throughout).
    assert any("running the workload.command" in row for row in rows), plain[-3000:]
    # Confirming adds trials the estimate did not foresee: its ETA is a floor (≥), the budget's ceiling (≤) or
    # under a minute, never "about" and never "?" once a trial is timed (issue #49).
    confirming = [row for row in live if "confirming" in row and "ETA" in row]
    assert confirming and all(re.search(r"ETA (≥ \d|≤ \d|< 1m)", row) for row in confirming), confirming


def test_plan_estimates_the_no_change_outcome_too(tmp_path):
    config, shas, repo = project(tmp_path, "ops_per_s", True, 1000.0)
    args = ("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(tmp_path / "p.sqlite"))
    data = json.loads(run_cli(*args, "--json").stdout)["estimate"]
    assert isinstance(data["trials_if_no_change"], int) and data["trials_if_no_change"] >= 2, data
    assert data["hours_unit"] == "machine-hours"
    text = run_cli(*args).stdout
    assert re.search(r"^  if nothing changed: ~\d+ trials?", text, re.M), text
    assert "GPU" not in text.split("estimate:", 1)[1]


def test_an_inconclusive_pair_reads_as_one_answer_of_two_changes():
    from types import SimpleNamespace

    from perfbisect.report.verdict_text import verdict_view
    from perfbisect.model import BisectOutcome, Verdict
    from perfbisect.report.render import format_outcome

    a, b, g, z = "a" * 40, "b" * 40, "0" * 40, "f" * 40
    out = BisectOutcome(verdict=Verdict.INCONCLUSIVE, good=g, bad=z, best_answer=(a, b), answer_probability=0.2,
                        budget_exhausted=True, trials_used=1)
    view = verdict_view(out, "done", {}, {}, "ops/s", "ops", 1, 0.01, "machine-hours", 0.01, 2.0)
    assert f"Best answer: two changes, at {a[:10]} and at {b[:10]} (probability 0.20, given that something changed)" \
        in view["sentence"], view["sentence"]
    assert "after 1 trial," in view["sentence"]
    lines = format_outcome(SimpleNamespace(outcome=out, commits={}, bisection_id=1, filtered=[], db_path="x"))
    assert any(f"best answer two changes: at {a[:10]} and at {b[:10]} (probability 0.20, given" in line for line in lines), lines
