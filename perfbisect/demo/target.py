"""The embedded demo target: a throwaway git repository shaped like SGLang, with a planted slowdown.

``make_demo_target`` writes a repository whose history mixes docs-only, test-only and Python
commits, upstream edits to the files the user's patch stack touches, a decoy commit named like the
one the user suspected ("Fix PCG MoE Error"), and one commit that makes the speculative verify
cycle ~17% slower (speculative tok/s −15%). It also writes the patch stack (EAGLE-3 support, the
deepseek_v2 hidden-state fix, NCCL env propagation) as ``git format-patch`` files and a
``perfbisect.toml`` that serves every commit with the demo emulator
(``perfbisect.demo.emulator``), the one stand-in for the GPU server.

Only git (through argument lists) and the standard library are used, so this module also serves
tests that need a realistic repository.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .wheels import DEMO_KERNEL, write_wheel

VERIFY_GOOD_MS = 4.0
# The demo's stand-in for SGLang's kernel: pinned in python/pyproject.toml, renamed and bumped once in
# the range (as sgl-kernel became sglang-kernel at SGLang 0.5.10), and checked by the emulator at launch
# as SGLang checks its kernel (perfbisect/demo/wheels.py). Beside it a flashinfer-like pair pinned at one
# version (flashinfer-python and flashinfer-cubin): the emulator refuses to start when they differ.
KERNEL_OLD, KERNEL_NEW = "0.1.0", "0.2.0"
DEMO_KERNEL_NEW = "demo-sglang-kernel"  # the kernel's name after the rename
DEMO_ATTN, DEMO_ATTN_CUBIN, ATTN_VERSION = "demo-attn", "demo-attn-cubin", "0.1.0"
ATTN_NEW = "0.2.0"  # a second commit bumps the pair (as SGLang bumps flashinfer): a third package that moves
DEMO_RUNTIME = "demo-runtime"  # what demo-attn needs at a range (demo-runtime>=1.0): resolved, not pinned
VERIFY_BAD_MS = 4.7  # 4.0 / 4.7 = 0.851: the speculative mode loses ~15%
# The "target" variant slows the target model's forward pass, which both modes run: the baseline
# decode step and the speculative verify cycle (one target forward over the drafts) by the same 20%.
DECODE_GOOD_MS = 2.0
TARGET_SLOWDOWN = 1.2
# What the planted commit slows: "speculative" (the verify cycle only: EAGLE-3 loses, the baseline
# does not) or "target" (the target model: both modes lose alike).
VARIANTS = ("speculative", "target")

_AUTHOR_ENV = {
    "GIT_AUTHOR_NAME": "Demo Upstream",
    "GIT_AUTHOR_EMAIL": "upstream@example.invalid",
    "GIT_COMMITTER_NAME": "Demo Upstream",
    "GIT_COMMITTER_EMAIL": "upstream@example.invalid",
}


@dataclass(frozen=True)
class DemoTarget:
    """What ``perfbisect demo`` built: where things are and what it planted."""

    root: Path
    repo: Path
    patches: Path
    config: Path
    good: str
    bad: str
    planted: str | None  # sha of the planted slowdown; None for the drift-only variant
    commits: int
    variant: str = "speculative"  # what the planted commit slows (VARIANTS)
    wheels: Path | None = None  # the wheelhouse the demo's environments install from (None: no pins)
    pin_bump: str | None = None  # sha of the commit that renames and bumps the demo-kernel pin
    attn_bump: str | None = None  # sha of the commit that bumps demo-attn (and its cubin)


def _git(repo: Path, *args: str, env_extra: dict[str, str] | None = None) -> str:
    env = {**os.environ, **_AUTHOR_ENV, **(env_extra or {})}
    out = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    )
    return out.stdout.strip()


_FILES: dict[str, str] = {
    "README.md": "# sglang (demo)\n\nA throwaway repository shaped like SGLang for perfbisect's demo.\n",
    "docs/index.md": "# Docs\n\nServing guide.\n",
    "docs/speculative.md": "# Speculative decoding\n\nEAGLE-3 notes.\n",
    "test/test_generate.py": "def test_generate():\n    assert True\n",
    "benchmark/bench_latency.py": "print('latency benchmark')\n",
    ".github/workflows/ci.yml": "name: ci\non: [push]\n",
    "python/pyproject.toml": '[project]\nname = "sglang"\nversion = "0.0.0"\n',  # pins added by _pyproject
    "python/sglang/__init__.py": '__version__ = "0.0.0.demo"\n',
    "python/sglang/srt/__init__.py": "",
    "python/sglang/srt/model_executor/__init__.py": "",
    "python/sglang/srt/model_executor/decode.py": (
        '"""Decode step timing of the demo engine (read by the demo emulator)."""\n\n'
        "DECODE_STEP_MS = 2.0\n\n\n"
        "def decode_step(batch):\n"
        "    return batch\n"
    ),
    "python/sglang/srt/model_executor/model_runner.py": (
        '"""Model runner."""\n\n\n'
        "def init_model(config):\n"
        "    layers = getattr(config, 'eagle_aux_hidden_state_layer_ids', None)\n"
        "    return layers\n"
    ),
    "python/sglang/srt/speculative/__init__.py": "",
    "python/sglang/srt/speculative/eagle_worker.py": (
        '"""EAGLE speculative worker of the demo engine."""\n\n'
        f"VERIFY_CYCLE_MS = {VERIFY_GOOD_MS}\n"
        "SPEC_ACCEPT_LENGTH = 2.4\n\n\n"
        "def verify(draft_tokens):\n"
        "    return draft_tokens\n"
    ),
    "python/sglang/srt/models/__init__.py": "",
    "python/sglang/srt/models/deepseek_v2.py": (
        '"""DeepseekV2ForCausalLM (demo)."""\n\n'
        "# Whether the hidden states the EAGLE-3 drafter needs are captured at the right layers.\n"
        "EAGLE3_CAPTURE_FIX = False\n\n\n"
        "class DeepseekV2ForCausalLM:\n"
        "    def __init__(self, n_layers=61):\n"
        "        self.n_layers = n_layers\n"
        "        self.layers_to_capture = []\n\n"
        "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
        "        n = self.n_layers\n"
        "        self.layers_to_capture = [2, n // 2, n - 3]\n"
    ),
    "python/sglang/srt/entrypoints/__init__.py": "",
    "python/sglang/srt/entrypoints/engine.py": (
        '"""Engine entry point (demo)."""\n\nimport os\n\n\n'
        "def _set_envs_and_config(server_args):\n"
        '    os.environ.setdefault("NCCL_CUMEM_ENABLE", "0")\n'
        "    return server_args\n"
    ),
    "python/sglang/srt/managers/__init__.py": "",
    "python/sglang/srt/managers/scheduler.py": '"""Scheduler (demo)."""\n\n\ndef run_scheduler_process():\n    pass\n',
    "python/sglang/srt/distributed/__init__.py": "",
    "python/sglang/srt/distributed/parallel_state.py": '"""Parallel state (demo)."""\n\nWORLD = None\n',
    "python/sglang/srt/distributed/device_communicators/__init__.py": "",
    "python/sglang/srt/distributed/device_communicators/pynccl.py": '"""PyNccl (demo)."""\n\nNCCL_READY = True\n',
}

# (subject, {path: appended text}) for ordinary upstream history; none of them changes speed.
_HISTORY: list[tuple[str, dict[str, str]]] = [
    ("Update serving guide", {"docs/index.md": "\nMore on serving.\n"}),
    ("Add scheduler metrics hook", {"python/sglang/srt/managers/scheduler.py": "\n\ndef metrics():\n    return {}\n"}),
    ("Fix typo in README", {"README.md": "\nFixed a typo.\n"}),
    ("Test: cover streaming", {"test/test_generate.py": "\n\ndef test_stream():\n    assert True\n"}),
    ("Refactor decode batch handling", {"python/sglang/srt/model_executor/decode.py": "\n\ndef merge_batches(a, b):\n    return a + b\n"}),
    ("CI: bump runner", {".github/workflows/ci.yml": "# runner v2\n"}),
    ("Document EAGLE-3 flags", {"docs/speculative.md": "\n--speculative-num-steps 2\n"}),
    ("Clean up model runner imports", {"python/sglang/srt/model_executor/model_runner.py": "\n\ndef warmup():\n    pass\n"}),
    ("deepseek_v2: add MLA helper", {"python/sglang/srt/models/deepseek_v2.py": "\n\ndef mla_absorb(x):\n    return x\n"}),
    ("Benchmark: add latency sweep", {"benchmark/bench_latency.py": "print('sweep')\n"}),
    ("Engine: log server args", {"python/sglang/srt/entrypoints/engine.py": "\n\ndef log_args(args):\n    return str(args)\n"}),
    ("Fix PCG MoE Error", {
        "python/sglang/srt/distributed/device_communicators/pynccl.py": "\n\ndef pcg_moe_guard():\n    return NCCL_READY\n",
        "python/sglang/srt/distributed/parallel_state.py": "\n\ndef moe_group():\n    return WORLD\n",
    }),
    ("Speculative: tidy verify signature", {"python/sglang/srt/speculative/eagle_worker.py": "\n\ndef tidy():\n    pass\n"}),
    ("Docs: FAQ entry", {"docs/index.md": "\nFAQ: clocks matter.\n"}),
    ("Scheduler: handle empty queue", {"python/sglang/srt/managers/scheduler.py": "\n\ndef empty():\n    return []\n"}),
    ("Tests: speculative smoke test", {"test/test_generate.py": "\n\ndef test_spec():\n    assert True\n"}),
]

_PATCHES: list[tuple[str, str, str, str]] = [
    # (subject, path, old line, new line) — each applied at the tip, exported with format-patch.
    (
        "EAGLE-3 speculative decoding support",
        "python/sglang/srt/model_executor/model_runner.py",
        "    layers = getattr(config, 'eagle_aux_hidden_state_layer_ids', None)\n",
        "    layers = getattr(config, 'eagle_aux_hidden_state_layer_ids', None)\n"
        "    if layers is not None:\n"
        "        layers = [i + 1 for i in layers]  # EAGLE-3: capture after the layer\n",
    ),
    (
        "deepseek_v2: capture the right hidden states for the EAGLE-3 drafter",
        "python/sglang/srt/models/deepseek_v2.py",
        "EAGLE3_CAPTURE_FIX = False\n",
        "EAGLE3_CAPTURE_FIX = True\n",
    ),
    (
        "engine: push NCCL tuning variables into spawned workers",
        "python/sglang/srt/entrypoints/engine.py",
        '    os.environ.setdefault("NCCL_CUMEM_ENABLE", "0")\n',
        '    os.environ.setdefault("NCCL_CUMEM_ENABLE", "0")\n'
        '    for name in ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL"):\n'
        "        os.environ.setdefault(name, os.environ.get(name, \"\"))\n",
    ),
]

NCCL_ENV = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}


def _write(repo: Path, rel: str, text: str, append: bool = False) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w") as fh:
        fh.write(text)


def _commit(repo: Path, subject: str, when: int) -> str:
    _git(repo, "add", "-A")
    date = f"{when} +0000"
    _git(repo, "commit", "-q", "-m", subject, env_extra={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    return _git(repo, "rev-parse", "HEAD")


def make_demo_target(
    root: Path,
    *,
    commits: int = 36,
    planted_at: int | None = None,
    drift_only: bool = False,
    seed: int = 7,
    session_sigma: float = 0.02,
    run_sigma: float = 0.01,
    drift_per_session: float = 0.0,
    max_tokens: int = 96,
    runs: int = 5,
    warmup: int = 1,
    variant: str = "speculative",
    pins: bool = True,
    seeded: bool = False,
) -> DemoTarget:
    """Build the demo repository, its patch stack and a perfbisect.toml under ``root``.

    ``pins``: python/pyproject.toml pins demo-kernel 0.1.0 (renamed demo-sglang-kernel and bumped to
    0.2.0 by one commit a third into the range) and the pair demo-attn / demo-attn-cubin at one version
    (bumped 0.1.0 → 0.2.0 by a commit halfway), whose wheels (and demo-runtime's, which demo-attn needs at a
    range) are written to ``root/wheels``; the config resolves each commit's pyproject with uv from that
    wheelhouse ([environment]) into one environment per lock, and the emulator refuses to start on a
    version mismatch.

    ``seeded``: the config measures with ``perfbisect.demo.seeded`` (a ``command`` workload that
    computes the emulator's speed for the checked-out code, with seeded noise of the session and run
    sigmas together, and the same drift)
    instead of timing the emulator, so a bisection's outcome does not depend on the machine's load.
    """
    root = Path(root).resolve()
    repo = _new_repo(root)
    rng = random.Random(seed)
    when = 1_764_000_000  # fixed dates: the demo's history is the same on every machine
    good, wheels = _initial_import(root, repo, pins, when)

    n_after = max(commits - 1, 8)
    planted_index = None if drift_only else (planted_at if planted_at is not None else (2 * n_after) // 3)
    bump_index = n_after // 3 if pins else None
    if bump_index is not None and bump_index == planted_index:
        bump_index -= 1
    attn_index = n_after // 2 if pins else None
    if attn_index is not None and attn_index in (planted_index, bump_index):
        attn_index += 1
    planted, pin_bump, attn_bump = _upstream_history(repo, n_after, planted_index, bump_index, variant, rng, when,
                                                     attn_index=attn_index)
    bad = _git(repo, "rev-parse", "HEAD")

    patches = root / "patches"
    _make_patch_stack(repo, patches, bad)
    config = root / "perfbisect.toml"
    config.write_text(
        demo_config_text(
            repo=repo,
            patches=patches,
            seed=seed,
            session_sigma=session_sigma,
            run_sigma=run_sigma,
            drift_per_session=drift_per_session,
            drift_file=root / "drift-counter",
            max_tokens=max_tokens,
            runs=runs,
            warmup=warmup,
            wheels=wheels,
            seeded_state=root / "seeded-counters" if seeded else None,
        )
    )
    return DemoTarget(
        root=root,
        repo=repo,
        patches=patches,
        config=config,
        good=good,
        bad=bad,
        planted=planted,
        commits=n_after + 1,
        variant=variant,
        wheels=wheels,
        pin_bump=pin_bump,
        attn_bump=attn_bump,
    )


def _new_repo(root: Path) -> Path:
    """An empty repository at ``root/sglang`` (``root`` emptied first), committing as the demo's upstream."""
    if root.exists():
        shutil.rmtree(root)
    repo = root / "sglang"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.name", "Demo Upstream")
    _git(repo, "config", "user.email", "upstream@example.invalid")
    _git(repo, "config", "commit.gpgsign", "false")
    return repo


