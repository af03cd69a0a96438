"""Query functions over the results database.

Each takes a ``Session`` that the caller owns (``with Session(engine) as s, s.begin():``) and returns
plain values from ``perfbisect.model`` or ``perfbisect.store.records``, fully loaded, so nothing
touches the database after the session closes. They raise ``StoreError`` for what a user can cause
(an unknown trial id, a duplicate observation) and let SQLAlchemy errors through otherwise.

Why one module of ~670 lines: it is the one place that knows the schema's rows (every ``select``
and row → value mapping); split, the row mappings would be shared across files.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from ..errors import StoreError
from ..layout import Layout
from ..model import (
    BisectOutcome,
    Comparison,
    EnvCheck,
    NoiseKey,
    RunResult,
    SystemSummary,
    TrialIdentity,
    TrialResult,
    TrialStatus,
    Verdict,
    trial_summary,
)
from . import codec
from .records import (
    INTERRUPTED_ERROR,
    UNFINISHED_ERROR,
    BisectionRecord,
    ComparisonRecord,
    NoiseEstimate,
    ObservationRecord,
    TrialPurpose,
)
from .schema import (
    BISECTION_DONE,
    BISECTION_INTERRUPTED,
    BISECTION_RUNNING,
    TRIAL_RUNNING,
    BisectionRow,
    ComparisonRow,
    NoiseEstimateRow,
    ObservationRow,
    RunRow,
    TrialRow,
)


# RunResult field name -> runs column name ("index" would shadow SQL's INDEX keyword).
_RUN_COLUMNS = {
    f.name: ("idx" if f.name == "index" else f.name) for f in dataclasses.fields(RunResult)
}


# --- trials and runs -------------------------------------------------------------------------


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
    # overwritten with "interrupted" once it exits — a lost update seen under load. Its finish now
    # waits for this transaction, and it stays alive (its owner lock held) until then.
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


# --- bisections and observations ---------------------------------------------------------------


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


def insert_noise_estimate(session: Session, estimate: NoiseEstimate) -> None:
    """Keep a measured noise level for later bisections on the same host."""
    session.add(
        NoiseEstimateRow(
            host=estimate.host, mode=estimate.mode, mode_hash=estimate.mode_hash,
            workload_hash=estimate.workload_hash, sigma_b=estimate.sigma_b, dof=estimate.dof,
            sigma_w=estimate.sigma_w, source=estimate.source, created_at=estimate.created_at,
        )
    )
    session.flush()


def load_noise_estimates(session: Session, mode: str, workload_hash: str) -> list[NoiseEstimate]:
    """Every stored estimate for (mode, workload) on any host, newest first (the caller picks the host)."""
    rows = session.scalars(
        select(NoiseEstimateRow)
        .where(NoiseEstimateRow.mode == mode, NoiseEstimateRow.workload_hash == workload_hash)
        .order_by(NoiseEstimateRow.created_at.desc(), NoiseEstimateRow.id.desc())
    )
    return [
        NoiseEstimate(r.host, r.mode, r.mode_hash, r.workload_hash, r.sigma_b, r.dof, r.sigma_w, r.source, r.created_at)
        for r in rows
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
    row.culprit = outcome.named_culprit  # NULL when the answer is a set: the index never blames one of them
    row.outcome = encoded
    row.finished_at = time.time() if finished_at is None else finished_at
    session.flush()
    return _bisection_record(session, row)


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


# --- comparisons -----------------------------------------------------------------------------


def insert_comparison(
    session: Session,
    *,
    a: str,
    b: str,
    mode: str,
    comparison: Comparison,
    metric: str = "decode_tok_s",
    trial_ids_a: Iterable[int] = (),
    trial_ids_b: Iterable[int] = (),
    bisection_id: int | None = None,
    created_at: float | None = None,
    metric_info: dict[str, Any] | None = None,
) -> int:
    """Store one comparison and return its id."""
    row = ComparisonRow(
        a=a,
        b=b,
        mode=mode,
        metric=metric,
        verdict=Verdict(comparison.verdict).value,
        effect_pct=comparison.effect_pct,
        ci_low_pct=comparison.ci_low_pct,
        ci_high_pct=comparison.ci_high_pct,
        comparison=json_part("comparison", comparison),
        trial_ids_a=[int(t) for t in trial_ids_a],
        trial_ids_b=[int(t) for t in trial_ids_b],
        bisection_id=bisection_id,
        created_at=time.time() if created_at is None else created_at,
        metric_info=metric_info,
    )
    session.add(row)
    session.flush()
    return row.id


def list_comparisons(
    session: Session, limit: int = 20, *, bisection_id: int | None = None
) -> list[ComparisonRecord]:
    """The most recent comparisons, newest first."""
    query = select(ComparisonRow)
    if bisection_id is not None:
        query = query.where(ComparisonRow.bisection_id == bisection_id)
    query = query.order_by(ComparisonRow.created_at.desc(), ComparisonRow.id.desc()).limit(limit)
    return [
        ComparisonRecord(
            id=row.id,
            a=row.a,
            b=row.b,
            mode=row.mode,
            metric=row.metric,
            comparison=codec.load(Comparison, row.comparison),
            trial_ids_a=tuple(row.trial_ids_a),
            trial_ids_b=tuple(row.trial_ids_b),
            bisection_id=row.bisection_id,
            created_at=row.created_at,
            metric_info=row.metric_info,
        )
        for row in session.scalars(query)
    ]


# --- row <-> model ---------------------------------------------------------------------------


def _purpose(purpose: TrialPurpose | str) -> TrialPurpose:
    try:
        return TrialPurpose(purpose)
    except ValueError:
        allowed = ", ".join(p.value for p in TrialPurpose)
        raise StoreError(f"Unknown trial purpose {purpose!r}; use one of: {allowed}.") from None


def json_part(name: str, value: Any) -> Any:
    """``codec.encode(value)``, or a StoreError naming ``name`` when it cannot be stored."""
    try:
        return codec.encode(value)
    except TypeError as exc:
        raise StoreError(
            f"The {name} cannot be stored: {exc}. Pass plain JSON values (str, int, float, bool, "
            "None, lists, dicts) or perfbisect.model dataclasses."
        ) from exc


def _trial_row(session: Session, trial_id: int, *, with_runs: bool = False) -> TrialRow:
    options = (selectinload(TrialRow.runs),) if with_runs else ()
    row = session.get(TrialRow, trial_id, options=options)
    if row is None:
        raise StoreError(
            f"There is no trial {trial_id} in the results database; list stored trials with "
            "`perfbisect log` and use one of their ids."
        )
    return row


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
