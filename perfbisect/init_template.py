"""The commented perfbisect.toml files `perfbisect init` writes: for an SGLang checkout (the default),
for any repository with a benchmark command (``--command``), for any OpenAI-compatible server
(``--openai``). Each is a valid config as written (tests load every one)."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

SGLANG_TEMPLATE = """\
# perfbisect.toml for an SGLang checkout — written by `perfbisect init`.
# Every key is documented in perfbisect's docs/configuration.md; unknown keys are errors.

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

# Each commit runs in the environment its own python/pyproject.toml resolves to: uv resolves every
# dependency (torch and the CUDA stack, transformers, triton, flashinfer, the kernel under whichever name
# the commit uses) into a lock, and the commits with one lock share one complete environment, installed
# once into the cache directory (never an overlay on target.python, which never changes; uv's cache makes
# each further environment take seconds). Unpinned requirements resolve as of the bad endpoint's commit
# date, so an environment changes only at the commits that change requirements. target.python gives the
# Python version (SGLang's 2026 commits accept 3.10-3.12). `perfbisect plan` lists the environments of a
# range and the packages that move between them; `perfbisect plan --prepare` installs them all before any
# GPU time; `perfbisect doctor --range GOOD..BAD` says which cannot be made and why.
{environment}# resolve_date = "bad"           # or "commit" (each commit's own date), "now", or a date: "2026-08-01"
# extras = ["tracing"]           # optional-dependency groups to include
# index_url = "https://pypi.org/simple"
# find_links = ["/wheels"]       # a wheelhouse; on an offline node add no_index = true and offline = true
# overrides = ["torch==2.9.1"]   # a version pinned by hand over every commit's own

# Python-only commits need no install: the server imports sglang from the checkout under test
# through PYTHONPATH (see [server.env]), so perfbisect never touches your environment and your own
# `import sglang` stays what it was. This step only byte-compiles it (a syntax error skips the commit).
[[build.steps]]
name = "sglang-python"
command = ["{{python}}", "-m", "compileall", "-q", "python/sglang"]
paths = ["python/**"]
python_only = true

# Uncomment to build SGLang's kernels from source (~25 min a build). Their sources moved: sgl-kernel/
# until 2026-07-28, python/sglang/kernels/aot/ after (PR #32648); at each commit the first of
# `sources` that exists is {{source}}, and the build is cached by that directory's content, so a
# commit that does not touch it restores the last build instead of rebuilding. The package is
# installed into .perfbisect/kernel-site inside the worktree (kept in the build cache), which
# [server.env] PYTHONPATH puts ahead of the environment's kernel wheel (uv on PATH installs it: the
# environments hold no pip).
# [[build.steps]]
# name = "kernel"
# sources = ["python/sglang/kernels/aot", "sgl-kernel"]
# command = ["uv", "pip", "install", "--python", "{{python}}", "--no-deps", "--no-build-isolation", "-q",
#            "--target", ".perfbisect/kernel-site", "{{source}}"]
# artifacts = [".perfbisect/kernel-site"]
# timeout_s = 3600

[server]
command = ["{{python}}", "-m", "sglang.launch_server",
           "--model-path", {model}, "--tp-size", "8",
{trust_remote_code}
           "--host", "{{host}}", "--port", "{{port}}"]
ready_path = "/health_generate"  # runs a real 1-token generation: ready means ready
ready_timeout_s = 900            # a ~1T MoE model takes ~6 minutes to load
shutdown_grace_s = 30

[server.env]                     # checked in every worker process after readiness
PYTHONPATH = "{{worktree}}/python:{{worktree}}/.perfbisect/kernel-site"  # the checkout under test (and its kernel build, if any), not an install
{nccl}

[modes.baseline]
args = []

