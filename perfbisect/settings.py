"""The settings every layer receives: frozen values with their defaults, and nothing about files.

Each default is written once, here, in the dataclass field. `perfbisect.config` is one way to make
these values (it reads perfbisect.toml by walking these fields); tests and library callers build them
directly.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Mapping

from .errors import ConfigError
from .model import content_hash
from .workload_kinds import KINDS

# A command: a list of arguments, or in the file a string split like a shell would (never run by one).
Argv = Annotated[tuple[str, ...], "argv"]

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

WORKLOAD_KINDS: tuple[str, ...] = tuple(KINDS)  # workload_kinds.KINDS: what each one is


# One rule for every number perfbisect reads, config key or command-line flag: finite, and no
# larger in size than this (a percent: PERCENT_CEILING). Nothing perfbisect counts or times comes
# near — a million trials, 31 years of seconds —: a larger value is a typo, and NaN or infinity
# would crash a statistic or make a wait that never ends.
NUMBER_CEILING = 1e9
# How long a trial waits for GPUs another process took before it gives up (``--wait-idle``): an
# overnight bisection outlasts a neighbour's job instead of dying on it.
DEFAULT_WAIT_IDLE_S = 6 * 3600.0
PERCENT_CEILING = 1000.0


def number_problem(value: float | int, name: str) -> str | None:
    """Why ``value`` (of the key or flag ``name``) breaks the one rule for numbers, or None."""
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    ceiling = PERCENT_CEILING if "_pct" in name else NUMBER_CEILING
    if not math.isfinite(number):
        return f"{name} is {value!r}, not a finite number; give a number between {-ceiling:g} and {ceiling:g}"
    if abs(number) > ceiling:
        shown = f"{value:g}" if isinstance(value, float) else (str(value) if len(str(value)) < 25 else f"an integer of {len(str(abs(value)))} digits")
        return f"{name} is {shown}, beyond any sensible value (at most {ceiling:g} in size)"
    return None


@dataclass(frozen=True)
class TargetConfig:
    repo: Path = Path(".")  # relative to the config file's folder
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
    # Earlier versions of `branch` (tags, branches, shas of its earlier tips; `reflog`: every tip its reflog holds):
    # at each commit the version based nearest before it is tried first (perfbisect/git/patches.py VersionedStack).
    versions: tuple[str, ...] = ()
    reflog: bool = False


@dataclass(frozen=True)
class BuildStep:
    name: str  # in the file: default "step<N>"
    command: Argv
    paths: tuple[str, ...] = ("**",)  # the cache key is the tree hash of these paths
    python_only: bool = False  # recorded as such: no compiled artefact to cache
    timeout_s: float = 3600.0
    cache: bool = True
    artifacts: tuple[str, ...] = ()  # paths (relative to the worktree) to keep in the build cache
    # Where the step's sources may live across the range, first match wins (SGLang's kernels: "sgl-kernel"
    # until 2026-07-28, "python/sglang/kernels/aot" after): at each commit the first directory that exists
    # is {source} in command, paths and artifacts, and paths default to "{source}/**"; a commit with none
    # of them has nothing to build and skips the step. Empty: the step runs at every commit.
    sources: tuple[str, ...] = ()

    def source_at(self, has_dir) -> str | None:
        """The first of ``sources`` that ``has_dir(path)`` says exists; None when none does (or none are set)."""
        return next((s.strip("/") for s in self.sources if has_dir(s.strip("/"))), None)

    def key_paths(self, source: str | None) -> tuple[str, ...]:
        """The globs the cache key hashes at a commit whose source is ``source``."""
        if source is None:
            return self.paths
        if self.paths == ("**",):
            return (f"{source}/**",)
        return tuple(p.replace("{source}", source) for p in self.paths)


@dataclass(frozen=True)
class BuildConfig:
    steps: tuple[BuildStep, ...] = ()
    cache_max_gb: float = 20.0


# Keys [build] held before environments were resolved by uv ([environment]); a file that still has one is told
# what replaced it. A compatibility message only: removed in perfbisect 0.3, when these become unknown keys like any other.
RETIRED_BUILD_KEYS = ("pinned_packages", "package_aliases", "companions", "pin_files", "wheel_dir", "index_url")

# How unpinned requirements are resolved in time (uv --exclude-newer): "bad" the bad endpoint's commit date
# for the whole range (the default: an environment changes only at commits that change requirements), "commit"
# each commit's own date, "now" no cut-off, or a fixed ISO 8601 date / date-time.
RESOLVE_DATE_POLICIES = ("bad", "commit", "now")
RUST_EXTENSION_MODES = ("prebuild", "never", "server")  # [environment] rust_extensions


@dataclass(frozen=True)
class EnvironmentConfig:
    """Each commit's Python environment: what its own requirement file resolves to (perfbisect/git/requirements.py,
    perfbisect/measure/resolver.py, perfbisect/measure/envs.py). Off (target.python as it is) while
    ``requirements`` is empty."""

    requirements: str = ""  # the commit's requirement file: "python/pyproject.toml" (SGLang) or a requirements*.txt
    extras: tuple[str, ...] = ()  # optional-dependency groups of that file to include ("srt", "all", ...)
    resolve_date: str = "bad"  # RESOLVE_DATE_POLICIES or an ISO date ("2026-08-01", "2026-08-01T12:00:00Z")
    python_platform: str = ""  # uv --python-platform ("x86_64-manylinux_2_28"); "": target.python's own platform
    index_url: str = ""  # the index to resolve and install from ("": uv's default, PyPI, plus the file's own indexes)
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()  # wheelhouses (directories of wheels) or flat index pages
    no_index: bool = False  # only find_links: no index at all (an offline node with a wheelhouse)
    offline: bool = False  # uv --offline: nothing fetched, only uv's cache and find_links
    no_sources: bool = False  # ignore the commit's own [tool.uv] sources (uv --no-sources): a wheelhouse replaces them
    overrides: tuple[str, ...] = ()  # requirements that win over every commit's own ("torch==2.9.1"): pinned by hand
    uv: str = ""  # the uv executable; "": the one installed with perfbisect (the `uv` package), else PATH's
    # What SGLang compiles itself (perfbisect/measure/rust_extensions.py), with or without `requirements`: "prebuild"
    # its Rust extensions before the server starts, which then never compiles; "never" compile them; "server" as SGLang does.
    rust_extensions: str = "prebuild"

    @property
    def enabled(self) -> bool:
        return bool(self.requirements)


@dataclass(frozen=True)
class ServerConfig:
    command: Argv = ()  # required unless workload.kind = "command" (then no server runs)
    env: Mapping[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port per trial
    ready_path: str = "/health_generate"
    ready_timeout_s: float = 900.0
    ready_poll_s: float = 2.0
    shutdown_grace_s: float = 20.0
    check_env: bool = True
    # Variables whose values no report shows (besides any whose name holds TOKEN, KEY, SECRET, PASSWORD, ...).
    secret_env: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModeConfig:
    name: str  # in the file: the name of its [modes.NAME] table
    args: Argv = ()
    env: Mapping[str, str] = field(default_factory=dict)
    speculative: bool = False  # in the file: default whether an argument mentions "speculative"

    def config_hash(self, server: ServerConfig) -> str:
        """Identity of what this mode launches: server command, args and env."""
        return content_hash(
            list(server.command), dict(server.env), list(self.args), dict(self.env)
        )


# WorkloadConfig fields newer than its hash, with the default that leaves each out of it.
_LATE_WORKLOAD_FIELDS: dict[str, object] = {"detect_warmup": True, "client_rev": None, "dataset_path": None, "files": ()}


@dataclass(frozen=True)
class WorkloadConfig:
    kind: str = "sglang"  # one of WORKLOAD_KINDS
    prompts: tuple[str, ...] = ()
    prompts_file: Path | None = None
    max_tokens: int = 256
    warmup: int = 2
    runs: int = 5  # measured runs per trial; 0: auto, the cheapest for this host (perfbisect/measure/run_allocation.py)
    concurrency: int = 1
    temperature: float = 0.0
    request_timeout_s: float = 600.0
    model: str = "default"  # model name for the OpenAI endpoints
    command: Argv = ()  # kind = "command": prints a JSON object; kind = "bench_serving": extra arguments
    # kind = "command": paths in the working tree (files or folders) copied into every commit's worktree before the
    # command runs, as they are when the command starts: one benchmark for every commit (measure/workload_files.py).
    files: tuple[str, ...] = ()
    metric: str = "tok_s"  # what each run yields: a quantity, a bench_serving or command JSON key (perfbisect/metrics.py)
    higher_is_better: bool = True  # for command keys; a known metric's direction is known
    # Leading measured runs slower than the rest beyond their spread count as warm-up and are
    # replaced by more runs (perfbisect/measure/warmup.py); built-in client only (one measured run otherwise).
    detect_warmup: bool = True
    # kind = "bench_serving": the revision whose `sglang.bench_serving` measures every trial, so a change
    # to the client cannot be blamed. Default: the command's reference revision (the good endpoint of
    # run/check/resume, A of compare, the revision of measure/calibrate).
    client_rev: str | None = None
    # kind = "bench_serving": the ShareGPT-format JSON file its `--dataset-name random` samples prompt
    # tokens from (`--dataset-path`). Unset: `--dataset-name random-ids`, random token ids, so nothing
    # is downloaded (`random` without a path fetches ShareGPT from the Hugging Face hub at run time).
    dataset_path: Path | None = None

    def config_hash(self) -> str:
        """Identity of what a trial runs: part of the noise key every stored trial is pooled by."""
        data = dataclasses.asdict(self)
        data["prompts_file"] = str(self.prompts_file) if self.prompts_file else None
        data["dataset_path"] = str(self.dataset_path) if self.dataset_path else None
        # Fields added after trials were stored under this hash stay out of it while at their
        # default: adding one must not move the noise key of a config that does not set it.
        for name, default in _LATE_WORKLOAD_FIELDS.items():
            if data[name] == default:
                del data[name]
        if self.kind == "bench_serving" and self.dataset_path is None:
            # Without a dataset its prompts are random token ids (`random-ids`); trials stored with ShareGPT-sampled
            # prompts (`random`) hashed without this entry, and the two must not pool.
            data["bench_serving_dataset"] = "random-ids"
        return content_hash(data)



@dataclass(frozen=True)
class StatsConfig:
    metric: str = "baseline"  # a mode name, or "ratio:SPEC/BASE"
    min_effect_pct: float = 3.0  # smaller differences are called `same`
    alpha: float = 0.01  # false-blame rate per decision
    confidence: float = 0.99  # posterior needed to name a culprit
    max_trials_per_commit: int = 0  # 0: no cap per commit (the look-ahead allocates within max_trials_total)
    max_trials_total: int = 120  # at the H200's session noise a 5% tolerance takes ~80 (docs/archive/benchmarks-notebook.md, round 6)
    prior_sigma_pct: float = 5.0  # between-trial noise assumed before any is measured
    drift_check: bool = True  # model the machine's drift over the run order (and say when it moved)
    # The older name of tolerance_pct, still read so that configs written for 0.1 load: > 0 overrides it (the engine
    # reads `stop_when_ruled_out_pct or tolerance_pct`). Removed in perfbisect 0.3; config.deprecations says so.
    stop_when_ruled_out_pct: float = 0.0
    layout_check_pct: float = 10.0  # a change smaller than this must survive a change of layout before it is blamed
    tolerance_pct: float = 5.0  # `same` = no regression this big (one-sided, 1 − alpha); 0: only "no change at all"
    second_change_z: float = 2.0  # how hard to look for a second change (3: thorough, 0: off)
    # When a speculative mode's culprit is named: trials of every other mode at the culprit and its
    # parent, to say whether the target model or the speculative path regressed (0: don't).
    mode_trials: int = 3


@dataclass(frozen=True)
class FiltersConfig:
    ignore: tuple[str, ...] = ()  # your patterns, added to the target's defaults (targets.path_filters)
    use_defaults: bool = True  # apply the target's default patterns (SGLang's, on an SGLang target only)
    skip: tuple[str, ...] = ()  # revisions never measured, never blamed (like `git bisect skip`)


@dataclass(frozen=True)
class HookConfig:
    """[hook]: what the post-`git pull` hook's check does (perfbisect/hook/check.py)."""

    action: str = "bisect"  # "check": only answer "slower beyond noise?"; "bisect": then find the culprit
    modes: tuple[str, ...] = ()  # modes the check compares (default: every configured mode)
    idle_s: float = 60.0  # GPUs must have been free of other processes this long before a check starts
    webhook_url: str | None = None  # POST the verdict as JSON here (failures are logged, never fatal)
    notify_command: Argv = ()  # run after each check ({verdict} {culprit} {effect} {report} {line})


