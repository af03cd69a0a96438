"""perfbisect workload (round 8 reconstruction): tomli parsing a file of 40 inline tables.

Usage: python bench_tomli_inline.py WORKTREE
Puts WORKTREE/src first on sys.path and refuses to run if `tomli` was imported from anywhere else.
After one in-process warm-up, ROUNDS rounds each parse the document (tomli_inline.toml, next to this
script, read once) PER_ROUND times with tomli.loads. Prints one JSON object
{"ops_s": parses per CPU-second in the best round (time.process_time), "wall_ops_s": ..., "us": ..., "rounds": ...}.
"""
import json
import os
import sys
import time

worktree = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.getcwd())
src = os.path.join(worktree, "src")
sys.path.insert(0, src if os.path.isdir(os.path.join(src, "tomli")) else worktree)

import tomli  # noqa: E402

if not os.path.abspath(tomli.__file__).startswith(worktree + os.sep):
    sys.exit(f"imported tomli from {tomli.__file__}, not from {worktree}")

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tomli_inline.toml"), encoding="utf-8") as f:
    DOC = f.read()
ROUNDS = 7
PER_ROUND = 40

doc = tomli.loads(DOC)
assert len(doc) == 40 and doc["t39"]["sub"]["z"] == [1, 2, 3], "document parsed wrong"
cpu, wall = [], []
for _ in range(ROUNDS):
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(PER_ROUND):
        tomli.loads(DOC)
    cpu.append(PER_ROUND / (time.process_time() - c0))
    wall.append(PER_ROUND / (time.perf_counter() - w0))
print(json.dumps({"ops_s": round(max(cpu), 2), "wall_ops_s": round(max(wall), 2),
                  "us": round(1e6 / max(cpu), 2), "rounds": ROUNDS}))
