"""The Slurm executor: each observation's trials run as one Slurm job on a whole node.

The search loop (``executors.loop.SearchLoop``, run by ``app.bisection.run_bisection`` with this executor when
``[executor] kind = "slurm"``) asks the policy for up to k measurements (``SearchPolicy.next_batch``); the
executor stores a ``jobs`` row for each, with the decision that asked for it, and submits it with ``sbatch --parsable --exclusive`` (argument lists only: the fixed script
``slurm_job.sh`` execs ``python -m perfbisect.app.slurmjob`` with its arguments). It then polls: a job
stores its own result in the results database (``perfbisect.app.slurmjob``), which the controller turns
into the next observation (``seq`` = completion order, ``host`` = the node); a job Slurm reports
ended (``scontrol show job``) without a result was lost by the cluster (cancelled, preempted, node
failure, time limit, failed to start): an infrastructure failure, stored as such on the job and its
trials, never an observation of the commit, resubmitted up to ``executor.retries`` times.

``resume`` re-attaches to the jobs still queued or running (the ``jobs`` rows in flight) instead of
submitting them again, and picks up the results of jobs that finished meanwhile. Ctrl-C / SIGTERM
cancels the jobs in flight (``scancel``) and says so; a SIGKILL leaves them running for ``resume``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from ..engine.observations import Measure
from ..model import Commit, Observation
from ..errors import InfrastructureError, UsageError
from ..settings import ExecutorConfig
from ..store.location import StoreLocation
from ..store.jobs import OBSERVED, RESULT, SUBMITTED, JobRecord
from ..measure.trial_context import TrialContext
from ..runtime.progress import Progress
from .loop import Landed

SCRIPT = Path(__file__).with_name("slurm_job.sh")
JOB_MODULE = "perfbisect.app.slurmjob"
DB_ENV = "PERFBISECT_JOB_DB"  # the store URL with its password, for the job (never on its command line)
COMMAND_TIMEOUT_S = 120.0
CANCEL_WAIT_S = 120.0  # scancel: SIGTERM, then SIGKILL after the cluster's KillWait (30 s by default)
MAX_UNANSWERED_POLLS = 30  # a controller restart is survived; a dead one ends the run (resume continues)
MODES_SUFFIX = "-modes"  # the name's end of a which-path job (measure_modes): never one of the search's

# Job states in which Slurm may still run the job (squeue(1) "JOB STATE CODES"); any other state is
# an end. A preempted job that Slurm requeues goes back to PENDING and stays watched.
ACTIVE_STATES = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED",
    "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "STOPPED",
})


@dataclass(frozen=True)
class SlurmJob:
    """What ``scontrol show job`` says about one job."""

    job_id: str
    state: str
    node: str | None
    reason: str | None
    exit_code: str | None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    def describe(self) -> str:
        where = f" on {self.node}" if self.node else ""
        why = f" ({self.reason})" if self.reason and self.reason != "None" else ""
        code = f", exit code {self.exit_code}" if self.exit_code and self.exit_code != "0:0" and not self.active else ""
        return f"{self.state}{where}{why}{code}"


# ------------------------------------------------------------------------------------------------
# Slurm's commands, as argument lists


def _slurm(argv: Sequence[str], what: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                              env={**os.environ, **env} if env else None)
    except FileNotFoundError:
        raise InfrastructureError(
            f"`{argv[0]}` is not on PATH, so perfbisect cannot {what}. [executor] kind = \"slurm\" needs "
            f"Slurm's client commands (sbatch, scontrol, squeue, scancel) on the machine running perfbisect: "
            f"install them (Debian: slurm-client) or run with [executor] kind = \"local\"."
        ) from None
    except subprocess.TimeoutExpired:
        raise InfrastructureError(
            f"`{' '.join(argv[:3])} ...` did not answer within {COMMAND_TIMEOUT_S:.0f}s, so perfbisect cannot "
            f"{what}: is slurmctld reachable (`scontrol ping`)? Stored results are kept; `perfbisect resume` "
            f"continues once it answers."
        ) from None


def sbatch_argv(cfg: ExecutorConfig, *, name: str, output: Path, script: Path, args: Sequence[str],
                nodelist: str | None = None) -> list[str]:
    """The sbatch command line of one job: a whole node (``--exclusive``), the config's resources."""
    argv = ["sbatch", "--parsable", "--exclusive", "--nodes=1", "--ntasks=1", f"--job-name={name}", f"--output={output}"]
    for flag, value in (("--partition", cfg.partition), ("--account", cfg.account), ("--time", cfg.time_limit),
                        ("--constraint", cfg.constraint), ("--nodelist", nodelist)):
        if value:
            argv.append(f"{flag}={value}")
    if cfg.gpus_per_node:
        argv.append(f"--gpus-per-node={cfg.gpus_per_node}")
    argv.extend(cfg.sbatch_args)
    return [*argv, str(script), *args]