HOOK_ACTIONS = ("check", "bisect")


@dataclass(frozen=True)
class CostConfig:
    """[cost]: what a trial costs, for `plan`'s estimate and `run`'s budget question (perfbisect/engine/cost.py)."""

    trial_minutes: float = 0.0  # 0: learn it from the trials stored on this host (none yet: unknown)
    gpus: int = 1  # GPUs one trial holds (8 for --tp 8): GPU-hours = trial hours x gpus
    budget_gpu_hours: float = 0.0  # > 0: `run` asks before starting when the estimate exceeds it


@dataclass(frozen=True)
class ExecutorConfig:
    """[executor]: where a bisection's trials run (perfbisect/executors/slurm.py for "slurm")."""

    kind: str = "local"  # "local": on this machine, one at a time; "slurm": one Slurm job per observation
    nodes: int = 1  # slurm: jobs in flight at once (k nodes, each job takes a whole node)
    partition: str | None = None  # slurm: sbatch --partition
    account: str | None = None  # slurm: sbatch --account
    time_limit: str | None = None  # slurm: sbatch --time ("02:00:00"); the partition's default when unset
    constraint: str | None = None  # slurm: sbatch --constraint ("h100")
    gpus_per_node: int = 0  # slurm: sbatch --gpus-per-node (0: ask for none explicitly)
    sbatch_args: tuple[str, ...] = ()  # slurm: more sbatch arguments, one per item ("--qos=high")
    retries: int = 2  # slurm: resubmissions of a job lost to the cluster (cancelled, node failure) before giving up
    poll_s: float = 10.0  # slurm: seconds between looks at the jobs in flight


