"""Validate perfbisect on a real regression in a public project nobody here wrote: pypa/packaging.

    python3 tools/validate_public_project.py CLONE [--workdir DIR] [--python PY]
                                             [--hand-time REPS] [--run]

CLONE is a git clone of https://github.com/pypa/packaging with history through mid-2025.
The regression (docs/validation/public-project.md has the evidence):

    680c31aa25d24f71f897717f84e3dac434a8c063  Refactor canonicalize_version (#793)

re-parses every version twice (str -> Version -> str -> _TrimmedRelease), so canonicalize_version
runs ~2x slower, and with it Specifier.__hash__ and every SpecifierSet construction (~-37%). The
workload below (a resolver-like mix of SpecifierSet construction, canonicalize_version and
Version parsing) loses ~25% at that commit. Upstream later removed the duplicate parse in
5037c9324e "perf: avoid duplicate Version creation in canonicalize_version (#994)".

This script writes into DIR (default: CLONE's sibling `<name>-work`):

    bench_perfbisect.py   the workload: imports `packaging` from the worktree it is given,
                          prints {"ops_s": ...}; it lives outside the target repo, so it is the
                          same ruler at every commit
    perfbisect.toml       a `command` workload config, no patch stack, docs/tests/CI filtered

and prints the two perfbisect commands: the regression range (24.1..24.2, culprit inside) and an
A/A range (24.2..78c2a5e4, no performance-relevant change). `--hand-time N` times the commit before
the culprit against the culprit, and the A/A endpoints, N times each, interleaved, from `git archive`
exports (no perfbisect involved). `--run` runs both bisections.

No command here is built as a shell string: git and perfbisect get argument lists.
"""

from __future__ import annotations

import argparse
import io
import json
import shlex
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

PERFBISECT_ROOT = Path(__file__).resolve().parents[1]

REGRESSION_GOOD = "85442b8032cb7bae72866dfd7782234a98dd2fb7"  # tag 24.1, "Bump for release"
REGRESSION_BAD = "d8e3b31b734926ebbcaff654279f6855a73e052f"  # tag 24.2, "Bump for release"
CULPRIT = "680c31aa25d24f71f897717f84e3dac434a8c063"  # "Refactor canonicalize_version (#793)"
CULPRIT_SUBJECT = "Refactor canonicalize_version (#793)"
BEFORE_CULPRIT = "c385b58c4d0e4d66f5c8273ebb155801c92aadf3"  # its parent, "Patch python_full_version unconditionally (#825)"
AA_GOOD = REGRESSION_BAD  # 24.2
AA_BAD = "78c2a5e4f5c04fd782a5729d93892c3a3eafe365"  # "Remove outdated/confusing Gist link (#921)", 2025-07-29

# Paths in packaging's history that cannot change the speed of the imported `packaging` package.
# pyproject.toml stays measured: conservative, it is read by nothing the workload imports.
IGNORE = [
    "docs/**",
    "tests/**",
    ".github/**",
    "**/*.rst",
    "noxfile.py",
    "tasks/**",
    ".pre-commit-config.yaml",
]