def idle_nodes(cfg: ExecutorConfig) -> list[str]:
    """Nodes of the partition that are idle now (``sinfo``), in sinfo's order; [] when unknown.

    With a ``constraint`` only nodes whose features include it literally count; a constraint
    expression (``&``, ``|``, brackets) pins nothing: Slurm alone can evaluate it.
    """
    if cfg.constraint and any(c in cfg.constraint for c in "&|[]*,!"):
        return []
    argv = ["sinfo", "--noheader", "--Node", "--states=idle", "--format=%N %f"]
    if cfg.partition:
        argv.append(f"--partition={cfg.partition}")
    try:
        done = _slurm(argv, "list the idle nodes")
    except InfrastructureError:
        return []
    if done.returncode != 0:
        return []
    nodes: list[str] = []
    for line in done.stdout.splitlines():
        name, _, features = line.strip().partition(" ")
        if not name or name in nodes:
            continue
        if cfg.constraint and cfg.constraint not in features.split(","):
            continue
        nodes.append(name)
    return nodes


def job_db_argument(location: StoreLocation) -> tuple[str, dict[str, str] | None]:
    """The job's ``--db`` argument and what to add to its environment.

    A password in the store's URL never goes on a command line (``ps``, ``scontrol show job`` show
    those): the job gets ``env:PERFBISECT_JOB_DB`` and reads the URL from its environment, which
    sbatch passes on (``--export=ALL``, its default).
    """
    if location.password:
        return "env:" + DB_ENV, {DB_ENV: location.secret()}
    return str(location), None


def submit(argv: Sequence[str], env: dict[str, str] | None = None) -> str:
    """Run sbatch (``env`` added to the environment the job inherits); the job id it prints
    (``--parsable``: "ID" or "ID;CLUSTER")."""
    done = _slurm(argv, "submit a job", env)
    job_id = done.stdout.strip().split(";")[0]
    if done.returncode != 0 or not job_id.isdigit():
        raise InfrastructureError(
            f"sbatch refused the job (exit {done.returncode}): {(done.stderr or done.stdout).strip()[:500]}. "
            f"Check [executor] partition, account, time_limit, constraint, gpus_per_node and sbatch_args "
            f"against `sinfo`, then `perfbisect resume`."
        )
    return job_id


def job_state(job_id: str) -> SlurmJob | None:
    """The job as ``scontrol show job -o`` reports it; None once Slurm has forgotten it (MinJobAge)."""
    done = _slurm(["scontrol", "show", "job", "-o", str(job_id)], "look at a job")
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:
            return None
        raise InfrastructureError(
            f"`scontrol show job {job_id}` failed (exit {done.returncode}): {done.stderr.strip()[:300]}. "
            f"Is slurmctld up (`scontrol ping`)? `perfbisect resume` re-attaches once it is."
        )
    fields: dict[str, str] = {}
    for word in done.stdout.split():
        key, sep, value = word.partition("=")
        if sep and key not in fields:
            fields[key] = value
    node = fields.get("BatchHost") or fields.get("NodeList")
    return SlurmJob(
        job_id=str(job_id), state=fields.get("JobState", "UNKNOWN"),
        node=None if node in (None, "", "(null)") else node,
        reason=fields.get("Reason"), exit_code=fields.get("ExitCode"),
    )


def jobs_named(name: str) -> list[str]:
    """Ids of the queued or running jobs called ``name`` (a job whose sbatch answer was lost)."""
    done = _slurm(["squeue", "--noheader", f"--name={name}", "--format=%i"], "list jobs")
    return [w for w in done.stdout.split() if w.isdigit()] if done.returncode == 0 else []


def cancel(job_ids: Sequence[str]) -> None:
    if job_ids:
        _slurm(["scancel", *job_ids], "cancel jobs")


class JobContext(TrialContext, Protocol):
    """A command's workspace as the Slurm executor reads it: what a trial needs, and where the results store is
    (``db_path``), which each job is handed to open it on its node."""

    db_path: StoreLocation


# ------------------------------------------------------------------------------------------------
# The controller