[modes.eagle3]
args = ["--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", {draft},
        "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "3"]
speculative = true

# A tuning's effect is itself a comparison of two modes: the same server, one variable apart.
# `perfbisect measure REV` measures every mode, so the two tables side by side are the answer.
# [modes.eagle3-nccl-ll]
# args = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", {draft},
#         "--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3"]
# env = {{ NCCL_PROTO = "LL" }}
# speculative = true

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
max_trials_total = 120           # the budget; no cap per commit (max_trials_per_commit = 0): trials go where they tell most

[filters]
use_defaults = true              # docs/, **/*.md, test/, .github/, benchmark/, examples/, sgl-model-gateway/ ...
ignore = []
"""


COMMAND_TEMPLATE = """\
# perfbisect.toml for any git repository whose speed one command can measure — written by
# `perfbisect init --command`. Every key is documented in perfbisect's docs/configuration.md; unknown keys are errors.
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
command = ["{{python}}", "bench.py"]  # a list of arguments (never run through a shell); runs in each commit's worktree,
                                 # (a .py kept outside, named by its full path, gets it first on PYTHONPATH)
files = ["bench.py"]             # taken from your working tree when the run starts and placed in every commit's
                                 # worktree: one benchmark for every commit (remove it to run each commit's own)
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
max_trials_total = 120           # the budget; no cap per commit: trials go where they tell most

[filters]
# No default path filters apply (they are SGLang's); list paths whose changes cannot affect the metric.
ignore = []                      # e.g. ["docs/**", "**/*.md", ".github/**"]
skip = []                        # commits known to be untestable (or `perfbisect skip REV`)
"""

OPENAI_TEMPLATE = """\
# perfbisect.toml for any server with an OpenAI-compatible API (vLLM, TGI, llama.cpp, ...) —
# written by `perfbisect init --openai`. Every key is documented in perfbisect's docs/configuration.md.
#
# Each trial checks the commit out in its own worktree, builds it, launches server.command, waits
# for ready_path to answer 200, sends the workload's requests and tears the whole process group down.

[target]
repo = "."                       # the checkout to bisect (relative to this file)
python = "{python}"              # what {{python}} expands to in the commands below

# vLLM needs its compiled extensions (vllm/_C and friends), which a checkout does not have.
# VLLM_USE_PRECOMPILED=1 fetches the ones built for this commit's base (wheels.vllm.ai) instead of
# compiling for an hour, and `pip install -e` writes them into the checkout. The install goes into a
# throwaway venv inside the worktree (made for perfbisect, seeing target.python's packages), never
# into target.python's own environment; the server imports vllm from the checkout (PYTHONPATH).
# The kernels are cached by the tree hash of the compiled sources: Python-only commits reuse them.
# To compile from source instead, drop VLLM_USE_PRECOMPILED=1 (and raise timeout_s).
[[build.steps]]
name = "build-venv"
command = ["{{python}}", "-m", "venv", "--system-site-packages", "{{worktree}}/.perfbisect-build-venv"]
paths = ["setup.py", "pyproject.toml"]
cache = false

[[build.steps]]
name = "vllm-kernels"
command = ["env", "VLLM_USE_PRECOMPILED=1", "{{worktree}}/.perfbisect-build-venv/bin/python", "-m", "pip",
           "install", "-q", "--no-deps", "-e", "{{worktree}}"]
paths = ["csrc/**", "cmake/**", "CMakeLists.txt", "setup.py", "pyproject.toml", "requirements/**"]
artifacts = ["vllm/**/*.so", "vllm/_version.py"]
timeout_s = 1800

[server]
# {{port}} is a free port per trial, {{host}} server.host, {{worktree}} the checkout under test.
command = ["{{python}}", "-m", "vllm.entrypoints.openai.api_server",
           "--model", "{model}", "--host", "{{host}}", "--port", "{{port}}"]  # add "--trust-remote-code" for a model with its own code
ready_path = "/health"           # 200 once the server can answer
ready_timeout_s = 900
shutdown_grace_s = 30

[server.env]                     # checked in every process of the server after readiness
PYTHONPATH = "{{worktree}}"        # import the package (and its built kernels) from the checkout under test

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
max_trials_total = 120           # the budget; no cap per commit: trials go where they tell most

[filters]
# No default path filters apply (they are SGLang's); list paths whose changes cannot affect speed.
ignore = []                      # e.g. ["docs/**", "**/*.md", "tests/**", ".github/**"]
skip = []                        # commits known to be untestable (or `perfbisect skip REV`)
"""

TEMPLATES = {"command": COMMAND_TEMPLATE, "openai": OPENAI_TEMPLATE}


def render_template(kind: str, python: str, model: str = "/models/model") -> str:
    """The ``--command`` or ``--openai`` template with the interpreter (and model) filled in."""
    return TEMPLATES[kind].format(python=python, model=model)


def render_sglang_config(python: str, model: str, draft: str, *, environ: Mapping[str, str] | None = None,
                         site_dirs: Sequence[Path] | None = None, environments: bool = True) -> str:
    """Fill the template: the interpreter, the model paths, ``--trust-remote-code`` when the model
    needs it, and the NCCL variables the user's environment sets (``environ``: the shell's, by
    default ``os.environ``; ``site_dirs``: where target.python looks for ``sitecustomize.py``, by
    default asked of it without running that file). ``environments``: the checkout has
    python/pyproject.toml, so [environment] is on (else written commented out)."""
    environ = os.environ if environ is None else environ
    dirs = site_dirs_of(python, environ) if site_dirs is None else list(site_dirs)
    return SGLANG_TEMPLATE.format(
        python=python, model=toml_string(model), draft=toml_string(draft),
        trust_remote_code=trust_remote_code_line(model), nccl=nccl_block(nccl_settings(environ, dirs)),
        environment=('[environment]\nrequirements = "python/pyproject.toml"\n' if environments else
                     "# This checkout has no python/pyproject.toml at HEAD: uncomment once its commits have one.\n"
                     '# [environment]\n# requirements = "python/pyproject.toml"\n'),
    )


def toml_string(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(str(value), ensure_ascii=False)


def _comment(text: str) -> str:
    """Text for one comment line: control characters (a newline would end the comment) escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


