"""What a results database that cannot be used says: one paragraph each, the cause and the fix.

A lock another process holds past the busy timeout (``is_locked``, ``locked_message``) and a full or
failing disk (``disk_fault``) are the machine's trouble, not a damaged file: their messages say so,
because moving the file aside would only start an empty database beside the results. ``connect_error``
reads why a PostgreSQL server cannot be used; ``reason_of`` is the driver's own words under
SQLAlchemy's wrapper.
"""

from __future__ import annotations

from sqlalchemy.exc import SQLAlchemyError

from .location import StoreLocation, mask


def is_locked(reason: str) -> bool:
    """Whether SQLite's ``reason`` is another connection's lock (SQLITE_BUSY, SQLITE_LOCKED), not a fault of the file."""
    low = reason.lower()
    return "database is locked" in low or "table is locked" in low or "database is busy" in low


def connect_error(location: StoreLocation, exc: BaseException) -> str:
    """One paragraph for a PostgreSQL server that cannot be used: what failed and what to do."""
    reason = mask(" ".join(reason_of(exc).split()) if isinstance(exc, SQLAlchemyError) else str(exc), location.password)
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


def reason_of(exc: SQLAlchemyError) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig) if orig is not None else str(exc).splitlines()[0]
    return text.rstrip(". ")
