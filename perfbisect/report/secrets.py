"""What a report never shows: the values of variables that look like secrets.

A report is the file a user hands to a colleague. The configured environment (`[server] env`, `[modes.NAME] env`),
what reached the workers and what the server said of itself can hold an ``HF_TOKEN``, an ``OPENAI_API_KEY`` or a
server's ``api_key``: their values are replaced by ``REDACTED`` wherever a report shows them, and the report says
which names were redacted. A name is secret when it contains one of ``SECRET_WORDS`` (any case), or is listed in
``[server] secret_env``.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "PRIVATE", "COOKIE")
_SECRET = re.compile("|".join(SECRET_WORDS), re.I)
REDACTED = "REDACTED"


def is_secret(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether the value of ``name`` must not be shown."""
    return bool(_SECRET.search(str(name))) or str(name) in set(extra)


def redact(env: Mapping[str, object], extra: Iterable[str] = ()) -> tuple[dict[str, object], list[str]]:
    """``env`` with every secret value replaced, and the names replaced."""
    extra = set(extra)
    out, hidden = {}, []
    for name, value in env.items():
        if is_secret(name, extra):
            out[name] = REDACTED
            hidden.append(str(name))
        else:
            out[name] = value
    return out, hidden
