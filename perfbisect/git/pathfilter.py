"""Path filters: globs of paths whose changes cannot move serving throughput (docs, tests, CI).

Pure string matching, no git: ``glob_regex`` turns one glob into a regex over full paths from the
repository root; ``PathFilter`` answers whether a commit's changed paths are all ignorable.
"""

from __future__ import annotations

import re
from typing import Iterable

from ..settings import SGLANG_IGNORE_PATHS


def _segment_regex(segment: str) -> str:
    out = []
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = segment.find("]", i + 1)
            if end == -1:
                out.append(re.escape(ch))
            else:
                body = segment[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def glob_regex(pattern: str) -> str:
    """Regex for one path glob: ``*`` stays inside a directory, ``**`` spans any number of them.

    Patterns are matched against the full path from the repository root. ``dir/`` means
    ``dir/**``; a pattern without wildcards also matches everything under it (``docs`` = ``docs/**``).
    """
    pattern = pattern.strip().lstrip("/")
    if pattern.endswith("/"):
        pattern += "**"
    if not any(c in pattern for c in "*?["):
        return re.escape(pattern) + "(?:/.*)?"
    parts = pattern.split("/")
    rx = []
    for i, seg in enumerate(parts):
        last = i == len(parts) - 1
        if seg == "**":
            rx.append(".*" if last else "(?:[^/]+/)*")
        else:
            rx.append(_segment_regex(seg) + ("" if last else "/"))
    return "".join(rx)


class PathFilter:
    """Globs of paths that cannot change serving throughput (docs, tests, CI, ...).

    A commit is ignorable when every path it changes matches a pattern. A commit that changes no
    path at all (an empty commit, or a merge identical to its first parent) is ignorable too: its
    tree equals its parent's, so measuring it would measure the parent's build again.
    """

    def __init__(self, patterns: Iterable[str], builtin: Iterable[str] = SGLANG_IGNORE_PATHS):
        self.patterns = tuple(p for p in patterns if p.strip())
        # Built-in defaults are not the user's input: one that matches nothing in a range (say
        # `sgl-router/**` after its rename) is expected and not worth a warning.
        self.builtin = frozenset(builtin)
        self._each = [re.compile(glob_regex(p)) for p in self.patterns]
        self._any = re.compile("|".join(f"(?:{glob_regex(p)})" for p in self.patterns)) if self.patterns else None

    def matches(self, path: str) -> bool:
        """True when ``path`` matches one of the patterns."""
        return bool(self._any and self._any.fullmatch(path))

    def only_ignored(self, paths: Iterable[str]) -> bool:
        """True when every path matches (and also when there are no paths: nothing changed)."""
        return all(self.matches(p) for p in paths)

    def unused_patterns(self, paths: Iterable[str]) -> tuple[str, ...]:
        """User patterns (not built-in defaults) that match none of ``paths``: likely typos."""
        left = {p: rx for p, rx in zip(self.patterns, self._each) if p not in self.builtin}
        for path in paths:
            if not left:
                break
            for pat in [p for p, rx in left.items() if rx.fullmatch(path)]:
                del left[pat]
        return tuple(left)

    def __repr__(self) -> str:
        return f"PathFilter({list(self.patterns)!r})"