class SlurmExecutor:
    """The jobs of one bisection: submit, watch, collect results, resubmit what the cluster lost
    (``executors.loop.Executor``: the search loop drives it as it drives the local one)."""

    what = "Slurm jobs"

    def __init__(self, ws: JobContext, bisection_id: int, progress: Progress):
        if ws.config.path is None:
            raise UsageError(
                "[executor] kind = \"slurm\" needs the config as a file its jobs can read: pass -c perfbisect.toml."
            )
        self.ws = ws
        self.cfg = ws.config.executor
        self.bisection_id = bisection_id
        self.progress = progress
        self.in_flight: dict[int, JobRecord] = {}  # jobs row id -> row, while queued, running or unread
        self.shown: dict[int, str] = {}  # row id -> the state last reported
        self.pins: dict[int, str] = {}  # slot -> the node the policy asked for
        self.unanswered = 0  # polls in a row that Slurm did not answer
        self.extra: dict[int, list[str]] = {}  # slot -> the job's own arguments (a which-path job's pair and modes)
        self.out_dir = ws.config.cache_dir / "slurm"
        self._tag = hashlib.sha256(str(ws.db_path).encode()).hexdigest()[:8]
        jobs = ws.store.jobs(bisection_id)
        self.next_slot = max((j.slot for j in jobs), default=-1) + 1
        self.slots = self.cfg.nodes
        self.held: dict[tuple[int, ...], int] = {}  # trial ids -> the seq of the observation they are

    @property
    def pending(self) -> list[tuple[str, str | None]]:
        """(commit, node) of each job in flight: the node it runs on, or was pinned to, when known."""
        return [(j.commit, j.node or self.pins.get(j.slot)) for j in self.in_flight.values()]

    def output(self, job: JobRecord) -> Path:
        return self.out_dir / f"{job.job_name}-{job.job_id}.out"

    # -- submission -------------------------------------------------------------------------------
    def submit(self, measure: Measure, decision: dict[str, Any]) -> None:
        """The search loop's measurement as a job, pinned to the node the policy asked for (if any)."""
        self.submit_job(measure.commit, host=measure.host, decision=decision)

    def submit_job(self, commit: str, *, slot: int | None = None, attempt: int = 1, host: str | None = None,
                   extra: Sequence[str] | None = None, decision: Mapping[str, Any] | None = None) -> JobRecord:
        """Store the job, then sbatch it; the row exists first so that a crash cannot lose it.
        ``extra``: the job's own arguments (a which-path job's, kept for its resubmissions); ``decision``:
        the search's decision that asked for it (kept with the row; its observation carries it on)."""
        store = self.ws.store
        if slot is None:
            slot, self.next_slot = self.next_slot, self.next_slot + 1
        if host:
            self.pins[slot] = host
        if extra is not None:
            self.extra[slot] = list(extra)
        extra = self.extra.get(slot, [])
        name = f"perfbisect-{self._tag}-b{self.bisection_id}-s{slot}-a{attempt}" + (MODES_SUFFIX if extra else "")
        row_id = store.add_job(self.bisection_id, slot, attempt, commit, "slurm", name, decision=decision)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        db, env = job_db_argument(self.ws.db_path)
        args = [sys.executable, "--config", str(self.ws.config.path), "--db", db, "--row", str(row_id), *extra]
        argv = sbatch_argv(self.cfg, name=name, output=self.out_dir / f"{name}-%j.out", script=SCRIPT, args=args,
                           nodelist=host)
        try:
            job_id = submit(argv, env)
        except InfrastructureError as exc:
            store.job_lost(row_id, f"not submitted: {exc}")
            raise
        store.job_submitted(row_id, job_id)
        job = store.job(row_id)
        self.in_flight[row_id] = job
        pinned = f", on {host}" if host else ""
        again = f", attempt {attempt}" if attempt > 1 else ""
        self.progress.info(f"job {job_id} submitted: {commit[:10]} (slot {slot}{again}{pinned})")
        return job

    def reattach(self, modes: Sequence[str] | None = None) -> None:
        """After a restart: watch the jobs still queued or running, read the results that landed.

        The search's jobs, or with ``modes`` (the which-path job's arguments) the which-path job still
        in flight; a which-path job's result is read by the step that asked for it, never an observation."""
        store = self.ws.store
        for job in store.jobs(self.bisection_id, (SUBMITTED, RESULT)):
            if is_modes_job(job) != (modes is not None):
                continue
            if modes is not None:
                if job.state == RESULT:
                    continue  # its trials are stored: the step counts them
                self.extra[job.slot] = list(modes)
            if job.state == RESULT:
                self.in_flight[job.id] = job
                self.progress.info(f"job {job.job_id} finished while perfbisect was stopped: {job.commit[:10]} on {job.node}")
                continue
            if job.job_id is None:  # stopped between storing the row and sbatch's answer
                found = jobs_named(job.job_name)
                if not found:
                    self._lost(job, "never submitted: perfbisect stopped before sbatch answered")
                    continue
                store.job_submitted(job.id, found[0])
                job = store.job(job.id)
            state = job_state(job.job_id)
            self.in_flight[job.id] = job
            self.progress.info(
                f"re-attached to job {job.job_id} ({job.commit[:10]}, slot {job.slot}): "
                f"{state.describe() if state else 'no longer known to Slurm'}"
            )

    # -- watching ---------------------------------------------------------------------------------
    def collect_jobs(self) -> list[JobRecord]:
        """Jobs whose results are stored (oldest first); lost jobs are resubmitted on the way."""
        store = self.ws.store
        ready: list[JobRecord] = []
        for row_id in list(self.in_flight):
            job = store.job(row_id)
            if job.state == SUBMITTED:
                try:
                    state = job_state(job.job_id) if job.job_id else None
                except InfrastructureError as exc:  # slurmctld busy or restarting: look again next time
                    self.unanswered += 1
                    if self.unanswered >= MAX_UNANSWERED_POLLS:
                        raise
                    if self.unanswered == 1:
                        self.progress.warn(f"{exc} (looking again every {self.cfg.poll_s:g}s)")
                    continue
                self.unanswered = 0
                if state is not None and state.active:
                    self._show(job, state)
                    continue
                job = store.job(row_id)  # it may have stored its result just before it ended
                if job.state == SUBMITTED:
                    del self.in_flight[row_id]
                    self._lost(job, self._why_lost(job, state))
                    continue
            del self.in_flight[row_id]
            if job.state == RESULT:
                ready.append(job)
        return sorted(ready, key=lambda j: (j.finished_at or 0.0, j.id))

    def _show(self, job: JobRecord, state: SlurmJob) -> None:
        if self.shown.get(job.id) != state.state:
            self.shown[job.id] = state.state
            self.ws.store.job_seen(job.id, state.state, state.node)
            self.progress.info(f"job {job.job_id} ({job.commit[:10]}, slot {job.slot}): {state.describe()}")

    def _why_lost(self, job: JobRecord, state: SlurmJob | None) -> str:
        if state is None:
            what = f"Slurm job {job.job_id} ended (Slurm no longer knows it)"
        else:
            self.ws.store.job_seen(job.id, state.state, state.node)
            what = f"Slurm job {job.job_id} ended {state.describe()}"
        said = f"; the job said: {job.error}" if job.error else ""
        return f"{what} without a result{said}"

    def _lost(self, job: JobRecord, why: str) -> None:
        """An infrastructure failure: stored on the job and its trials, never blamed on the commit;
        resubmitted until ``executor.retries`` is spent, then a clear error."""
        if not self.ws.store.job_lost(job.id, why):
            fresh = self.ws.store.job(job.id)
            if fresh.state == RESULT:  # its result landed after all
                self.in_flight[job.id] = fresh
            return
        self.progress.warn(
            f"{job.commit[:10]} (slot {job.slot}): {why}. An infrastructure failure, not a property of the "
            f"commit: nothing of it is used"
        )
        if job.attempt > self.cfg.retries:
            out = f" Its output: {self.output(job)}." if job.job_id else ""
            raise InfrastructureError(
                f"The cluster lost the measurement of {job.commit[:10]} {job.attempt} times (last: {why}).{out} "
                f"Nothing was blamed on the commit. Check the nodes (`sinfo -R`) and [executor] time_limit, "
                f"raise [executor] retries if the cluster preempts often, then `perfbisect resume {self.bisection_id}`."
            )
        self.submit_job(job.commit, slot=job.slot, attempt=job.attempt + 1, host=self.pins.get(job.slot),
                        decision=job.decision)

    # -- the search loop's side (executors.loop.Executor) ---------------------------------------------
    def resume(self, observations: list[Observation]) -> None:
        """Before the loop: each stored observation's node from its job, the results already observed (a job
        observed just before a kill is not observed twice), and the jobs still in flight re-attached."""
        store = self.ws.store
        nodes = {j.observation_seq: j.node for j in store.jobs(self.bisection_id, (OBSERVED,))}
        observations[:] = [replace(o, host=nodes.get(o.seq, o.host)) for o in observations]
        self.held = {tuple(o.trial_ids): o.seq for o in store.observations(self.bisection_id)}
        self.reattach()

    def free_hosts(self, free: int) -> list[str | None]:
        """Idle nodes go to the policy, which pins measurements to them (a node's first trials are references
        for its level offset); the other free slots run wherever Slurm says."""
        hosts: list[str | None] = list(idle_nodes(self.cfg)[:free])
        return [*hosts, *([None] * (free - len(hosts)))]

    def collect(self) -> list[Landed]:
        """The search's results that landed, as observations to store (oldest first)."""
        landed = []
        for job in self.collect_jobs():
            result = dict(job.result or {})
            trial_ids = tuple(int(t) for t in result.get("trial_ids", []))
            if trial_ids and trial_ids in self.held:  # observed just before a kill: not twice
                self.ws.store.job_observed(job.id, self.held[trial_ids])
                continue
            obs = Observation(
                commit=job.commit, value=result.get("value"), covariates=dict(result.get("covariates") or {}),
                at=result.get("at"), flag=result.get("flag"), host=job.node, layout=result.get("layout"),
            )
            landed.append(Landed(obs, trial_ids, dict(job.decision) if job.decision else None, handle=job))
        return landed

    def observed(self, landed: Landed, seq: int) -> None:
        job = landed.handle
        self.ws.store.job_observed(job.id, seq)
        self.held[landed.trial_ids] = seq
        value = "untestable" if landed.observation.value is None else "measured"
        self.progress.info(f"[{seq + 1}] job {job.job_id} on {job.node}: {job.commit[:10]} {value}")

    def wait(self) -> None:
        time.sleep(self.cfg.poll_s)

    def interrupted_line(self, ids: Sequence[str]) -> str:
        return (f"cancelled the Slurm jobs in flight ({', '.join(ids)}) with scancel; their commits are measured "
                f"again on resume")

    def cancel_all(self, why: str) -> list[str]:
        """scancel every job in flight, wait until Slurm has ended them (each job tears its server
        down and stores its trial as interrupted itself), and store each as lost (``why``)."""
        ids = [j.job_id for j in self.in_flight.values() if j.job_id and j.state == SUBMITTED]
        try:
            cancel(ids)
            deadline = time.monotonic() + CANCEL_WAIT_S
            while ids and time.monotonic() < deadline:
                states = [job_state(i) for i in ids]
                if not any(st is not None and st.active for st in states):
                    break
                time.sleep(0.5)
        finally:
            for job in list(self.in_flight.values()):
                self.ws.store.job_lost(job.id, why)
            self.in_flight.clear()
        return ids


