"""{port}/{python}/{worktree}/{host} in commands and env values, filled in just before a launch."""

from __future__ import annotations

import re

_PLACEHOLDER = re.compile(r"\{([A-Za-z_]+)\}")


def expand(argv: tuple[str, ...], **values: str) -> list[str]:
    """Fill {port}/{python}/{worktree}/{host} placeholders in each argument (no shell involved).

    One pass: text that a placeholder brings in (a repository path containing "{host}") is never
    expanded again. Unknown placeholders stay as written.
    """
    def fill(match: re.Match) -> str:
        key = match.group(1)
        return str(values[key]) if key in values else match.group(0)

    return [_PLACEHOLDER.sub(fill, arg) for arg in argv]
