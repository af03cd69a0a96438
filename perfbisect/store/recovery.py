"""What a dead process left running: trials and bisections whose owner is gone, marked failed / interrupted.

Whether an owner is gone is the caller's ``owner_alive`` (``perfbisect.runtime.liveness`` for a SQLite
file, the owner locks of ``shared`` for a PostgreSQL store). The functions take a ``Session`` the
caller owns, like every query module of the store.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from ..model import TrialStatus
from .records import INTERRUPTED_ERROR
from .schema import BISECTION_INTERRUPTED, BISECTION_RUNNING, TRIAL_RUNNING, BisectionRow, TrialRow


def has_running(session: Session) -> bool:
    """Whether any trial or bisection is marked running."""
    trial = session.scalar(select(TrialRow.id).where(TrialRow.status == TRIAL_RUNNING).limit(1))
    bisection = session.scalar(
        select(BisectionRow.id).where(BisectionRow.status == BISECTION_RUNNING).limit(1)
    )
    return trial is not None or bisection is not None


def recover_interrupted(
    session: Session, owner_alive: Callable[[str], bool], *, now: float | None = None
) -> tuple[list[int], list[int]]:
    """Mark running trials and bisections whose process is gone as failed / interrupted.

    Runs are kept. A recovered trial's finished_at is its last sign of life (its last run, or its
    start). Returns (trial ids, bisection ids) recovered.
    """
    trial_ids: list[int] = []
    # FOR UPDATE (PostgreSQL; a SQLite write transaction holds the whole file already): a writer that
    # finishes a trial between this read and the liveness check below would otherwise have its `ok`
    # overwritten with "interrupted" once it exits — a lost update seen under load. With the rows locked, its
    # finish waits for this transaction, and it stays alive (its owner lock held) until then.
    running = session.scalars(
        select(TrialRow)
        .options(selectinload(TrialRow.runs))
        .where(TrialRow.status == TRIAL_RUNNING)
        .with_for_update(of=TrialRow)
    )
    for row in running:
        # A cluster job's trial runs on another node: its job's state, not a local pid, says whether
        # it is alive; the controller that watches the job closes it (perfbisect.executors.slurm).
        if row.job_id is not None or owner_alive(row.owner):
            continue
        row.status = TrialStatus.FAILED.value
        row.error = INTERRUPTED_ERROR
        row.summary = None
        row.finished_at = max([row.started_at] + [r.recorded_at for r in row.runs])
        trial_ids.append(row.id)
    bisection_ids: list[int] = []
    for row in session.scalars(
        select(BisectionRow).where(BisectionRow.status == BISECTION_RUNNING).with_for_update(of=BisectionRow)
    ):
        if owner_alive(row.owner):
            continue
        row.status = BISECTION_INTERRUPTED
        bisection_ids.append(row.id)
    session.flush()
    return trial_ids, bisection_ids
