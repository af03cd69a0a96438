"""Trials and their runs in the results database: begin, add runs, re-mark warm-up, finish, load, select.

Like every query module of the store, each function takes a ``Session`` that the caller owns
(``with Session(engine) as s, s.begin():``) and returns plain values from ``perfbisect.model``, fully
loaded, so nothing touches the database after the session closes. They raise ``StoreError`` for what a
user can cause (an unknown trial id, a run added to a finished trial) and let SQLAlchemy errors through
otherwise. The row → ``TrialResult`` mapping lives here, beside the only queries that read trial rows
whole; ``recovery`` and ``jobs`` only change a trial row's status.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from ..errors import StoreError
from ..layout import Layout
from ..model import (
    EnvCheck,
    NoiseKey,
    RunResult,
    SystemSummary,
    TrialIdentity,
    TrialResult,
    TrialStatus,
    trial_summary,
)
from . import codec
from .records import UNFINISHED_ERROR, TrialPurpose
from .schema import TRIAL_RUNNING, RunRow, TrialRow


# RunResult field name -> runs column name ("index" would shadow SQL's INDEX keyword).
_RUN_COLUMNS = {
    f.name: ("idx" if f.name == "index" else f.name) for f in dataclasses.fields(RunResult)
}


def insert_trial(
    session: Session,
    identity: TrialIdentity,
    purpose: TrialPurpose | str,
    *,
    owner: str,
    bisection_id: int | None = None,
    log_path: str | None = None,
    started_at: float | None = None,
    job_id: str | None = None,
    node: str | None = None,
    layout: Layout | None = None,
) -> int:
    """Store a new trial in state "running" and return its id (with the layout it runs under)."""
    purpose = _purpose(purpose)
    row = TrialRow(
        commit_sha=identity.commit,
        patch_hash=identity.patch_hash,
        build_hash=identity.build_hash,
        mode=identity.mode,
        mode_hash=identity.mode_hash,
        workload_hash=identity.workload_hash,
        host=identity.host,
        purpose=purpose.value,
        status=TRIAL_RUNNING,
        owner=owner,
        started_at=time.time() if started_at is None else started_at,
        log_path=log_path,
        bisection_id=bisection_id,
        job_id=job_id,
        node=node,
        layout=None if layout is None else layout.id,
    )
    session.add(row)
    session.flush()
    return row.id


def insert_run(
    session: Session, trial_id: int, run: RunResult, *, recorded_at: float | None = None
) -> int:
    """Store one run of a running trial and return its row id."""
    trial = _trial_row(session, trial_id)
    if trial.status != TRIAL_RUNNING:
        raise StoreError(
            f"Trial {trial_id} is already finished ({trial.status}); a run cannot be added to it. "
            "Start a new trial with begin_trial() for further runs."
        )
    values = {column: getattr(run, name) for name, column in _RUN_COLUMNS.items()}
    values["recorded_at"] = recorded_at or run.recorded_at or time.time()
    row = RunRow(trial_id=trial_id, **values)
    session.add(row)
    session.flush()
    return row.id


def mark_detected_warmup(session: Session, trial_id: int, indices: Sequence[int]) -> int:
    """Re-mark measured runs of a running trial as warm-up found after the fact; how many changed."""
    trial = _trial_row(session, trial_id, with_runs=True)
    if trial.status != TRIAL_RUNNING:
        raise StoreError(
            f"Trial {trial_id} is already finished ({trial.status}); its runs can no longer be re-marked "
            "as warm-up (its summary is stored). Re-mark them before finish_trial()."
        )
    wanted = set(indices)
    changed = 0
    for row in trial.runs:
        if row.idx in wanted and not row.warmup:
            row.warmup = True
            row.detected_warmup = True
            changed += 1
    session.flush()
    return changed


@dataclasses.dataclass(frozen=True)
class TrialDetails:
    """What finish_trial writes, already reduced to JSON-able values (so encoding errors happen
    before any row is touched)."""

    system: Any
    system_samples: Any
    env_checks: Any
    server_info: Any
    versions: Any

    @classmethod
    def encode(
        cls,
        system: SystemSummary | None,
        system_samples: Mapping[str, Any] | None,
        env_checks: Sequence[EnvCheck],
        server_info: Mapping[str, Any] | None,
        versions: Mapping[str, str] | None,
    ) -> "TrialDetails":
        """Encode each part, naming the part that cannot be stored as JSON."""
        parts = {
            "system": system,
            "system_samples": system_samples,
            "env_checks": tuple(env_checks or ()),
            "server_info": server_info,
            "versions": versions,
        }
        out = {}
        for name, value in parts.items():
            try:
                out[name] = codec.encode(value)
            except TypeError as exc:
                raise StoreError(
                    f"The trial's {name} cannot be stored: {exc}. Convert it to plain JSON values "
                    "(str, int, float, bool, None, lists, dicts) before finish_trial(); the trial's "
                    "runs are already stored and were not touched."
                ) from exc
        return cls(**out)


def finish_trial(
    session: Session,
    trial_id: int,
    status: TrialStatus,
    details: TrialDetails,
    *,
    error: str | None = None,
    finished_at: float | None = None,
) -> TrialResult:
    """Close a running trial with its status, state and summary; return it as stored."""
    status = TrialStatus(status)
    row = _trial_row(session, trial_id, with_runs=True)
    if row.status != TRIAL_RUNNING:
        raise StoreError(
            f"Trial {trial_id} is already finished ({row.status}, error {row.error!r}); it cannot be "
            "finished twice. A trial marked 'interrupted' was recovered after its process died: "
            "start a new trial instead."
        )
    runs = tuple(_run_result(r) for r in row.runs)
    row.status = status.value
    row.summary = trial_summary(runs) if status is TrialStatus.OK else None
    row.finished_at = time.time() if finished_at is None else finished_at
    row.error = error
    row.system = details.system
    row.system_samples = details.system_samples
    row.env_checks = details.env_checks
    row.server_info = details.server_info
    row.versions = details.versions
    session.flush()
    return _trial_result(row)


def load_trial(session: Session, trial_id: int) -> TrialResult:
    """One stored trial with its runs in order."""
    return _trial_result(_trial_row(session, trial_id, with_runs=True))


def trial_samples(session: Session, trial_id: int) -> dict[str, Any] | None:
    """The compact system-state time series of one trial (the sampler's form), if recorded."""
    _trial_row(session, trial_id)
    return session.scalar(select(TrialRow.system_samples).where(TrialRow.id == trial_id))


def select_trials(
    session: Session,
    *,
    commit: str | None = None,
    mode: str | None = None,
    noise_key: NoiseKey | None = None,
    status: TrialStatus | None = TrialStatus.OK,
    since: float | None = None,
    purpose: TrialPurpose | str | None = None,
    bisection_id: int | None = None,
) -> list[TrialResult]:
    """Stored trials matching every filter given, oldest first, runs loaded.

    ``status=None`` includes every trial, unfinished ones too (see ``records.is_unfinished``).
    ``commit`` matches a full sha (40 or 64 hex digits) or a prefix of at least 4 characters.
    """
    query = select(TrialRow).options(selectinload(TrialRow.runs))
    if commit is not None:
        if len(commit) not in (40, 64):
            if len(commit) < 4:
                raise StoreError(
                    f"Commit '{commit}' is too short to look up trials by; give at least 4 hex "
                    "characters of the sha."
                )
            query = query.where(TrialRow.commit_sha.startswith(commit, autoescape=True))
        else:
            query = query.where(TrialRow.commit_sha == commit)
    if mode is not None:
        query = query.where(TrialRow.mode == mode)
    if noise_key is not None:
        host, key_mode, mode_hash, workload_hash = noise_key
        query = query.where(
            TrialRow.host == host,
            TrialRow.mode == key_mode,
            TrialRow.mode_hash == mode_hash,
            TrialRow.workload_hash == workload_hash,
        )
    if status is not None:
        query = query.where(TrialRow.status == TrialStatus(status).value)
    if since is not None:
        query = query.where(TrialRow.started_at >= since)
    if purpose is not None:
        query = query.where(TrialRow.purpose == _purpose(purpose).value)
    if bisection_id is not None:
        query = query.where(TrialRow.bisection_id == bisection_id)
    query = query.order_by(TrialRow.started_at, TrialRow.id)
    return [_trial_result(row) for row in session.scalars(query)]


def count_trials(session: Session, commit: str, mode: str) -> int:
    """How many trials of (commit, mode) the database holds, whatever their status or purpose."""
    return session.scalar(
        select(func.count()).select_from(TrialRow).where(TrialRow.commit_sha == commit, TrialRow.mode == mode)
    ) or 0


def identical_build_groups(
    session: Session, noise_key: NoiseKey, *, min_size: int = 2
) -> list[list[TrialResult]]:
    """OK trials of one noise key grouped by identical build (A/A data), groups of >= min_size."""
    groups: dict[tuple[str, ...], list[TrialResult]] = {}
    for trial in select_trials(session, noise_key=noise_key, status=TrialStatus.OK):
        groups.setdefault(trial.identity.build_key, []).append(trial)
    return [g for g in groups.values() if len(g) >= min_size]


def unfinished_trials(session: Session) -> list[TrialResult]:
    """Trials still marked running: in progress elsewhere, or left by a killed process."""
    rows = session.scalars(
        select(TrialRow)
        .options(selectinload(TrialRow.runs))
        .where(TrialRow.status == TRIAL_RUNNING)
        .order_by(TrialRow.id)
    )
    return [_trial_result(row) for row in rows]


# --- row <-> model ---------------------------------------------------------------------------


def _purpose(purpose: TrialPurpose | str) -> TrialPurpose:
    try:
        return TrialPurpose(purpose)
    except ValueError:
        allowed = ", ".join(p.value for p in TrialPurpose)
        raise StoreError(f"Unknown trial purpose {purpose!r}; use one of: {allowed}.") from None


def _trial_row(session: Session, trial_id: int, *, with_runs: bool = False) -> TrialRow:
    options = (selectinload(TrialRow.runs),) if with_runs else ()
    row = session.get(TrialRow, trial_id, options=options)
    if row is None:
        raise StoreError(
            f"There is no trial {trial_id} in the results database; list stored trials with "
            "`perfbisect log` and use one of their ids."
        )
    return row


def _run_result(row: RunRow) -> RunResult:
    return RunResult(**{name: getattr(row, column) for name, column in _RUN_COLUMNS.items()})


def _trial_result(row: TrialRow) -> TrialResult:
    running = row.status == TRIAL_RUNNING
    return TrialResult(
        identity=TrialIdentity(
            commit=row.commit_sha,
            patch_hash=row.patch_hash,
            build_hash=row.build_hash,
            mode=row.mode,
            mode_hash=row.mode_hash,
            workload_hash=row.workload_hash,
            host=row.host,
        ),
        status=TrialStatus.FAILED if running else TrialStatus(row.status),
        runs=tuple(_run_result(r) for r in row.runs),
        started_at=row.started_at,
        finished_at=row.finished_at or 0.0,
        system=codec.load(SystemSummary, row.system) if row.system else SystemSummary(),
        env_checks=tuple(codec.load(EnvCheck, e) for e in row.env_checks or ()),
        server_info=dict(row.server_info or {}),
        versions=dict(row.versions or {}),
        error=UNFINISHED_ERROR if running else row.error,
        log_path=row.log_path,
        id=row.id,
        job_id=row.job_id,
        node=row.node,
        layout=_layout(row),
    )


def _layout(row: TrialRow) -> Layout | None:
    if not row.layout:
        return None
    try:
        return Layout.parse(row.layout)
    except ValueError:
        raise StoreError(
            f"Trial {row.id} in the results database has the layout {row.layout!r}, which is not a layout id "
            "(like 's2-e1733-h40211'); the file was edited by hand or damaged. Set that trial's layout to NULL "
            "or use another database (--db)."
        ) from None
