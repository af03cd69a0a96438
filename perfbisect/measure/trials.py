"""Trials: one server session for (commit, mode), every run stored as it lands.

``TrialRunner`` prepares a commit (worktree, patch stack, build), starts its server, runs the
workload under the system-state sampler and stores the trial, skipped and failed ones too.
``observe`` turns the trials of one commit into what the search sees. Server pidfiles let a later
perfbisect reap a server that a crashed one left running.

A trial must measure the commit and the mode it names, so two things make it untestable (skipped,
the commit never blamed) rather than measured: on an SGLang target, an ``sglang`` that the server's
env would import from outside the worktree although that env puts the worktree on PYTHONPATH
(``served_elsewhere``: a checkout is not the release, and since SGLang 0.5.9 the reported version is
the installed package's, so only the import location tells); and a variable of the mode's own env
that the server's workers do not run with (``server.mode_not_applied``). Each trial of an SGLang
target records where its sglang came from (``versions["sglang_file"]``) and which server-info path
answered (``server_info["perfbisect"]``), with a warning when a speculative mode's server-wide
accept length is missing.
"""

from __future__ import annotations

import json
import os
import math
import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..metrics import DECODE, Metric, describe_workload
from .host import describe_busy, gpu_memory_released, gpu_memory_used_mib, wait_until_idle
from ..store.samples import compact
from .sysstate import Sampler
from .versions import target_versions
from .build import run_build
from ..placeholders import expand
from ..settings import Config, ModeConfig, WorkloadConfig
from .run_allocation import runs_advice
from ..runtime.locks import GPU_WAIT_FILE
from ..errors import (BuildError, EnvironmentBuildError, MachineBusy, ModeNotApplied, PatchError, ServerError, ServerNotReady,
                      Untestable, WorkloadError)
from ..git.targets import is_sglang_target
from ..layout import HASH_SEED_VAR, Layout, choose, joined
from ..model import Commit, EnvCheck, Observation, RunResult, SystemSummary, TrialIdentity, TrialResult, TrialStatus, content_hash
from ..runtime.children import signal_group
from .served import Served, fallback_refusal, served_from_log
from .server import ServerSession, process_cmdline
from ..runtime.liveness import owner_alive, process_owner
from ..store import Store
from .external_workloads import run_bench_serving, run_command_workload
from .workload import avg_spec_accept_length, read_server_info, run_workload, server_info_warnings
from .workspace import Progress, Workspace
from ..workload_kinds import kind_of


@dataclass
class Prepared:
    """A commit checked out in a worktree with the stack applied and built, or why it can't be."""

    commit: Commit
    worktree: Path | None = None
    slot: int = 0  # the worktree slot (path length) it was prepared in
    patch_hash: str = "none"
    build_hash: str = "none"
    untestable: str | None = None  # reason: patch conflict, build failure
    versions: dict | None = None  # target's torch/sglang/CUDA/NCCL versions, read once per commit
    python: str = ""  # the interpreter its build, server and workload run under: the pinned environment's, else target.python
    env_key: str | None = None  # the pinned environment it runs in (perfbisect/measure/envs.py), if any
    # On an SGLang target: the versions read before each trial, with the server's env for the mode,
    # per (worktree, PYTHON* variables of that env): they hold where its sglang is imported from.
    served: dict | None = None


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
        alive = process_cmdline(pf.pgid) or ""
        # The group's leader still runs the command the pidfile names: the id was not reused.
        if alive and alive == pf.cmdline.strip():
            try:
                if signal_group(pf.pgid, signal.SIGKILL):
                    killed.append(pf.pgid)
                    progress.warn(f"killed a server left running by an interrupted perfbisect (process group {pf.pgid}: {alive[:80]})")
            except OSError:
                pass
        pf.path.unlink(missing_ok=True)
    return killed


def write_gpu_wait(cache_dir: Path, who: str, waited: float, bound: float) -> None:
    """Record that this process's next trial waits for GPUs others hold (``perfbisect status`` shows it)."""
    path = Path(cache_dir) / GPU_WAIT_FILE
    state = {"owner": process_owner(), "pid": os.getpid(), "who": who, "waited_s": round(waited),
             "bound_s": bound, "since": time.time() - waited}
    try:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, path)
    except OSError:
        pass  # status is a courtesy: a read-only cache directory must not stop the wait


