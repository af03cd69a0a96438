"""Bisections and their observations in the results database: begin, append, finish, resume, list.

The functions take a ``Session`` the caller owns and return ``records.BisectionRecord`` /
``ObservationRecord`` values, fully loaded (see ``trial_queries`` for the conventions every query
module of the store follows). Observations are append-only: a bisection is replayed from them in
``seq`` order, so a clash is an error, never an overwrite.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from ..errors import StoreError
from ..model import BisectOutcome, Verdict
from . import codec
from .codec import json_part
from .records import BisectionRecord, ObservationRecord
from .schema import (
    BISECTION_DONE,
    BISECTION_INTERRUPTED,
    BISECTION_RUNNING,
    BisectionRow,
    ComparisonRow,
    JobRow,
    ObservationRow,
    TrialRow,
)


def insert_bisection(
    session: Session,
    *,
    good: str,
    bad: str,
    commits: Sequence[str],
    metric: str,
    config_hash: str,
    target: str,
    settings: Any,
    owner: str,
    started_at: float | None = None,
    metric_info: dict[str, Any] | None = None,
    search_start: Mapping[str, Any] | None = None,
) -> int:
    """Store a new running bisection and return its id."""
    row = BisectionRow(
        good=good,
        bad=bad,
        commits=list(commits),
        metric=metric,
        config_hash=config_hash,
        target=target,
        settings=json_part("settings", settings),
        status=BISECTION_RUNNING,
        owner=owner,
        started_at=time.time() if started_at is None else started_at,
        metric_info=metric_info,
        search_start=json_part("search_start", dict(search_start)) if search_start is not None else None,
    )
    session.add(row)
    session.flush()
    return row.id


def insert_observation(
    session: Session,
    bisection_id: int,
    seq: int,
    commit: str,
    value: float | None,
    trial_ids: Iterable[int] = (),
    covariates: Mapping[str, float] | None = None,
    *,
    recorded_at: float | None = None,
    flag: str | None = None,
    layout: str | None = None,
    host: str | None = None,
    decision: Mapping[str, Any] | None = None,
) -> None:
    """Append one observation of a bisection; seq must be new for that bisection."""
    _bisection_row(session, bisection_id)
    clash = session.scalar(
        select(ObservationRow.commit_sha).where(
            ObservationRow.bisection_id == bisection_id, ObservationRow.seq == seq
        )
    )
    if clash is not None:
        raise StoreError(
            f"Bisection {bisection_id} already has observation #{seq} (commit {clash[:10]}); "
            "observations are append-only. Use the next sequence number "
            "(len(store.observations(id))) when resuming."
        )
    session.add(
        ObservationRow(
            bisection_id=bisection_id,
            seq=seq,
            commit_sha=commit,
            value=value,
            trial_ids=[int(t) for t in trial_ids],
            covariates={str(k): float(v) for k, v in (covariates or {}).items()},
            recorded_at=time.time() if recorded_at is None else recorded_at,
            flag=flag,
            layout=layout,
            host=host,
            decision=json_part("decision", dict(decision)) if decision is not None else None,
        )
    )
    session.flush()


def load_observations(session: Session, bisection_id: int) -> list[ObservationRecord]:
    """A bisection's observations in replay order (seq)."""
    _bisection_row(session, bisection_id)
    rows = session.scalars(
        select(ObservationRow)
        .where(ObservationRow.bisection_id == bisection_id)
        .order_by(ObservationRow.seq)
    )
    return [
        ObservationRecord(
            bisection_id=row.bisection_id,
            seq=row.seq,
            commit=row.commit_sha,
            value=row.value,
            trial_ids=tuple(row.trial_ids),
            covariates=dict(row.covariates),
            recorded_at=row.recorded_at,
            flag=row.flag,
            layout=row.layout,
            host=row.host,
            decision=dict(row.decision) if row.decision else None,
        )
        for row in rows
    ]


def finish_bisection(
    session: Session,
    bisection_id: int,
    outcome: BisectOutcome,
    *,
    finished_at: float | None = None,
) -> BisectionRecord:
    """Store a bisection's outcome and mark it done."""
    encoded = json_part("outcome", outcome)
    row = _bisection_row(session, bisection_id)
    row.status = BISECTION_DONE
    row.verdict = Verdict(outcome.verdict).value
    row.culprit = outcome.named_culprit  # NULL when untestable neighbours share the blame (a merge is named)
    row.outcome = encoded
    row.finished_at = time.time() if finished_at is None else finished_at
    session.flush()
    return _bisection_record(session, row)


