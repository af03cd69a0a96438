"""Where perfbisect's non-Python files (db/ migrations, templates/, hooks/) live.

In a source checkout or editable install they sit at the repository root; a wheel carries them
under ``perfbisect/_data/`` (see pyproject's force-include). Both must work.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The directory ``name`` (``db``, ``templates`` or ``hooks``) shipped with perfbisect."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"perfbisect's '{name}' directory is missing from {_PACKAGE}; reinstall perfbisect."
    )
