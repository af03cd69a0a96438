"""The compiled dependencies each commit pins, read from the files that declare them, and the range
grouped by pin set.

SGLang pins ``sgl-kernel`` (and flashinfer, torch) in ``python/pyproject.toml`` and checks the
installed ``sgl-kernel`` at launch: a commit whose pin differs from what the interpreter has never
starts. ``[build] pinned_packages`` names the packages that matter; ``commit_pins`` reads their
requirements at a commit (``[build] pin_files``: ``pyproject.toml`` dependency lists, optional ones
included, or ``requirements*.txt`` lines) from git objects, without a checkout, so ``plan`` and a
trial read the same pins. Commits with the same pins share one environment (``perfbisect.measure.envs``).

With a patch stack that edits a pin file (a local patch bumping ``sgl-kernel``), the pins are read
from the files as patched: the stack is applied to them in a small temporary index
(``PatchStack.patched_files``), so the environment matches what the patched worktree declares. Where
the stack does not apply, the commit is untestable for that reason, and its upstream pins are shown.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

from .gitrepo import TargetRepo
from ..model import Commit, content_hash

if TYPE_CHECKING:
    from .patches import PatchStack

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# name [extras] specifiers ; marker  (PEP 508, without URLs)
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;]*?)\s*(;.*)?$")


def normalize(name: str) -> str:
    """A package name as PEP 503 compares them: ``Flashinfer_Python`` → ``flashinfer-python``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    """One pinned requirement: ``sgl-kernel==0.3.9`` and where it was declared."""

    name: str  # normalized
    spec: str  # the version specifiers as written ("==0.3.9", ">=2.8,<2.9")
    source: str  # "python/pyproject.toml"
    marker: str = ""  # an environment marker ("; sys_platform == 'linux'"), passed on to the installer

    @property
    def requirement(self) -> str:
        """What the installer is given."""
        return f"{self.name}{self.spec}" + (f" {self.marker}" if self.marker else "")

    @property
    def exact_version(self) -> str | None:
        """The version of an ``==V`` pin (the usual kind), else None."""
        m = re.fullmatch(r"===?\s*([^\s,*]+)", self.spec.strip())
        return m.group(1) if m else None


@dataclass(frozen=True)
class PinSet:
    """The pins of one commit: the packages of ``pinned_packages`` it declares a version of."""

    pins: tuple[Pin, ...] = ()

    @property
    def key(self) -> str:
        """Identity of the set (what is installed, not where it was declared)."""
        return content_hash("pin-set-v1", [[p.name, p.spec, p.marker] for p in self.pins])

    @property
    def requirements(self) -> list[str]:
        return [p.requirement for p in self.pins]

    def describe(self) -> str:
        return ", ".join(self.requirements) or "no pins"

    def as_dict(self) -> dict[str, str]:
        return {p.name: p.spec + (f" {p.marker}" if p.marker else "") for p in self.pins}

    def __bool__(self) -> bool:
        return bool(self.pins)


def parse_requirement(text: str) -> tuple[str, str, str] | None:
    """(normalized name, specifiers, marker) of one requirement line, or None for what is not one."""
    text = text.split(" #", 1)[0].strip()
    if not text or text.startswith(("#", "-")) or "://" in text or " @ " in text:
        return None
    m = _REQUIREMENT.match(text)
    if not m:
        return None
    spec = re.sub(r"\s+", "", m.group(3) or "")
    if spec.startswith("(") and spec.endswith(")"):
        spec = spec[1:-1]
    return normalize(m.group(1)), spec, (m.group(4) or "").strip()


def declared_requirements(path: str, text: str) -> list[str]:
    """Every requirement string a pin file declares: a pyproject's ``[project] dependencies`` and
    ``optional-dependencies`` (SGLang keeps sgl-kernel in its ``srt`` extra), or requirement lines."""
    if Path(path).suffix == ".toml":
        try:
            project = tomllib.loads(text).get("project", {})
        except tomllib.TOMLDecodeError:
            return []  # a commit with a broken pyproject pins nothing we can read; its build will say more
        found = [r for r in project.get("dependencies", []) if isinstance(r, str)]
        for extra in (project.get("optional-dependencies") or {}).values():
            found.extend(r for r in extra if isinstance(r, str))
        return found
    return text.splitlines()


def read_pins(files: Mapping[str, str | None], packages: Iterable[str]) -> PinSet:
    """The pins of ``packages`` declared in ``files`` (path → text, None for a missing file).

    A package without a version specifier pins nothing (the interpreter's own is used); one
    declared more than once with different specifiers gets them joined, as the installer would
    have to satisfy all of them.
    """
    wanted = {normalize(p) for p in packages}
    specs: dict[str, list[str]] = {}
    sources: dict[str, str] = {}
    markers: dict[str, str] = {}
    for path, text in files.items():
        if text is None:
            continue
        for raw in declared_requirements(path, text):
            parsed = parse_requirement(raw)
            if parsed is None or parsed[0] not in wanted or not parsed[1]:
                continue
            name, spec, marker = parsed
            if spec not in specs.setdefault(name, []):
                specs[name].append(spec)
            sources.setdefault(name, path)
            markers.setdefault(name, marker)
    return PinSet(tuple(
        Pin(name, ",".join(specs[name]), sources[name], markers[name]) for name in sorted(specs)
    ))