def _initial_import(root: Path, repo: Path, pins: bool, when: int) -> tuple[str, Path | None]:
    """The good end: the engine's files (with ``pins``, python/pyproject.toml pinning the old kernel,
    and every pinned wheel written to ``root/wheels``); its sha and the wheel directory."""
    for rel, text in _FILES.items():
        _write(repo, rel, text)
    wheels = None
    if pins:
        wheels = root / "wheels"
        write_wheel(wheels, DEMO_KERNEL, KERNEL_OLD)
        write_wheel(wheels, DEMO_KERNEL_NEW, KERNEL_NEW)
        for version in (ATTN_VERSION, ATTN_NEW):
            write_wheel(wheels, DEMO_ATTN, version, requires=(f"{DEMO_RUNTIME}>=1.0",))
            write_wheel(wheels, DEMO_ATTN_CUBIN, version)
        for version in ("1.0", "1.1"):
            write_wheel(wheels, DEMO_RUNTIME, version)
        _write(repo, "python/pyproject.toml", _pyproject(DEMO_KERNEL, KERNEL_OLD))
    return _commit(repo, "Initial import of the serving engine", when), wheels


def _upstream_history(repo: Path, n_after: int, planted_index: int | None, bump_index: int | None, variant: str,
                      rng: random.Random, when: int, attn_index: int | None = None) -> tuple[str | None, str | None, str | None]:
    """``n_after`` commits an hour apart after the initial import: upstream's mix (``_HISTORY``), the kernel's
    rename and bump at ``bump_index``, demo-attn's bump at ``attn_index`` and the planted slowdown at
    ``planted_index``; their shas (planted, kernel bump, attn bump)."""
    planted = pin_bump = attn_bump = None
    kernel = (DEMO_KERNEL, KERNEL_OLD)
    for i in range(1, n_after + 1):
        when += 3600
        if planted_index is not None and i == planted_index and variant == "target":
            planted = _plant_target_slowdown(repo, when)
            continue
        if bump_index is not None and i == bump_index:
            kernel = (DEMO_KERNEL_NEW, KERNEL_NEW)
            _write(repo, "python/pyproject.toml", _pyproject(*kernel))
            pin_bump = _commit(repo, f"Rename {DEMO_KERNEL} to {DEMO_KERNEL_NEW} and bump it to {KERNEL_NEW} (#{1000 + i})",
                               when)
            continue
        if attn_index is not None and i == attn_index:
            _write(repo, "python/pyproject.toml", _pyproject(*kernel, attn=ATTN_NEW))
            attn_bump = _commit(repo, f"[Dependency] Bump {DEMO_ATTN} to {ATTN_NEW} (#{1000 + i})", when)
            continue
        if planted_index is not None and i == planted_index:
            planted = _plant_speculative_slowdown(repo, when)
            continue
        subject, edits = _HISTORY[(i - 1) % len(_HISTORY)]
        for rel, text in edits.items():
            _write(repo, rel, text.replace("\n\ndef ", f"\n\ndef v{i}_") if "def " in text else text, append=True)
        if rng.random() < 0.15:  # some upstream commits also touch docs, as real ones do
            _write(repo, "docs/index.md", f"\nNote {i}.\n", append=True)
        _commit(repo, f"{subject} (#{1000 + i})", when)
    return planted, pin_bump, attn_bump


