"""perfbisect.toml → a validated, frozen configuration.

Every error names the file and the key and says what would be accepted. Unknown keys are errors
(a typo like ``warmpu = 2`` must not silently fall back to a default).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import ConfigError
from .model import content_hash

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

CONFIG_NAME = "perfbisect.toml"

# Paths that cannot change serving throughput in SGLang (its own CI filters agree; DESIGN.md §8).
SGLANG_IGNORE_PATHS: tuple[str, ...] = (
    "docs/**",
    "**/*.md",
    "test/**",
    ".github/**",
    "benchmark/**",
    "examples/**",
    "sgl-model-gateway/**",
    "sgl-router/**",
    "python/sglang/multimodal_gen/**",
)

PLACEHOLDERS = ("{port}", "{python}", "{worktree}", "{host}")


@dataclass(frozen=True)
class TargetConfig:
    repo: Path
    python: str = sys.executable  # the target's interpreter: versions are read through it
    cache_dir: Path | None = None  # default: <repo>/.git/perfbisect


@dataclass(frozen=True)
class PatchVariant:
    """Alternative versions of one patch of the stack; the first that applies is used."""

    patch: str  # file name of the patch in the stack directory this variant replaces
    alternatives: tuple[Path, ...]


@dataclass(frozen=True)
class PatchesConfig:
    dir: Path | None = None  # a directory of `git format-patch` files applied in name order
    branch: str | None = None  # or a branch of patch commits ...
    base: str | None = None  # ... on top of this base
    variants: tuple[PatchVariant, ...] = ()


@dataclass(frozen=True)
class BuildStep:
    name: str
    command: tuple[str, ...]
    paths: tuple[str, ...] = ("**",)  # the cache key is the tree hash of these paths
    python_only: bool = False  # recorded as such: no compiled artefact to cache
    timeout_s: float = 3600.0
    cache: bool = True
    artifacts: tuple[str, ...] = ()  # paths (relative to the worktree) to keep in the build cache


@dataclass(frozen=True)
class BuildConfig:
    steps: tuple[BuildStep, ...] = ()
    cache_max_gb: float = 20.0


@dataclass(frozen=True)
class ServerConfig:
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port per trial
    ready_path: str = "/health_generate"
    ready_timeout_s: float = 900.0
    ready_poll_s: float = 2.0
    shutdown_grace_s: float = 20.0
    check_env: bool = True


@dataclass(frozen=True)
class ModeConfig:
    name: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    speculative: bool = False

    def config_hash(self, server: ServerConfig) -> str:
        """Identity of what this mode launches: server command, args and env."""
        return content_hash(
            list(server.command), dict(server.env), list(self.args), dict(self.env)
        )


@dataclass(frozen=True)
class WorkloadConfig:
    kind: str = "sglang"  # sglang | openai-completions | openai-chat | command
    prompts: tuple[str, ...] = ()
    prompts_file: Path | None = None
    max_tokens: int = 256
    warmup: int = 2
    runs: int = 5
    concurrency: int = 1
    temperature: float = 0.0
    request_timeout_s: float = 600.0
    model: str = "default"  # model name for the OpenAI endpoints
    command: tuple[str, ...] = ()  # for kind = "command": prints a JSON object
    metric: str = "tok_s"  # JSON key of the metric, for kind = "command"
    higher_is_better: bool = True

    def config_hash(self) -> str:
        data = dataclasses.asdict(self)
        data["prompts_file"] = str(self.prompts_file) if self.prompts_file else None
        return content_hash(data)


@dataclass(frozen=True)
class StatsConfig:
    metric: str = "baseline"  # a mode name, or "ratio:SPEC/BASE"
    min_effect_pct: float = 3.0  # smaller differences are called `same`
    alpha: float = 0.01  # false-blame rate per decision
    confidence: float = 0.99  # posterior needed to name a culprit
    max_trials_per_commit: int = 10
    max_trials_total: int = 80
    prior_sigma_pct: float = 5.0  # between-trial noise assumed before any is measured
    drift_check: bool = True  # model the machine's drift over the run order (and say when it moved)
    stop_when_ruled_out_pct: float = 0.0  # > 0: stop once regressions this big are ruled out
    second_change_z: float = 2.0  # how hard to look for a second change (3: thorough, 0: off)


@dataclass(frozen=True)
class FiltersConfig:
    ignore: tuple[str, ...] = SGLANG_IGNORE_PATHS


@dataclass(frozen=True)
class Config:
    path: Path | None
    target: TargetConfig
    patches: PatchesConfig
    build: BuildConfig
    server: ServerConfig
    modes: Mapping[str, ModeConfig]
    workload: WorkloadConfig
    stats: StatsConfig
    filters: FiltersConfig

    @property
    def cache_dir(self) -> Path:
        return self.target.cache_dir or (self.target.repo / ".git" / "perfbisect")

    @property
    def default_db(self) -> Path:
        return self.cache_dir / "results.sqlite"

    def mode(self, name: str) -> ModeConfig:
        try:
            return self.modes[name]
        except KeyError:
            known = ", ".join(sorted(self.modes)) or "(none)"
            raise ConfigError(
                f"Mode '{name}' is not defined in {self.path}. Known modes: {known}. "
                f"Add a [modes.{name}] table or pick one of those."
            ) from None

    @property
    def metric_modes(self) -> tuple[str, ...]:
        """The modes the bisection metric needs measured at every commit."""
        metric = self.stats.metric
        if metric.startswith("ratio:"):
            spec, base = metric[len("ratio:") :].split("/", 1)
            return (base, spec)
        return (metric,)


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
                return tuple(shlex.split(value))
            except ValueError as exc:
                raise self._err(key, f"a command line ({exc})", value) from None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._err(key, "a list of arguments or a command string", value)
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
            out[str(name)] = str(val)
        return out

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


def parse_config(data: Mapping[str, Any], path: Path | None = None, base_dir: Path | None = None) -> Config:
    """Validate a parsed TOML mapping. Relative paths are taken from ``base_dir`` (the file's folder)."""
    base = base_dir or (path.parent if path else Path.cwd())
    top = _Section(data, "", path)

    t = top.sub("target")
    repo_s = t.get("repo", str, ".")
    repo = _resolve(base, repo_s) or base
    target = TargetConfig(
        repo=repo.resolve(),
        python=t.get("python", str, sys.executable),
        cache_dir=_resolve(base, t.get("cache_dir", str, None)),
    )
    t.finish()

    p = top.sub("patches")
    variants = []
    raw_variants = p.get("variants", list, [])
    for i, raw in enumerate(raw_variants):
        v = _Section(raw, f"patches.variants[{i}]", path)
        name = v.get("patch", str, None)
        if not name:
            raise ConfigError(f"{path}: key 'patches.variants[{i}].patch' is required: the file name of the patch it replaces.")
        alts = tuple(_resolve(base, a) for a in v.str_list("alternatives"))
        if not alts:
            raise ConfigError(f"{path}: key 'patches.variants[{i}].alternatives' must list at least one patch file.")
        v.finish()
        variants.append(PatchVariant(patch=name, alternatives=alts))  # type: ignore[arg-type]
    patches = PatchesConfig(
        dir=_resolve(base, p.get("dir", str, None)),
        branch=p.get("branch", str, None),
        base=p.get("base", str, None),
        variants=tuple(variants),
    )
    if patches.dir and patches.branch:
        raise ConfigError(f"{path}: [patches] has both 'dir' and 'branch'. Keep one: a directory of patch files or a branch of patch commits.")
    if patches.branch and not patches.base:
        raise ConfigError(f"{path}: [patches] 'branch' needs 'base', the upstream commit the patch branch starts from.")
    p.finish()

    b = top.sub("build")
    steps = []
    for i, raw in enumerate(b.get("steps", list, [])):
        s = _Section(raw, f"build.steps[{i}]", path)
        command = s.argv("command")
        if not command:
            raise ConfigError(f"{path}: key 'build.steps[{i}].command' is required (a list of arguments).")
        steps.append(
            BuildStep(
                name=s.get("name", str, f"step{i + 1}"),
                command=command,
                paths=s.str_list("paths", ("**",)),
                python_only=s.get("python_only", bool, False),
                timeout_s=s.positive("timeout_s", float, 3600.0),
                cache=s.get("cache", bool, True),
                artifacts=s.str_list("artifacts"),
            )
        )
        s.finish()
    build = BuildConfig(steps=tuple(steps), cache_max_gb=b.positive("cache_max_gb", float, 20.0))
    b.finish()

    s = top.sub("server")
    command = s.argv("command")
    if not command:
        raise ConfigError(
            f"{path}: key 'server.command' is required: the server launch command as a list, e.g. "
            '["{python}", "-m", "sglang.launch_server", "--model-path", "M", "--port", "{port}"].'
        )
    if not any("{port}" in a for a in command):
        raise ConfigError(f"{path}: key 'server.command' must contain the placeholder {{port}} so each trial can use a free port.")
    server = ServerConfig(
        command=command,
        env=s.env("env"),
        host=s.get("host", str, "127.0.0.1"),
        port=s.non_negative_int("port", 0),
        ready_path=s.get("ready_path", str, "/health_generate"),
        ready_timeout_s=s.positive("ready_timeout_s", float, 900.0),
        ready_poll_s=s.positive("ready_poll_s", float, 2.0),
        shutdown_grace_s=s.positive("shutdown_grace_s", float, 20.0),
        check_env=s.get("check_env", bool, True),
    )
    s.finish()

    m = top.sub("modes")
    modes: dict[str, ModeConfig] = {}
    for name in list(m.data):
        ms = m.sub(name)
        modes[name] = ModeConfig(
            name=name,
            args=ms.argv("args"),
            env=ms.env("env"),
            speculative=ms.get("speculative", bool, any("speculative" in a for a in ms.data.get("args", []) if isinstance(a, str))),
        )
        ms.finish()
    if not modes:
        modes["baseline"] = ModeConfig(name="baseline")
    m.finish()

    w = top.sub("workload")
    kind = w.get("kind", str, "sglang")
    kinds = ("sglang", "openai-completions", "openai-chat", "command")
    if kind not in kinds:
        raise ConfigError(f"{path}: key 'workload.kind' is {kind!r}; use one of {', '.join(kinds)}.")
    workload = WorkloadConfig(
        kind=kind,
        prompts=w.str_list("prompts"),
        prompts_file=_resolve(base, w.get("prompts_file", str, None)),
        max_tokens=w.positive("max_tokens", int, 256),
        warmup=w.non_negative_int("warmup", 2),
        runs=w.positive("runs", int, 5),
        concurrency=w.positive("concurrency", int, 1),
        temperature=w.get("temperature", float, 0.0),
        request_timeout_s=w.positive("request_timeout_s", float, 600.0),
        model=w.get("model", str, "default"),
        command=w.argv("command"),
        metric=w.get("metric", str, "tok_s"),
        higher_is_better=w.get("higher_is_better", bool, True),
    )
    if kind == "command" and not workload.command:
        raise ConfigError(f"{path}: workload.kind is 'command' but 'workload.command' is empty; give the benchmark command that prints a JSON object.")
    w.finish()

    st = top.sub("stats")
    stats = StatsConfig(
        metric=st.get("metric", str, "baseline"),
        min_effect_pct=st.positive("min_effect_pct", float, 3.0),
        alpha=st.positive("alpha", float, 0.01),
        confidence=st.positive("confidence", float, 0.99),
        max_trials_per_commit=st.positive("max_trials_per_commit", int, 10),
        max_trials_total=st.positive("max_trials_total", int, 80),
        prior_sigma_pct=st.positive("prior_sigma_pct", float, 5.0),
        drift_check=st.get("drift_check", bool, True),
        stop_when_ruled_out_pct=float(st.get("stop_when_ruled_out_pct", (int, float), 0.0)),
        second_change_z=float(st.get("second_change_z", (int, float), 2.0)),
    )
    if stats.second_change_z < 0:
        raise ConfigError(f"{path}: key 'stats.second_change_z' must be ≥ 0 (0 turns the check off), got {stats.second_change_z}.")
    if stats.stop_when_ruled_out_pct < 0:
        raise ConfigError(
            f"{path}: key 'stats.stop_when_ruled_out_pct' must be 0 (off) or a positive percent, got "
            f"{stats.stop_when_ruled_out_pct}."
        )
    if not (0 < stats.alpha < 0.5):
        raise ConfigError(f"{path}: key 'stats.alpha' must lie between 0 and 0.5, got {stats.alpha}.")
    if not (0.5 < stats.confidence < 1):
        raise ConfigError(f"{path}: key 'stats.confidence' must lie between 0.5 and 1, got {stats.confidence}.")
    st.finish()

    f = top.sub("filters")
    use_defaults = f.get("use_defaults", bool, True)
    extra = f.str_list("ignore")
    filters = FiltersConfig(ignore=(SGLANG_IGNORE_PATHS if use_defaults else ()) + extra)
    f.finish()
    top.finish()

    config = Config(
        path=path,
        target=target,
        patches=patches,
        build=build,
        server=server,
        modes=modes,
        workload=workload,
        stats=stats,
        filters=filters,
    )
    metric = stats.metric
    if metric.startswith("ratio:"):
        spec, sep, base = metric[len("ratio:") :].partition("/")
        if not sep or not spec or not base or "/" in base or spec == base:
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
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}. Fix the syntax at that line.") from None
    except OSError as exc:
        raise ConfigError(f"Cannot read {path}: {exc.strerror}.") from None
    return parse_config(data, path=path.resolve())


_PLACEHOLDER = re.compile(r"\{([A-Za-z_]+)\}")


def expand(argv: tuple[str, ...], **values: str) -> list[str]:
    """Fill {port}/{python}/{worktree}/{host} placeholders in each argument (no shell involved).

    One pass: text that a placeholder brings in (a repository path containing "{host}") is never
    expanded again. Unknown placeholders stay as written.
    """
    def fill(match: re.Match) -> str:
        key = match.group(1)
        return str(values[key]) if key in values else match.group(0)

    return [_PLACEHOLDER.sub(fill, arg) for arg in argv]