BENCH = '''\
"""perfbisect workload for pypa/packaging: a resolver-like mix of SpecifierSet construction,
canonicalize_version and Version parsing. Written by perfbisect's tools/validate_public_project.py.

Usage: python bench_perfbisect.py WORKTREE
Imports `packaging` from WORKTREE/src (or WORKTREE for very old layouts), never from site-packages,
runs a fixed amount of work in ROUNDS rounds after one warm-up round, and prints one JSON object
{"ops_s": <work items per CPU-second in the fastest round>, ...} on stdout: best of ROUNDS, as
timeit does, and measured in this process's CPU time (time.process_time) so that time spent
descheduled by other load on a shared machine is not counted. "wall_ops_s" is the same with
wall-clock time (set workload.metric = "wall_ops_s" to use it). One work item is one
SpecifierSet parsed and hashed plus five candidate Version strings parsed.
Uses only API present in every release since 16.x (SpecifierSet(str), hash, Version(str),
canonicalize_version).
"""
import json
import os
import statistics
import sys
import time

worktree = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.getcwd())
src = os.path.join(worktree, "src")
sys.path.insert(0, src if os.path.isdir(os.path.join(src, "packaging")) else worktree)

import packaging  # noqa: E402
from packaging.specifiers import SpecifierSet  # noqa: E402
from packaging.utils import canonicalize_version  # noqa: E402
from packaging.version import Version  # noqa: E402

if not os.path.abspath(packaging.__file__).startswith(worktree + os.sep):
    sys.exit(f"imported packaging from {packaging.__file__}, not from {worktree}")

# Fixed inputs: the kind of specifiers a resolver parses from requirements / metadata.
SPECS = [
    ">=1.0", ">=2.8.1,<3", "==2.8.*", "~=1.2.3", "!=1.5.*,>=1.0,<2.0", ">=3.8", "<4,>=3.7",
    "==1.26.4", ">=0.9.0,!=0.9.3,<1.0.0", "~=2.2", ">1.0.0,<1.5.0.post1", "==1!2.0", ">=22.0rc1",
    ">=1.0.dev0,<2", "===1.0-legacy", ">=3.6,!=3.7.0,!=3.7.1", "<=5.0.0,>=4.2.1", "==0.12.*,!=0.12.3",
    ">=2021.10.8", ">=1.21.0,<1.27.0", "~=0.24.0", ">=6.0.1", "!=2.0.0,!=2.0.1,>=1.10", "==3.11.*",
]
VERSIONS = ["1.0", "1.0.0", "2.8.1", "1.26.4", "1!2.0.0", "22.0rc1", "1.0.dev0", "2021.10.8", "1.5.0.post1",
            "0.24.0", "3.11.0a7", "6.0.1", "10.2.0+local.7"]
CANDIDATES = [f"{major}.{minor}.{patch}{suffix}" for major, minor, patch, suffix in (
    (1, 0, 0, ""), (1, 2, 3, "rc1"), (2, 8, 1, ".post2"), (0, 9, 12, ".dev4"), (3, 11, 0, "a7"),
    (22, 0, 1, ""), (1, 26, 4, "+local.1"), (4, 2, 1, "b2"), (2021, 10, 8, ""), (0, 24, 0, ".post1"))]
ROUNDS = 7
PER_ROUND = 40  # passes over SPECS per round


def work():
    n = 0
    for _ in range(PER_ROUND):
        for i, s in enumerate(SPECS):
            ss = SpecifierSet(s)
            hash(ss)
            for j in range(5):
                Version(CANDIDATES[(i + j) % len(CANDIDATES)])
            n += 1
        for v in VERSIONS:
            canonicalize_version(v)
    return n


work()  # warm-up: regex compilation, caches
cpu_rates, wall_rates = [], []
for _ in range(ROUNDS):
    c0, w0 = time.process_time(), time.perf_counter()
    n = work()
    cpu_rates.append(n / (time.process_time() - c0))
    wall_rates.append(n / (time.perf_counter() - w0))
print(json.dumps({
    "ops_s": round(max(cpu_rates), 2),  # CPU time of this process: blind to time spent descheduled
    "wall_ops_s": round(max(wall_rates), 2),
    "median_ops_s": round(statistics.median(cpu_rates), 2),
    "rounds": ROUNDS,
}))
'''


def toml_str(value: str) -> str:
    """A TOML basic string (JSON string escapes are valid TOML escapes)."""
    return json.dumps(value, ensure_ascii=False)


def toml_list(values: list[str]) -> str:
    return "[" + ", ".join(toml_str(v) for v in values) + "]"


def render_config(clone: Path, workdir: Path, python: str, bench: Path) -> str:
    return f"""\
# perfbisect.toml: bisect pypa/packaging with a `command` workload (no server, no patch stack).
# Written by perfbisect's tools/validate_public_project.py.

[target]
repo = {toml_str(str(clone))}
python = {toml_str(python)}
cache_dir = {toml_str(str(workdir / "cache"))}

# Not launched for kind = "command", but perfbisect still requires server.command with {{port}}.
[server]
command = ["{{python}}", "-c", "raise SystemExit('unused: workload.kind is command')", "{{port}}"]

[workload]
kind = "command"
# -B: no __pycache__ written into the worktrees. The script warms up in-process, so warmup = 0.
command = {toml_list(["{python}", "-B", str(bench), "{worktree}"])}
metric = "ops_s"
higher_is_better = true
warmup = 0
request_timeout_s = 120

[modes.baseline]
args = []

[stats]
metric = "baseline"

[filters]
use_defaults = false             # the SGLang defaults do not fit this repository
ignore = {toml_list(IGNORE)}
"""


