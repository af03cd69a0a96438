"""The bad-input battery: every case runs the real CLI (in this process, through ``perfbisect.cli.main.main``,
its one error boundary; four of them also as the installed command) and must give the exit code docs/commands.md
documents (2 usage/config, 3 inconclusive, 4 measurement broke) with one paragraph on stderr and no traceback.

A case is (id, edit of the demo config or None, extra setup, arguments, exit code, words the
message must hold). ``{config}``, ``{db}``, ``{good}``, ``{bad}``, ``{tmp}`` in arguments are filled in.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from perfbisect.demo.target import make_demo_target
from tests.cli_runner import run_cli, run_command

pytestmark = pytest.mark.slow

DIES_AT_ONCE = 'command = ["{python}", "-c", "import sys; print(\'no GPU here\'); sys.exit(3)", "{port}"'
EMULATOR = 'command = ["{python}", "-m", "perfbisect.demo.emulator"'


def _setup_cache_file(tmp: Path) -> None:
    (tmp / "cache-is-a-file").write_text("not a directory\n")


def _setup_garbage_patch(tmp: Path) -> None:
    (tmp / "patches").mkdir()
    (tmp / "patches" / "0001-notes.patch").write_text("just notes, no diff\n")


def _setup_not_sqlite(tmp: Path) -> None:
    (tmp / "junk.sqlite").write_text("a,b,c\n1,2,3\n")


def _setup_db_dir(tmp: Path) -> None:
    (tmp / "dbdir").mkdir()


def _setup_no_git(tmp: Path) -> None:
    (tmp / "plain").mkdir()


def _setup_existing_file(tmp: Path) -> None:
    (tmp / "perfbisect.toml").write_text("# mine\n")


def _setup_nan_bench(tmp: Path) -> None:
    (tmp / "bench.py").write_text("import json\nprint(json.dumps({'tok_s': float('nan')}))\n")


def _setup_keyless_bench(tmp: Path) -> None:
    (tmp / "bench.py").write_text("import json\nprint(json.dumps({'latency_ms': 3.0}))\n")


def _setup_twice_bench(tmp: Path) -> None:
    (tmp / "bench.py").write_text("print('{\"tok_s\": 10.0, \"tok_s\": 99.0}')\n")


COMMAND_WORKLOAD = ('[workload]\nkind = "sglang"', '[workload]\nkind = "command"\ncommand = ["{python}", "{tmp}/bench.py"]\nmetric = "tok_s"')
BASELINE_METRIC = ('metric = "eagle3"', 'metric = "baseline"')

CASES = [
    # -- usage: arguments --------------------------------------------------------------------
    ("no-arguments", None, None, [], 2, ""),
    ("unknown-command", None, None, ["frobnicate"], 2, ""),
    ("unknown-flag", None, None, ["run", "--no-such-flag", "-c", "{config}"], 2, ""),
    ("run-without-range", None, None, ["run", "-c", "{config}"], 2, "good revision is missing"),
    ("range-with-colon", None, None, ["run", "good:HEAD", "-c", "{config}"], 2, "good=REV bad=REV"),
    ("range-missing-bad", None, None, ["run", "good=HEAD~2", "-c", "{config}"], 2, "bad revision is missing"),
    ("range-empty-value", None, None, ["run", "good=", "bad=HEAD", "-c", "{config}"], 2, "good=REV bad=REV"),
    ("unknown-revision", None, None, ["run", "good=nosuchrev", "bad=HEAD", "-c", "{config}"], 2, "nosuchrev"),
    ("good-equals-bad", None, None, ["run", "good=HEAD", "bad=HEAD", "-c", "{config}"], 2, "same commit"),
    ("swapped-range", None, None, ["run", "good={bad}", "bad={good}", "-c", "{config}"], 2, "ancestor"),
    ("negative-wait-idle", None, None, ["run", "good={good}", "bad={bad}", "--wait-idle", "-5", "-c", "{config}"], 2, "wait-idle"),
    ("zero-trials", None, None, ["measure", "--trials", "0", "-c", "{config}"], 2, "trials"),
    ("unknown-mode", None, None, ["measure", "--mode", "turbo", "-c", "{config}", "--db", "{db}"], 2, "turbo"),
    ("compare-one-commit", None, None, ["compare", "HEAD", "-c", "{config}"], 2, ""),
    ("compare-max-trials-1", None, None, ["compare", "{good}", "{bad}", "--max-trials", "1", "-c", "{config}"], 2, "max-trials"),
    ("calibrate-one-trial", None, None, ["calibrate", "-n", "1", "-c", "{config}", "--db", "{db}"], 2, "at least 2 trials"),
    ("demo-too-short", None, None, ["demo", "--commits", "3", "--dir", "{tmp}/demo"], 2, "commits"),
    ("log-limit-0", None, None, ["log", "--limit", "0", "-c", "{config}"], 2, "limit"),
    ("resume-unknown-id", None, None, ["resume", "99", "-c", "{config}", "--db", "{db}"], 2, "no bisection 99"),
    ("resume-nothing", None, None, ["resume", "-c", "{config}", "--db", "{db}"], 2, "No unfinished bisection"),
    ("init-over-existing", None, _setup_existing_file, ["init", "--path", "{tmp}/perfbisect.toml"], 2, "--force"),
    ("patches-check-without-stack", ("[patches]\ndir = ", "[patches]\n#dir = "), None,
     ["patches", "check", "good={good}", "bad={bad}", "-c", "{config}"], 2, "no patch stack"),
    # -- config ------------------------------------------------------------------------------
    ("config-missing", None, None, ["run", "good=a", "bad=b", "-c", "{tmp}/nope.toml"], 2, "No config file"),
    ("config-not-toml", ("[server]", "[server"), None, ["plan", "good={good}", "bad={bad}", "-c", "{config}"], 2, "not valid TOML"),
    ("config-unknown-key", ("runs = ", "runz = 3\nruns = "), None, ["plan", "good={good}", "bad={bad}", "-c", "{config}"], 2, "unknown key 'runz'"),
    ("ratio-metric-malformed", ('metric = "eagle3"', 'metric = "ratio:eagle3"'), None,
     ["plan", "good={good}", "bad={bad}", "-c", "{config}"], 2, "ratio:SPEC/BASE"),
    ("metric-unknown-mode", ('metric = "eagle3"', 'metric = "turbo"'), None,
     ["plan", "good={good}", "bad={bad}", "-c", "{config}"], 2, "turbo"),
    ("workload-kind-unknown", ('kind = "sglang"', 'kind = "grpc"'), None,
     ["plan", "good={good}", "bad={bad}", "-c", "{config}"], 2, "workload.kind"),
    ("runs-negative", ("runs = ", "runs = -1\n#"), None, ["plan", "good={good}", "bad={bad}", "-c", "{config}"], 2, "≥ 0"),
    ("server-command-not-found", (EMULATOR, 'command = ["/opt/no-such/sglang"'), None,
     ["measure", "-c", "{config}", "--db", "{db}"], 2, "/opt/no-such/sglang"),
    ("repo-not-git", ("[target]\nrepo = ", "[target]\nrepo = \"{tmp}/plain\"\n#"), _setup_no_git,
     ["plan", "good=a", "bad=b", "-c", "{config}"], 2, "git"),
    ("cache-dir-is-a-file", ("\ncache_dir = ", "\ncache_dir = \"{tmp}/cache-is-a-file\"\n# the demo's was: "), _setup_cache_file,
     ["measure", "-c", "{config}", "--db", "{db}"], 2, "target.cache_dir"),
    ("garbage-patch-file", ("[patches]\ndir = ", "[patches]\ndir = \"{tmp}/patches\"\n#"), _setup_garbage_patch,
     ["plan", "good={good}", "bad={bad}", "-c", "{config}"], 2, "0001-notes.patch"),
    ("patch-dir-missing", ("[patches]\ndir = ", "[patches]\ndir = \"{tmp}/no-patches\"\n#"), None,
     ["plan", "good={good}", "bad={bad}", "-c", "{config}"], 2, "no-patches"),
    ("db-is-a-directory", None, _setup_db_dir, ["log", "-c", "{config}", "--db", "{tmp}/dbdir"], 2, "is a directory"),
    ("db-is-a-device", None, None, ["log", "-c", "{config}", "--db", "/dev/null"], 2, "is not a regular file"),
    ("db-not-sqlite", None, _setup_not_sqlite, ["log", "-c", "{config}", "--db", "{tmp}/junk.sqlite"], 2, "not a SQLite database"),
    ("nul-in-a-path", ("[target]\nrepo = ", "[target]\nrepo = \"{tmp}/x\\u0000y\"\n#"), None,
     ["plan", "good=a", "bad=b", "-c", "{config}"], 2, "NUL character"),
    ("metric-key-printed-twice", COMMAND_WORKLOAD + BASELINE_METRIC, _setup_twice_bench,
     ["measure", "-m", "baseline", "-c", "{config}", "--db", "{db}"], 4, "more than once"),
    ("metric-key-never-printed", COMMAND_WORKLOAD + BASELINE_METRIC, _setup_keyless_bench,
     ["measure", "-m", "baseline", "-c", "{config}", "--db", "{db}"], 2, "without the key 'tok_s'"),
    # -- measurement broke -------------------------------------------------------------------
    ("measure-server-never-starts", (EMULATOR, DIES_AT_ONCE), None,
     ["measure", "-m", "baseline", "-c", "{config}", "--db", "{db}"], 4, "No trial produced a measurement"),
    ("run-server-never-starts", (EMULATOR, DIES_AT_ONCE, "min_effect_pct = 3.0", "min_effect_pct = 3.0\nmax_trials_total = 4"), None,
     ["run", "good={good}", "bad={bad}", "-c", "{config}", "--db", "{db}"], 4, "No trial produced a measurement"),
    ("measure-metric-always-nan", COMMAND_WORKLOAD + BASELINE_METRIC, _setup_nan_bench,
     ["measure", "-m", "baseline", "-c", "{config}", "--db", "{db}"], 4, "not a finite positive number"),
    # -- inconclusive ------------------------------------------------------------------------
    ("one-trial-budget", ("min_effect_pct = 3.0", "min_effect_pct = 3.0\nmax_trials_total = 1"), None,
     ["run", "good={good}", "bad={bad}", "-c", "{config}", "--db", "{db}"], 3, None),
]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return make_demo_target(tmp_path_factory.mktemp("bad-input") / "demo", commits=10)


def _apply_edit(text: str, edit: tuple[str, ...]) -> str:
    for old, new in zip(edit[::2], edit[1::2]):
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def _prepare(demo, tmp_path: Path, case) -> list[str]:
    _name, edit, setup, args, _code, _needle = case
    if setup is not None:
        setup(tmp_path)
    config = demo.config
    if edit is not None:
        config = tmp_path / "perfbisect.toml" if not (tmp_path / "perfbisect.toml").exists() else tmp_path / "edited.toml"
        config.write_text(_apply_edit(demo.config.read_text(), edit).replace("{tmp}", str(tmp_path)))
    fill = {"config": str(config), "db": str(tmp_path / "r.sqlite"), "good": demo.good, "bad": demo.bad, "tmp": str(tmp_path)}
    return [a.format(**fill) for a in args]


def _check(case, code: int, stdout: str, stderr: str) -> None:
    _name, _edit, _setup, _args, expected, needle = case
    assert code == expected, (code, stdout[-2000:], stderr[-3000:])
    assert "Traceback" not in stderr, stderr
    if needle:
        assert needle in " ".join(stderr.split()), stderr
    if expected == 2 and needle is not None and needle != "":
        assert "Error" in stderr or "Usage" in stderr


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_its_exit_code(demo, tmp_path, case):
    """In this process, through the CLI's one error boundary (``run_cli``): what the servers, builds and
    workloads a case starts are real subprocesses; the interpreter start of each case is not the point
    (the last test runs the installed command for one case of each exit code)."""
    proc = run_cli(*_prepare(demo, tmp_path, case), cwd=demo.root)
    _check(case, proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.parametrize("name", ["unknown-flag", "config-not-toml", "one-trial-budget", "measure-server-never-starts"])
def test_the_installed_command_gives_the_same_exit_codes(demo, tmp_path, name):
    """The `perfbisect` process itself (its entry point, Click's usage errors, exit statuses), one case per code."""
    (case,) = [c for c in CASES if c[0] == name]
    argv = _prepare(demo, tmp_path, case)
    proc = run_command(*argv, cwd=demo.root)
    _check(case, proc.returncode, proc.stdout, proc.stderr)


def test_json_never_holds_nan_and_lines_never_say_nan(demo, tmp_path):
    """A one-trial budget leaves no estimate: JSON says null (NaN is not JSON), the lines say n/a."""
    config = tmp_path / "perfbisect.toml"
    config.write_text(_apply_edit(demo.config.read_text(), ("min_effect_pct = 3.0", "min_effect_pct = 3.0\nmax_trials_total = 1")))
    base = ["run", f"good={demo.good}", f"bad={demo.bad}", "-c", str(config)]
    proc = run_command(*base, "--db", str(tmp_path / "a.sqlite"), "--json")
    assert proc.returncode == 3, proc.stderr

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in --json output")

    data = json.loads(proc.stdout, parse_constant=refuse)
    assert data["verdict"] == "inconclusive" and data["effect_pct"] is None
    lines = run_command(*base, "--db", str(tmp_path / "b.sqlite"))
    assert lines.returncode == 3 and "nan%" not in lines.stdout.lower(), lines.stdout


def test_a_comparison_without_an_estimate_reads_n_a():
    from perfbisect.model import Comparison, Verdict
    from perfbisect.report.render import comparison_line, json_value

    nan = float("nan")
    cmp = Comparison(Verdict.INCONCLUSIVE, nan, nan, nan, 5.0, "prior", 1, 0)
    line = comparison_line("endpoints", cmp)
    assert "nan" not in line.lower() and "n/a" in line
    assert json_value(cmp)["effect_pct"] is None and json_value({"x": [float("inf")]}) == {"x": [None]}


def test_port_in_use_is_a_config_error(demo, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        config = tmp_path / "perfbisect.toml"
        config.write_text(demo.config.read_text().replace("ready_timeout_s = 60", f"ready_timeout_s = 60\nport = {port}"))
        proc = run_command("measure", "-c", str(config), "--db", str(tmp_path / "r.sqlite"))
    assert proc.returncode == 2 and f"Port {port}" in proc.stderr


def test_an_unexpected_exception_is_exit_4_with_one_paragraph(demo, tmp_path, monkeypatch):
    """The CLI boundary: an error no layer anticipated (here a full disk while removing worktrees)."""
    import errno

    from perfbisect.app import housekeeping

    def full_disk(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(housekeeping, "gc", full_disk)  # the one fake here: a disk cannot be filled safely in a test
    proc = run_cli("gc", "-c", str(demo.config))
    assert proc.returncode == 4
    err = " ".join(proc.stderr.split())
    assert err.startswith("Error: perfbisect stopped on an unexpected OSError")
    assert "No space left on device" in err and "Traceback" not in err
