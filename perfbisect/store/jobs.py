"""The jobs table: one row per observation submitted to a cluster (``perfbisect.executors.slurm``).

Two writers share a row and never overwrite each other's columns: the controller (submission, the
state Slurm reports, the observation it became, "lost") and the job on its node (its result or its
error). Every update here names only the columns its writer owns, and "lost" is set only on a row
without a result, so a job that finished while the controller looked is never thrown away.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ..errors import StoreError
from ..model import TrialStatus
from .schema import TRIAL_RUNNING, JobRow, TrialRow

# Controller-owned lifecycle of a row.
SUBMITTED = "submitted"  # in flight: queued or running on the cluster
RESULT = "result"  # the job stored its result; not yet an observation
OBSERVED = "observed"  # its result is observation ``observation_seq`` of the bisection
LOST = "lost"  # the cluster ended it without a result: an infrastructure failure, resubmitted


@dataclass(frozen=True)
class JobRecord:
    id: int
    bisection_id: int
    slot: int
    attempt: int
    commit: str
    executor: str
    job_id: str | None
    job_name: str
    state: str
    slurm_state: str | None
    node: str | None
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    result: Mapping[str, Any] | None
    error: str | None
    observation_seq: int | None
    decision: Mapping[str, Any] | None = None  # what submitted it (executors.loop.batch_decision)


def _record(row: JobRow) -> JobRecord:
    return JobRecord(
        id=row.id, bisection_id=row.bisection_id, slot=row.slot, attempt=row.attempt, commit=row.commit_sha,
        executor=row.executor, job_id=row.job_id, job_name=row.job_name, state=row.state,
        slurm_state=row.slurm_state, node=row.node, submitted_at=row.submitted_at, started_at=row.started_at,
        finished_at=row.finished_at, result=dict(row.result) if row.result is not None else None,
        error=row.error, observation_seq=row.observation_seq,
        decision=dict(row.decision) if row.decision is not None else None,
    )


def insert_job(session: Session, bisection_id: int, slot: int, attempt: int, commit: str, executor: str,
               job_name: str, decision: Mapping[str, Any] | None = None) -> int:
    row = JobRow(
        bisection_id=bisection_id, slot=slot, attempt=attempt, commit_sha=commit, executor=executor,
        job_name=job_name, state=SUBMITTED, submitted_at=time.time(),
        decision=dict(decision) if decision is not None else None,
    )
    session.add(row)
    session.flush()
    return row.id


def load_job(session: Session, row_id: int) -> JobRecord:
    row = session.get(JobRow, row_id)
    if row is None:
        raise StoreError(f"No job row #{row_id} in the results database: the controller that submitted it stores it first.")
    return _record(row)


def load_jobs(session: Session, bisection_id: int, states: tuple[str, ...] | None = None) -> list[JobRecord]:
    query = select(JobRow).where(JobRow.bisection_id == bisection_id)
    if states is not None:
        query = query.where(JobRow.state.in_(states))
    return [_record(r) for r in session.scalars(query.order_by(JobRow.id))]


def set_submitted(session: Session, row_id: int, job_id: str) -> None:
    session.execute(update(JobRow).where(JobRow.id == row_id).values(job_id=job_id))


def set_slurm_state(session: Session, row_id: int, slurm_state: str, node: str | None) -> None:
    values: dict[str, Any] = {"slurm_state": slurm_state}
    if node:
        values["node"] = node
    session.execute(update(JobRow).where(JobRow.id == row_id).values(**values))


def job_started(session: Session, row_id: int, job_id: str | None, node: str) -> None:
    """Written by the job on its node when it starts."""
    values: dict[str, Any] = {"node": node, "started_at": time.time()}
    if job_id:
        values["job_id"] = job_id
    session.execute(update(JobRow).where(JobRow.id == row_id).values(**values))


def job_result(session: Session, row_id: int, result: Mapping[str, Any]) -> bool:
    """Written by the job: its observation's value, trials and covariates. False when the row was
    already given up as lost (a result nobody waits for any more is not stored as one)."""
    done = session.execute(
        update(JobRow).where(JobRow.id == row_id, JobRow.state == SUBMITTED)
        .values(result=dict(result), state=RESULT, finished_at=time.time())
    )
    return bool(done.rowcount)


def job_error(session: Session, row_id: int, error: str) -> None:
    """Written by the job when it stops without a result (interrupted, an error)."""
    session.execute(
        update(JobRow).where(JobRow.id == row_id, JobRow.state == SUBMITTED)
        .values(error=error, finished_at=time.time())
    )


def set_lost(session: Session, row_id: int, why: str) -> bool:
    """The cluster ended the job without a result: mark the row lost and its unfinished trials failed.

    False (and nothing changed) when its result landed meanwhile."""
    row = session.get(JobRow, row_id)
    if row is None or row.state != SUBMITTED or row.result is not None:
        return False
    row.state = LOST
    row.error = f"{why}; {row.error}" if row.error and row.error not in why else why
    row.finished_at = row.finished_at or time.time()
    if row.job_id:
        for trial in session.scalars(
            select(TrialRow).where(TrialRow.job_id == row.job_id, TrialRow.status == TRIAL_RUNNING)
        ):
            trial.status = TrialStatus.FAILED.value
            trial.error = f"infrastructure: {why}"
            trial.summary = None
            trial.finished_at = time.time()
    session.flush()
    return True


def set_observed(session: Session, row_id: int, seq: int) -> None:
    session.execute(update(JobRow).where(JobRow.id == row_id).values(state=OBSERVED, observation_seq=seq))