# --------------------------------------------------------------------------------------------
# --trust-remote-code: does the model ship its own code?

def remote_code(model: str) -> tuple[bool | None, str]:
    """(needed, why) from the model directory: ``auto_map`` in config.json or tokenizer_config.json
    (transformers loads the named classes from the model's own files), or Python files beside
    them. None when the directory is not here to read (a hub id, another machine's path)."""
    root = Path(model).expanduser()
    if not root.is_dir():
        return None, f"{model} is not a directory on this machine, so its config.json could not be read"
    for name in ("config.json", "tokenizer_config.json"):
        path = root / name
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        auto_map = data.get("auto_map") if isinstance(data, dict) else None
        if isinstance(auto_map, dict) and auto_map:
            first = next(iter(auto_map.items()))
            return True, f"{name} has auto_map ({first[0]} -> {first[1]}): the model ships its own code"
    code = sorted(p.name for p in root.glob("*.py"))
    if code:
        return True, f"the model directory has its own code ({', '.join(code[:3])})"
    if not (root / "config.json").is_file():
        return None, f"{model} has no config.json to read"
    return False, "config.json has no auto_map and the directory holds no .py files"


def trust_remote_code_line(model: str) -> str:
    """The server command's ``--trust-remote-code`` line: on, off with the reason, or commented."""
    needed, why = remote_code(model)
    pad = " " * 11
    if needed:
        return f'{pad}"--trust-remote-code",  # {_comment(why)}'
    if needed is None:
        return (f'{pad}# "--trust-remote-code",  # uncomment if the model ships its own code (config.json auto_map, '
                f'as Kimi-K2\'s tokenizer does): {_comment(why)}')
    return f"{pad}# no --trust-remote-code: {_comment(why)}"


# --------------------------------------------------------------------------------------------
# NCCL variables: what the user's environment really sets (shell, sitecustomize.py)

_NCCL_NAME = re.compile(r"NCCL_[A-Z0-9_]+\Z")


@dataclass(frozen=True)
class NcclSetting:
    """One NCCL variable the user's environment sets, and where."""

    name: str
    value: str
    source: str  # "your shell" or the sitecustomize.py path and line
    overrides_config: bool = False  # sitecustomize assigns it at interpreter start, after [server.env]


def site_dirs_of(python: str, environ: Mapping[str, str] | None = None, timeout_s: float = 30.0) -> list[Path]:
    """Where ``python`` looks for sitecustomize.py: PYTHONPATH, its site-packages, its stdlib.
    Asked with -I -S, so its own sitecustomize.py is not run to answer."""
    environ = os.environ if environ is None else environ
    dirs = [Path(p) for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    probe = ("import json, site, sys, sysconfig; p = sysconfig.get_paths(); "
             "print(json.dumps([p.get('purelib'), p.get('platlib'), site.getusersitepackages(), p.get('stdlib')] + sys.path))")
    try:
        proc = subprocess.run([python, "-I", "-S", "-c", probe], capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
        found = json.loads(proc.stdout) if proc.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError):
        found = []
    dirs += [Path(p) for p in found if isinstance(p, str) and p]
    return list(dict.fromkeys(dirs))


def _const_str(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float)) and not isinstance(node.value, bool):
        return str(node.value)
    return None


