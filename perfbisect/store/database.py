"""The results database: a SQLite file (the default) or a shared PostgreSQL server, opened through
SQLAlchemy, migrated by Alembic.

``open_store(path)`` gives a ``Store`` that owns the engine and runs each call in its own short
transaction, so every run is committed the moment it lands and a crash loses nothing stored. The
query functions it calls (``trial_queries``, ``bisection_queries``, ``noise_queries``,
``comparison_queries``, ``jobs``, ``recovery``) take a ``Session`` and can be used directly by code
that wants several steps in one transaction. Where it is comes from ``location.locate`` (``--db PATH``
or ``--db URL``); the engine from ``connections``; a SQLite file is checked first (``sqlite_file``),
and what fails is told in ``faults``'s words. A shared store also holds this process's owner lock
(``shared.OwnerLock``) while it is open, which is how other hosts tell its trials are still alive;
a SQLite file's owners are this host's processes (``perfbisect.runtime.liveness``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from ..errors import StoreError, StoreWriteError
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
    content_hash,
)
from ..runtime.liveness import owner_alive, process_owner
from . import bisection_queries, comparison_queries, jobs, noise_queries, recovery, shared, trial_queries
from .codec import json_part
from .connections import DEFAULT_BUSY_TIMEOUT_S, make_engine
from .faults import connect_error, disk_fault, is_locked, locked_message, reason_of
from .jobs import JobRecord
from .location import StoreLocation, locate, mask
from .migrations import upgrade_to_head
from .records import BisectionRecord, ComparisonRecord, NoiseEstimate, ObservationRecord, TrialPurpose
from .sqlite_file import check_file, check_integrity
from .trial_queries import TrialDetails


def open_store(
    db: "StoreLocation | Path | str",
    *,
    recover: bool = True,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    read_only: bool = False,
) -> "Store":
    """Open (creating parent directories, creating or upgrading the schema) the results database:
    a SQLite file path, or a ``StoreLocation``/URL string (see ``location.locate``).

    With ``recover`` (the default), trials and bisections left running by a dead process are
    marked failed / interrupted (see ``Store.recover_interrupted``); ``Store.recovered`` says which.
    ``read_only`` (``log``, ``report``): a SQLite file is opened so that nothing is written — a
    read-only file or directory is fine; a schema that is not current is an error, not an upgrade.
    """
    location = locate(db)
    if location.shared:
        return _open_shared(location, recover=recover, busy_timeout_s=busy_timeout_s)
    db_path = location.path
    assert db_path is not None
    check_file(db_path, writable=not read_only)
    engine = make_engine(location, busy_timeout_s, read_only=read_only)
    try:
        check_integrity(engine, db_path, busy_timeout_s)
        upgrade_to_head(engine, db_path)
    except StoreError:
        engine.dispose()
        raise
    except SQLAlchemyError as exc:
        engine.dispose()
        full = disk_fault(reason_of(exc), db_path)
        if full:
            raise StoreWriteError(full) from exc
        if is_locked(reason_of(exc)):
            raise StoreWriteError(locked_message(db_path, reason_of(exc), busy_timeout_s)) from exc
        raise StoreError(
            f"Cannot open the results database {db_path}: {reason_of(exc)}. If the file is damaged or "
            "not a perfbisect database, move it aside (perfbisect starts a new one) or pass "
            "--db PATH; if it is locked, wait for the other perfbisect process to finish."
        ) from exc
    store = Store(location, engine)
    return _recover_on_open(store, recover)


def _recover_on_open(store: "Store", recover: bool) -> "Store":
    if recover:
        try:
            store.recovered = store.recover_interrupted()
        except StoreError:
            store.close()
            raise
    return store


def _open_shared(location: StoreLocation, *, recover: bool, busy_timeout_s: float) -> "Store":
    """Open a PostgreSQL store: connect (a clear error for each way that fails), migrate under the
    migration lock, take this process's owner lock, then recover what dead processes left."""
    engine = make_engine(location, busy_timeout_s)
    owner = process_owner()
    try:
        upgrade_to_head(engine, location)
        owner_lock = shared.OwnerLock(engine, owner)
    except StoreError:
        engine.dispose()
        raise
    except SQLAlchemyError as exc:
        engine.dispose()
        raise StoreError(connect_error(location, exc)) from None
    store = Store(location, engine, owner_lock=owner_lock)
    return _recover_on_open(store, recover)


