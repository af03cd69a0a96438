"""One Slurm job of a bisection, on its node: ``python -m perfbisect.app.slurmjob --config C --db D --row N``.

A which-path job (``--pair BEFORE CULPRIT --target N --mode=M ...``, from ``slurm.measure_modes``) measures
those modes at both commits instead (``search_trials.measure_modes``) and stores the trials it ran on the row.

Started by ``slurm_job.sh`` (submitted by ``perfbisect.executors.slurm``). It opens the config and the results
database exactly as the controller named them, takes this node's locks (a per-node cache directory
under the config's cache_dir, and the GPU node lock), measures the row's commit once with the
ordinary ``TrialRunner``/``observe`` (prepare/build, server, workload, teardown, system-state
sampling), every trial stored with this job's id and node, and stores the result on the jobs row
for the controller to turn into an observation. Stopped by Slurm (scancel, time limit: SIGTERM), it
tears the server down, marks the trial interrupted and the row with why; the controller decides
what that means (an infrastructure failure, never the commit's).

It stands among the use cases, not with the Slurm executor that submits it, because it is a process's entry point
that opens a ``Workspace``, as a command does: the executors below are handed one.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from dataclasses import replace
from pathlib import Path

from ..config import load_config
from ..report.console import ConsoleProgress
from ..errors import PerfbisectError, UsageError
from ..interrupts import install_signal_handlers, signal_name
from ..engine.search_start import stats_over
from ..measure.search_trials import measure_modes, observe
from ..measure.trials import TrialRunner
from .workspace import Workspace


def node_name() -> str:
    """The Slurm node this job runs on (``SLURMD_NODENAME``), else the short host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfbisect.app.slurmjob", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the perfbisect.toml of the bisection")
    parser.add_argument("--db", required=True, help="the results database, as the controller named it")
    parser.add_argument("--row", required=True, type=int, help="the jobs row this job measures")
    # A which-path job (perfbisect.executors.slurm.measure_modes): the modes at the pair, not an observation.
    parser.add_argument("--pair", nargs=2, metavar=("BEFORE", "CULPRIT"), help="the commit before the culprit and the culprit")
    parser.add_argument("--mode", action="append", default=[], help="a mode to measure at both (repeated)")
    parser.add_argument("--target", type=int, default=0, help="measured trials wanted of each mode at each commit")
    args = parser.parse_args(argv)
    install_signal_handlers()
    try:
        return _run(args)
    except PerfbisectError as exc:  # before the jobs row could be opened: the job's output says why
        print(f"perfbisect job: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code


def _run(args: argparse.Namespace) -> int:
    node = node_name()
    job_id = os.environ.get("SLURM_JOB_ID")
    progress = ConsoleProgress()
    config = load_config(Path(args.config))
    # One cache directory per node: its worktrees, build cache, logs and server pidfiles are this
    # node's own, and --exclusive means one job at a time uses it.
    config = replace(config, target=replace(config.target, cache_dir=config.cache_dir / "nodes" / node))
    db = args.db
    if db.startswith("env:"):  # a URL with a password: handed over in the environment (perfbisect.executors.slurm)
        db = os.environ.get(db[len("env:"):], "")
        if not db:
            raise UsageError(
                f"The job's results database was to come from the environment variable {args.db[4:]}, which is "
                f"not set on this node: the sbatch arguments must keep the environment (--export=ALL, the "
                f"default), or put the password in ~/.pgpass on the nodes instead of the URL."
            )
    with Workspace.open(config, db, recover=False) as ws:
        store = ws.store
        store.job_id, store.node = job_id, node
        job = store.job(args.row)
        store.job_started(job.id, job_id, node)
        progress.info(f"job {job_id} on {node}: {job.commit[:10]} for bisection #{job.bisection_id} (slot {job.slot})")
        try:
            record = store.bisection(job.bisection_id) if job.bisection_id else None
            if record is not None:  # the benchmark the bisection started with, not the working tree's of today
                ws.keep_workload_files(record.search_start, record.id)
            with ws.exclusive(progress, wait=True):
                if args.pair:  # the which-path step: every mode at the pair, interleaved on this node
                    pair = [ws.repo.resolve(sha) for sha in args.pair]
                    runner = TrialRunner(ws, progress)  # as the step runs them locally (perfbisect.app.bisection.which_path)
                    new = measure_modes(runner, pair, args.mode, args.target, job.bisection_id,
                                        store.trials(bisection_id=job.bisection_id))
                    result = {"trial_ids": [t.id for t in new], "ran": len(new), "modes": list(args.mode),
                              "pair": list(args.pair), "node": node, "job_id": job_id}
                    return _store_result(store, job, result, progress)
                commit = ws.repo.resolve(job.commit)
                if record is not None:  # measure the bisection's metric, as it started, never the config file's of today
                    ws = replace(ws, config=replace(ws.config, stats=stats_over(record.settings, record.metric, ws.config.stats)))
                runner = TrialRunner(ws, progress, client_rev=record.good if record is not None else None)
                obs, trial_ids = observe(runner, commit, job.bisection_id, seq=job.slot)
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", signal.SIGINT)
            store.job_error(job.id, f"stopped by {signal_name(signum)} on {node}")
            progress.warn(f"stopped by {signal_name(signum)}: the server was torn down, the trial marked interrupted")
            return 128 + signum
        except PerfbisectError as exc:
            store.job_error(job.id, f"{type(exc).__name__} on {node}: {exc}")
            progress.warn(str(exc))
            return exc.exit_code
        result = {
            "value": obs.value, "trial_ids": trial_ids, "covariates": dict(obs.covariates),
            "flag": obs.flag, "at": obs.at, "node": node, "job_id": job_id, "layout": obs.layout,
        }
        return _store_result(store, job, result, progress)


def _store_result(store, job, result: dict, progress) -> int:
    if not store.job_result(job.id, result):
        progress.warn(f"row #{job.id} was given up by its controller meanwhile: the result is kept in its trials only")
    progress.info(f"stored the result of {job.commit[:10]}: trials {', '.join(map(str, result['trial_ids']))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
