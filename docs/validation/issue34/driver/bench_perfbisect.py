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
