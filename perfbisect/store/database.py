"""The results database: a SQLite file (the default) or a shared PostgreSQL server, opened through
SQLAlchemy, migrated by Alembic.

``open_store(path)`` gives a ``Store`` that owns the engine and runs each call in its own short
transaction, so every run is committed the moment it lands and a crash loses nothing stored. The
query functions it calls (``trial_queries``, ``bisection_queries``, ``noise_queries``,
``comparison_queries``, ``jobs``, ``recovery``) take a ``Session`` and can be used directly by code
that wants several steps in one transaction. Where it is comes from ``location.locate``
(``--db PATH`` or ``--db URL``); a shared store also holds this process's owner lock
(``shared.OwnerLock``) while it is open, which is how other hosts tell its trials are still alive.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import NoSuchModuleError, SQLAlchemyError
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
from .jobs import JobRecord
from .location import StoreLocation, locate, mask
from .migrations import upgrade_to_head
from .trial_queries import TrialDetails
from .records import BisectionRecord, ComparisonRecord, NoiseEstimate, ObservationRecord, TrialPurpose

DB_FILENAME = "results.sqlite"
DEFAULT_BUSY_TIMEOUT_S = 30.0
PG_CONNECT_TIMEOUT_S = 10
_SQLITE_MAGIC = b"SQLite format 3\x00"
_BEGIN_MODES = {"DEFERRED", "IMMEDIATE", "EXCLUSIVE"}


def default_db_path(repo: Path) -> Path:
    """``<repo>/.git/perfbisect/results.sqlite``, following the ``.git`` file of a worktree."""
    dot_git = Path(repo) / ".git"
    if dot_git.is_file():
        # A linked worktree or submodule: ".git" holds "gitdir: <path>".
        text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
        if text.startswith("gitdir:"):
            target = Path(text[len("gitdir:") :].strip())
            dot_git = target if target.is_absolute() else (Path(repo) / target).resolve()
    return dot_git / "perfbisect" / DB_FILENAME


def _read_only_connection(path: Path, busy_timeout_s: float) -> Any:
    """A SQLite connection that cannot write ``path``. A WAL database needs its -shm file: where it
    cannot be created (a read-only directory, where nothing can be writing either) the file is
    opened as immutable."""
    import sqlite3
    from urllib.parse import quote

    uri = f"file:{quote(str(path))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, check_same_thread=False)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
        return conn
    except sqlite3.OperationalError as exc:
        conn.close()
        if _locked(str(exc)):  # a writer holds it: reading it as immutable could see a half-written page
            raise
        return sqlite3.connect(uri + "&immutable=1", uri=True, timeout=busy_timeout_s, check_same_thread=False)


def _locked(reason: str) -> bool:
    """Whether SQLite's ``reason`` is another connection's lock (SQLITE_BUSY, SQLITE_LOCKED), not a fault of the file."""
    low = reason.lower()
    return "database is locked" in low or "table is locked" in low or "database is busy" in low


def _switch_to_wal(cursor: Any, busy_timeout_s: float) -> None:
    """``PRAGMA journal_mode = WAL``, waiting (up to the busy timeout) while another connection creates
    the same new file. SQLite refuses that switch at once, without its busy handler, when a second
    connection is writing the file's first page: the switch would have to turn its read lock into a
    write lock, and waiting for that could deadlock. Two perfbisect commands opening one new database
    at the same moment meet exactly that; the loser retries here instead of calling the file locked."""
    deadline = time.monotonic() + busy_timeout_s
    pause = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except Exception as exc:  # sqlite3.OperationalError; the driver's module is not imported here
            if not _locked(str(exc)) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def make_engine(db: "StoreLocation | Path | str", busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
                read_only: bool = False) -> Engine:
    """An engine on ``db``. SQLite: WAL, foreign keys and a busy timeout on every connection
    (``read_only``: opened so it cannot write, for commands that only read); PostgreSQL: psycopg 3,
    a connect timeout, and a ping before a pooled connection is reused."""
    location = locate(db)
    if location.shared:
        return _pg_engine(location, busy_timeout_s)
    if read_only:
        path = location.path
        assert path is not None
        engine = create_engine("sqlite://", creator=lambda: _read_only_connection(path, busy_timeout_s))
    else:
        engine = create_engine(location.url, connect_args={"timeout": busy_timeout_s})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event emit BEGIN itself (pysqlite's implicit BEGIN is deferred
        # and would make two writers deadlock-fail instead of waiting for each other).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            if not read_only:  # setting it may write; a read-only file keeps whatever mode it has
                _switch_to_wal(cursor, busy_timeout_s)
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        mode = connection.get_execution_options().get("sqlite_begin", "DEFERRED")
        if mode not in _BEGIN_MODES:
            raise ValueError(f"sqlite_begin must be one of {sorted(_BEGIN_MODES)}, not {mode!r}")
        connection.exec_driver_sql(f"BEGIN {mode}")

    return engine


def _pg_engine(location: StoreLocation, busy_timeout_s: float) -> Engine:
    try:
        return create_engine(
            location.url,
            pool_pre_ping=True,
            connect_args={
                "connect_timeout": PG_CONNECT_TIMEOUT_S,
                "application_name": "perfbisect",
                # A lock wait as long as SQLite's busy timeout, then an error instead of a hang.
                "options": f"-c lock_timeout={int(busy_timeout_s * 1000)}",
            },
        )
    except (ImportError, NoSuchModuleError) as exc:
        raise StoreError(
            f"The results database {location} is on PostgreSQL, which needs the psycopg 3 driver, and it "
            f"cannot be imported ({exc}). Install it with `pip install 'perfbisect[postgres]'` (or "
            f"`pip install 'psycopg[binary]'`), or use a SQLite file with --db PATH."
        ) from None


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
    _check_file(db_path, writable=not read_only)
    engine = make_engine(location, busy_timeout_s, read_only=read_only)
    try:
        _check_integrity(engine, db_path, busy_timeout_s)
        upgrade_to_head(engine, db_path)
    except StoreError:
        engine.dispose()
        raise
    except SQLAlchemyError as exc:
        engine.dispose()
        full = disk_fault(_reason(exc), db_path)
        if full:
            raise StoreWriteError(full) from exc
        if _locked(_reason(exc)):
            raise StoreWriteError(locked_message(db_path, _reason(exc), busy_timeout_s)) from exc
        raise StoreError(
            f"Cannot open the results database {db_path}: {_reason(exc)}. If the file is damaged or "
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


def connect_error(location: StoreLocation, exc: BaseException) -> str:
    """One paragraph for a PostgreSQL server that cannot be used: what failed and what to do."""
    reason = mask(" ".join(_reason(exc).split()) if isinstance(exc, SQLAlchemyError) else str(exc), location.password)
    url = location.url
    host = url.host or "the local socket"
    where = f"{host}:{url.port or 5432}"
    low = reason.lower()
    if "password authentication failed" in low or "no password supplied" in low or "authentication failed" in low:
        fix = (
            f"the server at {where} refused user '{url.username or '(default)'}'. Fix the user name or "
            "password: put the password in PGPASSWORD or ~/.pgpass (or in the URL, which perfbisect "
            "never prints), and check the server's pg_hba.conf allows this host"
        )
    elif "does not exist" in low and "database" in low:
        fix = (
            f"the server at {where} has no database '{url.database}'. Create it once with "
            f"`createdb -h {url.host or 'localhost'} -p {url.port or 5432} {url.database}` (perfbisect creates "
            "its tables itself), or fix the name in the URL"
        )
    elif any(w in low for w in ("connection refused", "could not connect", "timeout expired", "timed out",
                                "could not translate host name", "name or service not known",
                                "no route to host", "network is unreachable", "connection failed")):
        fix = (
            f"no PostgreSQL server answers at {where}. Start it, or fix the host and port in --db / "
            f"[store] url (`pg_isready -h {url.host or 'localhost'} -p {url.port or 5432}` checks), or "
            "use a SQLite file with --db PATH"
        )
    else:
        fix = "check the URL, the server's logs and that this user may create tables in that database"
    return (
        f"Cannot use the results database {location}: {reason}. In short, {fix}. Nothing was stored."
    )


def locked_message(db_path: object, reason: str, busy_timeout_s: float) -> str:
    """A results database another process kept locked past the busy timeout: not damaged, so never
    "move it aside" (that would start an empty database beside the results)."""
    return (
        f"The results database {db_path} stayed locked for {busy_timeout_s:g} s (SQLite: {reason}): another "
        f"process is writing it, a perfbisect command or a tool holding it open. The file is not damaged: do "
        f"not move it aside. Let that process finish (or stop it), then run the command again."
    )


def _check_integrity(engine: Engine, db_path: Path, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
    """PRAGMA quick_check: a damaged file is refused before anything reads results from it or
    writes more into it (a bisection resumed on a torn page would replay wrong observations)."""
    if not db_path.is_file() or db_path.stat().st_size == 0:
        return
    try:
        with engine.connect() as conn:
            rows = [str(r[0]) for r in conn.exec_driver_sql("PRAGMA quick_check(5)").fetchall()]
            conn.rollback()
    except SQLAlchemyError as exc:
        if _locked(_reason(exc)):  # another process's lock says nothing about the file
            raise StoreWriteError(locked_message(db_path, _reason(exc), busy_timeout_s)) from exc
        rows = [_reason(exc)]
    full = disk_fault("; ".join(rows), db_path) if rows != ["ok"] else None
    if full:
        raise StoreWriteError(full)
    if rows != ["ok"]:
        raise StoreError(
            f"The results database {db_path} is damaged (SQLite quick_check: {'; '.join(rows)[:300]}). "
            f"perfbisect will not read or add results to it. Move it aside (perfbisect then starts a new "
            f"one), try `sqlite3 {db_path} .recover > recovered.sql` to save what is readable, or pass "
            f"another file with --db PATH."
        )


def _read_only_reason(path: Path) -> str | None:
    """Why ``path`` (a directory or a file) cannot be written, or None when it can."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "is on a read-only file system"
    except OSError:
        return None
    if not os.access(path, os.W_OK):
        return "is not writable by this user"
    return None


