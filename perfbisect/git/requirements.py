"""What each commit asks its Python environment to hold, read from git objects (no checkout).

A commit's environment is what its own requirement file resolves to (``[environment] requirements``:
SGLang's ``python/pyproject.toml``, or a ``requirements*.txt``): every dependency, with its extras and
markers, plus the extras the config names, and for a pyproject the commit's own ``[tool.uv]`` (indexes,
sources, overrides), which SGLang's file carries. The project itself (``sglang``) is not part of it: it
comes from the worktree. Resolution is uv's (``perfbisect.measure.resolver``); this module only says
*what* to resolve and whether the commit can be resolved at all (its ``requires-python``).

With a patch stack that edits the requirement file (a local patch bumping a pin), the file is read as
patched (``PatchStack.patched_files``); where the stack does not apply the commit is untestable for that
reason anyway, and its upstream file is shown.

Identity: ``RequirementSet.key`` hashes only what resolution reads (the dependency tables, the python
bound, ``[tool.uv]``, the extras), so a commit that only bumps the project's version or edits its
description resolves nothing new.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Iterable

from .gitrepo import TargetRepo
from ..model import Commit, content_hash

if TYPE_CHECKING:
    from .patches import PatchStack

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


@dataclass(frozen=True)
class RequirementSet:
    """One commit's requirement input: the file's text as uv will read it, and what of it matters."""

    file: str  # path in the repository ("python/pyproject.toml")
    text: str | None  # the file's text (as patched); None: the commit has no such file
    extras: tuple[str, ...] = ()
    requires_python: str = ""  # the file's [project] requires-python ("" where it says none)
    problem: str | None = None  # why it cannot be resolved as read (unreadable TOML, no such file)
    missing_extras: tuple[str, ...] = ()  # extras the config names that this commit's file does not have (left out)

    @property
    def is_pyproject(self) -> bool:
        return PurePosixPath(self.file).name.endswith(".toml")

    @cached_property  # a frozen dataclass keeps it in its __dict__: a range of 7,000 commits parses each file once
    def key(self) -> str:
        """What resolution reads, hashed: commits with the same key resolve to the same lock."""
        return content_hash("requirements-v1", self.file, _resolution_input(self), list(self.extras))

    def dependencies(self) -> list[str]:
        """The requirement strings the file declares for the environment (its dependencies and the named
        extras'), as written; for showing, resolution reads the file itself."""
        if self.text is None or self.problem:
            return []
        if not self.is_pyproject:
            return [line.strip() for line in self.text.splitlines() if line.strip() and not line.lstrip().startswith(("#", "-"))]
        project = tomllib.loads(self.text).get("project", {})
        found = [r for r in project.get("dependencies", []) if isinstance(r, str)]
        optional = project.get("optional-dependencies") or {}
        for extra in self.extras:
            found.extend(r for r in optional.get(extra, []) if isinstance(r, str))
        return found


def _resolution_input(reqs: RequirementSet) -> object:
    """The parts of the file that resolution reads, in a canonical form."""
    if reqs.text is None:
        return None
    if not reqs.is_pyproject or reqs.problem:
        return reqs.text
    data = tomllib.loads(reqs.text)
    project = data.get("project", {})
    uv = (data.get("tool") or {}).get("uv", {})
    return json.loads(json.dumps({
        "name": project.get("name"),
        "requires-python": project.get("requires-python"),
        "dependencies": project.get("dependencies"),
        "optional-dependencies": project.get("optional-dependencies"),
        "dynamic-deps": "dependencies" in (project.get("dynamic") or []),
        "tool.uv": uv,
    }, sort_keys=True, default=str))


def read_requirements(file: str, text: str | None, extras: Iterable[str] = ()) -> RequirementSet:
    """``file``'s requirement input from its ``text`` (None: the commit has no such file)."""
    extras = tuple(extras)
    if text is None:
        return RequirementSet(file, None, extras, problem=f"the commit has no {file}")
    if not PurePosixPath(file).name.endswith(".toml"):
        return RequirementSet(file, text, extras)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return RequirementSet(file, text, extras, problem=f"its {file} is not valid TOML ({exc})")
    project = data.get("project")
    if not isinstance(project, dict):
        return RequirementSet(file, text, extras, problem=f"its {file} has no [project] table to read dependencies from")
    if "dependencies" in (project.get("dynamic") or []):
        return RequirementSet(file, text, extras, problem=(
            f"its {file} declares its dependencies dynamic (computed by its build backend), so they cannot be read "
            f"without building it"))
    # Extras come and go over history (SGLang's `srt` held everything up to 0.5.x and is gone in 2026): one the
    # commit does not have is left out for it, and said, rather than making the commit untestable.
    optional = project.get("optional-dependencies") or {}
    present = tuple(e for e in extras if e in optional)
    missing = tuple(e for e in extras if e not in optional)
    return RequirementSet(file, text, present, str(project.get("requires-python") or ""), missing_extras=missing)


class RequirementReader:
    """Each commit's ``RequirementSet``, with the ``[environment]`` settings and the patch stack bound;
    a commit that changes neither the file nor what the stack touches shares its parent's."""

    def __init__(self, repo: TargetRepo, file: str, extras: Iterable[str] = (), stack: "PatchStack | None" = None):
        self.repo = repo
        self.file = file
        self.extras = tuple(extras)
        # Only a stack that edits the file changes what is read; it is then re-read at commits changing
        # any file the stack touches (what decides whether and how it applies).
        self.stack = stack if stack is not None and file in stack.touched_paths else None
        self._watched = {file} | (set(self.stack.touched_paths) if self.stack is not None else set())
        self._seen: dict[str, RequirementSet] = {}

    def upstream(self, commit: Commit | str) -> RequirementSet:
        """The requirement input as ``commit`` has it, the patch stack not applied."""
        sha = commit.sha if isinstance(commit, Commit) else str(commit)
        return read_requirements(self.file, self.repo.file_at(sha, self.file), self.extras)

    def __call__(self, commit: Commit | str) -> RequirementSet:
        sha = commit.sha if isinstance(commit, Commit) else str(commit)
        if sha not in self._seen:
            parent = commit.parents[0] if isinstance(commit, Commit) and commit.parents else None
            if parent in self._seen and not set(self.repo.changed_paths(commit)) & self._watched:
                self._seen[sha] = self._seen[parent]
            else:
                self._seen[sha] = self._read(sha)
        return self._seen[sha]

    def _read(self, sha: str) -> RequirementSet:
        if self.stack is not None:
            patched = self.stack.patched_files(sha, [self.file])
            if patched is not None:
                return read_requirements(self.file, patched.get(self.file), self.extras)
        return self.upstream(sha)