class Store:
    """The results database for the app layer; each call is its own committed transaction.

    ``path`` is its ``StoreLocation`` (prints as the file path, or the URL with the password masked).
    """

    def __init__(self, path: "StoreLocation | Path", engine: Engine, *, owner_lock: "shared.OwnerLock | None" = None):
        self.path = locate(path)
        self.engine = engine
        self.shared = self.path.shared
        # SQLite writers take the write lock at BEGIN, so two processes queue instead of failing
        # (PostgreSQL locks rows, not the database: writers never wait for each other's inserts).
        self._write_engine = engine if self.shared else engine.execution_options(sqlite_begin="IMMEDIATE")
        self.owner = owner_lock.owner if owner_lock is not None else process_owner()
        self._owner_lock = owner_lock
        # Whether the process that wrote an owner string still runs: /proc here, the owner lock when shared.
        self.owner_alive = shared.owner_checker(engine, self.owner) if self.shared else owner_alive
        self.recovered: tuple[list[int], list[int]] = ([], [])
        # Set by a cluster job (perfbisect.app.slurmjob): every trial it begins records its job and node.
        self.job_id: str | None = None
        self.node: str | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Release the engine's connections (and, on a shared store, this process's owner lock)."""
        if self._owner_lock is not None:
            self._owner_lock.release()
            self._owner_lock = None
        self.engine.dispose()

    def node_lock(self, node: str | None = None) -> "shared.DatabaseNodeLock | None":
        """The GPU node's lock in this store when it is shared (None for a SQLite file)."""
        return shared.DatabaseNodeLock(self.engine, node, str(self.path)) if self.shared else None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def session(self, *, write: bool = False) -> Iterator[Session]:
        """A session inside one transaction, committed on exit (for several query calls at once)."""
        try:
            with Session(self._write_engine if write else self.engine) as s, s.begin():
                yield s
        except SQLAlchemyError as exc:
            # Failing once open (a full disk, a lock held too long) is the machine's trouble, not a
            # bad argument: exit 4, like any measurement that broke.
            if self.shared:
                raise StoreWriteError(
                    f"The results database {self.path} failed: {mask(reason_of(exc), self.path.password)}. "
                    "Results stored before this point are kept. Check that the PostgreSQL server is up "
                    "and reachable from this host, then `perfbisect resume` continues a bisection."
                ) from exc
            full = disk_fault(reason_of(exc), self.path)
            if full:
                raise StoreWriteError(full) from exc
            raise StoreWriteError(
                f"The results database {self.path} failed: {reason_of(exc)}. Results stored before "
                "this point are kept. If it is locked, another perfbisect process is writing: let "
                "it finish; otherwise check that the file is writable and the disk has space, then "
                "`perfbisect resume` continues a bisection."
            ) from exc

    # --- trials --------------------------------------------------------------------------------

    def begin_trial(
        self,
        identity: TrialIdentity,
        purpose: TrialPurpose | str,
        bisection_id: int | None = None,
        log_path: str | Path | None = None,
        *,
        started_at: float | None = None,
        layout: Layout | None = None,
    ) -> int:
        """Store a new running trial (and the layout it runs under) and return its id."""
        with self.session(write=True) as s:
            return trial_queries.insert_trial(
                s,
                identity,
                purpose,
                owner=self.owner,
                bisection_id=bisection_id,
                log_path=None if log_path is None else str(log_path),
                started_at=started_at,
                job_id=self.job_id,
                node=self.node,
                layout=layout,
            )

    def trial_count(self, commit: str, mode: str) -> int:
        """How many trials of (commit, mode) are stored, whatever their status (the layout draw's counter)."""
        with self.session() as s:
            return trial_queries.count_trials(s, commit, mode)

    def add_run(self, trial_id: int, run: RunResult) -> None:
        """Store one run, committed before this returns."""
        with self.session(write=True) as s:
            trial_queries.insert_run(s, trial_id, run)

    def mark_detected_warmup(self, trial_id: int, indices: Sequence[int]) -> int:
        """Re-mark measured runs (by index) of a running trial as warm-up found after the fact."""
        with self.session(write=True) as s:
            return trial_queries.mark_detected_warmup(s, trial_id, indices)

    def finish_trial(
        self,
        trial_id: int,
        status: TrialStatus,
        system: SystemSummary | None = None,
        system_samples: Mapping[str, Any] | None = None,
        env_checks: Sequence[EnvCheck] = (),
        server_info: Mapping[str, Any] | None = None,
        versions: Mapping[str, str] | None = None,
        error: str | None = None,
        *,
        finished_at: float | None = None,
    ) -> TrialResult:
        """Close a trial with its status and state; its runs stay as stored whatever happens here."""
        # Encode first: a value that cannot be stored fails before any row is touched.
        details = TrialDetails.encode(system, system_samples, env_checks, server_info, versions)
        with self.session(write=True) as s:
            return trial_queries.finish_trial(
                s, trial_id, status, details, error=error, finished_at=finished_at
            )

    def trial(self, trial_id: int) -> TrialResult:
        """One stored trial with its runs."""
        with self.session() as s:
            return trial_queries.load_trial(s, trial_id)

    def trial_samples(self, trial_id: int) -> dict[str, Any] | None:
        """The compact system-state samples stored with a trial."""
        with self.session() as s:
            return trial_queries.trial_samples(s, trial_id)

    def trials(
        self,
        commit: str | None = None,
        mode: str | None = None,
        noise_key: NoiseKey | None = None,
        status: TrialStatus | None = TrialStatus.OK,
        since: float | None = None,
        *,
        purpose: TrialPurpose | str | None = None,
        bisection_id: int | None = None,
    ) -> list[TrialResult]:
        """Stored trials matching the filters, oldest first, with their runs."""
        with self.session() as s:
            return trial_queries.select_trials(
                s,
                commit=commit,
                mode=mode,
                noise_key=noise_key,
                status=status,
                since=since,
                purpose=purpose,
                bisection_id=bisection_id,
            )

    def identical_build_groups(
        self, noise_key: NoiseKey, *, min_size: int = 2
    ) -> list[list[TrialResult]]:
        """Repeated OK trials of identical builds under one noise key: A/A data for σ_b."""
        with self.session() as s:
            return trial_queries.identical_build_groups(s, noise_key, min_size=min_size)

    def unfinished_trials(self) -> list[TrialResult]:
        """Trials still marked running (see ``records.is_unfinished``)."""
        with self.session() as s:
            return trial_queries.unfinished_trials(s)

    def recover_interrupted(self, *, force: bool = False) -> tuple[list[int], list[int]]:
        """Mark trials/bisections left running by a dead process failed ("interrupted") / interrupted.

        Their runs and observations are kept. ``force`` also takes those whose process looks alive.
        Returns (trial ids, bisection ids).
        """
        alive = (lambda _owner: False) if force else self.owner_alive
        with self.session() as s:
            # Most opens find nothing to recover: look before taking the write lock.
            if not recovery.has_running(s):
                return [], []
        with self.session(write=True) as s:
            return recovery.recover_interrupted(s, alive)

    def release_own(self) -> tuple[list[int], list[int]]:
        """Mark this process's running trials and bisections interrupted (an orderly Ctrl-C or
        SIGTERM exit), along with any left by dead processes. Returns (trial ids, bisection ids)."""
        mine = self.owner
        with self.session(write=True) as s:
            return recovery.recover_interrupted(s, lambda owner: owner != mine and self.owner_alive(owner))

    # --- bisections ----------------------------------------------------------------------------

    def begin_bisection(
        self,
        good: str,
        bad: str,
        commits: Sequence[str],
        metric: str,
        settings: Any = None,
        target: str | Path = "",
        config_hash: str | None = None,
        *,
        started_at: float | None = None,
        metric_info: dict[str, Any] | None = None,
        search_start: Mapping[str, Any] | None = None,
    ) -> int:
        """Store a new running bisection over ``commits`` (oldest first) and return its id.

        ``settings`` is a mapping or a config dataclass (e.g. ``StatsConfig``), stored as JSON;
        ``config_hash`` defaults to the content hash of those settings; ``search_start`` is what the
        search starts from (``search_start.SearchStart.as_json``), so a report replays this search.
        """
        encoded = json_part("settings", settings if settings is not None else {})
        if config_hash is None:
            config_hash = content_hash(encoded)
        with self.session(write=True) as s:
            return bisection_queries.insert_bisection(
                s,
                good=good,
                bad=bad,
                commits=commits,
                metric=metric,
                config_hash=config_hash,
                target=str(target),
                settings=encoded,
                owner=self.owner,
                started_at=started_at,
                metric_info=metric_info,
                search_start=search_start,
            )

    def add_observation(
        self,
        bisection_id: int,
        seq: int,
        commit: str,
        value: float | None,
        trial_ids: Iterable[int] = (),
        covariates: Mapping[str, float] | None = None,
        flag: str | None = None,
        layout: str | None = None,
        host: str | None = None,
        decision: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one observation (committed before this returns); ``host`` and ``decision``: the node
        the search was told measured it and the decision that asked for it (what a report replays)."""
        with self.session(write=True) as s:
            bisection_queries.insert_observation(s, bisection_id, seq, commit, value, trial_ids, covariates,
                                                 flag=flag, layout=layout, host=host, decision=decision)

    def add_noise_estimate(self, estimate: NoiseEstimate) -> None:
        """Keep a measured noise level (committed before this returns)."""
        with self.session(write=True) as s:
            noise_queries.insert_noise_estimate(s, estimate)

    def noise_estimates(self, mode: str, workload_hash: str) -> list[NoiseEstimate]:
        """Stored noise estimates for (mode, workload) on every host, newest first."""
        with self.session() as s:
            return noise_queries.load_noise_estimates(s, mode, workload_hash)

    def observations(self, bisection_id: int) -> list[ObservationRecord]:
        """A bisection's observations in replay order."""
        with self.session() as s:
            return bisection_queries.load_observations(s, bisection_id)

    def finish_bisection(self, bisection_id: int, outcome: BisectOutcome) -> BisectionRecord:
        """Store the outcome and mark the bisection done."""
        with self.session(write=True) as s:
            return bisection_queries.finish_bisection(s, bisection_id, outcome)

    def discard_bisection(self, bisection_id: int) -> None:
        """Forget a bisection that measured nothing; its trials stay, in no bisection."""
        with self.session(write=True) as s:
            bisection_queries.discard_bisection(s, bisection_id)

    def bisection(self, bisection_id: int) -> BisectionRecord:
        """One stored bisection."""
        with self.session() as s:
            return bisection_queries.load_bisection(s, bisection_id)

    def bisections(self, limit: int = 20) -> list[BisectionRecord]:
        """The most recent bisections, newest first."""
        with self.session() as s:
            return bisection_queries.list_bisections(s, limit)

    def latest_unfinished_bisection(self) -> BisectionRecord | None:
        """The newest bisection that was interrupted (what `perfbisect resume` continues)."""
        with self.session() as s:
            return bisection_queries.latest_unfinished_bisection(s, self.owner_alive)

    def resume_bisection(self, bisection_id: int) -> BisectionRecord:
        """Mark an interrupted bisection running again, owned by this process."""
        with self.session(write=True) as s:
            return bisection_queries.set_bisection_running(s, bisection_id, self.owner, self.owner_alive)

    # --- cluster jobs (perfbisect.executors.slurm) -------------------------------------------------------

    def add_job(self, bisection_id: int, slot: int, attempt: int, commit: str, executor: str, job_name: str,
                decision: Mapping[str, Any] | None = None) -> int:
        """Store a job about to be submitted (before sbatch, so a crash cannot lose track of it), with the
        decision that asked for it (None: a which-path job)."""
        with self.session(write=True) as s:
            return jobs.insert_job(s, bisection_id, slot, attempt, commit, executor, job_name, decision)

    def job(self, row_id: int) -> JobRecord:
        with self.session() as s:
            return jobs.load_job(s, row_id)

    def jobs(self, bisection_id: int, states: tuple[str, ...] | None = None) -> list[JobRecord]:
        """A bisection's jobs in submission order (only those in ``states`` when given)."""
        with self.session() as s:
            return jobs.load_jobs(s, bisection_id, states)

    def job_submitted(self, row_id: int, job_id: str) -> None:
        with self.session(write=True) as s:
            jobs.set_submitted(s, row_id, job_id)

    def job_seen(self, row_id: int, slurm_state: str, node: str | None) -> None:
        with self.session(write=True) as s:
            jobs.set_slurm_state(s, row_id, slurm_state, node)

    def job_started(self, row_id: int, job_id: str | None, node: str) -> None:
        with self.session(write=True) as s:
            jobs.job_started(s, row_id, job_id, node)

    def job_result(self, row_id: int, result: Mapping[str, Any]) -> bool:
        with self.session(write=True) as s:
            return jobs.job_result(s, row_id, result)

    def job_error(self, row_id: int, error: str) -> None:
        with self.session(write=True) as s:
            jobs.job_error(s, row_id, error)

    def job_lost(self, row_id: int, why: str) -> bool:
        """An infrastructure failure: the row is lost, its unfinished trials failed (never blamed)."""
        with self.session(write=True) as s:
            return jobs.set_lost(s, row_id, why)

    def job_observed(self, row_id: int, seq: int) -> None:
        with self.session(write=True) as s:
            jobs.set_observed(s, row_id, seq)

    # --- comparisons ---------------------------------------------------------------------------

    def record_comparison(
        self,
        a: str,
        b: str,
        mode: str,
        comparison: Comparison,
        *,
        metric: str = "decode_tok_s",
        trial_ids_a: Iterable[int] = (),
        trial_ids_b: Iterable[int] = (),
        bisection_id: int | None = None,
        metric_info: dict[str, Any] | None = None,
    ) -> int:
        """Store one comparison and return its id (``metric_info``: ``metrics.Metric.as_json()``)."""
        with self.session(write=True) as s:
            return comparison_queries.insert_comparison(
                s,
                a=a,
                b=b,
                mode=mode,
                comparison=comparison,
                metric=metric,
                trial_ids_a=trial_ids_a,
                trial_ids_b=trial_ids_b,
                bisection_id=bisection_id,
                metric_info=metric_info,
            )

    def comparisons(
        self, limit: int = 20, *, bisection_id: int | None = None
    ) -> list[ComparisonRecord]:
        """The most recent comparisons, newest first."""
        with self.session() as s:
            return comparison_queries.list_comparisons(s, limit, bisection_id=bisection_id)