def _plant_speculative_slowdown(repo: Path, when: int) -> str:
    """The "speculative" variant's commit: a slower verify cycle (EAGLE-3 loses ~15%, the baseline nothing)."""
    path = repo / "python/sglang/srt/speculative/eagle_worker.py"
    path.write_text(path.read_text().replace(f"VERIFY_CYCLE_MS = {VERIFY_GOOD_MS}", f"VERIFY_CYCLE_MS = {VERIFY_BAD_MS}"))
    _write(repo, "python/sglang/srt/speculative/eagle_worker.py", "\n\ndef reuse_draft_buffer():\n    return None\n", append=True)
    return _commit(repo, "Speculative: reuse the draft buffer across verify steps", when)


def _plant_target_slowdown(repo: Path, when: int) -> str:
    """The "target" variant's commit: a slower MoE path in the model, so the target forward (the
    baseline's decode step and the verify cycle that runs it over the drafts) is 20% slower."""
    edits = {
        "python/sglang/srt/model_executor/decode.py": (
            f"DECODE_STEP_MS = {DECODE_GOOD_MS}", f"DECODE_STEP_MS = {DECODE_GOOD_MS * TARGET_SLOWDOWN:g}"),
        "python/sglang/srt/speculative/eagle_worker.py": (
            f"VERIFY_CYCLE_MS = {VERIFY_GOOD_MS}", f"VERIFY_CYCLE_MS = {VERIFY_GOOD_MS * TARGET_SLOWDOWN:g}"),
    }
    for rel, (old, new) in edits.items():
        path = repo / rel
        text = path.read_text()
        if old not in text:
            raise RuntimeError(f"demo target variant lost its context in {rel}")
        path.write_text(text.replace(old, new, 1))
    _write(repo, "python/sglang/srt/models/deepseek_v2.py", "\n\ndef moe_dense_fallback(x):\n    return x\n", append=True)
    return _commit(repo, "deepseek_v2: route MoE through the dense fallback", when)


