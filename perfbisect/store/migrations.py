"""Alembic, driven from code: the results schema is created and upgraded only by ``db/versions``.

No ``alembic.ini``: the script location comes from ``perfbisect.resources.data_dir("db")`` (a
checkout or an installed wheel) and the connection is handed to ``db/env.py`` through
``config.attributes["connection"]``.

Developers add a migration after changing ``schema.py`` with::

    python -m perfbisect.store.migrations revision "add trials.foo"
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, inspect, text

from ..errors import StoreError
from ..resources import data_dir
from .schema import Base


def alembic_config(connection: Connection | None = None) -> Config:
    """An in-memory Alembic config pointing at perfbisect's db/ migrations."""
    cfg = Config()
    cfg.set_main_option("script_location", str(data_dir("db")))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest schema revision this perfbisect knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "db/versions has no migrations"
    return head


def current_revision(connection: Connection) -> str | None:
    """The schema revision stamped in the database (None for an empty file)."""
    return MigrationContext.configure(connection).get_current_revision()


def upgrade_to_head(engine: Engine, db_path: object) -> tuple[str | None, str]:
    """Bring the database to the head revision; return (revision before, revision after).
    ``db_path`` (a path or a ``StoreLocation``) only names the database in messages.

    At head this only reads. Otherwise the upgrade runs in one write transaction. SQLite: with
    foreign keys off, because batch migrations drop and recreate tables, and with foreign keys on a
    DROP TABLE would first delete the rows that reference it (or refuse), which must never happen to
    results. PostgreSQL (transactional DDL, real ALTER TABLE): under an advisory transaction lock, so
    processes that open a new or old database at once migrate it one after the other.
    """
    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    assert head is not None, "db/versions has no migrations"
    known = {rev.revision for rev in script.walk_revisions()}
    with engine.connect() as conn:
        before = current_revision(conn)
        if conn.dialect.name == "sqlite":
            _check_known(conn, before, known, head, db_path)
        # (PostgreSQL: checked under the lock below only; reading the version, then the tables,
        # outside it can see another process's migration commit in between.)
        conn.rollback()
        if before == head:
            return before, head
        if conn.dialect.name != "sqlite":
            from .shared import MIGRATION_KEY

            with conn.begin():
                # Wait for another migrator however long its migration takes (not lock_timeout).
                conn.execute(text("SET LOCAL lock_timeout = 0"))
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_KEY})
                # Re-read under the lock: another process may have migrated meanwhile.
                before = current_revision(conn)
                _check_known(conn, before, known, head, db_path)
                if before != head:
                    command.upgrade(alembic_config(conn), "head")
            return before, head
        # PRAGMA foreign_keys is ignored inside a transaction: set it on the raw connection, which
        # (isolation_level None) is in autocommit between SQLAlchemy transactions.
        raw = conn.connection.dbapi_connection
        raw.execute("PRAGMA foreign_keys = OFF")
        try:
            with conn.execution_options(sqlite_begin="IMMEDIATE").begin():
                # Re-read under the write lock: another process may have migrated meanwhile.
                before = current_revision(conn)
                _check_known(conn, before, known, head, db_path)
                if before != head:
                    command.upgrade(alembic_config(conn), "head")
                broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise StoreError(
                        f"Upgrading the results database {db_path} to schema {head} left "
                        f"{len(broken)} rows pointing at missing rows ({broken[:3]}); nothing was "
                        "changed. Report this as a perfbisect bug and keep the file."
                    )
        finally:
            raw.execute("PRAGMA foreign_keys = ON")
    return before, head


def schema_diffs(engine: Engine) -> list:
    """Differences between the database's actual schema and what schema.py declares ([] = in sync)."""
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return compare_metadata(context, Base.metadata)


def _check_known(
    conn: Connection, revision: str | None, known: set[str], head: str | None, db_path: object
) -> None:
    if revision is None:
        tables = [t for t in inspect(conn).get_table_names() if not t.startswith("sqlite_")]
        if tables:
            if conn.dialect.name == "sqlite":
                raise StoreError(
                    f"{db_path} is a SQLite database but not a perfbisect results database (it has "
                    f"tables {', '.join(sorted(tables)[:5])} and no schema version). Point perfbisect at "
                    "another file (--db PATH) or move this one aside."
                )
            raise StoreError(
                f"The database {db_path} already holds other tables ({', '.join(sorted(tables)[:5])}) and no "
                "perfbisect schema version, so it is not a perfbisect results database. Create an empty "
                "database for perfbisect (`createdb perfbisect`) and point --db / [store] url at it."
            )
    elif revision not in known:
        raise StoreError(
            f"The results database {db_path} was written by a newer perfbisect (schema revision "
            f"{revision}; this version knows up to {head}). Upgrade perfbisect "
            "(pip install -U perfbisect), or use another database with --db PATH or --db URL."
        )


def make_revision(message: str) -> None:
    """Autogenerate a new migration in db/versions from the difference between head and schema.py."""
    versions = data_dir("db") / "versions"
    number = len(list(versions.glob("[0-9][0-9][0-9][0-9]_*.py"))) + 1
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite:///{Path(tmp) / 'head.sqlite'}")
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), "head")
            command.revision(
                alembic_config(conn),
                message=message,
                autogenerate=True,
                rev_id=f"{number:04d}",
            )
        engine.dispose()


def main(argv: list[str]) -> int:
    """Developer entry point: ``revision MESSAGE``."""
    if len(argv) != 2 or argv[0] != "revision":
        sys.stderr.write('usage: python -m perfbisect.store.migrations revision "MESSAGE"\n')
        return 2
    make_revision(argv[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