def clear_gpu_wait(cache_dir: Path) -> None:
    (Path(cache_dir) / GPU_WAIT_FILE).unlink(missing_ok=True)


def gpu_wait(cache_dir: Path) -> dict | None:
    """The trial waiting for GPUs in this cache directory, if its perfbisect is still alive."""
    try:
        state = json.loads((Path(cache_dir) / GPU_WAIT_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not owner_alive(str(state.get("owner", ""))):
        return None
    return state


def launch_check(ws: Workspace, mode: ModeConfig) -> tuple[float, tuple[EnvCheck, ...], Served]:
    """Start the server of ``mode`` once in the target checkout as it is, wait until it is ready and
    check the configured env reached every process of its group (``perfbisect doctor --launch``).

    Seconds to readiness, the env checks, and which implementation served (its log, ``served``); the
    server is torn down before this returns. The caller holds the locks a trial holds
    (``workspace.exclusive``).
    """
    cfg = ws.config
    log = cfg.cache_dir / "logs" / "doctor-server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    python = cfg.target.python
    if ws.envs is not None and ws.pins is not None:  # the checkout's pins: its server would refuse another version
        pin_set = ws.pins.upstream(ws.repo.resolve("HEAD"))  # the checkout as it is: no patch stack applied
        if pin_set:
            python = ws.envs.ensure(pin_set).python
    with ServerSession(cfg.server, mode, cfg.target.repo, python, log) as session:
        seconds = session.wait_ready()
        return seconds, session.check_env(), served_from_log(log)


class TrialRunner:
    """Runs trials: one server session per (commit, mode), every run stored as it lands."""

    def __init__(self, ws: Workspace, progress: Progress | None = None, wait_idle_s: float = 0.0,
                 client_rev: str | None = None):
        self.ws = ws
        self.progress = progress or Progress()
        self.wait_idle_s = wait_idle_s
        self._prepared: Prepared | None = None
        self._unobserved: dict[int, list[TrialResult]] = {}  # per bisection: stored trials no observation holds
        self._auto_runs: dict[str, int] = {}  # per mode: the run count workload.runs = 0 chose
        self._logs = ws.config.cache_dir / "logs"
        # The revision whose bench_serving measures every trial (kind = "bench_serving"): the command
        # sets its reference revision here (run: the good endpoint); workload.client_rev wins.
        self.client_rev = client_rev
        self._client_dir: Path | None = None
        self._pids = ws.config.cache_dir / "servers"
        reap_leftover_servers(ws.config.cache_dir, self.progress)

    # -- preparation -------------------------------------------------------------------------
    def prepare(self, commit: Commit, slot: int = 0) -> Prepared:
        """Check out, patch and build ``commit`` in worktree slot ``slot`` (reusing the last
        preparation when it was of the same commit in the same slot).

        Only the last one is reused: a build step without artefacts may install into the target's
        environment (``pip install -e``), which then points at the worktree it last ran in, so a
        commit prepared again in another slot is built again there (cached artefacts restored).
        """
        last = self._prepared
        if last is not None and last.commit.sha == commit.sha and last.slot == slot:
            return last
        cfg = self.ws.config
        self.progress.detail(f"{commit.short}: preparing worktree")
        worktree = self.ws.pool.checkout(commit, slot=slot)
        prepared = Prepared(commit=commit, worktree=worktree, slot=slot, python=cfg.target.python)
        if last is not None and last.commit.sha == commit.sha:
            prepared.versions = last.versions  # the same commit's code: the same versions, read once
            prepared.served = last.served  # keyed by worktree: another slot's are not used for this one
        try:
            if self.ws.stack is not None:
                applied = self.ws.stack.apply(worktree, commit)
                prepared.patch_hash = applied.hash
            self._environment(prepared)
            build = run_build(
                cfg.build.steps,
                worktree=worktree,
                commit=commit,
                applied_stack_hash=prepared.patch_hash,
                cache=self.ws.build_cache,
                python=prepared.python,
                log_dir=self._logs / "build",
            )
            # The pinned environment is part of what was built: trials pool only within one.
            prepared.build_hash = build.hash if prepared.env_key is None else content_hash(build.hash, prepared.env_key)
            cached = [s.name for s in build.steps if s.cached]
            if cached:
                self.progress.detail(f"{commit.short}: build cache hit for {', '.join(cached)}")
        except PatchError as exc:
            prepared.untestable = f"patch conflict: {exc}"
            self.progress.warn(f"{commit.short} skipped (patch stack does not apply): {exc}")
        except EnvironmentBuildError as exc:
            prepared.untestable = f"pinned dependencies cannot be installed: {exc}"
            self.progress.warn(f"{commit.short} skipped (pinned dependencies cannot be installed): {exc}")
        except BuildError as exc:
            prepared.untestable = f"build failed: {exc}"
            self.progress.warn(f"{commit.short} skipped (build failed): {exc}")
        self._prepared = prepared
        return prepared

    def _environment(self, prepared: Prepared) -> None:
        """Run ``prepared`` in the environment of its commit's pins (built once per pin set, cached):
        its interpreter becomes the one the build, the server and the workload use."""
        ws = self.ws
        if ws.envs is None or ws.pins is None:
            return
        pin_set = ws.pins(prepared.commit)
        if not pin_set:
            return  # nothing pinned at this commit: the target interpreter as it is
        env = ws.envs.ensure(pin_set)
        prepared.python, prepared.env_key = env.python, env.key
        if env.cached:
            self.progress.detail(f"{prepared.commit.short}: environment {env.key[:10]} ({pin_set.describe()}): cached")
        else:
            self.progress.info(
                f"{prepared.commit.short}: built the environment {env.key[:10]} for {pin_set.describe()} "
                f"in {env.seconds:.1f}s ({env.installer})"
            )

    def identity(self, prepared: Prepared, mode: ModeConfig) -> TrialIdentity:
        return TrialIdentity.of_build(
            self.ws.noise_key(mode),
            commit=prepared.commit.sha,
            patch_hash=prepared.patch_hash,
            build_hash=prepared.build_hash,
        )

    def layout(self, commit: Commit, mode: ModeConfig, vary: bool = False) -> Layout:
        """The layout of the next trial of (commit, mode): drawn per ``[layout]`` (perfbisect/layout.py),
        counting the trials of (commit, mode) already stored, so each gets its own draw; ``vary``: the
        search asked for another layout (drawn even when ``randomize = false``)."""
        cfg = self.ws.config
        draws = cfg.layout.randomize or vary
        counter = self.ws.store.trial_count(commit.sha, mode.name) if draws else 0  # fixed: no draw
        pinned = HASH_SEED_VAR in {**cfg.server.env, **mode.env}  # the config's own seed wins
        return choose(cfg.layout, commit=commit.sha, mode=mode.name, counter=counter, hash_seed_pinned=pinned, vary=vary)

    # -- one trial ---------------------------------------------------------------------------
    def trial(self, commit: Commit, mode_name: str, purpose: str, bisection_id: int | None = None,
              vary_layout: bool = False) -> TrialResult:
        """One server session for (commit, mode) under a layout drawn for it; skipped and failed
        trials are stored too, each with its layout."""
        mode = self.ws.config.mode(mode_name)
        layout = self.layout(commit, mode, vary=vary_layout)
        prepared = self.prepare(commit, layout.slot)
        identity = self.identity(prepared, mode)
        if prepared.untestable:
            return self._store_untestable(identity, prepared.untestable, purpose, bisection_id, layout)
        stored = self._stored_unobserved(identity, purpose, bisection_id)
        if stored is not None:
            self.progress.info(
                f"trial #{stored.id}: {commit.short} [{mode.name}] was stored before the interruption: used, not measured again"
            )
            return stored
        versions = None
        if is_sglang_target(self.ws.config):
            # Which code would serve, read before the server starts: a checkout that is not what
            # the server imports is refused here, not measured.
            versions, env = self._served_versions(prepared, mode)
            why = served_elsewhere(versions, env, prepared)
            if why:
                self.progress.warn(f"{commit.short} [{mode.name}] skipped: {why}")
                return self._store_untestable(identity, why, purpose, bisection_id, layout, versions=versions)
        self._wait_until_idle()
        log_path = self._server_log(commit, mode)
        trial_id = self.ws.store.begin_trial(
            identity, purpose=purpose, bisection_id=bisection_id, log_path=str(log_path), layout=layout,
        )
        self.progress.info(f"trial #{trial_id}: {commit.short} [{mode.name}] {commit.subject[:60]}")
        self.progress.detail(f"  layout {layout.id}: {_layout_words(layout, prepared.worktree)}")
        session = _Session(trial_id, self.ws.store, self.progress, describe_workload(self.ws.config.workload))
        what = "server and benchmark" if kind_of(self.ws.config.workload).serves else "workload.command"
        self.progress.detail(f"{prepared.commit.short} [{mode.name}]: running the {what}; its runs show as they land")
        status, error = self._measure(session, prepared, mode, log_path, layout)
        if versions is None:
            self._read_versions(prepared)
            versions = prepared.versions
        result = self._finish(session, status, error, versions)
        self._report_summary(result, session.info)
        return result

    def _store_untestable(self, identity: TrialIdentity, why: str, purpose: str, bisection_id: int | None,
                          layout: Layout, versions: dict | None = None) -> TrialResult:
        """A commit that cannot be tested (patch conflict, build failure, a checkout the server would
        not import) is stored as a skipped trial, with the versions read for it, if any."""
        store = self.ws.store
        trial_id = store.begin_trial(identity, purpose=purpose, bisection_id=bisection_id, layout=layout)
        store.finish_trial(trial_id, TrialStatus.SKIPPED, versions=versions, error=why)
        return store.trial(trial_id)

    def _wait_until_idle(self) -> None:
        """Wait (up to ``wait_idle_s``) while other processes hold the GPUs, saying so on the
        progress line and in ``perfbisect status``; 0 refuses at once (MachineBusy)."""
        cache_dir = self.ws.config.cache_dir
        said: list[bool] = []

        def still_busy(procs: list[tuple[int, int, str]], waited: float) -> None:
            who = describe_busy(procs)
            if not said:
                said.append(True)
                self.progress.info(
                    f"waiting for the GPUs: {who} holds them; the next trial starts when they are free "
                    f"(waiting at most {self.wait_idle_s:g} s, --wait-idle)"
                )
            self.progress.detail(f"GPUs busy ({who}); waited {waited:.0f} s of at most {self.wait_idle_s:g} s")
            write_gpu_wait(cache_dir, who, waited, self.wait_idle_s)

        try:
            waited = wait_until_idle(timeout_s=self.wait_idle_s, poll_s=min(10.0, max(1.0, self.wait_idle_s / 10)),
                                     progress=still_busy)
        except MachineBusy as exc:
            raise MachineBusy(
                f"{exc} Trials stored so far are kept; `perfbisect resume` continues a bisection where it stopped."
            ) from None
        finally:
            if said:
                clear_gpu_wait(cache_dir)
        if said:
            self.progress.info(f"GPUs free again after {waited:.0f} s: carrying on")

    def _server_log(self, commit: Commit, mode: ModeConfig) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log_path = self._logs / "server" / f"{stamp}-{commit.short}-{mode.name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        return log_path

    def _measure(self, session: "_Session", prepared: Prepared, mode: ModeConfig, log_path: Path,
                 layout: Layout) -> tuple[TrialStatus, str | None]:
        """Run the workload under the sampler: (OK, None), or why the trial was skipped or failed.

        Anything else (Ctrl-C, SIGTERM, a config error, a bug) marks the stored trial failed with
        what happened, keeps its runs, and propagates.
        """
        commit = prepared.commit
        gpu_baseline = gpu_memory_used_mib()
        released = gpu_memory_released(gpu_baseline, tolerance_mib=1024) if gpu_baseline else None
        try:
            with session.sampler:
                if kind_of(self.ws.config.workload).client == "command":
                    self._run_command(session, prepared, mode, log_path, layout)
                else:
                    self._run_server(session, prepared, mode, log_path, released, layout)
        except ServerNotReady as exc:
            # A commit whose server never gets ready cannot be tested: skipped, never blamed.
            self.progress.warn(f"{commit.short} [{mode.name}]: {exc}")
            return TrialStatus.SKIPPED, f"server never ready: {exc}"
        except ModeNotApplied as exc:
            # The commit's code overwrote a variable that defines the mode: it cannot run this mode.
            self.progress.warn(f"{commit.short} [{mode.name}] skipped: {exc}")
            return TrialStatus.SKIPPED, f"mode not applied: {exc}"
        except Untestable as exc:
            # The command's own verdict (exit 125, as in `git bisect run`): skipped, never blamed, not a failure.
            self.progress.warn(f"{commit.short} [{mode.name}] skipped: {exc}")
            return TrialStatus.SKIPPED, f"untestable: {exc}"
        except (ServerError, WorkloadError) as exc:
            self.progress.warn(f"{commit.short} [{mode.name}] trial failed: {exc}")
            return TrialStatus.FAILED, str(exc)
        except BaseException as exc:  # Ctrl-C, SIGTERM, a config error or a bug: record what happened, keep the runs
            what = "interrupted" if isinstance(exc, KeyboardInterrupt) else "aborted"
            self.ws.store.finish_trial(
                session.trial_id, TrialStatus.FAILED, system=session.sampler.summary(),
                error=f"{what}: {type(exc).__name__}: {exc}",
            )
            raise
        return TrialStatus.OK, None

    def _run_command(self, session: "_Session", prepared: Prepared, mode: ModeConfig, log_path: Path, layout: Layout) -> None:
        """A ``command`` workload: the command starts what it measures and prints the metric.
        It runs with the layout's env (padding, hash seed); build steps never get it."""
        cfg = self.ws.config
        env = {**cfg.server.env, **mode.env}
        for run in run_command_workload(cfg.workload, prepared.worktree, prepared.python, env, log_path,
                                        extra_env=layout.env()):
            session.on_run(run)

    def _run_server(self, session: "_Session", prepared: Prepared, mode: ModeConfig, log_path: Path,
                    released: Callable[[], bool] | None, layout: Layout) -> None:
        """Start the server (with the layout's env), wait until it is ready, check its env, run the
        workload, tear it down."""
        cfg = self.ws.config
        server = ServerSession(
            cfg.server, mode, prepared.worktree, prepared.python, log_path,
            extra_env=layout.env(), gpu_memory_released=released,
        )
        session.servers.append(server)
        with server:
            pidfile = self._remember(server)
            seconds = server.wait_ready(progress=self._ready_progress(mode.name))
            self.progress.detail(f"  server ready in {seconds:.1f}s (port {server.port})")
            if cfg.server.check_env:
                session.env_checks = server.check_env()
                self._report_env(session.env_checks)
                not_applied = server.mode_not_applied(session.env_checks)
                if not_applied is not None:
                    raise not_applied
            session.served = served_from_log(log_path)  # which implementation serves: said while it started
            for note in session.served.notes():
                self.progress.warn(f"  [{mode.name}] {note}")
            refused = fallback_refusal(mode.name, mode.env, session.served)
            if refused is not None:
                raise refused
            workload = self._workload(mode)
            if kind_of(cfg.workload).client == "bench_serving":
                env = {**cfg.server.env, **mode.env}
                # The client of one fixed revision, with the user's interpreter: a change to the
                # client, or to a commit's pins, cannot move what it reports.
                for run in run_bench_serving(server.base_url, workload, self.client_checkout(), cfg.target.python, env,
                                             log_path, extra_env=layout.env()):
                    session.on_run(run)
            else:
                run_workload(server.base_url, workload, on_run=session.on_run, on_warmup_detected=session.on_warmup_detected)
            session.info = self._server_info(server.base_url, mode, session.served)
        pidfile.unlink(missing_ok=True)  # torn down cleanly: nothing to reap later

    def _server_info(self, base_url: str, mode: ModeConfig, served: Served | None = None) -> dict:
        """The server's info for the trial, with which path answered, what is missing from it and which
        implementation served (``served``) under ``"perfbisect"`` (kept only where there is something to
        say); the warnings are shown."""
        read = read_server_info(base_url)
        info = dict(read.info)
        warnings = server_info_warnings(read, base_url, mode.speculative)
        for warning in warnings:
            self.progress.warn(f"  [{mode.name}] {warning}")
        record = served.as_json() if served is not None else {}
        if read.path is not None or warnings or record:
            info["perfbisect"] = {"server_info_path": read.path, "warnings": list(warnings), **({"served": record} if record else {})}
        return info

    def client_checkout(self) -> Path:
        """The checkout bench_serving runs from: ``workload.client_rev``, else the command's reference
        revision (``client_rev``: the good endpoint of a bisection), else HEAD as this runner first
        needed it; made once and kept for every trial of this runner."""
        if self._client_dir is None:
            rev = self.ws.config.workload.client_rev or self.client_rev or "HEAD"
            commit = self.ws.repo.resolve(rev)
            self._client_dir = self.ws.pool.fixed(commit, "client")
            self.progress.info(f"benchmark client: sglang.bench_serving of {commit.short} (workload.client_rev), for every trial")
        return self._client_dir

    def _workload(self, mode: ModeConfig) -> WorkloadConfig:
        """The workload a trial runs: ``workload.runs = 0`` (auto) resolved once per mode and command,
        from this host's stored noise and timings (run_allocation), so one command's trials agree."""
        workload = self.ws.config.workload
        if workload.runs:
            return workload
        if mode.name not in self._auto_runs:
            advice = runs_advice(self.ws, mode.name)
            self._auto_runs[mode.name] = advice.runs
            self.progress.info(f"[{mode.name}] {advice.line()}")
        return replace(workload, runs=self._auto_runs[mode.name])

    def _read_versions(self, prepared: Prepared) -> None:
        """The target's package versions, read once per commit through the server's env (PYTHONPATH
        to the checkout): the versions it imports."""
        if prepared.versions is not None:
            return
        cfg = self.ws.config
        server_env = {k: expand((v,), python=prepared.python, worktree=str(prepared.worktree))[0]
                      for k, v in cfg.server.env.items()}
        prepared.versions = target_versions(prepared.python, cwd=prepared.worktree, extra_env=server_env)

    def _served_versions(self, prepared: Prepared, mode: ModeConfig) -> tuple[dict, dict[str, str]]:
        """The versions the server of ``mode`` would import and the env they were read with: the
        target's interpreter run with [server].env + the mode's env (placeholders filled), in the
        worktree. Read once per worktree and per value of the PYTHON* variables of that env, since
        ``sglang_file`` is a path inside the worktree."""
        cfg = self.ws.config
        env = {k: expand((v,), python=prepared.python, worktree=str(prepared.worktree), host=cfg.server.host)[0]
               for k, v in {**cfg.server.env, **mode.env}.items()}
        key = (str(prepared.worktree), prepared.python, tuple(sorted((k, v) for k, v in env.items() if k.startswith("PYTHON"))))
        if prepared.served is None:
            prepared.served = {}
        if key not in prepared.served:
            prepared.served[key] = target_versions(prepared.python, cwd=prepared.worktree, extra_env=env)
        return dict(prepared.served[key]), env

    def _finish(self, session: "_Session", status: TrialStatus, error: str | None, versions: dict | None) -> TrialResult:
        """Store the trial's outcome with the machine's state over its measured runs."""
        sampler = session.sampler
        since, until = (session.window[0], session.window[-1]) if len(session.window) == 2 else (None, None)
        system = sampler.summary(since=since, until=until)
        if system.samples == 0:  # runs shorter than the sampling interval: use the whole session
            system = sampler.summary()
        system = with_start_state(system, sampler.snapshots)
        return self.ws.store.finish_trial(
            session.trial_id,
            status,
            system=system,
            system_samples=compact(sampler.snapshots),
            env_checks=session.env_checks,
            server_info=session.info,
            versions=versions,
            error=error,
        )

    def _report_summary(self, result: TrialResult, info: dict) -> None:
        if result.summary is None:
            return
        accept = avg_spec_accept_length(info)
        extra = f", server-wide accept length {accept:.2f}" if accept else ""
        flagged = f", {len(result.flagged_runs)} runs flagged" if result.flagged_runs else ""
        detected = len(result.detected_warmup_runs)
        if detected:
            flagged += f", {detected} slow leading run{'s' if detected > 1 else ''} counted as warm-up"
        self.progress.info(
            f"  → {describe_workload(self.ws.config.workload).format(math.exp(result.summary))} "
            f"({'median of ' + str(len(result.usable_runs)) + ' runs' if len(result.usable_runs) != 1 else 'one run'}"
            f"{flagged}{extra})"
        )

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
                self.progress.warn(f"  configured env did not reach {check.gap()}")


class _Session:
    """What one trial gathers while it runs: its runs (stored as they land) and their time window,
    the sampler, the server, its env checks and server info."""

    def __init__(self, trial_id: int, store: Store, progress: Progress, metric: Metric | None = None):
        self.trial_id = trial_id
        self.metric = metric
        self.store = store
        self.progress = progress
        self.servers: list[ServerSession] = []
        self.window: list[float] = []  # when measured runs ran: the state summary covers only that
        self.landed: dict[int, float] = {}  # run index -> when it landed
        self.env_checks: tuple[EnvCheck, ...] = ()
        self.info: dict = {}
        self.served: Served | None = None
        self.sampler = Sampler(
            interval_s=1.0, exclude_pids=lambda: self.servers[0].group_pids() if self.servers else ()
        )

    def on_run(self, run: RunResult) -> None:
        self.store.add_run(self.trial_id, run)
        self.landed[run.index] = time.time()
        if run.warmup or not self.window:
            self.window[:] = [self.landed[run.index]]
        else:
            self.window[1:] = [self.landed[run.index]]
        self.progress.detail("  " + format_run(run, self.metric))

    def on_warmup_detected(self, runs: list[RunResult]) -> None:
        """Leading measured runs turned out to be warm-up: re-mark them stored, and start the state
        window after them (it covers measured runs only)."""
        self.store.mark_detected_warmup(self.trial_id, [r.index for r in runs])
        self.window[0] = max(self.landed[r.index] for r in runs)
        self.progress.info(
            f"  run{'s' if len(runs) > 1 else ''} {', '.join(str(r.index) for r in runs)}: slower than the later runs "
            f"beyond their spread: counted as warm-up (workload.detect_warmup); more runs take their place, up to a bound"
        )


# ------------------------------------------------------------------------------------------------
# Observations: what the search policy sees for one commit


def observe(runner: TrialRunner, commit: Commit, bisection_id: int | None, seq: int,
            vary_layout: bool = False) -> tuple[Observation, list[int]]:
    """Measure the bisection metric at ``commit`` once: one trial per needed mode (``vary_layout``:
    under a layout drawn even when layouts are held fixed, as the search's layout re-check asks).

    A trial the machine spoiled (throttled by an external cause, another process on the GPUs) is
    kept but flagged: the search excludes it and asks for the commit again, like nvbench re-runs.
    """
    cfg = runner.ws.config
    summaries: dict[str, float] = {}
    trial_ids: list[int] = []
    covariates: dict[str, float] = {}
    flags: list[str] = []
    layouts: dict[str, Layout | None] = {}  # per mode: the layout of the trial whose value is used
    started: float | None = None
    modes = interleaved(cfg.metric_modes, seq)

    def layout_ids() -> str | None:  # in the order of metric_modes, whichever order the trials ran in
        return joined([layouts[m] for m in cfg.metric_modes if m in layouts])

    for mode in modes:
        result = None
        for _attempt in range(2):  # a crash mid-run is retried once before the commit counts as untestable
            result = runner.trial(commit, mode, purpose="bisect", bisection_id=bisection_id, vary_layout=vary_layout)
            trial_ids.append(result.id)
            if result.status is not TrialStatus.FAILED:
                break
        if result is not None:
            layouts[mode] = result.layout
        if result is None or result.summary is None:
            return Observation(commit=commit.sha, value=None, seq=seq, layout=layout_ids()), trial_ids
        summaries[mode] = result.summary
        covariates.update(result.system.as_covariates())
        started = result.started_at if started is None else started
        why = result.system.exclusion()
        if why:
            flags.append(f"[{mode}] {why}")
            runner.progress.warn(f"{commit.short} [{mode}]: {why}: the search leaves this trial out and measures again")
    return Observation(
        commit=commit.sha, value=metric_value(cfg, summaries), covariates=covariates, seq=seq,
        at=started, flag="; ".join(flags) or None, layout=layout_ids(),
    ), trial_ids


def _inside(path: str, root: str) -> bool:
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def served_elsewhere(versions: dict, env: dict[str, str], prepared: Prepared) -> str | None:
    """Why a trial of ``prepared`` would not measure its checkout, or None: the server's ``env`` puts
    a folder of the worktree on PYTHONPATH, yet the target's interpreter, run with that env in the
    worktree, finds ``sglang`` outside it (``versions["sglang_file"]``). Nothing is said when the env
    puts no worktree folder on PYTHONPATH (an install-based config) or when no sglang is found at all
    (the server then fails with its own message)."""
    worktree = str(prepared.worktree)
    entries = [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e]
    ours = [e for e in entries if _inside(os.path.join(worktree, e), worktree)]  # relative ones: from the worktree
    where = versions.get("sglang_file")
    if not ours or not where or _inside(where, worktree):
        return None
    version = versions.get("sglang")
    reported = (f"and report that copy's version (sglang {version}: since SGLang 0.5.9 sglang.__version__ is the "
                f"installed package's, not the checkout's)" if version else "and report that copy's version")
    return (
        f"the server would not run the checkout under test: with the server's env (PYTHONPATH={env['PYTHONPATH']!r}, "
        f"which names {', '.join(ours)} of the worktree) {prepared.python} imports sglang from {where}, outside the worktree "
        f"{worktree}. The server would run that copy's code, not {prepared.commit.short}'s, {reported}, so this trial is "
        f"skipped and the commit never blamed. Make the checkout importable: check that {ours[0]}/sglang exists at this "
        f"commit, and that nothing resets PYTHONPATH or puts the other copy first (target.python a wrapper script that "
        f"sets PYTHONPATH, a .pth file or sitecustomize, python -I or -E in server.command)."
    )


def _layout_words(layout: Layout, worktree: Path | None) -> str:
    """A layout in words for the progress line: where it checks out and what it adds to the env."""
    where = f"worktree slot {layout.slot} ({len(str(worktree))}-character path)" if worktree else f"worktree slot {layout.slot}"
    seed = "PYTHONHASHSEED as configured" if layout.hash_seed is None else f"PYTHONHASHSEED={layout.hash_seed}"
    return f"{where}, {layout.env_pad} bytes of env padding, {seed}"


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


def measured_trials(stored: Iterable[TrialResult], sha: str, mode: str) -> int:
    """How many of ``stored`` measured ``mode`` at ``sha`` (a summary: not skipped, failed or flagged out)."""
    return sum(1 for t in stored if t.identity.commit == sha and t.identity.mode == mode and t.summary is not None)


def measure_modes(runner: TrialRunner, pair: Sequence[Commit], modes: Sequence[str], target: int,
                  bisection_id: int, stored: list[TrialResult]) -> list[TrialResult]:
    """Trials of ``modes`` at both commits of ``pair`` until each (commit, mode) has ``target``
    measured ones in ``stored`` (purpose "modes": the which-path step), one trial a round each,
    rounds in A B B A order so drift hits both sides alike, up to ``target`` failed attempts each
    before giving up on one. New trials are appended to ``stored`` and returned. The same loop
    runs here (``[executor] kind = "local"``) and in a Slurm job on its node."""
    new: list[TrialResult] = []
    for round_ in range(2 * target):
        ran = False
        for commit in interleaved(pair, round_):
            for mode in modes:
                if measured_trials(stored, commit.sha, mode) >= target:  # one trial a round each: interleaved
                    continue
                trial = runner.trial(commit, mode, purpose="modes", bisection_id=bisection_id)
                stored.append(trial)
                new.append(trial)
                ran = True
        if not ran:
            break
    return new


def interleaved(items: Sequence, round_index: int) -> list:
    """Order of one round of an A B B A schedule: forwards on even rounds, backwards on odd ones."""
    return list(items) if round_index % 2 == 0 else list(reversed(items))


def metric_value(cfg: Config, summaries: dict[str, float]) -> float:
    """log of the metric mode's summary (its workload.metric), or log(spec/base) for a ratio metric."""
    modes = cfg.metric_modes
    if len(modes) == 2:
        return summaries[modes[1]] - summaries[modes[0]]
    return summaries[modes[0]]


def format_run(run: RunResult, metric: Metric | None = None) -> str:
    """One progress line for a run, its value in the metric's own unit."""
    tag = "warm-up" if run.warmup else f"run {run.index}"
    if run.error:
        return f"{tag}: error: {run.error}"
    metric = metric or DECODE
    spec = ""
    if run.spec_accept_length:
        cycle = run.cycle_time_ms
        spec = f", accept {run.spec_accept_length:.2f}" + (f", cycle {cycle:.1f} ms" if cycle else "")
    flag = "" if run.complete else f"  FLAGGED: {run.output_tokens}/{run.requested_tokens} tokens, kept out of statistics"
    ttft = f", TTFT {run.ttft_s * 1000:.0f} ms" if run.ttft_s is not None and metric.name != "ttft_ms" else ""
    itl = (f", ITL p50/p99 {run.itl_p50_ms:.2f}/{run.itl_p99_ms:.2f} ms"
           if run.itl_p50_ms is not None and run.itl_p99_ms is not None and not metric.name.startswith("itl_") else "")
    return f"{tag}: {metric.format(run.value)}{ttft}{itl}{spec}{flag}"
