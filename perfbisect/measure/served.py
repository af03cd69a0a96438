"""Which implementation actually served a trial, read from what the server said while it started.

A checkout is not the release: SGLang picks some of its implementations at start-up, by what the
machine and the commit allow, and says so only in its log. From 2026 its unified radix cache runs a
Rust TreeCore when ``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND`` is ``rust`` (the default in later
commits), building it with Cargo on first use, and falls back to the Python TreeCore — logging
``Using the Python TreeCore: <reason>`` at INFO — when the configuration or the machine cannot run it
(``mem_cache/unified_cache/tree_core_registry.py``); its Rust extensions are built on demand with
``Building <module> with `cargo build …``` (``rust_extensions/loader.py``, 0.5.18 on).

``served_from_log`` reads those lines into a record kept with the trial (``server_info["perfbisect"]
["served"]``); ``fallback_refusal`` makes a silent fallback from an implementation the mode asks for a
mode change: the trial is untestable for that commit (``ModeNotApplied``), never a slower commit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..errors import ModeNotApplied

# How much of a server log is read for these lines (they come while it starts, before readiness).
_MAX_BYTES = 64 * 1024 * 1024

TREE_CORE_VAR = "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"
_PYTHON_TREE_CORE = re.compile(r"Using the Python TreeCore: (?P<reason>.+?)\s*$")
_CARGO_BUILD = re.compile(r"Building (?P<module>\S+) with `(?P<command>cargo build[^`]*)`")


@dataclass(frozen=True)
class Served:
    """What the log said of the implementations that served: the radix-tree core's fallback (its reason),
    and the Rust extensions built with Cargo at start-up."""

    tree_core_fallback: str | None = None  # the reason SGLang gave for the Python TreeCore; None: none logged
    cargo_builds: tuple[str, ...] = ()  # modules built with Cargo while the server started

    def as_json(self) -> dict:
        out: dict = {}
        if self.tree_core_fallback is not None:
            out["tree_core"] = "python"
            out["tree_core_fallback"] = self.tree_core_fallback
        if self.cargo_builds:
            out["cargo_builds"] = list(self.cargo_builds)
        return out

    def notes(self) -> list[str]:
        """What a user should see of it, one line each."""
        out = []
        if self.tree_core_fallback is not None:
            out.append(f"served by the Python TreeCore (SGLang: {self.tree_core_fallback})")
        if self.cargo_builds:
            out.append(f"built {', '.join(self.cargo_builds)} with Cargo while starting (start-up time, not measured)")
        return out


def served_from_log(log_path: Path | str) -> Served:
    """The implementation lines of a server log (its first ``_MAX_BYTES``); an unreadable log says nothing."""
    fallback, builds = None, []
    try:
        with open(log_path, "rb") as f:
            text = f.read(_MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return Served()
    for line in text.splitlines():
        if fallback is None and (m := _PYTHON_TREE_CORE.search(line)):
            fallback = m.group("reason")
        elif m := _CARGO_BUILD.search(line):
            if m.group("module") not in builds:
                builds.append(m.group("module"))
    return Served(fallback, tuple(builds))


def fallback_refusal(mode_name: str, mode_env: Mapping[str, str], served: Served) -> ModeNotApplied | None:
    """A ModeNotApplied when the mode asks for the Rust TreeCore (``[modes.NAME].env`` sets
    SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND = "rust") and the server fell back to the Python one; None
    otherwise (a fallback under the commit's own default is recorded and shown, not refused)."""
    wanted = mode_env.get(TREE_CORE_VAR)
    if wanted is None or wanted.strip().lower() != "rust" or served.tree_core_fallback is None:
        return None
    return ModeNotApplied(
        f"Mode '{mode_name}' asks for the Rust TreeCore ({TREE_CORE_VAR}=rust in [modes.{mode_name}].env), but this "
        f"commit's server fell back to the Python TreeCore: \"{served.tree_core_fallback}\" (its log). A trial here "
        f"would measure another implementation than the mode names, so this commit is skipped for it, never blamed. "
        f"Fix what SGLang names (a torch inside the Rust TreeCore's range, its Rust sources or extension present, a "
        f"configuration it supports), or drop {TREE_CORE_VAR} from the mode to measure whichever the commit picks "
        f"(recorded with each trial)."
    )
