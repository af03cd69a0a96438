"""What every command opens once: the composition root of a use case.

``Workspace.open`` wires the config, the target repository, the results store, the patch stack, the worktree pool and
the caches; ``Workspace.exclusive`` holds the repository's and the GPU node's locks while a command uses worktrees
and servers. Measuring reads a workspace as a ``perfbisect.measure.trial_context.TrialContext`` and never imports this
module; what fails fast before a trial (``preflight``) is ``perfbisect.measure.launch_checks``'s, and where long work
reports (``Progress``) is ``perfbisect.runtime.progress``'s. Nothing here runs a trial or decides anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import ConfigError
from ..git.gitrepo import TargetRepo
from ..git.pathfilter import PathFilter
from ..git.patches import PatchStack
from ..git.requirements import RequirementReader
from ..git.targets import active_filters
from ..git.worktrees import WorktreePool
from ..measure.build import BuildCache
from ..measure.environments import Environments
from ..measure.envs import EnvCache
from ..measure.host import host_fingerprint
from ..measure.resolver import Resolver
from ..measure.workload_files import Snapshot, kept, snapshot
from ..model import NoiseKey
from ..runtime import locks
from ..runtime.progress import Progress
from ..settings import Config, ModeConfig
from ..store import Store, StoreLocation, locate, open_store
from ..workload_kinds import kind_of


@dataclass
class Workspace:
    """Everything one command needs opened once: config, repository, store, patch stack, caches."""

    config: Config
    repo: TargetRepo
    store: Store
    db_path: StoreLocation  # prints as the file path, or the server URL with its password masked
    stack: PatchStack | None
    build_cache: BuildCache
    host: str
    filters: PathFilter
    # Each commit's environment (requirements -> uv lock -> <cache_dir>/envs/<key>), when [environment] is set.
    environments: Environments | None = None
    _pool: WorktreePool | None = field(default=None, repr=False)
    _workload_files: tuple[Snapshot | None] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, config: Config, db_path: Path | str | None = None, *, recover: bool = True) -> "Workspace":
        repo = TargetRepo(config.target.repo)
        db = locate(db_path or config.results_db)
        cache = config.cache_dir
        check_cache_dir(config)
        stack = PatchStack.load(config.patches, repo) if (config.patches.dir or config.patches.branch) else None
        store = open_store(db, recover=recover)  # a cluster job leaves recovery to its controller
        build = config.build
        build_cache = BuildCache(cache / "build-cache", int(config.build.cache_max_gb * 1024**3))
        environments = None
        envcfg = config.environment
        if envcfg.enabled:
            resolver = Resolver(envcfg, config.target.python, cache / "locks")
            envs = EnvCache(cache / "envs", resolver, log_dir=cache / "logs" / "envs")
            build_cache.share(envs)  # environments count toward cache_max_gb, evicted LRU with the artefacts
            environments = Environments(repo, RequirementReader(repo, envcfg.requirements, envcfg.extras, stack),
                                        resolver, envs, policy=envcfg.resolve_date)
        return cls(
            config=config,
            repo=repo,
            store=store,
            db_path=db,
            stack=stack,
            build_cache=build_cache,
            host=host_fingerprint(),
            filters=active_filters(config).path_filter(),
            environments=environments,
        )

    @property
    def pool(self) -> WorktreePool:
        """perfbisect's worktrees of the target, opened on first use: opening one recovers from a
        crash (stale worktree metadata and index locks), which only a command holding the
        repository's lock (``exclusive``) may do, never one that merely reads (plan, doctor)."""
        if self._pool is None:
            layout = self.config.layout
            # One slot per path length a trial's layout may draw (perfbisect/layout.py); a fixed
            # layout uses slot 0 only (git/worktrees.py slot_name: the path of trials stored without a layout).
            slots = layout.path_slots if layout.randomize else 1
            self._pool = WorktreePool(self.repo, self.config.cache_dir, size=slots)
        return self._pool

    @property
    def workload_files(self) -> Snapshot | None:
        """``workload.files`` taken from the working tree on first use (the command's first trial), then kept:
        an edit made while the command runs reaches none of its trials."""
        if self._workload_files is None:
            self._workload_files = (snapshot(self.config),)
        return self._workload_files[0]

    def keep_workload_files(self, search_start: Mapping[str, Any] | None, bisection_id: int) -> None:
        """A stored bisection goes on with the ``workload.files`` it started with (their hash in its search start),
        never the working tree's of today: `resume`, and each cluster job of it."""
        digest = (search_start or {}).get("workload_files")
        if digest:
            self._workload_files = (kept(self.config, digest, bisection_id),)

    def noise_key(self, mode: ModeConfig) -> NoiseKey:
        """The key trials of ``mode`` on this host with this workload share their noise under."""
        return NoiseKey(self.host, mode.name, mode.config_hash(self.config.server), self.config.workload.config_hash())

    def exclusive(self, progress: Progress | None = None, *, wait: bool = False, gpu: bool = True):
        """Hold the repository's lock (and the GPU node's) while a command uses worktrees and servers.
        With a shared store the node is locked in the database too, where every user of it sees the holder."""
        progress = progress or Progress()
        cfg = self.config
        gpu = gpu and kind_of(cfg.workload).serves  # no server, no GPU: its repository's lock is all it needs
        shared_lock = self.store.node_lock() if gpu else None
        return locks.exclusive(
            cfg.cache_dir,
            repo=str(cfg.target.repo),
            gpu=gpu,
            gpus=locks.gpus_of([cfg.server.env, *(m.env for m in cfg.modes.values())]),
            wait=wait,
            on_wait=lambda what, holder: progress.info(f"waiting for {holder.describe()} to release the {what} ..."),
            node_locks=(shared_lock,) if shared_lock is not None else (),
        )

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            if self.environments is not None:
                self.environments.close()  # the environments this command used may be evicted now
            if self.stack is not None:
                self.stack.cleanup()  # a branch stack's temp dir is owned here

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_cache_dir(config: Config) -> None:
    """The cache directory (worktrees, builds, logs, locks) must be a writable directory."""
    cache = config.cache_dir
    key = "target.cache_dir" if config.target.cache_dir else "target.cache_dir (default <repo>/.git/perfbisect)"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        probe = cache / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(
            f"{config.path}: {key} is {cache}, which cannot be used: {exc.strerror or exc}. perfbisect keeps "
            f"its worktrees, build cache, logs and locks there: set target.cache_dir to a writable directory."
        ) from None
