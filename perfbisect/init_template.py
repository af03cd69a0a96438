"""The commented perfbisect.toml that `perfbisect init --sglang` writes for an SGLang checkout."""

from __future__ import annotations

SGLANG_TEMPLATE = """\
# perfbisect.toml for an SGLang checkout — written by `perfbisect init --sglang`.
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

[[build.steps]]
name = "sglang-python"           # Python-only: seconds, no artefacts to cache
command = ["{{python}}", "-m", "pip", "install", "-e", "python", "--no-deps", "-q"]
paths = ["python/**"]
python_only = true

# Uncomment to build sgl-kernel from source (~25 min); cached by the tree hash of sgl-kernel/**.
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
