"""Alembic environment for perfbisect's results database (no alembic.ini).

perfbisect runs it through ``perfbisect.store.migrations``, which passes an open connection in
``config.attributes["connection"]`` (already inside a transaction, with foreign keys off). For
developer use outside that path, ``sqlalchemy.url`` may be set as a main option instead.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from perfbisect.store.schema import Base

config = context.config
target_metadata = Base.metadata


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things: batch mode recreates the table and copies the rows.
        render_as_batch=True,
        compare_type=True,
    )


def run_migrations_offline() -> None:
    """Emit SQL to stdout instead of running it (``alembic upgrade --sql``)."""
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        render_as_batch=True,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.connect() as conn:
        _configure(conn)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