def _check_file(db_path: Path, writable: bool = True) -> None:
    if db_path.is_dir():
        raise StoreError(
            f"The results database path {db_path} is a directory; pass a file path such as "
            f"{db_path / DB_FILENAME}."
        )
    if not writable:
        _check_header(db_path)
        return
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"Cannot create the directory {db_path.parent} for the results database: "
            f"{exc.strerror or exc}. Choose a writable location with --db PATH."
        ) from exc
    # SQLite in WAL mode writes beside the file (-wal, -shm): the directory must be writable too.
    for path in (db_path, db_path.parent):
        why = _read_only_reason(path) if path.exists() else None
        if why:
            raise StoreError(
                f"The results database {db_path} cannot be written: {path} {why}. perfbisect stores "
                f"every run as it lands, so it needs a writable database: pass --db PATH on a writable "
                f"disk (copy the file there to keep its results)."
            )
    _check_header(db_path)


def _check_header(db_path: Path) -> None:
    if db_path.is_file():
        try:
            with db_path.open("rb") as fh:
                header = fh.read(len(_SQLITE_MAGIC))
        except OSError as exc:
            raise StoreError(
                f"Cannot read the results database {db_path}: {exc.strerror or exc}. Fix its "
                "permissions or pass another file with --db PATH."
            ) from exc
        # An empty file is what a crashed first open can leave: SQLite treats it as a new database.
        if header and header != _SQLITE_MAGIC:
            raise StoreError(
                f"{db_path} is not a SQLite database (it starts with {header[:8]!r}). perfbisect "
                "keeps its results there; move that file aside (perfbisect then starts a new "
                "database) or pass another path with --db PATH."
            )


