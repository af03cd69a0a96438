"""perfbisect workload (round 8 reconstruction): packaging micro-benchmarks, ~16 us per call.

Usage: python bench_micro.py WORKTREE
Puts WORKTREE/src first on sys.path and refuses to run if `packaging` was imported from anywhere
else. After one in-process warm-up, each benchmark runs ROUNDS rounds of CALLS calls; a call's time
is the best round's CPU time (time.process_time) divided by CALLS, in microseconds. Prints one JSON
object: {"ver_us": ..., "spec_us": ..., "canon_us": ..., "rounds": ROUNDS}. lower is better.
  ver_us   one call = Version() of 5 fixed version strings (~16 us at packaging 24.2 on this machine) (packaging's Version parsing)
  spec_us  one call = SpecifierSet() of 2 fixed specifier strings
  canon_us one call = canonicalize_version() of 6 fixed version strings
"""
import json
import os
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

VERS = ["1.0", "2.8.1", "1!2.0.0", "22.0rc1", "1.0.dev0", "10.2.0+local.7"]
VER5 = ["1.0", "2.8.1", "1!2.0.0", "22.0rc1", "10.2.0+local.7"]
SPECS = [">=1.0,<2.0,!=1.5.*", "~=2.2"]
ROUNDS = 9
CALLS = 400


def ver():
    for v in VER5:
        Version(v)


def spec():
    for s in SPECS:
        SpecifierSet(s)


def canon():
    for v in VERS:
        canonicalize_version(v)


def best_us(fn):
    fn()
    best = float("inf")
    for _ in range(ROUNDS):
        c0 = time.process_time()
        for _ in range(CALLS):
            fn()
        best = min(best, time.process_time() - c0)
    return round(1e6 * best / CALLS, 4)


out = {"ver_us": best_us(ver), "spec_us": best_us(spec), "canon_us": best_us(canon), "rounds": ROUNDS}
print(json.dumps(out))
