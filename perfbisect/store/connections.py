"""Engines on a results database: how perfbisect connects to a SQLite file or a PostgreSQL server.

SQLite: WAL, foreign keys and a busy timeout on every connection, and the ``BEGIN`` emitted by
perfbisect itself in the mode the ``sqlite_begin`` execution option names (the ``Store`` writes under
``BEGIN IMMEDIATE``, so two writers queue instead of failing); a connection that cannot write for the
commands that only read. PostgreSQL: psycopg 3, a connect timeout, a lock timeout as long as SQLite's
busy timeout, and a ping before a pooled connection is reused.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import NoSuchModuleError

from ..errors import StoreError
from .faults import is_locked
from .location import StoreLocation, locate

DEFAULT_BUSY_TIMEOUT_S = 30.0
PG_CONNECT_TIMEOUT_S = 10
_BEGIN_MODES = {"DEFERRED", "IMMEDIATE", "EXCLUSIVE"}


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
        if is_locked(str(exc)):  # a writer holds it: reading it as immutable could see a half-written page
            raise
        return sqlite3.connect(uri + "&immutable=1", uri=True, timeout=busy_timeout_s, check_same_thread=False)


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
            if not is_locked(str(exc)) or time.monotonic() >= deadline:
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