EXECUTOR_KINDS = ("local", "slurm")


@dataclass(frozen=True)
class LayoutConfig:
    """[layout]: what each trial varies that the commit does not control (perfbisect/layout.py).

    Environment size, path lengths and hash order move timings by several percent with no code
    change (Mytkowicz et al., ASPLOS 2009): drawn anew per trial they become noise, not bias.
    """

    randomize: bool = True  # false: every trial runs under the fixed layout (slot 0, no padding, hash seed untouched)
    env_pad_max: int = 4096  # bytes: a trial pads the server's and command's environment by 0..this many
    path_slots: int = 4  # worktree paths of different lengths a trial may be checked out into (1..8)
    hash_seed: bool = True  # a per-trial PYTHONHASHSEED, unless server.env or the mode's env sets one


# Bounds of [layout]: a slot's directory name grows by 29 characters per slot (worktrees.slot_name)
# and must stay under NAME_MAX (255); one environment string may hold 128 KiB on Linux
# (MAX_ARG_STRLEN), and 4096 bytes already move the stack through every offset of a page.
LAYOUT_MAX_PATH_SLOTS = 8
LAYOUT_MAX_ENV_PAD = 65536


@dataclass(frozen=True)
class StoreConfig:
    """[store]: where results are kept (perfbisect/store)."""

    # A SQLAlchemy URL: postgresql+psycopg://USER@HOST:PORT/DB for a store shared by several nodes,
    # sqlite:///PATH, or a plain file path. Default: the SQLite file <cache_dir>/results.sqlite.
    url: str | None = None


@dataclass(frozen=True)
class Config:
    path: Path | None  # the file these settings came from, if any
    target: TargetConfig
    patches: PatchesConfig
    build: BuildConfig
    server: ServerConfig
    modes: Mapping[str, ModeConfig]
    workload: WorkloadConfig
    stats: StatsConfig
    filters: FiltersConfig
    hook: HookConfig = HookConfig()
    cost: CostConfig = CostConfig()
    executor: ExecutorConfig = ExecutorConfig()
    store: StoreConfig = StoreConfig()
    layout: LayoutConfig = LayoutConfig()
    environment: EnvironmentConfig = EnvironmentConfig()

    @property
    def cache_dir(self) -> Path:
        return self.target.cache_dir or (self.target.repo / ".git" / "perfbisect")

    @property
    def default_db(self) -> Path:
        return self.cache_dir / "results.sqlite"

    @property
    def results_db(self) -> str | Path:
        """The results database a command uses without --db: ``[store] url``, else ``default_db``."""
        return self.store.url or self.default_db

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