def git(clone: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(clone), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed in {clone}: {proc.stderr.strip()}")
    return proc.stdout


def check_clone(clone: Path) -> None:
    for sha in (REGRESSION_GOOD, REGRESSION_BAD, CULPRIT, BEFORE_CULPRIT, AA_BAD):
        if subprocess.run(["git", "-C", str(clone), "cat-file", "-e", f"{sha}^{{commit}}"],
                          capture_output=True).returncode != 0:
            raise SystemExit(f"{clone} has no commit {sha}: clone https://github.com/pypa/packaging "
                             f"with full history (through July 2025 at least).")
    subject = git(clone, "log", "-1", "--format=%s", CULPRIT).strip()
    if subject != CULPRIT_SUBJECT:
        raise SystemExit(f"{CULPRIT} in {clone} is {subject!r}, expected {CULPRIT_SUBJECT!r}: not pypa/packaging?")
    for older, newer in ((REGRESSION_GOOD, CULPRIT), (CULPRIT, REGRESSION_BAD), (AA_GOOD, AA_BAD)):
        if subprocess.run(["git", "-C", str(clone), "merge-base", "--is-ancestor", older, newer]).returncode != 0:
            raise SystemExit(f"{older[:10]} is not an ancestor of {newer[:10]} in {clone}.")


def first_parent_count(clone: Path, good: str, bad: str) -> int:
    return len(git(clone, "rev-list", "--first-parent", f"{good}..{bad}").split())


def perfbisect_argv(config: Path, db: Path, good: str, bad: str) -> list[str]:
    return [sys.executable, "-m", "uv", "run", "perfbisect", "run", f"good={good}", f"bad={bad}",
            "-c", str(config), "--db", str(db)]


def export_tree(clone: Path, sha: str, into: Path) -> Path:
    """`git archive SHA` unpacked with tarfile (no shell, no checkout of the user's clone)."""
    dest = into / sha
    if not (dest / "src" / "packaging").is_dir():
        data = subprocess.run(["git", "-C", str(clone), "archive", sha], capture_output=True, check=True).stdout
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
                tar.extractall(dest, filter="data")
            else:
                tar.extractall(dest)
    return dest


def hand_time(clone: Path, workdir: Path, python: str, bench: Path, a: str, b: str, reps: int) -> None:
    trees = {sha: export_tree(clone, sha, workdir / "trees") for sha in (a, b)}
    values: dict[str, list[float]] = {a: [], b: []}
    for rep in range(reps):
        for sha in (a, b) if rep % 2 == 0 else (b, a):  # A B B A ...
            out = subprocess.run([python, "-B", str(bench), str(trees[sha])], capture_output=True, text=True, check=True)
            values[sha].append(json.loads(out.stdout.strip().splitlines()[-1])["ops_s"])
    ma, mb = statistics.median(values[a]), statistics.median(values[b])
    paired = [vb / va - 1 for va, vb in zip(values[a], values[b])]
    print(f"  {a[:10]}: median {ma:.0f} ops/s  {[round(v) for v in values[a]]}")
    print(f"  {b[:10]}: median {mb:.0f} ops/s  {[round(v) for v in values[b]]}")
    print(f"  effect {100 * (mb / ma - 1):+.1f}% (medians), paired per repetition: median "
          f"{100 * statistics.median(paired):+.1f}%, range [{100 * min(paired):+.1f}%, {100 * max(paired):+.1f}%]")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("clone", type=Path, help="git clone of https://github.com/pypa/packaging")
    ap.add_argument("--workdir", type=Path, help="where to write the bench script, config, db (default: CLONE-work)")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the workload (default: this one)")
    ap.add_argument("--hand-time", type=int, metavar="REPS", default=0,
                    help="time before-culprit vs culprit and the A/A endpoints REPS times each, interleaved")
    ap.add_argument("--run", action="store_true", help="run both bisections (one each) after writing the files")
    args = ap.parse_args()

    clone = args.clone.resolve()
    check_clone(clone)
    workdir = (args.workdir or clone.with_name(clone.name + "-work")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    bench = workdir / "bench_perfbisect.py"
    config = workdir / "perfbisect.toml"
    db = workdir / "results.sqlite"
    bench.write_text(BENCH)
    config.write_text(render_config(clone, workdir, args.python, bench))
    print(f"wrote {bench}\nwrote {config}")

    ranges = [
        ("regression", REGRESSION_GOOD, REGRESSION_BAD,
         f"expect: regressed, first bad commit {CULPRIT[:10]} {CULPRIT_SUBJECT}"),
        ("A/A", AA_GOOD, AA_BAD, "expect: no change beyond noise, no culprit"),
    ]
    print(f"\nrun from {PERFBISECT_ROOT}:")
    for name, good, bad, expect in ranges:
        n = first_parent_count(clone, good, bad)
        print(f"\n# {name} range: {n} first-parent commits after good; {expect}")
        print(shlex.join(perfbisect_argv(config, db, good, bad)))

    if args.hand_time:
        print(f"\nhand timing ({args.hand_time} interleaved repetitions each, metric ops_s, higher is better):")
        print("before the culprit vs the culprit:")
        hand_time(clone, workdir, args.python, bench, BEFORE_CULPRIT, CULPRIT, args.hand_time)
        print("A/A endpoints:")
        hand_time(clone, workdir, args.python, bench, AA_GOOD, AA_BAD, args.hand_time)

    if args.run:
        rc = 0
        for name, good, bad, _ in ranges:
            print(f"\n=== {name} bisection", flush=True)
            rc = max(rc, subprocess.run(perfbisect_argv(config, db, good, bad), cwd=PERFBISECT_ROOT).returncode)
        return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
