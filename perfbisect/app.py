"""Use cases: wire config, git, build, server, workload, sampler, store, statistics and search.

Each public function here is one thing a user asks for (run a bisection, measure a commit, compare
two, calibrate the noise, plan a range). They report progress through a ``Progress`` sink, raise
``PerfbisectError`` subclasses, and never print: ``cli.py`` does that.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

from . import locks, sysstate
from .bisect import Done, Observation, SearchPolicy
from .build import BuildCache, run_build
from .config import load_config
from .placeholders import expand
from .settings import Config, ModeConfig
from .demo.target import DemoTarget, make_demo_target
from .errors import BuildError, ConfigError, PatchError, ServerError, ServerNotReady, UsageError, WorkloadError
from .gitrepo import TargetRepo
from .host import gpu_memory_released, gpu_memory_used_mib, host_fingerprint, wait_until_idle
from .model import (
    BisectOutcome,
    Commit,
    Comparison,
    EnvCheck,
    RunResult,
    SystemSummary,
    TrialIdentity,
    TrialResult,
    TrialStatus,
    Verdict,
)
from .pathfilter import PathFilter
from .patches import PatchCheck, PatchStack, check_patches
from .plan import Plan, plan_range
from .server import ServerSession, port_holders, port_in_use
from .stats import NoiseModel, calibrate_report, compare, compare_sequential, covariate_notes, history_shift, pct
from .store import NoiseEstimate, Store, open_store, owner_alive, process_owner
from .store.samples import compact
from .versions import target_versions
from .workload import avg_spec_accept_length, run_command_workload, run_workload, server_info
from .worktrees import WorktreePool


class Progress:
    """Where long work reports what it is doing. The default sink drops everything."""

    def info(self, message: str) -> None:  # a step of the work
        pass

    def detail(self, message: str) -> None:  # a finer step (a run, a readiness poll)
        pass

    def warn(self, message: str) -> None:  # something the user should know and may act on
        pass


@dataclass
class Workspace:
    """Everything one command needs opened once: config, repository, store, patch stack, caches."""

    config: Config
    repo: TargetRepo
    store: Store
    db_path: Path
    stack: PatchStack | None
    pool: WorktreePool
    build_cache: BuildCache
    host: str
    filters: PathFilter

    @classmethod
    def open(cls, config: Config, db_path: Path | None = None) -> "Workspace":
        repo = TargetRepo(config.target.repo)
        db = Path(db_path) if db_path else config.default_db
        cache = config.cache_dir
        check_cache_dir(config)
        stack = PatchStack.load(config.patches, repo) if (config.patches.dir or config.patches.branch) else None
        store = open_store(db)
        return cls(
            config=config,
            repo=repo,
            store=store,
            db_path=db,
            stack=stack,  # owned: close() removes a branch stack's temp dir
            pool=WorktreePool(repo, cache),
            build_cache=BuildCache(cache / "build-cache", int(config.build.cache_max_gb * 1024**3)),
            host=host_fingerprint(),
            filters=PathFilter(config.filters.ignore),
        )

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            if self.stack is not None:
                self.stack.cleanup()

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


def measured_nothing(ws: Workspace, bisection_id: int) -> str | None:
    """When no trial of a bisection produced a number: why the first one failed (else None)."""
    return why_nothing_measured(ws.store.trials(bisection_id=bisection_id, status=None))


def why_nothing_measured(trials: Sequence[TrialResult]) -> str | None:
    """None when some trial produced a number; else the first reason one did not."""
    if not trials or any(t.summary is not None for t in trials):
        return None
    for t in trials:
        if t.error:
            return t.error
        for r in t.runs:
            if r.error and not r.warmup:
                return r.error
    return "no trial produced a usable run"


@dataclass
class Prepared:
    """A commit checked out in a worktree with the stack applied and built, or why it can't be."""

    commit: Commit
    worktree: Path | None = None
    patch_hash: str = "none"
    build_hash: str = "none"
    untestable: str | None = None  # reason: patch conflict, build failure
    versions: dict | None = None  # target's torch/sglang/CUDA/NCCL versions, read once per commit


def preflight(ws: Workspace) -> None:
    """Fail fast on what would break every trial: a server command that does not exist, a busy fixed port."""
    cfg = ws.config
    if cfg.workload.kind == "command":
        argv = expand(cfg.workload.command, python=cfg.target.python, worktree=str(cfg.target.repo))
        what = "workload.command"
    else:
        argv = expand(cfg.server.command, python=cfg.target.python, port="0", worktree=str(cfg.target.repo), host=cfg.server.host)
        what = "server.command"
    exe = argv[0]
    if not (shutil.which(exe) or (os.sep in exe and os.access(exe, os.X_OK))):
        raise ConfigError(
            f"{cfg.path}: {what} starts with '{exe}', which is not an executable on PATH or a path to one. "
            f"Fix {what} (for SGLang: [\"{{python}}\", \"-m\", \"sglang.launch_server\", ...]) or target.python."
        )
    if cfg.workload.kind != "command" and cfg.server.port and port_in_use(cfg.server.host, cfg.server.port):
        holders = port_holders(cfg.server.port)
        who = f" (held by pid {', '.join(map(str, holders))})" if holders else ""
        raise ConfigError(
            f"Port {cfg.server.port} on {cfg.server.host} is already in use{who}, so no trial could start its server. "
            f"Stop the process holding it, or set server.port = 0 in {cfg.path} to pick a free port per trial."
        )


def exclusive(ws: Workspace, progress: Progress | None = None, *, wait: bool = False, gpu: bool = True):
    """Hold the repository's lock (and the GPU node's) while a command uses worktrees and servers."""
    progress = progress or Progress()
    return locks.exclusive(
        ws.config.cache_dir,
        repo=str(ws.config.target.repo),
        gpu=gpu,
        wait=wait,
        on_wait=lambda what, holder: progress.info(f"waiting for {holder.describe()} to release the {what} ..."),
    )


