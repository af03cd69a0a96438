"""The commented perfbisect.toml files `perfbisect init` writes: for an SGLang checkout (the default),
for any repository with a benchmark command (``--command``), for any OpenAI-compatible server
(``--openai``). Each is a valid config as written (tests load every one)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SGLANG_TEMPLATE = """\
# perfbisect.toml for an SGLang checkout — written by `perfbisect init`.
# Every key is documented in perfbisect's README; unknown keys are errors.

[target]
repo = "."                       # the SGLang checkout to bisect (relative to this file)
python = "{python}"              # the interpreter SGLang runs under; versions are read through it

[patches]
# Your local patch stack, re-applied (three-way) on every tested commit. Either a directory of
# `git format-patch` files applied in name order ...
dir = "perfbisect-patches"
# ... or a branch of patch commits:  branch = "local/eagle3"  and  base = "origin/main"
#
# Alternative versions of one patch for other parts of history (first that applies wins):
# [[patches.variants]]
# patch = "0002-deepseek_v2-hidden-state-fix.patch"
# alternatives = ["perfbisect-patches/variants/0002-before-refactor.patch"]

# sgl-kernel and flashinfer move with the commits: SGLang pins them in python/pyproject.toml and
# refuses to start on another sgl-kernel. Each pin set gets its own environment, built once and cached
# in the cache directory (a venv on top of target.python: everything else you installed is used as it
# is; your interpreter never changes), with the pinned wheels installed from wheel_dir and/or
# index_url (neither: pip's default index). `perfbisect plan` shows the pin sets of a range and
# `perfbisect doctor --range GOOD..BAD` which cannot be built. Add "torch" when the range moves it.
[build]
pinned_packages = ["sgl-kernel", "flashinfer-python"]
# wheel_dir = "/wheels"          # e.g. pip download --no-deps sgl-kernel==0.3.9 -d /wheels, per version
# index_url = "https://pypi.org/simple"

# Python-only commits need no install: the server imports sglang from the checkout under test
# through PYTHONPATH (see [server.env]), so perfbisect never touches your environment and your own
# `import sglang` stays what it was. This step only byte-compiles it (a syntax error skips the commit).
[[build.steps]]
name = "sglang-python"
command = ["{{python}}", "-m", "compileall", "-q", "python/sglang"]
paths = ["python/**"]
python_only = true

# Uncomment to build sgl-kernel from source (~25 min); cached by the tree hash of sgl-kernel/**.
# {{python}} is the interpreter of the commit's pinned environment when [build] pinned_packages applies
# (so this installs there); else it is target.python: then point target.python at a venv made for
# perfbisect (python -m venv --system-site-packages) so your own environment keeps its sgl-kernel.
# [[build.steps]]
# name = "sgl-kernel"
# command = ["{{python}}", "-m", "pip", "install", "-e", "sgl-kernel", "--no-build-isolation", "-q"]
# paths = ["sgl-kernel/**"]
# timeout_s = 3600

[server]
command = ["{{python}}", "-m", "sglang.launch_server",
           "--model-path", "{model}", "--tp", "8",
           "--host", "{{host}}", "--port", "{{port}}"]
ready_path = "/health_generate"  # runs a real 1-token generation: ready means ready
ready_timeout_s = 900            # a ~1T MoE model takes ~6 minutes to load
shutdown_grace_s = 30

[server.env]                     # checked in every worker process after readiness
PYTHONPATH = "{{worktree}}/python"  # import sglang from the checkout under test, not an install
NCCL_PROTO = "LL"
NCCL_ALGO = "Ring"
NCCL_P2P_LEVEL = "SYS"
NCCL_MAX_NCHANNELS = "16"
NCCL_BUFFSIZE = "16777216"
NCCL_NTHREADS = "512"

[modes.baseline]
args = []

