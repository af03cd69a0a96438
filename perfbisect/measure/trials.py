"""Trials: one server session for (commit, mode), every run stored as it lands.

``TrialRunner`` prepares a commit (worktree, patch stack, build), starts its server, runs the
workload under the system-state sampler and stores the trial, skipped and failed ones too; a trial
that cannot measure what it names is stored skipped (``launch_checks``). Each trial of an SGLang
target records where its sglang came from (``versions["sglang_file"]``) and which server-info path
answered (``server_info["perfbisect"]``), with a warning when a speculative mode's server-wide
accept length is missing.

Beside it: ``trial_session`` (the prepared commit, and what one trial gathers while it runs),
``server_pidfiles`` (so a later perfbisect reaps a server a crashed one left running) and
``search_trials`` (the trials a search asks for: ``observe`` turns one commit's trials into what the
search sees).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable

from ..errors import (BuildError, EnvironmentBuildError, MachineBusy, ModeNotApplied, PatchError, ServerError, ServerNotReady,
                      Untestable, WorkloadError)
from ..git.targets import is_sglang_target
from ..layout import HASH_SEED_VAR, Layout, choose
from ..metrics import describe_workload
from ..model import Commit, EnvCheck, TrialIdentity, TrialResult, TrialStatus, content_hash
from ..placeholders import expand
from ..settings import ModeConfig, WorkloadConfig
from ..store import compact
from ..workload_kinds import kind_of
from .build import run_build
from .external_workloads import run_bench_serving, run_command_workload
from .host import clear_gpu_wait, describe_busy, gpu_memory_released, gpu_memory_used_mib, wait_until_idle, write_gpu_wait
from . import rust_extensions
from .launch_checks import served_elsewhere
from .run_allocation import runs_advice
from .served import Served, fallback_refusal, served_from_log
from .server import ServerSession
from .server_pidfiles import reap_leftover_servers, remember_server
from .trial_session import Prepared, TrialSession, with_start_state
from .versions import target_versions
from .workload import avg_spec_accept_length, read_server_info, run_workload, server_info_warnings
from ..runtime.progress import Progress
from .trial_context import TrialContext


class TrialRunner:
    """Runs trials: one server session per (commit, mode), every run stored as it lands."""

    def __init__(self, ws: TrialContext, progress: Progress | None = None, wait_idle_s: float = 0.0,
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
            self._rust_extensions(prepared)
            # The environment is part of what was built: trials pool only within one.
            prepared.build_hash = build.hash if prepared.env_key is None else content_hash(build.hash, prepared.env_key)
            self._workload_files(prepared)
            cached = [s.name for s in build.steps if s.cached]
            if cached:
                self.progress.detail(f"{commit.short}: build cache hit for {', '.join(cached)}")
        except PatchError as exc:
            prepared.untestable = f"patch conflict: {exc}"
            self.progress.warn(f"{commit.short} skipped (patch stack does not apply): {exc}")
        except EnvironmentBuildError as exc:
            prepared.untestable = f"environment cannot be made: {exc}"
            self.progress.warn(f"{commit.short} skipped (its environment cannot be made): {exc}")
        except BuildError as exc:
            prepared.untestable = f"build failed: {exc}"
            self.progress.warn(f"{commit.short} skipped (build failed): {exc}")
        self._prepared = prepared
        return prepared

    def _environment(self, prepared: Prepared) -> None:
        """Run ``prepared`` in the environment its commit's requirements resolve to (one per lock, cached):
        its interpreter becomes the one the build, the server and the workload use."""
        environments = self.ws.environments
        if environments is None:
            return
        env = environments.ensure(prepared.commit)
        prepared.python, prepared.env_key = env.python, env.key
        prepared.env_info = {"environment": env.key, "environment_lock": env.lock.key,
                             "environment_packages": len(env.lock.packages),
                             "environment_resolved_as_of": env.lock.resolved_as_of}
        if env.cached:
            self.progress.detail(f"{prepared.commit.short}: environment {env.key[:10]} ({len(env.lock.packages)} packages): cached")
        else:
            self.progress.info(
                f"{prepared.commit.short}: built the environment {env.key[:10]} ({len(env.lock.packages)} packages"
                f"{', resolved as of ' + env.lock.resolved_as_of if env.lock.resolved_as_of else ''}) in {env.seconds:.1f}s"
            )

    def try_command(self, commit: Commit, mode: ModeConfig) -> tuple[float | None, str | None, float]:
        """``perfbisect doctor --launch`` on a command target: ``commit`` prepared as a trial's would be (worktree,
        patch stack, environment, build, workload.files) and workload.command run once, no warm-up, nothing stored.
        (the metric's value, why it is no measurement — 0, negative, non-finite —, seconds). A crash, a timeout or
        no JSON raise WorkloadError, a missing key ConfigError, exit 125 Untestable; an untestable preparation
        (patch conflict, build failure) comes back as its reason."""
        prepared = self.prepare(commit)
        if prepared.untestable:
            return None, prepared.untestable, 0.0
        cfg = self.ws.config
        log = self._logs / "doctor" / f"{commit.short}-{mode.name}.log"
        start = time.monotonic()
        runs = run_command_workload(replace(cfg.workload, warmup=0), prepared.worktree, prepared.python,
                                    {**cfg.server.env, **mode.env}, log, extra_env=prepared.server_env)
        return runs[-1].metric_value, runs[-1].error, time.monotonic() - start

    def _workload_files(self, prepared: Prepared) -> None:
        """``workload.files`` over the commit's own files: one benchmark for every commit, part of the build's identity."""
        files = self.ws.workload_files
        if files is None:
            return
        files.place(prepared.worktree)
        prepared.build_hash = content_hash(prepared.build_hash, files.hash)
        prepared.env_info = {**(prepared.env_info or {}), "workload_files": files.hash}

    def _rust_extensions(self, prepared: Prepared) -> None:
        """SGLang's Rust extensions built before the server starts, so it never compiles (``rust_extensions``)."""
        cfg = self.ws.config
        how = cfg.environment.rust_extensions
        if not rust_extensions.applies(prepared.worktree):
            return
        if how == "prebuild" and not rust_extensions.has_cargo():
            how = "server"  # no cargo here: SGLang falls back as it does without one (`plan` warned)
        prepared.server_env = rust_extensions.server_env(how, prepared.worktree)
        prepared.env_info = {**(prepared.env_info or {}), "rust_extensions": how}
        if how != "prebuild":
            return
        env = {k: expand((v,), python=prepared.python, worktree=str(prepared.worktree))[0] for k, v in cfg.server.env.items()}
        built = rust_extensions.prebuild(prepared.worktree, prepared.python, env,
                                         self._logs / "rust" / f"{prepared.commit.sha[:12]}-{prepared.slot}.log")
        prepared.env_info["rust_extensions"] = "prebuilt: " + (", ".join(built.modules) or "none")
        self.progress.detail(f"{prepared.commit.short}: Rust extensions ready before the server ({', '.join(built.modules) or 'none'}; "
                             f"{built.seconds:.1f}s); the server runs with SGLANG_RUST_BUILD_MODE=never")

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
        # In a bisection the screen numbers trials as its budget counts them ("[7] abc (locating)", "trial 7 of at
        # most 120"): the store's id would be a second numbering there. Elsewhere it is the only one.
        stored_as = "" if bisection_id is not None else f"trial #{trial_id}: "
        self.progress.info(f"{stored_as}{commit.short} [{mode.name}] {commit.subject[:60]}")
        self.progress.detail(f"  layout {layout.id}: {_layout_words(layout, prepared.worktree)}")
        session = TrialSession(trial_id, self.ws.store, self.progress, describe_workload(self.ws.config.workload))
        what = "server and benchmark" if kind_of(self.ws.config.workload).serves else "workload.command"
        self.progress.detail(f"{prepared.commit.short} [{mode.name}]: running the {what}; its runs show as they land")
        status, error = self._measure(session, prepared, mode, log_path, layout)
        if versions is None:
            self._read_versions(prepared)
            versions = prepared.versions
        if versions is not None and prepared.env_info:
            versions = {**versions, **prepared.env_info}  # which environment served: log, report, --json
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

    def _measure(self, session: TrialSession, prepared: Prepared, mode: ModeConfig, log_path: Path,
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

    def _run_command(self, session: TrialSession, prepared: Prepared, mode: ModeConfig, log_path: Path, layout: Layout) -> None:
        """A ``command`` workload: the command starts what it measures and prints the metric.
        It runs with the layout's env (padding, hash seed); build steps never get it."""
        cfg = self.ws.config
        env = {**cfg.server.env, **mode.env}
        for run in run_command_workload(cfg.workload, prepared.worktree, prepared.python, env, log_path,
                                        extra_env={**layout.env(), **prepared.server_env}):
            session.on_run(run)

    def _run_server(self, session: TrialSession, prepared: Prepared, mode: ModeConfig, log_path: Path,
                    released: Callable[[], bool] | None, layout: Layout) -> None:
        """Start the server (with the layout's env), wait until it is ready, check its env, run the
        workload, tear it down."""
        cfg = self.ws.config
        server = ServerSession(
            cfg.server, mode, prepared.worktree, prepared.python, log_path,
            extra_env={**layout.env(), **prepared.server_env}, gpu_memory_released=released,
        )
        session.servers.append(server)
        with server:
            pidfile = remember_server(self._pids, server)
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

    def _finish(self, session: TrialSession, status: TrialStatus, error: str | None, versions: dict | None) -> TrialResult:
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


def _layout_words(layout: Layout, worktree: Path | None) -> str:
    """A layout in words for the progress line: where it checks out and what it adds to the env."""
    where = f"worktree slot {layout.slot} ({len(str(worktree))}-character path)" if worktree else f"worktree slot {layout.slot}"
    seed = "PYTHONHASHSEED as configured" if layout.hash_seed is None else f"PYTHONHASHSEED={layout.hash_seed}"
    return f"{where}, {layout.env_pad} bytes of env padding, {seed}"
