"""What kind of target a config describes, decided once, and what follows from it.

SGLang is perfbisect's first target, not its only one: a `command` workload measures any repository,
and the OpenAI workloads talk to any compatible server. Whatever is SGLang's own — its default path
filters (docs, tests, CI, the gateway), the "is sglang importable" check, describing trials in
tokens — applies only where ``is_sglang_target`` says so. Pure: reads settings, runs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from .pathfilter import PathFilter
from ..settings import SGLANG_IGNORE_PATHS, Config
from ..workload_kinds import kind_of


def is_sglang_target(config: Config) -> bool:
    """The one rule: an SGLang target is one measured with SGLang's own workload (``/generate``), or
    whose server command mentions sglang (an OpenAI workload against ``sglang.launch_server``).

    A ``command`` workload runs no server, so only its kind could say "sglang", and it never does:
    a command workload is not an SGLang target even in an SGLang checkout (set ``[filters] ignore``).
    """
    said = kind_of(config.workload).sglang
    if said is not None:
        return said
    return any("sglang" in arg.lower() for arg in config.server.command)


def target_name(config: Config) -> str:
    """How doctor and plan name the target: "SGLang", "command workload", "OpenAI-compatible server"."""
    if is_sglang_target(config):
        return "SGLang"
    return kind_of(config.workload).title


@dataclass(frozen=True)
class ActiveFilters:
    """The path filters that apply to a target and where each came from (``perfbisect plan`` says so)."""

    defaults: tuple[str, ...]  # the target's built-in patterns (SGLang's), () where none apply
    defaults_of: str | None  # whose defaults they are ("SGLang"); None where none apply
    user: tuple[str, ...]  # [filters] ignore
    note: str  # one line: which apply and why

    @property
    def patterns(self) -> tuple[str, ...]:
        return self.defaults + tuple(p for p in self.user if p not in self.defaults)

    def path_filter(self) -> PathFilter:
        return PathFilter(self.patterns, builtin=self.defaults)


def active_filters(config: Config) -> ActiveFilters:
    """SGLang's default path filters on an SGLang target (unless ``use_defaults = false``), plus yours."""
    f = config.filters
    sglang = is_sglang_target(config)
    defaults = SGLANG_IGNORE_PATHS if (sglang and f.use_defaults) else ()
    user = tuple(p for p in f.ignore if p.strip())
    yours = f"yours ([filters] ignore): {', '.join(user)}" if user else "none of yours ([filters] ignore)"
    if defaults:
        note = f"SGLang's default path filters ({len(defaults)} patterns: {', '.join(defaults)}) + {yours}"
    elif sglang:
        note = f"SGLang's default path filters off ([filters] use_defaults = false); {yours}"
    else:
        note = f"no default path filters (not an SGLang target: {target_name(config)}); {yours}"
    return ActiveFilters(defaults, "SGLang" if defaults else None, user, note)