def discard_bisection(session: Session, bisection_id: int) -> None:
    """Remove a bisection that measured nothing (every trial failed): its observations and jobs go, its trials stay
    (their errors are what the user reads in `perfbisect log`), no longer part of any bisection."""
    _bisection_row(session, bisection_id)
    session.execute(update(TrialRow).where(TrialRow.bisection_id == bisection_id).values(bisection_id=None))
    session.execute(update(ComparisonRow).where(ComparisonRow.bisection_id == bisection_id).values(bisection_id=None))
    session.execute(delete(ObservationRow).where(ObservationRow.bisection_id == bisection_id))
    session.execute(delete(JobRow).where(JobRow.bisection_id == bisection_id))
    session.execute(delete(BisectionRow).where(BisectionRow.id == bisection_id))
    session.flush()


def set_bisection_running(
    session: Session, bisection_id: int, owner: str, owner_alive: Callable[[str], bool] = lambda _o: False
) -> BisectionRecord:
    """Take over an interrupted bisection (for `perfbisect resume`); refuse one whose process lives."""
    row = _bisection_row(session, bisection_id, for_update=True)
    if row.status == BISECTION_DONE:
        raise StoreError(
            f"Bisection {bisection_id} ({row.good[:10]}..{row.bad[:10]}) is already done "
            f"(verdict {row.verdict}); there is nothing to resume. Start a new run instead."
        )
    if row.status == BISECTION_RUNNING and row.owner and row.owner != owner and owner_alive(row.owner):
        host, pid = row.owner.split(":")[:2] if row.owner.count(":") >= 2 else ("", row.owner)
        where = f" on {host}" if host else ""
        raise StoreError(
            f"Bisection {bisection_id} ({row.good[:10]}..{row.bad[:10]}) is still running in process "
            f"{pid}{where}; resuming it now would measure on top of it. Wait for it to finish, or stop it "
            f"(kill {pid}{where}) and run `perfbisect resume {bisection_id}` again."
        )
    row.status = BISECTION_RUNNING
    row.owner = owner
    session.flush()
    return _bisection_record(session, row)


def load_bisection(session: Session, bisection_id: int) -> BisectionRecord:
    """One stored bisection."""
    return _bisection_record(session, _bisection_row(session, bisection_id))


def list_bisections(session: Session, limit: int = 20) -> list[BisectionRecord]:
    """The most recent bisections, newest first."""
    rows = session.scalars(
        select(BisectionRow)
        .order_by(BisectionRow.started_at.desc(), BisectionRow.id.desc())
        .limit(limit)
    )
    return [_bisection_record(session, row) for row in rows]


def latest_unfinished_bisection(
    session: Session, owner_alive: Callable[[str], bool]
) -> BisectionRecord | None:
    """The newest bisection that is not done and whose process is gone (what resume continues)."""
    rows = session.scalars(
        select(BisectionRow)
        .where(BisectionRow.status.in_((BISECTION_RUNNING, BISECTION_INTERRUPTED)))
        .order_by(BisectionRow.started_at.desc(), BisectionRow.id.desc())
    )
    for row in rows:
        if row.status == BISECTION_INTERRUPTED or not owner_alive(row.owner):
            return _bisection_record(session, row)
    return None


# --- row <-> record --------------------------------------------------------------------------


def _bisection_row(session: Session, bisection_id: int, *, for_update: bool = False) -> BisectionRow:
    # for_update: PostgreSQL locks the row until commit (two resumers take turns and the second sees
    # the first's owner); SQLite's writer already holds the database lock, and the clause is omitted.
    row = session.get(BisectionRow, bisection_id, with_for_update=for_update or None)
    if row is None:
        raise StoreError(
            f"There is no bisection {bisection_id} in the results database; list stored "
            "bisections with `perfbisect log` and use one of their ids."
        )
    return row


def _bisection_record(session: Session, row: BisectionRow) -> BisectionRecord:
    trial_count = session.scalar(
        select(func.count()).select_from(TrialRow).where(TrialRow.bisection_id == row.id)
    )
    observation_count = session.scalar(
        select(func.count())
        .select_from(ObservationRow)
        .where(ObservationRow.bisection_id == row.id)
    )
    return BisectionRecord(
        id=row.id,
        good=row.good,
        bad=row.bad,
        metric=row.metric,
        config_hash=row.config_hash,
        target=row.target,
        commits=tuple(row.commits),
        settings=dict(row.settings),
        status=row.status,
        started_at=row.started_at,
        finished_at=row.finished_at,
        verdict=Verdict(row.verdict) if row.verdict else None,
        # A row stored before culprit sets were kept out of the column reads as its outcome says.
        culprit=(codec.load(BisectOutcome, row.outcome).named_culprit if row.outcome else row.culprit),
        outcome=codec.load(BisectOutcome, row.outcome) if row.outcome else None,
        trial_count=trial_count or 0,
        observation_count=observation_count or 0,
        metric_info=row.metric_info,
        search_start=dict(row.search_start) if row.search_start else None,
    )