def _is_environ(node: ast.AST) -> bool:
    """``os.environ`` or a bare ``environ`` (from os import environ)."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (isinstance(node, ast.Name) and node.id == "environ")


def parse_sitecustomize(path: Path) -> list[tuple[str, str, int, bool]]:
    """NCCL_* variables a sitecustomize.py sets, read without running it: (name, value, line,
    assigns) for ``os.environ[K] = V``, ``os.environ.setdefault(K, V)``, ``os.environ.update({...})``
    / ``update(K=V)``, ``os.putenv(K, V)`` and ``{K: V}`` dicts looped into the environment. ``assigns``:
    it overwrites what the process was started with (setdefault does not)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return []
    found: list[tuple[str, str, int, bool]] = []

    def add(key: ast.AST | str | None, value: ast.AST, line: int, assigns: bool) -> None:
        name = key if isinstance(key, str) else (_const_str(key) if key is not None else None)
        val = _const_str(value)
        if name and val is not None and _NCCL_NAME.match(name):
            found.append((name, val, line, assigns))

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and _is_environ(target.value):
                    add(target.slice, node.value, node.lineno, True)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func, args = node.func, node.args
            if _is_environ(func.value) and func.attr == "setdefault" and len(args) == 2:
                add(args[0], args[1], node.lineno, False)
            elif _is_environ(func.value) and func.attr == "update":
                for arg in args:
                    if isinstance(arg, ast.Dict):
                        for k, v in zip(arg.keys, arg.values):
                            add(k, v, node.lineno, True)
                for kw in node.keywords:
                    if kw.arg:
                        add(kw.arg, kw.value, node.lineno, True)
            elif func.attr == "putenv" and len(args) == 2:
                add(args[0], args[1], node.lineno, True)
        elif isinstance(node, ast.Dict):  # a table of tuning values looped into os.environ
            if any(isinstance(k, ast.Constant) and isinstance(k.value, str) and _NCCL_NAME.match(k.value) for k in node.keys):
                for k, v in zip(node.keys, node.values):
                    if k is not None:
                        add(k, v, getattr(k, "lineno", node.lineno), True)
    unique: dict[str, tuple[str, str, int, bool]] = {}
    for item in found:  # the last assignment in the file wins, as it would when it runs
        unique[item[0]] = item
    return list(unique.values())


def nccl_settings(environ: Mapping[str, str], site_dirs: Sequence[Path]) -> list[NcclSetting]:
    """NCCL variables of the shell and of the first sitecustomize.py on the interpreter's path
    (the one Python imports), with where each came from. A sitecustomize.py that assigns a variable
    wins over the shell's; one that only sets a default does not."""
    out: dict[str, NcclSetting] = {}
    for name in sorted(environ):
        if _NCCL_NAME.match(name):
            out[name] = NcclSetting(name, environ[name], f"your shell (${name} when `perfbisect init` ran)")
    custom = next((d / "sitecustomize.py" for d in site_dirs if (d / "sitecustomize.py").is_file()), None)
    if custom is not None:
        for name, value, line, assigns in parse_sitecustomize(custom):
            how = "assigned" if assigns else "default (setdefault)"
            if assigns or name not in out:
                out[name] = NcclSetting(name, value, f"{custom}:{line}, {how}", overrides_config=assigns)
    return sorted(out.values(), key=lambda s: s.name)


def nccl_block(settings: Sequence[NcclSetting]) -> str:
    """[server.env] lines for the NCCL variables found (each with its source), else commented examples."""
    if not settings:
        return (
            "# No NCCL_* variable is set in your shell or in a sitecustomize.py of target.python, so NCCL picks\n"
            "# its own tuning for this node. To pin one, set it here (every worker's environment is checked\n"
            "# after readiness). Forcing a protocol or algorithm can slow large all-reduces on another node:\n"
            "# measure it first, as two modes (see [modes.eagle3-nccl-ll] below).\n"
            '# NCCL_PROTO = "LL"\n'
            '# NCCL_ALGO = "Ring"'
        )
    lines = ["# NCCL tuning your environment sets (perfbisect init read it; keep what you mean to pin):"]
    for s in settings:
        lines.append(f"{s.name} = {toml_string(s.value)}  # from {_comment(s.source)}")
        if s.overrides_config:
            lines.append("#   that sitecustomize.py assigns it when the interpreter starts, over [server.env] and [modes] env:")
            lines.append("#   to compare other values as modes, make it a setdefault there")
    return "\n".join(lines)


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