_PIDFILE_OWNER = "owner "


@dataclass(frozen=True)
class ServerPidfile:
    """A server process group perfbisect started, as its pidfile under <cache_dir>/servers says."""

    path: Path
    pgid: int
    owner: str  # host:pid:start of the perfbisect that started it ("" in pidfiles of older versions)
    cmdline: str

    @property
    def owner_pid(self) -> int | None:
        parts = self.owner.split(":")
        return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None


def server_pidfiles(cache_dir: Path) -> list[ServerPidfile]:
    """Every server pidfile of this cache directory (unreadable ones skipped)."""
    out = []
    for pidfile in sorted((Path(cache_dir) / "servers").glob("*.pid")):
        try:
            pgid = int(pidfile.stem)
            text = pidfile.read_text()
        except (ValueError, OSError):
            continue
        owner, cmdline = "", text
        if text.startswith(_PIDFILE_OWNER):
            first, _, cmdline = text.partition("\n")
            owner = first[len(_PIDFILE_OWNER):].strip()
        out.append(ServerPidfile(pidfile, pgid, owner, cmdline))
    return out


def reap_leftover_servers(cache_dir: Path, progress: Progress) -> list[int]:
    """Kill server process groups a crashed perfbisect left behind: a leftover server poisons later trials.

    Only pidfiles whose writer is dead are touched: a live perfbisect's server is never reaped.
    """
    killed = []
    for pf in server_pidfiles(cache_dir):
        if pf.owner and pf.owner != process_owner() and owner_alive(pf.owner):
            continue  # its perfbisect is running: the server is in use, not left over
        try:
            alive = Path(f"/proc/{pf.pgid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            alive = ""
        if alive and alive == pf.cmdline.strip():
            try:
                os.killpg(pf.pgid, signal.SIGKILL)
                killed.append(pf.pgid)
                progress.warn(f"killed a server left running by an interrupted perfbisect (process group {pf.pgid}: {alive[:80]})")
            except OSError:
                pass
        pf.path.unlink(missing_ok=True)
    return killed


class TrialRunner:
    """Runs trials: one server session per (commit, mode), every run stored as it lands."""

    def __init__(self, ws: Workspace, progress: Progress | None = None, wait_idle_s: float = 0.0):
        self.ws = ws
        self.progress = progress or Progress()
        self.wait_idle_s = wait_idle_s
        self._prepared: Prepared | None = None
        self._unobserved: dict[int, list[TrialResult]] = {}  # per bisection: stored trials no observation holds
        self._logs = ws.config.cache_dir / "logs"
        self._pids = ws.config.cache_dir / "servers"
        reap_leftover_servers(ws.config.cache_dir, self.progress)

    # -- preparation -------------------------------------------------------------------------
    def prepare(self, commit: Commit) -> Prepared:
        """Check out, patch and build ``commit`` (reusing the last preparation of the same commit)."""
        if self._prepared is not None and self._prepared.commit.sha == commit.sha:
            return self._prepared
        cfg = self.ws.config
        self.progress.detail(f"{commit.short}: preparing worktree")
        worktree = self.ws.pool.checkout(commit)
        prepared = Prepared(commit=commit, worktree=worktree)
        try:
            if self.ws.stack is not None:
                applied = self.ws.stack.apply(worktree, commit)
                prepared.patch_hash = applied.hash
            build = run_build(
                cfg.build.steps,
                worktree=worktree,
                commit=commit,
                applied_stack_hash=prepared.patch_hash,
                cache=self.ws.build_cache,
                python=cfg.target.python,
                log_dir=self._logs / "build",
            )
            prepared.build_hash = build.hash
            cached = [s.name for s in build.steps if s.cached]
            if cached:
                self.progress.detail(f"{commit.short}: build cache hit for {', '.join(cached)}")
        except PatchError as exc:
            prepared.untestable = f"patch conflict: {exc}"
            self.progress.warn(f"{commit.short} skipped (patch stack does not apply): {exc}")
        except BuildError as exc:
            prepared.untestable = f"build failed: {exc}"
            self.progress.warn(f"{commit.short} skipped (build failed): {exc}")
        self._prepared = prepared
        return prepared

    def identity(self, prepared: Prepared, mode: ModeConfig) -> TrialIdentity:
        cfg = self.ws.config
        return TrialIdentity(
            commit=prepared.commit.sha,
            patch_hash=prepared.patch_hash,
            build_hash=prepared.build_hash,
            mode=mode.name,
            mode_hash=mode.config_hash(cfg.server),
            workload_hash=cfg.workload.config_hash(),
            host=self.ws.host,
        )

    # -- one trial ---------------------------------------------------------------------------
    def trial(self, commit: Commit, mode_name: str, purpose: str, bisection_id: int | None = None) -> TrialResult:
        """One server session for (commit, mode); skipped and failed trials are stored too."""
        cfg = self.ws.config
        mode = cfg.mode(mode_name)
        prepared = self.prepare(commit)
        identity = self.identity(prepared, mode)
        store = self.ws.store
        if prepared.untestable:
            trial_id = store.begin_trial(identity, purpose=purpose, bisection_id=bisection_id)
            store.finish_trial(trial_id, TrialStatus.SKIPPED, error=prepared.untestable)
            return store.trial(trial_id)
        stored = self._stored_unobserved(identity, purpose, bisection_id)
        if stored is not None:
            self.progress.info(
                f"trial #{stored.id}: {commit.short} [{mode.name}] was stored before the interruption: used, not measured again"
            )
            return stored

        wait_until_idle(
            timeout_s=self.wait_idle_s,
            poll_s=10.0,
            progress=lambda procs, waited: self.progress.detail(f"GPUs busy ({len(procs)} processes); waited {waited:.0f}s"),
        )
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log_path = self._logs / "server" / f"{stamp}-{commit.short}-{mode.name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        trial_id = store.begin_trial(identity, purpose=purpose, bisection_id=bisection_id, log_path=str(log_path))
        self.progress.info(f"trial #{trial_id}: {commit.short} [{mode.name}] {commit.subject[:60]}")
        status, error = TrialStatus.OK, None
        env_checks: tuple = ()
        info: dict = {}
        sessions: list[ServerSession] = []
        sampler = sysstate.Sampler(
            interval_s=1.0, exclude_pids=lambda: sessions[0].group_pids() if sessions else ()
        )
        gpu_baseline = gpu_memory_used_mib()
        released = gpu_memory_released(gpu_baseline, tolerance_mib=1024) if gpu_baseline else None

        window: list[float] = []  # when measured runs ran: the state summary covers only that

        def on_run(run: RunResult) -> None:
            store.add_run(trial_id, run)
            if run.warmup or not window:
                window[:] = [time.time()]
            else:
                window[1:] = [time.time()]
            self.progress.detail("  " + format_run(run))

        try:
            with sampler:
                if cfg.workload.kind == "command":
                    env = {**cfg.server.env, **mode.env}
                    for run in run_command_workload(cfg.workload, prepared.worktree, cfg.target.python, env, log_path):
                        on_run(run)
                else:
                    session = ServerSession(
                        cfg.server, mode, prepared.worktree, cfg.target.python, log_path,
                        gpu_memory_released=released,
                    )
                    sessions.append(session)
                    with session:
                        pidfile = self._remember(session)
                        seconds = session.wait_ready(progress=self._ready_progress(mode.name))
                        self.progress.detail(f"  server ready in {seconds:.1f}s (port {session.port})")
                        if cfg.server.check_env:
                            env_checks = session.check_env()
                            self._report_env(env_checks)
                        run_workload(session.base_url, cfg.workload, on_run=on_run)
                        info = server_info(session.base_url)
                    pidfile.unlink(missing_ok=True)  # torn down cleanly: nothing to reap later
        except ServerNotReady as exc:
            # A commit whose server never gets ready cannot be tested: skipped, never blamed.
            status, error = TrialStatus.SKIPPED, f"server never ready: {exc}"
            self.progress.warn(f"{commit.short} [{mode.name}]: {exc}")
        except (ServerError, WorkloadError) as exc:
            status, error = TrialStatus.FAILED, str(exc)
            self.progress.warn(f"{commit.short} [{mode.name}] trial failed: {exc}")
        except BaseException as exc:  # Ctrl-C, SIGTERM, a config error or a bug: record what happened, keep the runs
            what = "interrupted" if isinstance(exc, KeyboardInterrupt) else "aborted"
            store.finish_trial(
                trial_id, TrialStatus.FAILED, system=sampler.summary(),
                error=f"{what}: {type(exc).__name__}: {exc}",
            )
            raise
        if prepared.versions is None:
            # Read through the server's env (PYTHONPATH to the checkout): the versions it imports.
            server_env = {k: expand((v,), python=cfg.target.python, worktree=str(prepared.worktree))[0]
                          for k, v in cfg.server.env.items()}
            prepared.versions = target_versions(cfg.target.python, cwd=prepared.worktree, extra_env=server_env)
        since, until = (window[0], window[-1]) if len(window) == 2 else (None, None)
        system = sampler.summary(since=since, until=until)
        if system.samples == 0:  # runs shorter than the sampling interval: use the whole session
            system = sampler.summary()
        system = with_start_state(system, sampler.snapshots)
        result = store.finish_trial(
            trial_id,
            status,
            system=system,
            system_samples=compact(sampler.snapshots),
            env_checks=env_checks,
            server_info=info,
            versions=prepared.versions,
            error=error,
        )
        if result.summary is not None:
            accept = avg_spec_accept_length(info)
            extra = f", server-wide accept length {accept:.2f}" if accept else ""
            flagged = f", {len(result.flagged_runs)} runs flagged" if result.flagged_runs else ""
            self.progress.info(
                f"  → {math.exp(result.summary):.1f} tok/s (median of {len(result.usable_runs)} runs{flagged}{extra})"
            )
        return result

    def _stored_unobserved(self, identity: TrialIdentity, purpose: str, bisection_id: int | None) -> TrialResult | None:
        """A finished trial of this bisection with this identity that no observation holds yet.

        Such a trial is what a kill between the trials of one observation leaves (a ratio metric
        measures two modes per commit): a resumed bisection uses it instead of measuring it again.
        Each is handed out once; the list is taken when this runner first looks, so trials this
        process measures itself are never handed back.
        """
        if bisection_id is None or purpose != "bisect":
            return None
        if bisection_id not in self._unobserved:
            store = self.ws.store
            held = {tid for o in store.observations(bisection_id) for tid in o.trial_ids}
            self._unobserved[bisection_id] = [
                t for t in store.trials(bisection_id=bisection_id, status=TrialStatus.OK)
                if t.id not in held and t.summary is not None
            ]
        pool = self._unobserved[bisection_id]
        for t in pool:
            if t.identity == identity:
                pool.remove(t)
                return t
        return None

    def _remember(self, session: ServerSession) -> Path:
        """Note the server's process group so a crash of this process cannot leave it running unseen."""
        self._pids.mkdir(parents=True, exist_ok=True)
        pidfile = self._pids / f"{session.pid}.pid"
        pidfile.write_text(f"{_PIDFILE_OWNER}{process_owner()}\n" + " ".join(session.argv))
        return pidfile

    def _ready_progress(self, mode: str) -> Callable[[float, int], None]:
        last = [0.0]

        def report(elapsed: float, polls: int) -> None:
            if elapsed - last[0] >= 10:
                last[0] = elapsed
                self.progress.detail(f"  [{mode}] waiting for readiness: {elapsed:.0f}s, {polls} polls")

        return report

    def _report_env(self, checks: Iterable[EnvCheck]) -> None:
        for check in checks:
            if not check.ok:
                what = ", ".join(list(check.missing) + [f"{n}={a!r} (wanted {w!r})" for n, w, a in check.mismatched])
                self.progress.warn(f"  configured env did not reach pid {check.pid} ({check.cmdline[:60]}): {what}")


def format_run(run: RunResult) -> str:
    """One progress line for a run."""
    tag = "warm-up" if run.warmup else f"run {run.index}"
    if run.error:
        return f"{tag}: error: {run.error}"
    value = run.value or 0.0
    spec = ""
    if run.spec_accept_length:
        cycle = run.cycle_time_ms
        spec = f", accept {run.spec_accept_length:.2f}" + (f", cycle {cycle:.1f} ms" if cycle else "")
    flag = "" if run.complete else f"  FLAGGED: {run.output_tokens}/{run.requested_tokens} tokens, kept out of statistics"
    ttft = f", TTFT {run.ttft_s * 1000:.0f} ms" if run.ttft_s is not None else ""
    return f"{tag}: {value:.1f} tok/s{ttft}{spec}{flag}"


# ------------------------------------------------------------------------------------------------
# Observations: what the search policy sees for one commit


def observe(runner: TrialRunner, commit: Commit, bisection_id: int | None, seq: int) -> tuple[Observation, list[int]]:
    """Measure the bisection metric at ``commit`` once: one trial per needed mode.

    A trial the machine spoiled (throttled by an external cause, another process on the GPUs) is
    kept but flagged: the search excludes it and asks for the commit again, like nvbench re-runs.
    """
    cfg = runner.ws.config
    summaries: dict[str, float] = {}
    trial_ids: list[int] = []
    covariates: dict[str, float] = {}
    flags: list[str] = []
    started: float | None = None
    modes = interleaved(cfg.metric_modes, seq)
    for mode in modes:
        result = None
        for _attempt in range(2):  # a crash mid-run is retried once before the commit counts as untestable
            result = runner.trial(commit, mode, purpose="bisect", bisection_id=bisection_id)
            trial_ids.append(result.id)
            if result.status is not TrialStatus.FAILED:
                break
        if result is None or result.summary is None:
            return Observation(commit=commit.sha, value=None, seq=seq), trial_ids
        summaries[mode] = result.summary
        covariates.update(result.system.as_covariates())
        started = result.started_at if started is None else started
        why = result.system.exclusion()
        if why:
            flags.append(f"[{mode}] {why}")
            runner.progress.warn(f"{commit.short} [{mode}]: {why}: the search leaves this trial out and measures again")
    return Observation(
        commit=commit.sha, value=metric_value(cfg, summaries), covariates=covariates, seq=seq,
        at=started, flag="; ".join(flags) or None,
    ), trial_ids


def with_start_state(system: SystemSummary, snapshots: Sequence) -> SystemSummary:
    """Add the state before the trial's own load (first snapshot): temperature and CPU load then."""
    if not snapshots:
        return system
    first = snapshots[0]
    temps = [g.temperature_c for g in first.gpus if g.temperature_c is not None]
    return replace(
        system,
        start_temperature_c=(sum(temps) / len(temps)) if temps else None,
        start_load_avg=first.load_avg_1m,
    )


def interleaved(items: Sequence, round_index: int) -> list:
    """Order of one round of an A B B A schedule: forwards on even rounds, backwards on odd ones."""
    return list(items) if round_index % 2 == 0 else list(reversed(items))


def run_logs(trials: Iterable[TrialResult]) -> list[list[float]]:
    """Per trial, the log values of its usable runs (for the within-trial noise σ_w)."""
    return [[math.log(r.value) for r in t.usable_runs if r.value] for t in trials]


def metric_value(cfg: Config, summaries: dict[str, float]) -> float:
    """log tok/s of the metric mode, or log(spec/base) for a ratio metric."""
    modes = cfg.metric_modes
    if len(modes) == 2:
        return summaries[modes[1]] - summaries[modes[0]]
    return summaries[modes[0]]


def noise_key(ws: Workspace, mode: ModeConfig) -> tuple[str, str, str, str]:
    cfg = ws.config
    return (ws.host, mode.name, mode.config_hash(cfg.server), cfg.workload.config_hash())


# A learned noise level counts as this many pseudo-observations at most: it stays a prior that
# today's own trials can overrule when the machine has changed.
LEARNED_DOF_CAP = 30.0


def noise_model(ws: Workspace, mode_names: Sequence[str]) -> NoiseModel:
    """Between-trial noise for this host/mode/workload: stored A/A data pooled with what earlier
    bisections on this host learned, else the stated prior."""
    return noise_model_and_note(ws, mode_names)[0]


def noise_model_and_note(ws: Workspace, mode_names: Sequence[str]) -> tuple[NoiseModel, str | None]:
    """The noise model, and a note when it was learned elsewhere or the host has changed."""
    cfg = ws.config
    prior = NoiseModel.prior(cfg.stats.prior_sigma_pct)
    if len(mode_names) != 1:
        return prior, None  # ratio metrics: A/A data of the ratio itself is not pooled yet
    mode = cfg.mode(mode_names[0])
    key = noise_key(ws, mode)
    note = None
    estimates = [e for e in ws.store.noise_estimates(mode.name, key[3]) if e.source.startswith("bisection")]
    here = [e for e in estimates if (e.host, e.mode, e.mode_hash, e.workload_hash) == key]
    if here:
        e = here[0]
        prior = NoiseModel(
            sigma_b=e.sigma_b, dof=min(e.dof, LEARNED_DOF_CAP),
            source=f"learned on this host by {e.source.split(':')[0]} ({pct(e.sigma_b):.1f}%, {e.dof:g} dof)",
            sigma_w=e.sigma_w,
        )
    elif estimates:
        note = (
            f"the noise was learned on another host ({estimates[0].host}); this host ({ws.host}) differs "
            f"(GPU, count or driver), so the search starts from the {cfg.stats.prior_sigma_pct:g}% prior"
        )
    groups = ws.store.identical_build_groups(key)
    summaries = [[t.summary for t in g if t.summary is not None] for g in groups]
    within = run_logs(t for g in groups for t in g)
    return NoiseModel.from_groups([s for s in summaries if s], within=within, prior=prior), note


def keep_noise(ws: Workspace, mode_names: Sequence[str], sigma_pct: float | None, dof: float | None, source: str,
               sigma_w: float | None = None) -> None:
    """Store the noise a calibration or a finished bisection measured, for the next one on this host."""
    if sigma_pct is None or not dof or dof < 2 or len(mode_names) != 1 or not math.isfinite(sigma_pct):
        return
    mode = ws.config.mode(mode_names[0])
    host, name, mode_hash, workload_hash = noise_key(ws, mode)
    ws.store.add_noise_estimate(NoiseEstimate(
        host=host, mode=name, mode_hash=mode_hash, workload_hash=workload_hash,
        sigma_b=math.log1p(sigma_pct / 100.0), dof=float(dof), sigma_w=sigma_w, source=source, created_at=time.time(),
    ))


# ------------------------------------------------------------------------------------------------
# perfbisect run / resume


@dataclass
class BisectResult:
    bisection_id: int
    outcome: BisectOutcome
    commits: dict[str, Commit]
    filtered: list[Commit] = field(default_factory=list)
    db_path: Path | None = None
    state: list[str] = field(default_factory=list)  # system state over the bisection's trials


def _range(ws: Workspace, good: str, bad: str) -> tuple[Commit, Commit, list[Commit]]:
    good_c = ws.repo.resolve(good)
    bad_c = ws.repo.resolve(bad)
    if good_c.sha == bad_c.sha:
        raise UsageError(
            f"good ({good}) and bad ({bad}) are the same commit {good_c.short}: there is nothing to "
            f"bisect. Pass the last commit known to be fast as good and a later one as bad."
        )
    return good_c, bad_c, ws.repo.first_parent_range(good_c.sha, bad_c.sha)


def _check_endpoints(ws: Workspace, good: Commit, bad: Commit) -> None:
    """The stack must apply at both ends: a bisection between untestable endpoints can only guess."""
    if ws.stack is None:
        return
    for label, commit in (("good", good), ("bad", bad)):
        check = ws.stack.check_at(commit)
        if not check.ok:
            raise UsageError(
                f"The patch stack does not apply at the {label} endpoint {commit.short}: {check.conflict.describe()}. "
                f"Pick a {label} commit where it applies (see `perfbisect patches check good=.. bad=..`), or add a "
                f"[[patches.variants]] entry with a version of that patch for this part of history."
            )


def latest_unfinished(ws: Workspace) -> int:
    """Id of the newest bisection that did not finish, or a clear error when there is none."""
    record = ws.store.latest_unfinished_bisection()
    if record is None:
        raise UsageError(
            f"No unfinished bisection in {ws.db_path}. Start one with `perfbisect run good=REV bad=REV`, "
            f"or list past ones with `perfbisect log`."
        )
    return record.id


def run_bisection(
    ws: Workspace,
    good: str,
    bad: str,
    progress: Progress | None = None,
    *,
    wait_idle_s: float = 0.0,
    resume_id: int | None = None,
) -> BisectResult:
    """Bisect good..bad: confirm the endpoints differ, search, confirm the culprit; store everything."""
    progress = progress or Progress()
    cfg = ws.config
    store = ws.store
    if resume_id is not None:
        record = store.resume_bisection(resume_id)
        good, bad = record.good, record.bad
    good_c, bad_c, commits = _range(ws, good, bad)
    preflight(ws)
    _check_endpoints(ws, good_c, bad_c)
    plan = plan_range(ws.repo, good_c.sha, bad_c.sha, ws.filters, None)
    for warning in plan.warnings:
        progress.warn(str(warning))
    by_sha = {c.sha: c for c in commits}
    candidates = [e.commit for e in plan.entries if e.measure or e.commit.sha in (good_c.sha, bad_c.sha)]
    filtered = [e.commit for e in plan.entries if e.filtered]
    progress.info(
        f"range {good_c.short}..{bad_c.short}: {len(commits)} commits, {len(candidates)} candidates, "
        f"{len(filtered)} not measured (only paths that cannot affect throughput)"
    )
    noise, noise_note = noise_model_and_note(ws, cfg.metric_modes)
    progress.info(f"noise model: {noise.describe()}")
    if noise_note:
        progress.warn(noise_note)
    shas = [c.sha for c in candidates]
    if resume_id is None:
        bisection_id = store.begin_bisection(
            good=good_c.sha, bad=bad_c.sha, commits=shas, metric=cfg.stats.metric,
            settings=cfg.stats, target=str(cfg.target.repo),
        )
        observations: list[Observation] = []
    else:
        bisection_id = resume_id
        if list(record.commits) != shas:
            progress.warn("the candidate list changed since this bisection started (config filters?); using the stored one")
            shas = list(record.commits)
        observations = [
            Observation(commit=o.commit, value=o.value, covariates=dict(o.covariates), seq=o.seq,
                        at=o.recorded_at or None, flag=o.flag)
            for o in store.observations(bisection_id)
        ]
        progress.info(f"resuming bisection #{bisection_id}: {len(observations)} stored observations, none repeated")
    history = endpoint_history(ws, (good_c, bad_c))
    policy = SearchPolicy(shas, cfg.stats, noise, history=history, higher_is_better=cfg.workload.higher_is_better)
    runner = TrialRunner(ws, progress, wait_idle_s=wait_idle_s)
    while True:
        action = policy.next(observations)
        if isinstance(action, Done):
            outcome = action.outcome
            break
        commit = by_sha[action.commit]
        progress.info(f"[{len(observations) + 1}] {commit.short} ({action.phase}): {action.reason}")
        obs, trial_ids = observe(runner, commit, bisection_id, seq=len(observations))
        store.add_observation(bisection_id, obs.seq, obs.commit, obs.value, trial_ids, obs.covariates, flag=obs.flag)
        observations.append(obs)
    outcome = _expand_merge_culprit(ws, outcome, by_sha)
    store.finish_bisection(bisection_id, outcome)
    keep_noise(
        ws, cfg.metric_modes, outcome.noise_sigma_pct, outcome.noise_dof,
        f"bisection #{bisection_id}: residual noise of {outcome.trials_used} trials after the change(s) and drift",
    )
    trials = store.trials(bisection_id=bisection_id, status=None)
    return BisectResult(
        bisection_id=bisection_id, outcome=outcome, commits=by_sha, filtered=filtered, db_path=ws.db_path,
        state=state_lines(trials),
    )


def endpoint_history(ws: Workspace, endpoints: Sequence[Commit]) -> list[Observation]:
    """Stored trials of the endpoints from earlier days: they inform drift notes, never the verdict."""
    cfg = ws.config
    if len(cfg.metric_modes) != 1:
        return []
    mode = cfg.mode(cfg.metric_modes[0])
    today = time.strftime("%Y-%m-%d")
    out = []
    for commit in endpoints:
        for t in ws.store.trials(commit=commit.sha, mode=mode.name):
            day = time.strftime("%Y-%m-%d", time.localtime(t.started_at))
            if t.summary is None or day == today or t.identity.noise_key != noise_key(ws, mode):
                continue
            out.append(Observation(commit=commit.sha, value=t.summary, day=day[5:]))
    return out


def _expand_merge_culprit(ws: Workspace, outcome: BisectOutcome, by_sha: dict[str, Commit]) -> BisectOutcome:
    """A merge commit stands for its whole branch: name the merged commits as the culprit set."""
    if not outcome.culprit or not by_sha[outcome.culprit].is_merge:
        return outcome
    merged = ws.repo.merged_commits(by_sha[outcome.culprit])
    for c in merged:
        by_sha.setdefault(c.sha, c)
    note = (
        f" The first bad commit is a merge of {len(merged)} commits; one of them (or the merge itself) "
        f"changed performance: bisect the merged branch to narrow it down."
    )
    return replace(
        outcome,
        culprit_set=tuple(dict.fromkeys((outcome.culprit, *outcome.culprit_set, *(c.sha for c in merged)))),
        explanation=outcome.explanation + note,
    )


def state_lines(trials: Sequence[TrialResult]) -> list[str]:
    """What the machine did during these trials: clock range, temperature, throttling, other GPU users."""
    ok = [t.system for t in trials if t.system.samples]
    if not ok:
        return []
    lines = []
    clocks = [s.sm_clock_mean_mhz for s in ok if s.sm_clock_mean_mhz is not None]
    if clocks:
        lines.append(f"SM clock per trial {min(clocks):.0f}–{max(clocks):.0f} MHz over {len(clocks)} trials")
    temps = [s.temperature_max_c for s in ok if s.temperature_max_c is not None]
    if temps:
        lines.append(f"GPU temperature up to {max(temps):.0f} C")
    throttled = [s.throttled_fraction for s in ok if s.throttled_fraction is not None]
    if throttled and max(throttled) > 0:
        lines.append(f"throttled in {sum(1 for f in throttled if f > 0)} of {len(throttled)} trials (up to {100 * max(throttled):.0f}% of samples)")
    others = sorted({p for s in ok for p in s.other_gpu_processes})
    if others:
        lines.append(f"other GPU processes seen: {', '.join(map(str, others))}")
    if not clocks:
        lines.append("no GPU state recorded (no NVML or nvidia-smi here): differences cannot be attributed to clocks")
    return lines


# ------------------------------------------------------------------------------------------------
# perfbisect measure / compare / calibrate


@dataclass
class MeasureResult:
    commit: Commit
    trials: dict[str, list[TrialResult]]  # per mode, in the order they ran


def measure(
    ws: Workspace,
    rev: str,
    modes: Sequence[str],
    trials: int,
    progress: Progress | None = None,
    *,
    purpose: str = "measure",
    wait_idle_s: float = 0.0,
) -> MeasureResult:
    """Run ``trials`` trials of each mode at one commit, interleaved (A B B A ...), and store them."""
    commit = ws.repo.resolve(rev)
    for m in modes:
        ws.config.mode(m)
    preflight(ws)
    runner = TrialRunner(ws, progress, wait_idle_s=wait_idle_s)
    out: dict[str, list[TrialResult]] = {m: [] for m in modes}
    for i in range(trials):
        for m in interleaved(modes, i):
            out[m].append(runner.trial(commit, m, purpose=purpose))
    return MeasureResult(commit=commit, trials=out)


@dataclass
class CompareResult:
    a: Commit
    b: Commit
    mode: str
    comparison: Comparison
    trials_a: list[TrialResult]
    trials_b: list[TrialResult]
    history: list[str]
    attribution: str | None
    comparison_id: int


def compare_commits(
    ws: Workspace,
    a_rev: str,
    b_rev: str,
    mode: str,
    progress: Progress | None = None,
    *,
    min_trials: int = 2,
    max_trials: int | None = None,
    wait_idle_s: float = 0.0,
) -> CompareResult:
    """A vs B with interleaved trials (A B B A ...) until the verdict is clear or the budget is spent."""
    progress = progress or Progress()
    cfg = ws.config
    mode_cfg = cfg.mode(mode)
    a, b = ws.repo.resolve(a_rev), ws.repo.resolve(b_rev)
    preflight(ws)
    max_trials = max_trials or cfg.stats.max_trials_per_commit
    noise = noise_model(ws, [mode])
    progress.info(f"noise model: {noise.describe()}")
    runner = TrialRunner(ws, progress, wait_idle_s=wait_idle_s)
    ta: list[TrialResult] = []
    tb: list[TrialResult] = []
    cmp: Comparison | None = None
    i = 0
    looks = 0  # each look spends part of alpha (stats.spent_alpha): stopping early stays honest
    while True:
        for commit, bucket in interleaved([(a, ta), (b, tb)], i):
            bucket.append(runner.trial(commit, mode, purpose="compare"))
        i += 1
        sa = [t.summary for t in ta if t.summary is not None]
        sb = [t.summary for t in tb if t.summary is not None]
        if len(sa) >= min_trials and len(sb) >= min_trials:
            looks += 1
            cmp = compare_sequential(
                sa, sb, noise, cfg.stats, look=looks, max_looks=max(max_trials - min_trials + 1, 1),
                higher_is_better=cfg.workload.higher_is_better,
            )
            progress.info(f"after {len(sa)}+{len(sb)} trials: {cmp.verdict.value} ({cmp.effect_pct:+.1f}%)")
            if cmp.verdict is not Verdict.INCONCLUSIVE:
                break
        if i >= max_trials:
            break
    if cmp is None:  # too few usable trials for a look: judge what there is (inconclusive)
        cmp = compare(sa, sb, noise, cfg.stats, higher_is_better=cfg.workload.higher_is_better)
    history = [line for line in (_history_line(ws, c, mode_cfg, ts, noise) for c, ts in ((a, ta), (b, tb))) if line]
    attribution = _attribution_line(ta + tb)
    cid = ws.store.record_comparison(
        a.sha, b.sha, mode, cmp, metric=mode,
        trial_ids_a=[t.id for t in ta], trial_ids_b=[t.id for t in tb], bisection_id=None,
    )
    return CompareResult(a, b, mode, cmp, ta, tb, history, attribution, cid)


def _history_line(ws: Workspace, commit: Commit, mode: ModeConfig, today: list[TrialResult], noise: NoiseModel) -> str | None:
    """Same build measured on earlier days: a shift is system drift, not code."""
    ids = {t.id for t in today}
    day = time.strftime("%m-%d")
    earlier = []
    for t in ws.store.trials(commit=commit.sha, mode=mode.name):
        if t.id in ids or t.summary is None or t.identity.build_key != today[0].identity.build_key:
            continue
        when = time.strftime("%m-%d", time.localtime(t.started_at))
        if when != day:
            earlier.append((when, t.summary))
    values = [t.summary for t in today if t.summary is not None]
    if not earlier or not values:
        return None
    return history_shift(values, earlier, noise, build=commit.short)


def _attribution_line(trials: list[TrialResult]) -> str | None:
    ok = [t for t in trials if t.summary is not None]
    if len(ok) < 4:
        return None
    _, notes = covariate_notes(
        [t.summary for t in ok], [t.system.as_covariates() for t in ok], [t.identity.build_key for t in ok], min_rows=4
    )
    return "; ".join(notes) if notes else None


@dataclass
class CalibrateResult:
    commit: Commit
    mode: str
    noise: NoiseModel
    trials: list[TrialResult]
    lines: list[str]


def calibrate(
    ws: Workspace, rev: str, mode: str, trials: int, progress: Progress | None = None, *, wait_idle_s: float = 0.0
) -> CalibrateResult:
    """Measure the machine's noise on purpose: N trials of one build (A/A), then σ_b, σ_w and the MDE."""
    if trials < 2:
        raise UsageError("calibrate needs at least 2 trials (--trials 2) to see any between-session noise; 5–10 is better.")
    result = measure(ws, rev, [mode], trials, progress, purpose="calibrate", wait_idle_s=wait_idle_s)
    done = result.trials[mode]
    groups: dict[tuple, list[float]] = {}
    for t in done:
        if t.summary is not None:
            groups.setdefault(t.identity.build_key, []).append(t.summary)
    within = run_logs(done)
    measured = NoiseModel.from_groups(list(groups.values()), within=within, prior=NoiseModel.prior(ws.config.stats.prior_sigma_pct))
    pooled = noise_model(ws, [mode])
    lines = calibrate_report(pooled, budget_trials=ws.config.stats.max_trials_per_commit, alpha=ws.config.stats.alpha)
    attribution = _attribution_line(done)
    if attribution:
        lines.append(attribution)
    if measured.measured:
        # What this calibration alone measured (no prior pseudo-observations) is what is kept.
        raw = NoiseModel.from_groups(list(groups.values()), prior=NoiseModel(0.0, 0.0, "none"))
        keep_noise(ws, [mode], raw.sigma_b_pct, raw.dof, f"calibrate: {len(done)} trials of {result.commit.short}",
                   sigma_w=measured.sigma_w)
    return CalibrateResult(result.commit, mode, measured, done, lines)


# ------------------------------------------------------------------------------------------------
# perfbisect plan / patches check / gc / log


def plan(ws: Workspace, good: str, bad: str, check_patches: bool = True) -> Plan:
    """Which commits of good..bad would be measured, which not, and why (nothing is built or run)."""
    good_c, bad_c, _ = _range(ws, good, bad)
    return plan_range(ws.repo, good_c.sha, bad_c.sha, ws.filters, ws.stack, check_patches=check_patches and ws.stack is not None)


def patches_check(ws: Workspace, good: str, bad: str) -> list[PatchCheck]:
    """For every commit in good..bad: does the stack apply, and with which variant."""
    if ws.stack is None:
        raise UsageError(
            f"{ws.config.path} defines no patch stack: set [patches] dir = \"DIR\" (git format-patch files) "
            f"or branch/base, then run this again."
        )
    good_c, bad_c, commits = _range(ws, good, bad)
    return check_patches(ws.repo, good_c.sha, bad_c.sha, ws.stack)


def gc(ws: Workspace, build_cache: bool = False) -> list[str]:
    """Remove perfbisect's worktrees (and with ``build_cache`` the cached build artefacts)."""
    removed = [f"worktree {p}" for p in ws.pool.gc()]
    if build_cache:
        size = ws.build_cache.total_bytes()
        ws.build_cache.clear()
        removed.append(f"build cache ({size / 1e6:.1f} MB)")
    return removed


# ------------------------------------------------------------------------------------------------
# perfbisect demo


def run_demo(
    directory: Path,
    progress: Progress | None = None,
    *,
    drift_only: bool = False,
    commits: int = 36,
    seed: int = 7,
) -> tuple[BisectResult, DemoTarget]:
    """Build the demo target (planted slowdown, or drift only) and bisect it with the real pipeline."""
    progress = progress or Progress()
    progress.info(f"building the demo target in {directory} ...")
    target = make_demo_target(
        Path(directory),
        commits=commits,
        drift_only=drift_only,
        seed=seed,
        # Drift only: sessions differ (σ 2%) and the machine slowly slows down (−0.3% per session).
        drift_per_session=-0.003 if drift_only else 0.0,
    )
    what = f"planted {target.planted[:10]}" if target.planted else "no code change (drift only)"
    progress.info(f"demo repository: {target.commits} commits, {what}; patch stack of 3; server: SGLang emulator")
    config = load_config(target.config)
    with Workspace.open(config, target.root / "results.sqlite") as ws, exclusive(ws, progress):
        result = run_bisection(ws, target.good, target.bad, progress)
    return result, target


# ------------------------------------------------------------------------------------------------
# perfbisect report


INDEX_REPLAY_BUDGET_S = 0.1


def report_path(db_path: Path, name: str) -> Path:
    """Where a report goes by default: ``reports/`` beside the results database."""
    return Path(db_path).expanduser().absolute().parent / "reports" / f"{name}.html"


def report(store: Store, which: str = "latest", out: Path | None = None, config: Config | None = None) -> tuple[Path, dict]:
    """Render one stored bisection (``N``, ``bN``), comparison (``cN``) or the ``latest`` of either."""
    from . import evidence
    from .report import render_report, write_html

    kind, number = _report_target(store, which)
    if kind == "bisection":
        view = evidence.bisection_view(store, number, config)
    else:
        view = evidence.comparison_view(store, number, config)
    path = write_html(render_report(view), out or report_path(store.path, f"{kind}-{number}"))
    return path, view


def _report_target(store: Store, which: str) -> tuple[str, int]:
    from .errors import PerfbisectError

    text = (which or "latest").strip().lower()
    if text == "latest":
        b = store.bisections(1)
        c = store.comparisons(1)
        if not b and not c:
            raise UsageError(f"{store.path} holds no bisection or comparison yet: run `perfbisect run good=REV bad=REV` first.")
        if b and (not c or b[0].started_at >= c[0].created_at):
            return "bisection", b[0].id
        return "comparison", c[0].id
    kind = "comparison" if text.startswith("c") else "bisection"
    digits = text.lstrip("bc#")
    if not digits.isdigit():
        raise UsageError(
            f"Cannot read report id '{which}': give a bisection id (3 or b3), a comparison id (c2) or 'latest' "
            f"(see `perfbisect log`)."
        )
    if kind == "bisection":
        try:
            store.bisection(int(digits))
        except PerfbisectError:
            raise UsageError(f"No bisection #{digits} in {store.path}. List the stored ones with `perfbisect log`.") from None
    return kind, int(digits)


def report_index(store: Store, directory: Path, config: Config | None = None, progress: Progress | None = None) -> Path:
    """A static site: every bisection's and comparison's report, and an index with a history chart per mode."""
    from . import evidence
    from .report import render_index, render_report, write_html

    directory = Path(directory).expanduser().absolute()
    views = []
    for b in store.bisections(1 << 30):
        # A site of many reports replays each search on a tighter budget (coarse to fine: the last
        # steps and the overall shape stay; `perfbisect report N` shows more).
        views.append(evidence.bisection_view(store, b.id, config, replay_budget_s=INDEX_REPLAY_BUDGET_S))
    for c in store.comparisons(1 << 30):
        views.append(evidence.comparison_view(store, c.id, config))
    entries, history = evidence.index_entries(views)
    for view, entry in zip(views, entries):
        write_html(render_report(view), directory / entry["href"])
        if progress:
            progress.detail(f"wrote {directory / entry['href']}")
    return write_html(render_index(entries, history, str(store.path)), directory / "index.html")


def report_quietly(progress: Progress | None, render: Callable[[], Path]) -> Path | None:
    """Write a command's report at its end; a failure to render never hides the verdict just measured."""
    from .errors import PerfbisectError

    try:
        return render()
    except (PerfbisectError, OSError) as exc:
        (progress or Progress()).warn(f"the HTML report could not be written: {exc}")
    except Exception as exc:  # a rendering bug: the measured verdict still prints and keeps its exit code
        (progress or Progress()).warn(
            f"the HTML report could not be rendered ({type(exc).__name__}: {exc}); this is a bug, please report it. "
            f"`perfbisect report` renders it again from the database once fixed."
        )
    return None


def demo_report(target: DemoTarget, result: BisectResult) -> Path:
    """The demo's report, beside its database (``<demo dir>/reports/bisection-N.html``)."""
    config = load_config(target.config)
    with open_store(target.root / "results.sqlite", recover=False) as store:
        return report(store, str(result.bisection_id), config=config)[0]


def calibration_report(ws: Workspace, result: CalibrateResult) -> Path:
    """The report of a calibration: its trials over time, the machine state and the noise it measured."""
    from . import evidence
    from .report import render_report, write_html

    stamp = time.strftime("%Y%m%d-%H%M%S")
    db = ws.db_path
    cfg = f" -c {ws.config.path}" if ws.config.path else ""
    view = evidence.trials_view(
        ws.store, f"perfbisect calibrate: {result.commit.short} [{result.mode}], {len(result.trials)} trials", "calibrate",
        result.trials, lines=result.lines, config=ws.config,
        reproduce=[f"perfbisect calibrate {result.commit.sha} --mode {result.mode} --trials {len(result.trials)}{cfg} --db {db}"],
    )
    view["id"] = f"{result.commit.short}-{stamp}"
    return write_html(render_report(view), report_path(db, f"calibrate-{result.commit.short}-{stamp}"))