[modes.eagle3]
args = ["--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "{draft}",
        "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "3"]
speculative = true

[workload]
kind = "sglang"                  # /generate; or openai-completions, openai-chat, command
max_tokens = 2048                # fixed length: ignore_eos is always on
warmup = 2
runs = 5
detect_warmup = true             # slow leading runs beyond the fixed warm-up: counted as warm-up, replaced

[stats]
metric = "eagle3"                # a mode, or "ratio:eagle3/baseline"
min_effect_pct = 3.0             # smaller changes are not located or blamed
tolerance_pct = 5.0              # `same` = "no regression of this size or more" (99%, one-sided)
alpha = 0.01
prior_sigma_pct = 5.0            # between-session noise assumed until it is measured (a prior, never a licence)
max_trials_total = 80            # the budget; no cap per commit (max_trials_per_commit = 0): trials go where they tell most

[filters]
use_defaults = true              # docs/, **/*.md, test/, .github/, benchmark/, examples/, sgl-model-gateway/ ...
ignore = []
"""


COMMAND_TEMPLATE = """\
# perfbisect.toml for any git repository whose speed one command can measure — written by
# `perfbisect init --command`. Every key is documented in perfbisect's README; unknown keys are errors.
#
# Each trial checks the commit out in its own worktree, runs the build steps, then runs
# workload.command there: `warmup` warm-up invocations and one measured one. No server is started
# (there is no [server] table): the command starts whatever it measures itself.
#
# The command's contract:
#   - it prints a JSON object on stdout; the LAST line that is a JSON object counts, e.g.
#     {{"ops_per_s": 1234.5}}; other output (progress, logs) is fine and kept in the trial's log
#   - workload.metric names the key read from it (a positive number); higher_is_better says which way is good
#   - it runs in the worktree of the commit under test (its working directory), with the placeholders
#     {{python}} (target.python) and {{worktree}} (that worktree's path) filled in
#   - exit 0: measured · exit 125: this commit cannot be tested (skipped, never blamed, like
#     `git bisect run`) · any other status: the trial failed (retried once, then the commit is untestable)
#   - it may run at most workload.request_timeout_s seconds

[target]
repo = "."                       # the repository to bisect (relative to this file)
python = "{python}"              # what {{python}} expands to in the commands below

# Optional: steps that prepare each checked-out commit (compile, install into a venv). Cached by the
# tree hash of `paths`; a failing step makes the commit untestable (skipped, never blamed).
# [[build.steps]]
# name = "build"
# command = ["make", "-j8"]
# paths = ["src/**", "Makefile"]

[modes.baseline]                 # a mode is one configuration measured; its env reaches the command
env = {{}}                         # e.g. {{ OMP_NUM_THREADS = "8" }}

[workload]
kind = "command"
command = ["{{python}}", "bench.py"]  # a list of arguments (never run through a shell)
metric = "ops_per_s"             # the key of the printed JSON object that is measured
higher_is_better = true          # false for times and latencies
warmup = 1                       # invocations before the measured one (caches, compilation)
request_timeout_s = 600          # longest one invocation may run

[stats]
metric = "baseline"              # the mode the bisection decides on
min_effect_pct = 3.0             # smaller changes are not located or blamed
tolerance_pct = 5.0              # `same` = "no regression of this size or more" (99%, one-sided); noisy benchmarks need more
alpha = 0.01
prior_sigma_pct = 5.0            # noise between trials assumed until it is measured (a prior, never a licence)
max_trials_total = 80            # the budget; no cap per commit: trials go where they tell most

[filters]
# No default path filters apply (they are SGLang's); list paths whose changes cannot affect the metric.
ignore = []                      # e.g. ["docs/**", "**/*.md", ".github/**"]
skip = []                        # commits known to be untestable (or `perfbisect skip REV`)
"""

OPENAI_TEMPLATE = """\
# perfbisect.toml for any server with an OpenAI-compatible API (vLLM, TGI, llama.cpp, ...) —
# written by `perfbisect init --openai`. Every key is documented in perfbisect's README.
#
# Each trial checks the commit out in its own worktree, builds it, launches server.command, waits
# for ready_path to answer 200, sends the workload's requests and tears the whole process group down.

[target]
repo = "."                       # the checkout to bisect (relative to this file)
python = "{python}"              # what {{python}} expands to in the commands below

# Optional: steps that prepare each checked-out commit (a compiled extension, an editable install
# into a venv made for perfbisect). Cached by the tree hash of `paths`.
# [[build.steps]]
# name = "install"
# command = ["{{python}}", "-m", "pip", "install", "-e", ".", "--no-deps", "-q"]
# paths = ["**"]

[server]
# {{port}} is a free port per trial, {{host}} server.host, {{worktree}} the checkout under test.
command = ["{{python}}", "-m", "vllm.entrypoints.openai.api_server",
           "--model", "{model}", "--host", "{{host}}", "--port", "{{port}}"]
ready_path = "/health"           # 200 once the server can answer
ready_timeout_s = 900
shutdown_grace_s = 30

[server.env]                     # checked in every process of the server after readiness
PYTHONPATH = "{{worktree}}"        # import the package from the checkout under test, not an install

[modes.baseline]                 # one configuration measured; args are appended to server.command
args = []

[workload]
kind = "openai-completions"      # /v1/completions; or openai-chat (/v1/chat/completions)
model = "{model}"                # the "model" field of every request
max_tokens = 256                 # fixed output length per request
warmup = 2
runs = 5
concurrency = 1

[stats]
metric = "baseline"
min_effect_pct = 3.0             # smaller changes are not located or blamed
tolerance_pct = 5.0              # `same` = "no regression of this size or more" (99%, one-sided)
alpha = 0.01
prior_sigma_pct = 5.0
max_trials_total = 80            # the budget; no cap per commit: trials go where they tell most

[filters]
# No default path filters apply (they are SGLang's); list paths whose changes cannot affect speed.
ignore = []                      # e.g. ["docs/**", "**/*.md", "tests/**", ".github/**"]
skip = []                        # commits known to be untestable (or `perfbisect skip REV`)
"""

TEMPLATES = {"command": COMMAND_TEMPLATE, "openai": OPENAI_TEMPLATE}


def render_template(kind: str, python: str, model: str = "/models/model") -> str:
    """The ``--command`` or ``--openai`` template with the interpreter (and model) filled in."""
    return TEMPLATES[kind].format(python=python, model=model)


def render_sglang_config(python: str, model: str, draft: str) -> str:
    """Fill the template with the interpreter and model paths the user gave."""
    return SGLANG_TEMPLATE.format(python=python, model=model, draft=draft)


def _imports_sglang(python: str, timeout_s: float = 30.0) -> bool:
    try:
        proc = subprocess.run(
            [python, "-c", "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('sglang') else 1)"],
            capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def find_target_python() -> tuple[str, bool, str]:
    """The interpreter SGLang most likely runs under: (path, imports sglang, where it was found).

    perfbisect's own interpreter is often an isolated tool environment (pipx, uv tool) without
    sglang, so it is not taken blindly: the active venv / conda env and the python on PATH are asked
    first, and the first that can import sglang wins.
    """
    candidates: list[tuple[str, str]] = []
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        root = os.environ.get(var)
        if root:
            candidates.append((str(Path(root) / "bin" / "python"), f"${var}"))
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        for name in ("python", "python3"):
            found = shutil.which(name, path=directory) if directory else None
            if found:
                candidates.append((found, "PATH"))
    candidates.append((sys.executable, "perfbisect's own interpreter"))
    seen: set[str] = set()
    unique = []
    for path, how in candidates:
        if path not in seen and os.access(path, os.X_OK):
            seen.add(path)
            unique.append((path, how))
    for path, how in unique:
        if _imports_sglang(path):
            return path, True, how
    # None imports sglang: the user's python (not perfbisect's own), to be fixed by hand.
    path, how = next(((p, h) for p, h in unique if p != sys.executable), (sys.executable, "perfbisect's own interpreter"))
    return path, False, how