def commit_pins(repo: TargetRepo, commit: Commit | str, pin_files: Sequence[str], packages: Sequence[str],
                stack: "PatchStack | None" = None) -> PinSet:
    """The pins of ``packages`` at ``commit``, read from its ``pin_files`` in git (no checkout); with a
    ``stack`` that edits a pin file, from the files as the stack patches them (upstream where it does
    not apply: the commit is untestable then, for the patch conflict)."""
    if not packages:
        return PinSet()
    if stack is not None and stack.touched_paths & set(pin_files):
        patched = stack.patched_files(commit, pin_files)
        if patched is not None:
            return read_pins(patched, packages)
    return read_pins({path: repo.file_at(commit, path) for path in pin_files}, packages)


class PinReader:
    """``commit_pins`` with the ``[build]`` settings and the patch stack bound, each commit read once."""

    def __init__(self, repo: TargetRepo, pin_files: Sequence[str], packages: Sequence[str],
                 stack: "PatchStack | None" = None):
        self.repo = repo
        self.pin_files = tuple(pin_files)
        self.packages = tuple(packages)
        # Only a stack that edits a pin file changes what is read; it is then re-read at commits
        # changing any file the stack touches (what decides whether and how it applies).
        self.stack = stack if stack is not None and stack.touched_paths & set(self.pin_files) else None
        self._watched = set(self.pin_files) | (set(self.stack.touched_paths) if self.stack is not None else set())
        self._seen: dict[str, PinSet] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.packages)

    def upstream(self, commit: Commit | str) -> PinSet:
        """The pins as ``commit`` has them, the patch stack not applied (a checkout used as it is)."""
        return commit_pins(self.repo, commit, self.pin_files, self.packages)

    def __call__(self, commit: Commit | str) -> PinSet:
        sha = commit.sha if isinstance(commit, Commit) else str(commit)
        if sha not in self._seen:
            parent = commit.parents[0] if isinstance(commit, Commit) and commit.parents else None
            if parent in self._seen and not set(self.repo.changed_paths(commit)) & self._watched:
                self._seen[sha] = self._seen[parent]  # no pin file changed: its parent's pins (one git call less per file)
            else:
                self._seen[sha] = commit_pins(self.repo, sha, self.pin_files, self.packages, self.stack)
        return self._seen[sha]


@dataclass(frozen=True)
class PinGroup:
    """Commits of a range that pin the same versions: one environment serves them all."""

    key: str
    pins: dict[str, str]  # name -> specifiers
    requirements: tuple[str, ...]
    commits: tuple[str, ...]  # full shas, oldest first
    env: str | None = None  # where its environment is (or would be) kept; None: no environment needed
    built: bool = False  # already in the environment cache
    problem: str | None = None  # why it cannot be built (its commits would be untestable); None: buildable

    def span(self, short: Callable[[str], str] = lambda s: s[:10]) -> str:
        """"a1b2c3d4e5..f6a7b8c9d0 (12 commits)", or one sha."""
        if len(self.commits) == 1:
            return short(self.commits[0])
        return f"{short(self.commits[0])}..{short(self.commits[-1])} ({len(self.commits)} commits)"


def group_by_pins(commits: Sequence[Commit], pins: Callable[[Commit], PinSet]) -> list[tuple[PinSet, list[Commit]]]:
    """The commits of a range grouped by pin set, in the order each set first appears."""
    groups: dict[str, tuple[PinSet, list[Commit]]] = {}
    for c in commits:
        ps = pins(c)
        groups.setdefault(ps.key, (ps, []))[1].append(c)
    return list(groups.values())


def wheel_problem(pin_set: PinSet, wheel_dir: Path | None, index_url: str | None) -> str | None:
    """Why ``pin_set`` cannot be installed, as far as can be told without installing, or None.

    Only a wheel directory without an index can be checked ahead: every pin needs a wheel (or
    sdist) of its name there, of its exact version for an ``==`` pin. An index is only known to
    lack a version when the installer asks it (a trial then says so).
    """
    if wheel_dir is None or index_url:
        return None
    if not Path(wheel_dir).is_dir():
        return f"[build] wheel_dir {wheel_dir} is not a directory"
    files = [p.name for p in Path(wheel_dir).iterdir() if p.name.endswith((".whl", ".tar.gz", ".zip"))]
    missing = []
    for pin in pin_set.pins:
        versions = {v for f in files if (v := _dist_version(f, pin.name)) is not None}
        exact = pin.exact_version
        if not versions or (exact is not None and exact not in versions):
            have = f" (it has {', '.join(sorted(versions))})" if versions else ""
            missing.append(f"{pin.requirement}{have}")
    if not missing:
        return None
    return (f"no wheel for {', '.join(missing)} in [build] wheel_dir {wheel_dir} and no [build] index_url: "
            f"put the wheels there (pip wheel PACKAGE==VERSION -w {wheel_dir}) or set index_url")


def wheel_files(pin_set: PinSet, wheel_dir: Path | None) -> list[Path]:
    """The files of ``wheel_dir`` an installer could pick for ``pin_set``: each pin's wheels and sdists
    (of its exact version for an ``==`` pin; every version otherwise), sorted by name."""
    if wheel_dir is None or not Path(wheel_dir).is_dir():
        return []
    out = []
    for f in Path(wheel_dir).iterdir():
        if not f.name.endswith((".whl", ".tar.gz", ".zip")) or not f.is_file():
            continue
        for pin in pin_set.pins:
            version = _dist_version(f.name, pin.name)
            if version is not None and (pin.exact_version is None or version == pin.exact_version):
                out.append(f)
                break
    return sorted(out, key=lambda f: f.name)


def _dist_version(filename: str, name: str) -> str | None:
    """The version of a wheel or sdist file of package ``name`` (normalized), else None."""
    stem = filename
    for suffix in (".whl", ".tar.gz", ".zip"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    parts = stem.split("-")
    if len(parts) < 2 or normalize(parts[0]) != name:
        return None
    return parts[1]
