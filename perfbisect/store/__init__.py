"""The results store: SQLite (default) or PostgreSQL through SQLAlchemy 2.0, schema managed by
Alembic migrations in db/.

SQLAlchemy is imported only inside this package. ``open_store`` is the app layer's entry point;
the session-taking query functions behind it are grouped by what they read and write:
``perfbisect.store.trial_queries`` (trials and runs), ``bisection_queries`` (bisections and
observations), ``noise_queries``, ``comparison_queries``, ``jobs`` (cluster jobs) and ``recovery``
(what a dead process left running). ``compact`` is the on-disk form of a trial's system-state time
series that the measure layer hands to ``Store.finish_trial``.
"""

from .connections import make_engine
from .database import Store, open_store
from .jobs import JobRecord
from .location import StoreLocation, locate, mask
from .records import (
    INTERRUPTED_ERROR,
    UNFINISHED_ERROR,
    BisectionRecord,
    ComparisonRecord,
    NoiseEstimate,
    ObservationRecord,
    TrialPurpose,
    is_unfinished,
)
from .samples import compact
from .sqlite_file import DB_FILENAME, default_db_path

__all__ = [
    "DB_FILENAME",
    "INTERRUPTED_ERROR",
    "UNFINISHED_ERROR",
    "BisectionRecord",
    "ComparisonRecord",
    "JobRecord",
    "NoiseEstimate",
    "ObservationRecord",
    "Store",
    "StoreLocation",
    "TrialPurpose",
    "compact",
    "default_db_path",
    "is_unfinished",
    "locate",
    "make_engine",
    "mask",
    "open_store",
]