def _pyproject(kernel: str, kernel_version: str, attn: str = ATTN_VERSION) -> str:
    """python/pyproject.toml pinning the demo kernel (as SGLang pins sgl-kernel / sglang-kernel) and the
    flashinfer-like pair at one version."""
    deps = [f"{DEMO_ATTN}=={attn}", f"{DEMO_ATTN_CUBIN}=={attn}", f"{kernel}=={kernel_version}"]
    return ('[project]\nname = "sglang"\nversion = "0.0.0"\ndependencies = [\n'
            + "".join(f'  "{d}",\n' for d in deps) + "]\n")


def _make_patch_stack(repo: Path, out: Path, tip: str) -> None:
    """Commit the user's local patches on a scratch branch at ``tip`` and export them."""
    _git(repo, "checkout", "-q", "-b", "local-patches", tip)
    for subject, rel, old, new in _PATCHES:
        path = repo / rel
        text = path.read_text()
        if old not in text:
            raise RuntimeError(f"demo patch '{subject}' lost its context in {rel}")
        path.write_text(text.replace(old, new, 1))
        _git(repo, "commit", "-q", "-am", subject)
    out.mkdir(parents=True, exist_ok=True)
    _git(repo, "format-patch", "-q", "-o", str(out), f"{tip}..local-patches")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "branch", "-q", "-D", "local-patches")


