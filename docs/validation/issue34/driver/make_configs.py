"""Round 8: write one perfbisect.toml per run into cfg/, each with its own cache_dir (cache/NAME)."""
import json
from pathlib import Path

R = Path("/work/validation/issue34")
PY = "/root/.pyenv/versions/3.11.7/bin/python3"
PKG_IGNORE = ["docs/**", "tests/**", ".github/**", "**/*.rst", "noxfile.py", "tasks/**", ".pre-commit-config.yaml"]
TOMLI_IGNORE = ["tests/**", "benchmark/**", ".github/**", "**/*.md", ".pre-commit-config.yaml"]


def q(s):
    return json.dumps(s)


def ql(xs):
    return "[" + ", ".join(q(x) for x in xs) + "]"


def config(repo, cache, bench, metric, hib, ignore):
    return f"""\
# issue #34 validation (round 8's driver) of the public-project config (docs/validation/public-project.md, tools/validate_public_project.py)
[target]
repo = {q(str(repo))}
python = {q(PY)}
cache_dir = {q(str(cache))}

# Not launched for kind = "command" (kept as the documented config had it).
[server]
command = ["{{python}}", "-c", "raise SystemExit('unused: workload.kind is command')", "{{port}}"]

[workload]
kind = "command"
command = {ql(["{python}", "-B", str(bench), "{worktree}"])}
metric = {q(metric)}
higher_is_better = {"true" if hib else "false"}
warmup = 0
request_timeout_s = 120

[modes.baseline]
args = []

[stats]
metric = "baseline"

[filters]
use_defaults = false
ignore = {ql(ignore)}
"""


def lay_cache(name):
    # worktree slot 0 = <cache_dir>/worktrees/wt0 must be 51 characters: cache_dir is 37
    base = str(R / "c" / name)          # e.g. /work/validation/issue34/c/lay-1 (31)
    pad = 37 - len(base)
    path = base + "-" + "p" * (pad - 1)
    assert len(path + "/worktrees/wt0") == 51, path
    return Path(path)


runs = {"tomli-1": ("tomli", "bench_tomli_inline.py", "ops_s", True, TOMLI_IGNORE),
        "aacal-1": ("packaging", "bench_perfbisect.py", "ops_s", True, PKG_IGNORE)}
for k in range(1, 4):
    runs[f"reg-{k}"] = ("packaging", "bench_perfbisect.py", "ops_s", True, PKG_IGNORE)
    runs[f"aa-{k}"] = ("packaging", "bench_perfbisect.py", "ops_s", True, PKG_IGNORE)
for name, (repo, bench, metric, hib, ign) in runs.items():
    cache = lay_cache(name) if name.startswith("lay") else R / "cache" / name
    (R / "cfg" / f"{name}.toml").write_text(config(R / repo, cache, R / "work" / bench, metric, hib, ign))
    print(name, cache, len(str(cache / "worktrees" / "wt0")))
