"""perfbisect.toml → the settings of `perfbisect.settings`, validated.

Every error names the file and the key and says what would be accepted. Unknown keys are errors
(a typo like ``warmpu = 2`` must not silently fall back to a default).

The keys, their types and their defaults are the fields of the settings dataclasses: this module
walks them (``dataclasses.fields`` and their type hints) and adds only what a file needs beyond
them — how a number is checked, where a relative path starts, which keys must be given, and the
checks that span keys.
"""

from __future__ import annotations

import shlex
import sys
import typing
from datetime import datetime
from collections.abc import Mapping as AbcMapping
from dataclasses import MISSING, Field, fields, is_dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Mapping

from . import metrics
from .errors import ConfigError
from .settings import (
    number_problem,
    EXECUTOR_KINDS,
    HOOK_ACTIONS,
    LAYOUT_MAX_ENV_PAD,
    LAYOUT_MAX_PATH_SLOTS,
    RESOLVE_DATE_POLICIES,
    RUST_EXTENSION_MODES,
    RETIRED_BUILD_KEYS,
    WORKLOAD_KINDS,
    Argv,
    BuildConfig,
    BuildStep,
    Config,
    EnvironmentConfig,
    LayoutConfig,
    ModeConfig,
    PatchesConfig,
    PatchVariant,
    ServerConfig,
    StatsConfig,
    StoreConfig,
    TargetConfig,
    WorkloadConfig,
)
from .workload_kinds import kind_of

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

CONFIG_NAME = "perfbisect.toml"

# How a number is checked where "must be positive" is not the rule (keys as known_keys() spells them).
_NUMBER_CHECKS: dict[str, str] = {
    "server.port": "non-negative",  # 0: pick a free port per trial
    "workload.warmup": "non-negative",
    "workload.runs": "non-negative",  # 0: auto, from this host's noise and timings (run_allocation)
    "workload.temperature": "any",
    "stats.stop_when_ruled_out_pct": "int-or-float",  # ≥ 0, checked with its own message
    "stats.tolerance_pct": "int-or-float",  # ≥ 0 (0: `same` only when no change at all), checked below
    "stats.layout_check_pct": "int-or-float",  # ≥ 0 (0: no layout re-check), checked below
    "stats.max_trials_per_commit": "non-negative",  # 0: no cap per commit
    "stats.mode_trials": "non-negative",  # 0: no trials of the other modes at the culprit
    "stats.second_change_z": "int-or-float",  # ≥ 0, checked with its own message
    "hook.idle_s": "int-or-float",  # ≥ 0, checked with its own message
    "cost.trial_minutes": "int-or-float",  # ≥ 0 (0: learned from stored trials), checked below
    "cost.budget_gpu_hours": "int-or-float",  # ≥ 0 (0: never ask), checked below
    "executor.gpus_per_node": "non-negative",
    "executor.retries": "non-negative",
    "layout.env_pad_max": "non-negative",  # 0: no padding; the upper bound is checked in _layout
}
# Commands that must be written as a list of arguments (their placeholders are filled from
# repository data: a string split like a shell would is not accepted there).
_ARGV_LIST_ONLY = {"hook.notify_command"}
# Strings that must be one of a few values.
_CHOICES: dict[str, tuple[str, ...]] = {
    "workload.kind": WORKLOAD_KINDS, "hook.action": HOOK_ACTIONS, "executor.kind": EXECUTOR_KINDS,
}
# Fields that no key sets: the file's own path, and a mode's name (the name of its table).
_NOT_KEYS = ("path", "modes.NAME.name")
# Keys that are not fields (none today).
_FILE_ONLY_KEYS: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------
# The keys, from the settings dataclasses


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _nested(hint: Any) -> tuple[str, type] | None:
    """For a field holding tables (one, an array of them, or one per name): (key suffix, their class)."""
    if isinstance(hint, type) and is_dataclass(hint):
        return "", hint
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis and is_dataclass(args[0]):
        return "", args[0]
    if origin is AbcMapping and len(args) == 2 and is_dataclass(args[1]):
        return ".NAME", args[1]
    return None


