"""Locks a shared (PostgreSQL) results store keeps for every process that uses it, on any host.

All three are PostgreSQL *advisory* locks, keyed by a 64-bit hash of what they protect. A session
lock belongs to its connection, so the server drops it the moment the holder's connection ends,
however the process ends (a crashed host: once the server's TCP keepalive notices); nothing is
stale after a crash.

- ``OwnerLock``: every process holds a *shared* lock on its owner key (``host:pid:start``) for as
  long as its store is open. A trial or bisection whose owner key nobody holds is dead, whichever host
  ran it: ``owner_alive`` reads ``pg_locks``, never this host's /proc.
- ``DatabaseNodeLock``: the GPU node lock of ``perfbisect.runtime.locks`` made visible to every user of the
  store: an exclusive lock on the node's name, held on a dedicated connection whose
  ``application_name`` says who holds it (pid, host, command), so a refusal can name the holder.
- ``MIGRATION_KEY``: a transaction lock that serializes processes upgrading the schema at once.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from typing import Callable

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError

from ..errors import InfrastructureError
from ..runtime.locks import Holder, LockHeld, this_command
from ..runtime.polling import poll_until


def lock_key(kind: str, name: str) -> int:
    """A signed 64-bit advisory-lock key for ``name`` in the ``kind`` namespace."""
    digest = hashlib.blake2b(f"perfbisect {kind}\0{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


MIGRATION_KEY = lock_key("migration", "schema")

# Granted advisory locks on one bigint key in this database, with their holders' application_name
# (pg_locks splits a bigint key into classid = high 32 bits, objid = low 32 bits, objsubid = 1).
_HOLDERS = text(
    """
    SELECT l.pid, coalesce(a.application_name, '') AS application_name
    FROM pg_locks AS l LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid::bigint = :hi AND l.objid::bigint = :lo
    ORDER BY l.pid
    """
)


def _split(key: int) -> dict[str, int]:
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    return {"hi": unsigned >> 32, "lo": unsigned & 0xFFFF_FFFF}


def holders(conn: Connection, key: int) -> list[tuple[int, str]]:
    """(backend pid, application_name) of each session holding the advisory lock ``key``."""
    return [(int(r[0]), str(r[1])) for r in conn.execute(_HOLDERS, _split(key)).fetchall()]


def _dedicated(engine: Engine, application_name: str) -> Connection:
    """A connection of its own (autocommit) for a session lock, named for pg_stat_activity."""
    conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    conn.execute(text("SELECT set_config('application_name', :n, false)"), {"n": application_name[:63]})
    return conn


def _close(conn: Connection | None) -> None:
    """Let go of the session's advisory locks, then close the DBAPI connection itself (not back into the
    pool). The explicit unlock makes a release visible at once: a closed socket alone is noticed by the
    server's backend a moment later, and a ``holder()`` read in that moment still named this process (CI
    saw it). On a connection already lost the unlock fails, and the server drops the locks with it."""
    if conn is None:
        return
    try:
        conn.execute(text("SELECT pg_advisory_unlock_all()"))
    except SQLAlchemyError:
        pass
    try:
        conn.invalidate()
        conn.close()
    except SQLAlchemyError:
        pass


class OwnerLock:
    """This process's liveness on a shared store: a shared advisory lock on its owner key."""

    def __init__(self, engine: Engine, owner: str):
        self.owner = owner
        self.key = lock_key("owner", owner)
        self._conn = _dedicated(engine, f"perfbisect owner {owner}")
        try:
            self._conn.execute(text("SELECT pg_advisory_lock_shared(:k)"), {"k": self.key})
        except BaseException:
            _close(self._conn)
            raise

    def release(self) -> None:
        _close(self._conn)
        self._conn = None


def owner_checker(engine: Engine, me: str) -> Callable[[str], bool]:
    """``owner_alive`` for a shared store: an owner lives while some session holds its owner key."""

    def alive(owner: str) -> bool:
        if owner == me:
            return True
        with engine.connect() as conn:
            found = bool(holders(conn, lock_key("owner", owner)))
            conn.rollback()
        return found

    return alive


_APP_NAME = re.compile(r"^perfbisect (\d+)@(\S+) ?(.*)$", re.DOTALL)


def describe_app(application_name: str, backend_pid: int) -> Holder:
    """The holder a node lock's ``application_name`` names (what ``DatabaseNodeLock`` set)."""
    m = _APP_NAME.match(application_name)
    if not m:
        return Holder(None, f"database session {backend_pid}")
    return Holder(int(m.group(1)), m.group(3).strip(), host=m.group(2))


class DatabaseNodeLock:
    """The GPU node's lock on a shared store; same interface as ``perfbisect.runtime.locks.FileLock``."""

    def __init__(self, engine: Engine, node: str | None = None, where: str = ""):
        self.engine = engine
        self.node = node or socket.gethostname()
        self.key = lock_key("node", self.node)
        self.what = f"GPU node {self.node}"
        self.where = where  # the store, for messages
        self._conn: Connection | None = None

    def holder(self) -> Holder | None:
        """Who holds this node now (None: nobody)."""
        with self.engine.connect() as conn:
            found = holders(conn, self.key)
            conn.rollback()
        if not found:
            return None
        pid, app = found[0]
        return describe_app(app, pid)

    def acquire(self, wait: bool = False, on_wait: Callable[[Holder], None] | None = None, poll_s: float = 0.5) -> None:
        try:
            conn = _dedicated(self.engine, f"perfbisect {os.getpid()}@{socket.gethostname()} {this_command()}")
        except SQLAlchemyError as exc:
            raise InfrastructureError(
                f"Cannot take the {self.what} lock in the results database {self.where}: {exc.orig or exc}. "
                "Check that the database server is reachable, then run the command again."
            ) from None
        told = False

        def locked() -> bool:
            nonlocal told
            try:
                got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": self.key}).scalar())
            except SQLAlchemyError as exc:
                _close(conn)
                raise InfrastructureError(
                    f"Lost the results database {self.where} while taking the {self.what} lock: {exc.orig or exc}. "
                    "Check that the database server is reachable, then run the command again."
                ) from None
            if got:
                return True
            holder = self.holder() or Holder(None, "")
            if not wait:
                _close(conn)
                raise LockHeld(
                    f"Another perfbisect command is using the {self.what}: {holder.describe()}, lock held in "
                    f"the shared results database {self.where}. Two commands on one node would measure each "
                    f"other. Wait for it to finish (or stop it"
                    f"{f' with `kill {holder.pid}` on {holder.host}' if holder.pid else ''}), or pass --wait "
                    f"to start as soon as it is done."
                )
            if on_wait is not None and not told:
                on_wait(holder)
                told = True
            return False

        poll_until(locked, None, poll_s)
        self._conn = conn

    def release(self) -> None:
        _close(self._conn)
        self._conn = None
