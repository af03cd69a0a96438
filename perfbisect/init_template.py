"""The commented perfbisect.toml that `perfbisect init` writes for an SGLang checkout."""

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

# Python-only commits need no install: the server imports sglang from the checkout under test
# through PYTHONPATH (see [server.env]), so perfbisect never touches your environment and your own
# `import sglang` stays what it was. This step only byte-compiles it (a syntax error skips the commit).
[[build.steps]]
name = "sglang-python"
command = ["{{python}}", "-m", "compileall", "-q", "python/sglang"]
paths = ["python/**"]
python_only = true

# Uncomment to build sgl-kernel from source (~25 min); cached by the tree hash of sgl-kernel/**.
# This one installs into target.python: point target.python at a venv made for perfbisect
# (python -m venv --system-site-packages) so your own environment keeps its sgl-kernel.
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

[stats]
metric = "eagle3"                # a mode, or "ratio:eagle3/baseline"
min_effect_pct = 3.0             # smaller differences are reported as `same`
alpha = 0.01
prior_sigma_pct = 5.0            # between-session noise assumed until `perfbisect calibrate` measures it
max_trials_per_commit = 10

[filters]
use_defaults = true              # docs/, **/*.md, test/, .github/, benchmark/, examples/, sgl-model-gateway/ ...
ignore = []
"""


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