def known_keys() -> tuple[str, ...]:
    """Every key a perfbisect.toml may hold, as TABLE.KEY ("stats.alpha", "build.steps.command",
    "modes.NAME.args"), in the order of the settings fields; derived from `perfbisect.settings`."""
    keys: list[str] = []

    def walk(prefix: str, cls: type) -> None:
        hints = _hints(cls)
        for f in fields(cls):
            key = f"{prefix}.{f.name}" if prefix else f.name
            if key in _NOT_KEYS:
                continue
            nested = _nested(hints[f.name])
            if nested:
                walk(key + nested[0], nested[1])
            else:
                keys.append(key)

    walk("", Config)
    return tuple(keys) + _FILE_ONLY_KEYS


# --------------------------------------------------------------------------------------------
# Parsing


class _Section:
    """Typed access to one TOML table that remembers which keys were read."""

    def __init__(self, data: Mapping[str, Any], where: str, file: Path | None):
        if not isinstance(data, Mapping):
            raise ConfigError(f"{file}: [{where}] must be a table, got {type(data).__name__}.")
        self.data = dict(data)
        self.where = where
        self.file = file
        self.used: set[str] = set()

    def _err(self, key: str, want: str, got: Any) -> ConfigError:
        return ConfigError(
            f"{self.file}: key '{self.where}.{key}' must be {want}, got {got!r} "
            f"({type(got).__name__}). Fix that value in the file."
        )

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = None, want: str = "") -> Any:
        self.used.add(key)
        if key not in self.data:
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and bool not in kinds:
            raise self._err(key, want or _kind_name(kinds), value)
        if not isinstance(value, kinds):
            raise self._err(key, want or _kind_name(kinds), value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            problem = number_problem(value, f"key '{self.where}.{key}'" if self.where else f"key '{key}'")
            if problem:
                raise ConfigError(f"{self.file}: {problem}. Fix that value in the file.")
        return value

    def positive(self, key: str, kind: type, default: Any) -> Any:
        value = self.get(key, kind, default)
        if value is not None and value <= 0:
            raise self._err(key, "a positive number", value)
        return value

    def non_negative_int(self, key: str, default: int) -> int:
        value = self.get(key, int, default)
        if value < 0:
            raise self._err(key, "an integer ≥ 0", value)
        return value

    def str_list(self, key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        self.used.add(key)
        if key not in self.data:
            return default
        value = self.data[key]
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._err(key, "a list of strings", value)
        return tuple(value)

    def argv(self, key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        """A command: a list of arguments, or a string split like a shell would (never run by one)."""
        self.used.add(key)
        if key not in self.data:
            return default
        value = self.data[key]
        if isinstance(value, str):
            try:
                value = shlex.split(value)
            except ValueError as exc:
                raise self._err(key, f"a command line ({exc})", value) from None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._err(key, "a list of arguments or a command string", value)
        for arg in value:
            if "\x00" in arg:  # no process can be given it: Python refuses it when the command starts
                raise ConfigError(
                    f"{self.file}: key '{self.where}.{key}' has an argument holding a NUL character (\\u0000): "
                    f"{arg!r}. An argument ends at the first NUL, so no process could be given it. Fix the "
                    f"argument in the file: remove the \\u0000."
                )
        return tuple(value)

    def env(self, key: str) -> dict[str, str]:
        self.used.add(key)
        value = self.data.get(key, {})
        if not isinstance(value, Mapping):
            raise self._err(key, "a table of NAME = \"value\"", value)
        out = {}
        for name, val in value.items():
            if isinstance(val, bool) or not isinstance(val, (str, int, float)):
                raise self._err(f"{key}.{name}", "a string or number", val)
            self._check_env_variable(key, str(name), str(val))
            out[str(name)] = str(val)
        return out

    def _check_env_variable(self, key: str, name: str, value: str) -> None:
        """A variable the OS can pass on: a process's environment is NAME=value strings ending at a NUL,
        so an empty name, '=' or NUL in a name, or NUL in a value cannot be (Python refuses it with a
        ValueError when the server or command starts, long after the config was read)."""
        table = f"{self.where}.{key}" if self.where else key
        if not name:
            raise ConfigError(
                f'{self.file}: [{table}] has a variable with an empty name ("" = {value!r}). An environment '
                f"variable needs a name. Fix it in the file: name the variable, or remove that line."
            )
        if "=" in name or "\x00" in name:
            bad = "'='" if "=" in name else "a NUL character"
            raise ConfigError(
                f"{self.file}: key '{table}.{name}' is not a usable environment variable name: it holds {bad}, "
                f"and a process's environment is NAME=value strings, so no process could be given it. Fix the "
                f"name in the file (letters, digits and '_', as in NCCL_DEBUG)."
            )
        if "\x00" in value:
            raise ConfigError(
                f"{self.file}: key '{table}.{name}' holds a NUL character (\\u0000) in its value "
                f"{value!r}. An environment value ends at the first NUL, so no process could be given it. Fix "
                f"the value in the file: remove the \\u0000."
            )

    def sub(self, key: str) -> "_Section":
        self.used.add(key)
        return _Section(self.data.get(key, {}), f"{self.where}.{key}" if self.where else key, self.file)

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            where = f"[{self.where}]" if self.where else "the top level"
            known = ", ".join(sorted(self.used))
            raise ConfigError(
                f"{self.file}: unknown key '{unknown[0]}' in {where}. Known keys there: {known}. "
                f"Remove it or fix its spelling."
            )


def _kind_name(kinds: tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _resolve(base: Path, value: str | None) -> Path | None:
    if not value:
        return None
    p = Path(value).expanduser()
    return p if p.is_absolute() else (base / p)


def _default(f: Field) -> Any:
    """The field's default; None for a field the file must give (its caller says so)."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def _no_nul(sec: _Section, key: str, value: str | None) -> str | None:
    """A path holding a NUL is no path any system call takes: said here, naming the key, not later as a ValueError."""
    if value is not None and "\x00" in value:
        raise ConfigError(
            f"{sec.file}: key '{key}' holds a NUL character (\\u0000) in the path {value!r}; no file can have that "
            f"name. Fix the path in the file."
        )
    return value


def _read(sec: _Section, name: str, hint: Any, default: Any, key: str, base: Path) -> Any:
    """One key, read and checked as its field's type says."""
    if hint is bool:
        return sec.get(name, bool, default)
    if hint is str or hint == (str | None):
        value = sec.get(name, str, default)
        choices = _CHOICES.get(key)
        if choices and value not in choices:
            raise ConfigError(f"{sec.file}: key '{key}' is {value!r}; use one of {', '.join(choices)}.")
        return value
    if hint is int or hint is float:
        check = _NUMBER_CHECKS.get(key, "positive")
        if check == "positive":
            return sec.positive(name, hint, default)
        if check == "non-negative":
            return sec.non_negative_int(name, default)
        if check == "int-or-float":
            return float(sec.get(name, (int, float), default))
        return sec.get(name, hint, default)
    if hint is Path or hint == (Path | None):
        return _resolve(base, _no_nul(sec, key, sec.get(name, str, None if default is None else str(default))))
    if hint == Argv:
        if key in _ARGV_LIST_ONLY and isinstance(sec.data.get(name), str):
            raise ConfigError(
                f"{sec.file}: key '{key}' is the string {sec.data[name]!r}; it must be a list of arguments, "
                f'as in {key.rpartition(".")[2]} = ["notify-send", "perfbisect", "{{line}}"] (it is run without a '
                f"shell, with placeholders filled from what a check found, so each argument stays one argument)."
            )
        return sec.argv(name, () if default is None else default)
    if hint == tuple[str, ...]:
        return sec.str_list(name, () if default is None else default)
    if hint == tuple[Path, ...]:
        return tuple(_resolve(base, _no_nul(sec, key, a)) for a in sec.str_list(name, () if default is None else default))
    if hint == Mapping[str, str]:
        return sec.env(name)
    raise TypeError(f"perfbisect.config has no reader for '{key}' of type {hint}; add one to _read.")


def _read_fields(sec: _Section, cls: type, prefix: str, base: Path, **defaults: Any) -> dict[str, Any]:
    """Every plain field of ``cls`` from its key (tables inside it are left to the caller)."""
    hints = _hints(cls)
    values = {}
    for f in fields(cls):
        key = f"{prefix}.{f.name}"
        if key in _NOT_KEYS or _nested(hints[f.name]):
            continue
        values[f.name] = _read(sec, f.name, hints[f.name], defaults.get(f.name, _default(f)), key, base)
    return values


def _looks_speculative(args: tuple[str, ...]) -> bool:
    """A mode that does not say `speculative = ...` is speculative when an argument mentions it."""
    return any("speculative" in a for a in args)


def _target(sec: _Section, base: Path) -> TargetConfig:
    values = _read_fields(sec, TargetConfig, "target", base)
    values["repo"] = (values["repo"] or base).resolve()
    return TargetConfig(**values)


def _patches(sec: _Section, base: Path) -> PatchesConfig:
    path = sec.file
    variants = []
    for i, raw in enumerate(sec.get("variants", list, [])):
        v = _Section(raw, f"patches.variants[{i}]", path)
        values = _read_fields(v, PatchVariant, "patches.variants", base)
        if not values["patch"]:
            raise ConfigError(f"{path}: key 'patches.variants[{i}].patch' is required: the file name of the patch it replaces.")
        if not values["alternatives"]:
            raise ConfigError(f"{path}: key 'patches.variants[{i}].alternatives' must list at least one patch file.")
        v.finish()
        variants.append(PatchVariant(**values))
    patches = PatchesConfig(**_read_fields(sec, PatchesConfig, "patches", base), variants=tuple(variants))
    if patches.dir and patches.branch:
        raise ConfigError(f"{path}: [patches] has both 'dir' and 'branch'. Keep one: a directory of patch files or a branch of patch commits.")
    if patches.branch and not patches.base:
        raise ConfigError(f"{path}: [patches] 'branch' needs 'base', the upstream commit the patch branch starts from.")
    if (patches.versions or patches.reflog) and not patches.branch:
        raise ConfigError(f"{path}: [patches] 'versions' and 'reflog' name earlier versions of a patch branch: they need "
                          f"'branch' and 'base' (a directory of patch files has no earlier versions; carry it with "
                          f"`perfbisect patches carry`).")
    return patches


def _build(sec: _Section, base: Path) -> BuildConfig:
    path = sec.file
    steps = []
    for i, raw in enumerate(sec.get("steps", list, [])):
        s = _Section(raw, f"build.steps[{i}]", path)
        values = _read_fields(s, BuildStep, "build.steps", base, name=f"step{i + 1}")
        if not values["command"]:
            raise ConfigError(f"{path}: key 'build.steps[{i}].command' is required (a list of arguments).")
        uses_source = [k for k in ("command", "paths", "artifacts") if any("{source}" in a for a in values[k])]
        if uses_source and not values["sources"]:
            raise ConfigError(
                f"{path}: key 'build.steps[{i}].{uses_source[0]}' uses {{source}}, but the step has no 'sources'. List "
                f'where its sources may be, first match wins: sources = ["python/sglang/kernels/aot", "sgl-kernel"].'
            )
        bad = [src for src in values["sources"] if not src.strip("/") or src.startswith("/") or ".." in src.split("/")]
        if bad:
            raise ConfigError(
                f"{path}: key 'build.steps[{i}].sources' holds {bad[0]!r}; each source is a directory relative to the "
                f"repository root (e.g. \"sgl-kernel\"), inside it."
            )
        steps.append(BuildStep(**values))
        s.finish()
    retired = [k for k in RETIRED_BUILD_KEYS if k in sec.data]
    if retired:
        raise ConfigError(
            f"{path}: key 'build.{retired[0]}' is no longer read: each commit's environment is now what its own "
            f"requirement file resolves to with uv, every package of it, not a few pinned ones. Remove "
            f"{', '.join('build.' + k for k in retired)} and add\n  [environment]\n  requirements = \"python/pyproject.toml\"\n"
            f"(wheel_dir becomes environment.find_links, index_url environment.index_url; a version you want fixed "
            f"by hand goes in environment.overrides). See docs/environments.md, \"How environments are made\"."
        )
    return BuildConfig(steps=tuple(steps), **_read_fields(sec, BuildConfig, "build", base))


def _environment(sec: _Section, base: Path) -> EnvironmentConfig:
    path = sec.file
    env = EnvironmentConfig(**_read_fields(sec, EnvironmentConfig, "environment", base))
    date = env.resolve_date
    if date not in RESOLVE_DATE_POLICIES:
        try:
            datetime.fromisoformat(date.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(
                f"{path}: key 'environment.resolve_date' is {date!r}; it must be \"bad\" (the bad endpoint's commit "
                f"date, for the whole range), \"commit\" (each commit's own date), \"now\", or an ISO date such as "
                f"\"2026-08-01\". Fix that value in the file."
            ) from None
    if env.requirements and (Path(env.requirements).is_absolute() or ".." in Path(env.requirements).parts):
        raise ConfigError(
            f"{path}: key 'environment.requirements' is {env.requirements!r}; it names a file inside the target "
            f"repository, relative to its root (\"python/pyproject.toml\" for SGLang). Fix that value in the file."
        )
    if env.rust_extensions not in RUST_EXTENSION_MODES:
        raise ConfigError(
            f"{path}: key 'environment.rust_extensions' is {env.rust_extensions!r}; it must be \"prebuild\" (build SGLang's "
            f"Rust extensions before each server starts; the server never compiles), \"never\" (never build them) or "
            f"\"server\" (let SGLang compile at server start). Fix that value in the file."
        )
    for key, value in (("requirements", env.requirements), *(("find_links", link) for link in env.find_links)):
        _no_nul(sec, f"environment.{key}", value)
    links = tuple(link if "://" in link else str(_resolve(base, link)) for link in env.find_links)
    return replace(env, find_links=links)


def _server(sec: _Section, base: Path) -> ServerConfig:
    # Whether a command is required depends on [workload] (a `command` workload runs no server):
    # _check_server, once both tables are read.
    return ServerConfig(**_read_fields(sec, ServerConfig, "server", base))


def _check_server(path: Path | None, server: ServerConfig, workload: WorkloadConfig) -> None:
    command = server.command
    if not kind_of(workload).serves:
        return  # the command starts whatever it measures: [server] is optional, its command unused
    if not command:
        raise ConfigError(
            f"{path}: key 'server.command' is required for workload.kind = {workload.kind!r}: the server launch "
            'command as a list, e.g. ["{python}", "-m", "sglang.launch_server", "--model-path", "M", "--port", '
            '"{port}"]. A benchmark that starts what it measures needs no server: set workload.kind = "command".'
        )
    if not any("{port}" in a for a in command):
        raise ConfigError(f"{path}: key 'server.command' must contain the placeholder {{port}} so each trial can use a free port.")


def _modes(sec: _Section, base: Path) -> dict[str, ModeConfig]:
    modes: dict[str, ModeConfig] = {}
    for name in list(sec.data):
        ms = sec.sub(name)
        values = _read_fields(ms, ModeConfig, "modes.NAME", base)
        if "speculative" not in ms.data:
            values["speculative"] = _looks_speculative(values["args"])
        modes[name] = ModeConfig(name=name, **values)
        ms.finish()
    if not modes:
        modes["baseline"] = ModeConfig(name="baseline")
    return modes


def _check_workload_files(names: tuple[str, ...], path: Path) -> None:
    """workload.files are paths inside the repository (copied into each worktree at the same path)."""
    for name in names:
        parts = PurePosixPath(name).parts
        if not parts or PurePosixPath(name).is_absolute() or ".." in parts or parts[0] == ".git":
            raise ConfigError(
                f"{path}: workload.files entry {name!r} is not a path inside the repository. Give paths relative to "
                f"target.repo (e.g. \"bench.py\", \"benchmarks/\"); a benchmark kept outside the repository needs no "
                f"entry: name it by its full path in workload.command (the worktree is on its PYTHONPATH)."
            )


def _workload(sec: _Section, base: Path) -> WorkloadConfig:
    workload = WorkloadConfig(**_read_fields(sec, WorkloadConfig, "workload", base))
    if kind_of(workload).requires == "command" and not workload.command:
        raise ConfigError(f"{sec.file}: workload.kind is 'command' but 'workload.command' is empty; give the benchmark command that prints a JSON object.")
    if workload.files and kind_of(workload).serves:
        raise ConfigError(f"{sec.file}: workload.files is for workload.kind = \"command\" (a benchmark placed in each worktree); "
                          f"this workload starts a server. Remove workload.files.")
    _check_workload_files(workload.files, sec.file)
    problem = metrics.unknown_quantity(workload) or metrics.direction_conflict(workload, sec.data.get("higher_is_better"))
    if problem:
        raise ConfigError(f"{sec.file}: {problem}")
    # A known metric's direction is known: the settings say it (ttft_ms is lower-is-better).
    return replace(workload, higher_is_better=metrics.describe_workload(workload).higher_is_better)


# Removal of the compatibility keys: each is listed in CHANGELOG.md's "Deprecations" with this version.
REMOVED_IN = "perfbisect 0.3"


def deprecations(cfg: Config) -> list[str]:
    """What ``cfg`` sets through a key kept only so that older configs load: each with its replacement and the release
    that stops reading it (``plan``, ``run`` and ``doctor`` say it)."""
    out = []
    if cfg.stats.stop_when_ruled_out_pct > 0:
        out.append(
            f"{cfg.path}: stats.stop_when_ruled_out_pct is the older name of stats.tolerance_pct, removed in "
            f"{REMOVED_IN}: write tolerance_pct = {cfg.stats.stop_when_ruled_out_pct:g} instead (it sets that tolerance now)."
        )
    return out


def _stats(sec: _Section, base: Path) -> StatsConfig:
    path = sec.file
    stats = StatsConfig(**_read_fields(sec, StatsConfig, "stats", base))
    if stats.second_change_z < 0:
        raise ConfigError(f"{path}: key 'stats.second_change_z' must be ≥ 0 (0 turns the check off), got {stats.second_change_z}.")
    if stats.stop_when_ruled_out_pct < 0:
        raise ConfigError(
            f"{path}: key 'stats.stop_when_ruled_out_pct' must be 0 (off) or a positive percent, got "
            f"{stats.stop_when_ruled_out_pct}; it is the older name of stats.tolerance_pct, removed in {REMOVED_IN}."
        )
    for key in ("tolerance_pct", "layout_check_pct"):
        value = getattr(stats, key)
        if not (0 <= value < 100):
            raise ConfigError(
                f"{path}: key 'stats.{key}' must be a percent from 0 to below 100, got {value}"
                + (" (the regression a `same` verdict rules out; 5 is the default)." if key == "tolerance_pct"
                   else " (changes smaller than this are re-measured under other layouts; 10 is the default).")
            )
    if stats.max_trials_per_commit and stats.max_trials_per_commit < 2:
        raise ConfigError(
            f"{path}: key 'stats.max_trials_per_commit' must be 0 (no cap per commit) or at least 2, got "
            f"{stats.max_trials_per_commit}: a verdict needs two trials on each side."
        )
    if not (0 < stats.alpha < 0.5):
        raise ConfigError(f"{path}: key 'stats.alpha' must lie between 0 and 0.5, got {stats.alpha}.")
    if not (0.5 < stats.confidence < 1):
        raise ConfigError(f"{path}: key 'stats.confidence' must lie between 0.5 and 1, got {stats.confidence}.")
    return stats


def _store(sec: _Section, base: Path) -> StoreConfig:
    url = _read_fields(sec, StoreConfig, "store", base)["url"] or None
    if url and "://" not in url:  # a plain path: relative to the config file's folder, like every path
        url = str(_resolve(base, url))
    return StoreConfig(url=url)


def _layout(sec: _Section, base: Path) -> LayoutConfig:
    path = sec.file
    layout = LayoutConfig(**_read_fields(sec, LayoutConfig, "layout", base))
    if not 1 <= layout.path_slots <= LAYOUT_MAX_PATH_SLOTS:
        raise ConfigError(
            f"{path}: key 'layout.path_slots' must be between 1 and {LAYOUT_MAX_PATH_SLOTS} (worktree paths of "
            f"different lengths a trial may run in; 1 keeps one path), got {layout.path_slots}. Fix that value in the file."
        )
    if layout.env_pad_max > LAYOUT_MAX_ENV_PAD:
        raise ConfigError(
            f"{path}: key 'layout.env_pad_max' must be at most {LAYOUT_MAX_ENV_PAD} bytes (one environment variable "
            f"may hold 128 KiB on Linux, and 4096 bytes already shift the stack through a whole page), got "
            f"{layout.env_pad_max}. Fix that value in the file, or set it to 0 for no padding."
        )
    return layout


# One per table of Config (a table without one here is read field by field).
_TABLES: dict[str, Callable[[_Section, Path], Any]] = {
    "target": _target,
    "patches": _patches,
    "build": _build,
    "server": _server,
    "modes": _modes,
    "workload": _workload,
    "stats": _stats,
    "store": _store,
    "layout": _layout,
    "environment": _environment,
}


def parse_config(data: Mapping[str, Any], path: Path | None = None, base_dir: Path | None = None) -> Config:
    """Validate a parsed TOML mapping. Relative paths are taken from ``base_dir`` (the file's folder)."""
    base = base_dir or (path.parent if path else Path.cwd())
    top = _Section(data, "", path)
    tables: dict[str, Any] = {}
    hints = _hints(Config)
    for f in fields(Config):
        if f.name in _NOT_KEYS:
            continue
        sec = top.sub(f.name)
        parse = _TABLES.get(f.name)
        if parse is not None:
            tables[f.name] = parse(sec, base)
        else:
            cls = hints[f.name]
            tables[f.name] = cls(**_read_fields(sec, cls, f.name, base))
        sec.finish()
    top.finish()

    config = Config(path=path, **tables)
    _check_server(path, config.server, config.workload)
    stats, modes = config.stats, config.modes
    metric = stats.metric
    if metric.startswith("ratio:"):
        spec, sep, base_mode = metric[len("ratio:") :].partition("/")
        if not sep or not spec or not base_mode or "/" in base_mode or spec == base_mode:
            raise ConfigError(
                f"{path}: key 'stats.metric' is {metric!r}; a ratio metric names two different modes as "
                f"\"ratio:SPEC/BASE\" (for example \"ratio:eagle3/baseline\"), or give one mode name."
            )
    for needed in config.metric_modes:
        if needed not in modes:
            raise ConfigError(
                f"{path}: key 'stats.metric' is {stats.metric!r}, which needs mode '{needed}', but only "
                f"{', '.join(sorted(modes))} are defined. Add [modes.{needed}] or change the metric."
            )
    for key in ("trial_minutes", "budget_gpu_hours"):
        if getattr(config.cost, key) < 0:
            raise ConfigError(f"{path}: key 'cost.{key}' must be ≥ 0 (0: {'learn it from stored trials' if key == 'trial_minutes' else 'never ask'}), got {getattr(config.cost, key)}.")
    hook = config.hook
    if hook.idle_s < 0:
        raise ConfigError(f"{path}: key 'hook.idle_s' must be ≥ 0 seconds (0: start as soon as the GPUs are free), got {hook.idle_s}.")
    for name in hook.modes:
        if name not in modes:
            raise ConfigError(f"{path}: key 'hook.modes' names mode '{name}', which is not defined; defined: {', '.join(sorted(modes))}.")
    if hook.webhook_url == "":
        config = replace(config, hook=replace(hook, webhook_url=None))
    return config


def load_config(path: Path) -> Config:
    """Read and validate a perfbisect.toml."""
    path = Path(path)
    if path.is_dir():
        path = path / CONFIG_NAME
    if not path.exists():
        raise ConfigError(
            f"No config file at {path}. Create one with `perfbisect init` in the SGLang "
            f"checkout, or pass --config PATH."
        )
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raw = path.read_bytes()[:4]
        what = ("UTF-16 text (it starts with a byte-order mark)" if raw[:2] in (b"\xff\xfe", b"\xfe\xff")
                else f"not UTF-8 text (byte {exc.start} is 0x{exc.object[exc.start]:02x})")
        raise ConfigError(
            f"{path} is {what}; a TOML config must be UTF-8. Save it as UTF-8 (for example "
            f"`iconv -f UTF-16 -t UTF-8 {path.name} > fixed.toml`), or pass the right file with --config."
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}. Fix the syntax at that line.") from None
    except OSError as exc:
        raise ConfigError(f"Cannot read {path}: {exc.strerror}.") from None
    return parse_config(data, path=path.resolve())