def _emulator_path(root: Path) -> Path:
    """A directory holding only perfbisect's package (a link to it): on PYTHONPATH it lets each commit's
    complete environment run the emulator without seeing anything else perfbisect's interpreter has."""
    import perfbisect

    where = Path(root) / "emulator-path"
    link = where / "perfbisect"
    package = Path(perfbisect.__file__).resolve().parent
    where.mkdir(parents=True, exist_ok=True)
    if not (link.is_symlink() and link.resolve() == package):
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(package, target_is_directory=True)
    return where


def _toml_str(value: str) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def demo_config_text(
    *,
    repo: Path,
    patches: Path,
    seed: int,
    session_sigma: float,
    run_sigma: float,
    drift_per_session: float,
    drift_file: Path,
    max_tokens: int,
    runs: int,
    warmup: int,
    wheels: Path | None = None,
    seeded_state: Path | None = None,
) -> str:
    """The perfbisect.toml the demo runs with: SGLang's shape, the emulator in place of the GPU server
    (or, with ``seeded_state``, the seeded calculation of its speed as a ``command`` workload)."""
    nccl = "\n".join(f"{k} = {_toml_str(v)}" for k, v in NCCL_ENV.items())
    pinned = "" if wheels is None else f"""
[environment]
# Each commit runs in the environment its own python/pyproject.toml resolves to (uv, one environment per
# lock, complete: your interpreter is never changed). The demo's history renames and bumps its kernel (as
# SGLang renamed sgl-kernel to sglang-kernel at 0.5.10) and bumps {DEMO_ATTN}; the emulator checks the
# versions at launch, as SGLang checks its kernel. Everything comes from the demo's own wheelhouse.
requirements = "python/pyproject.toml"
find_links = [{_toml_str(wheels)}]
no_index = true
"""
    text = _demo_config_text(repo=repo, patches=patches, seed=seed, session_sigma=session_sigma, run_sigma=run_sigma,
                             drift_per_session=drift_per_session, drift_file=drift_file, max_tokens=max_tokens,
                             runs=runs, warmup=warmup, nccl=nccl, pinned=pinned,
                             emulator_path=_emulator_path(drift_file.parent))
    if seeded_state is None:
        return text
    return text.replace(
        '[workload]\nkind = "sglang"',
        '# Seeded: computed from the code, not timed (perfbisect/demo/seeded.py): the same outcome under any load.\n'
        '[workload]\nkind = "command"\ncommand = ["{python}", "-m", "perfbisect.demo.seeded"]\nmetric = "tok_s"',
    ).replace(
        "PERFBISECT_DEMO_SEED =",
        f"PERFBISECT_SEEDED_STATE = {_toml_str(seeded_state)}\nPERFBISECT_SEEDED_SEED = \"{seed}\"\n"
        f"PERFBISECT_SEEDED_SIGMA = \"{math.hypot(session_sigma, run_sigma):.4f}\"\n"
        f"PERFBISECT_SEEDED_DRIFT = \"{drift_per_session}\"\nPERFBISECT_DEMO_SEED =",
    ).replace("[modes.baseline]\nargs = []", '[modes.baseline]\nargs = []\nenv = { PERFBISECT_SEEDED_MODE = "baseline" }'
    ).replace("speculative = true", 'speculative = true\nenv = { PERFBISECT_SEEDED_MODE = "eagle3" }')