# What SQLite (and the OS under it) says when the machine, not the file, is at fault.
_DISK_FAULTS = ("database or disk is full", "no space left on device", "disk quota exceeded", "disk i/o error")


def disk_fault(reason: str, db_path: object) -> str | None:
    """A message for a results database failing because its disk is full (or failing), else None:
    such a file is not damaged, and moving it aside would only lose results."""
    low = reason.lower()
    fault = next((f for f in _DISK_FAULTS if f in low), None)
    if fault is None:
        return None
    return (
        f"The disk holding the results database {db_path} is full or failing (SQLite: {reason}). The database "
        f"is not damaged and results stored before this point are kept: do not move it aside. Free space on "
        f"that disk (`perfbisect gc --build-cache` drops perfbisect's build cache), then run the command again; "
        f"`perfbisect resume` continues a bisection."
    )


def _reason(exc: SQLAlchemyError) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig) if orig is not None else str(exc).splitlines()[0]
    return text.rstrip(". ")


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
        # Set by a cluster job (perfbisect.cluster.slurmjob): every trial it begins records its job and node.
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
                    f"The results database {self.path} failed: {mask(_reason(exc), self.path.password)}. "
                    "Results stored before this point are kept. Check that the PostgreSQL server is up "
                    "and reachable from this host, then `perfbisect resume` continues a bisection."
                ) from exc
            full = disk_fault(_reason(exc), self.path)
            if full:
                raise StoreWriteError(full) from exc
            raise StoreWriteError(
                f"The results database {self.path} failed: {_reason(exc)}. Results stored before "
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
        search starts from (``search_replay.SearchStart.as_json``), so a report replays this search.
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

    # --- cluster jobs (perfbisect.cluster.slurm) -------------------------------------------------------

    def add_job(self, bisection_id: int, slot: int, attempt: int, commit: str, executor: str, job_name: str) -> int:
        """Store a job about to be submitted (before sbatch, so a crash cannot lose track of it)."""
        with self.session(write=True) as s:
            return jobs.insert_job(s, bisection_id, slot, attempt, commit, executor, job_name)

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
