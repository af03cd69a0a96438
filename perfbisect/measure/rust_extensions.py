"""What SGLang compiles itself: its Rust extensions, built before the server starts, never inside it.

From 2026-08-16 (PR #34994) an SGLang checkout loads its PyO3 extensions (``rust/``, a Cargo workspace whose
crates name their module in ``[package.metadata.sglang] python-module``) through
``sglang.srt.rust_extensions.loader.load_rust_extension``: a bundled module, else one cached under
``SGLANG_CACHE_DIR/rust_extensions`` by a fingerprint of the sources, the toolchain and the interpreter, else
``cargo build --release --locked`` — inside the server's start, where minutes of compiling (or a hang on an
offline node fetching crates) count as the server not getting ready, and a trial measures the compiler.
``SGLANG_RUST_BUILD_MODE`` (``auto`` | ``never`` | ``force``) chooses.

``[environment] rust_extensions`` makes the choice range-wide:

- ``prebuild`` (default): before each trial, SGLang's own loader builds every crate's module with the trial's
  interpreter and the server's environment (so the fingerprint, and the cache location, are the server's);
  a commit already built costs an import. The server then runs with ``SGLANG_RUST_BUILD_MODE=never``: it finds
  the cached modules and never runs cargo. A build that fails makes the commit untestable (``BuildError``).
- ``never``: nothing is built; the server runs with ``SGLANG_RUST_BUILD_MODE=never`` (bundled or cached modules,
  else SGLang's Python fallback where it has one).
- ``server``: SGLang as it is (it may compile at server start).

A commit without the loader (older history) is left alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import BuildError, InfrastructureError
from ..git.gitrepo import TargetRepo
from ..git.plan import PlanWarning, span_text
from ..model import Commit
from ..settings import EnvironmentConfig

LOADER = "python/sglang/srt/rust_extensions/loader.py"  # SGLang's on-demand loader (PR #34994, 2026-08-16)
WORKSPACE = "rust/Cargo.toml"
_NETWORK = ("failed to download", "could not resolve host", "failed to query replaced source registry",
            "network failure", "spurious network error", "couldn't resolve host")
_ENTRY = Path(__file__).with_name("rust_prebuild_entry.py")  # run by the trial's interpreter (stdlib + sglang only)


def applies(worktree: Path) -> bool:
    """Whether the checkout loads Rust extensions on demand (its loader and its Cargo workspace are there)."""
    return (worktree / LOADER).is_file() and (worktree / WORKSPACE).is_file()


def server_env(mode: str, worktree: Path) -> dict[str, str]:
    """What the server (or the command that starts one) gets: never compile, unless the user chose ``server``."""
    if mode == "server" or not applies(worktree):
        return {}
    return {"SGLANG_RUST_BUILD_MODE": "never"}


@dataclass(frozen=True)
class Prebuilt:
    modules: tuple[str, ...]
    seconds: float


def prebuild(worktree: Path, python: str, env: Mapping[str, str], log_path: Path, timeout_s: float = 3600.0) -> Prebuilt:
    """Build every crate's module with SGLang's loader in ``worktree`` (cached by the loader's own fingerprint), with
    ``env`` (the server's: the same cache and fingerprint). BuildError with the log's tail when it fails."""
    start = time.perf_counter()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full = {**os.environ, **env, "SGLANG_RUST_BUILD_MODE": "auto", "PERFBISECT_RUST_PREBUILD": "1"}
    source = str(worktree / "python")
    full["PYTHONPATH"] = os.pathsep.join(p for p in (source, full.get("PYTHONPATH", "")) if p)
    with open(log_path, "w") as log:
        try:
            proc = subprocess.run([python, str(_ENTRY), str(worktree)], cwd=worktree, env=full, stdout=subprocess.PIPE,
                                  stderr=log, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise BuildError(f"building SGLang's Rust extensions ran past {timeout_s:.0f} s", log_path=str(log_path)) from None
    tail = log_path.read_text(errors="replace")[-2000:]
    if proc.returncode != 0 and any(m in tail.lower() for m in _NETWORK):
        raise InfrastructureError(
            f"cargo could not fetch what SGLang's Rust extensions need (network): {tail.strip()[-400:]}. Nothing was "
            f"recorded against the commit. Fix the network, vendor the crates, or set environment.rust_extensions = "
            f"\"never\"; log: {log_path}"
        )
    if proc.returncode != 0:
        lines = [line.strip() for line in tail.splitlines() if line.strip()]
        said = [line for line in lines if line.startswith("error")] or lines[-1:]  # cargo's own error lines first
        raise BuildError(f"SGLang's Rust extensions did not build (exit {proc.returncode}): {'; '.join(said)[:600]} "
                         f"(log: {log_path})", log_path=str(log_path), log_tail=tail)
    modules = tuple(line.strip() for line in proc.stdout.splitlines() if line.strip())
    return Prebuilt(modules, time.perf_counter() - start)


def commits_with_loader(repo: TargetRepo, commits: Sequence[Commit]) -> list[Commit]:
    """The commits of a first-parent range that load Rust extensions on demand, read from git: the loader's presence
    changes only at commits that touch it, so a 7,000-commit range costs a handful of git calls."""
    out: list[Commit] = []
    present = None
    for i, c in enumerate(commits):
        follows = i > 0 and c.parents[:1] == (commits[i - 1].sha,)
        if not follows or {LOADER, WORKSPACE} & set(repo.changed_paths(c)):
            present = repo.file_at(c, LOADER) is not None and repo.file_at(c, WORKSPACE) is not None
        if present:
            out.append(c)
    return out


def has_cargo() -> bool:
    """Whether cargo is on PATH (what a trial needs to know; ``toolchain`` asks the versions)."""
    return shutil.which("cargo") is not None


def toolchain() -> dict[str, str]:
    """cargo's and rustc's versions on this machine ({} where cargo is missing)."""
    out = {}
    for tool in ("cargo", "rustc"):
        exe = shutil.which(tool)
        if exe is None:
            continue
        try:
            out[tool] = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout.strip() or exe
        except (OSError, subprocess.SubprocessError):
            out[tool] = exe
    return out


def problem(env: EnvironmentConfig, repo: TargetRepo, commits: Sequence[Commit],
            tools: dict[str, str] | None = None) -> PlanWarning | None:
    """What ``[environment] rust_extensions = "prebuild"`` meets over ``commits`` on this machine, or None."""
    if env.rust_extensions != "prebuild":
        return None
    with_loader = commits_with_loader(repo, commits)
    if not with_loader:
        return None
    span = span_text([c.sha for c in with_loader])
    tools = toolchain() if tools is None else tools
    if not tools.get("cargo"):
        return PlanWarning("rust-no-cargo", (
            f"{span} build SGLang's Rust extensions on demand, and cargo is not on PATH here: they cannot be built before "
            f"the server, so SGLang serves as it does without cargo (its Python fallback where it has one). Install Rust "
            f"(SGLang 0.5.22 needs 1.92) to measure them, or set environment.rust_extensions = \"never\" to say so."))
    if env.offline:
        return PlanWarning("rust-offline", (
            f"{span} build SGLang's Rust extensions with `cargo build --locked` ({tools['cargo']}), which fetches crates "
            f"from crates.io, and [environment] offline = true says this node has no network: every trial of them would "
            f"fail to build. Set environment.rust_extensions = \"never\" (bundled or cached modules only), or vendor the "
            f"crates (`cargo vendor`, CARGO_HOME) and set offline = false."))
    return None