def _demo_config_text(*, repo: Path, patches: Path, seed: int, session_sigma: float, run_sigma: float,
                      drift_per_session: float, drift_file: Path, max_tokens: int, runs: int, warmup: int,
                      nccl: str, pinned: str, emulator_path: Path) -> str:
    return f"""\
# perfbisect.toml written by `perfbisect demo`.
# The server is perfbisect's SGLang emulator (a stand-in for the GPU server); everything else is real.

[target]
repo = {_toml_str(repo)}
python = {_toml_str(sys.executable)}
# The demo keeps everything in its own directory: results.sqlite, reports/, worktrees, logs. Commands
# run in this directory find this file, and through it the demo's database.
cache_dir = {_toml_str(drift_file.parent)}

[patches]
dir = {_toml_str(patches)}
{pinned}
[[build.steps]]
name = "python"
# SGLang's Python-only build is `pip install -e python --no-deps`; the demo byte-compiles instead.
command = ["{{python}}", "-m", "compileall", "-q", "python"]
paths = ["python/**"]
python_only = true

[server]
command = ["{{python}}", "-m", "perfbisect.demo.emulator", "--model-path", "demo/Kimi-K2.5-INT4",
           "--tp", "8", "--host", "{{host}}", "--port", "{{port}}", "--worktree", "{{worktree}}",
           "--workers", "2"]
ready_timeout_s = 60
ready_poll_s = 0.1
shutdown_grace_s = 5

[server.env]
{nccl}
# The emulator is perfbisect's own code (standard library only), run in each commit's environment from here.
PYTHONPATH = {_toml_str(emulator_path)}
PERFBISECT_DEMO_SEED = "{seed}"
PERFBISECT_DEMO_SESSION_SIGMA = "{session_sigma}"
PERFBISECT_DEMO_RUN_SIGMA = "{run_sigma}"
PERFBISECT_DEMO_DRIFT_PER_SESSION = "{drift_per_session}"
PERFBISECT_DEMO_DRIFT_FILE = {_toml_str(drift_file)}

[modes.baseline]
args = []

[modes.eagle3]
args = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "demo/Kimi-K2.5-EAGLE3",
        "--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3"]
speculative = true

[workload]
kind = "sglang"
max_tokens = {max_tokens}
warmup = {warmup}
runs = {runs}

[stats]
metric = "eagle3"
min_effect_pct = 3.0
"""