def is_modes_job(job: JobRecord) -> bool:
    """A which-path job (``measure_modes``), as its name says; the others are the search's."""
    return job.job_name.endswith(MODES_SUFFIX)


def modes_arguments(pair: Sequence[Commit], modes: Sequence[str], target: int) -> list[str]:
    """The arguments a which-path job gets after ``--row`` (``perfbisect.app.slurmjob``)."""
    return ["--pair", pair[0].sha, pair[1].sha, "--target", str(target), *(f"--mode={m}" for m in modes)]


def measure_modes(ws: JobContext, bisection_id: int, pair: Sequence[Commit], modes: Sequence[str], target: int,
                  progress: Progress) -> int:
    """The which-path step's trials as one Slurm job: ``modes`` at the commit before the culprit and
    the culprit, up to ``target`` measured trials each, interleaved on one node (a level offset
    between nodes cannot then pass for the path that regressed). Waits for it (a job the cluster
    loses is resubmitted, as the search's are; one still in flight after a restart is re-attached)
    and returns how many trials it ran; the caller reads them from the store."""
    executor = SlurmExecutor(ws, bisection_id, progress)
    extra = modes_arguments(pair, modes, target)
    ran = 0
    try:
        executor.reattach(modes=extra)
        if not executor.in_flight:
            job = executor.submit_job(pair[1].sha, extra=extra)
            progress.info(f"job {job.job_id} measures {', '.join(modes)} at {pair[0].short} and {pair[1].short} "
                          f"(which path regressed)")
        while executor.in_flight:
            for job in executor.collect_jobs():
                ran += int((job.result or {}).get("ran", 0))
            if executor.in_flight:
                time.sleep(ws.config.executor.poll_s)
    except KeyboardInterrupt:
        ids = executor.cancel_all("cancelled: perfbisect was interrupted")
        if ids:
            progress.warn(f"cancelled the which-path job ({', '.join(ids)}) with scancel; `perfbisect resume` measures it again")
        raise
    return ran
