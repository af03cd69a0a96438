"""The compiled dependencies each commit pins, read from the files that declare them, and the range
grouped by pin set.

SGLang pins ``sgl-kernel`` (and flashinfer, torch) in ``python/pyproject.toml`` and checks the
installed ``sgl-kernel`` at launch: a commit whose pin differs from what the interpreter has never
starts. ``[build] pinned_packages`` names the packages that matter; ``commit_pins`` reads their
requirements at a commit (``[build] pin_files``: ``pyproject.toml`` dependency lists, optional ones
included, or ``requirements*.txt`` lines) from git objects, without a checkout, so ``plan`` and a
trial read the same pins. Commits with the same pins share one environment (``perfbisect.measure.envs``).

Packages move under SGLang's feet, so a pin set is read by *role*, not by one name:

- **renames** (``[build] package_aliases``, built in: ``sgl-kernel`` up to 0.5.9 is ``sglang-kernel``
  from 0.5.10): ``pinned_packages`` naming either name (or the role's own name) reads both, so the
  kernel pin follows the rename across a range instead of vanishing at it;
- **companions** (``[build] companions``, built in: ``flashinfer-cubin`` beside ``flashinfer-python``,
  pinned together from 0.5.6; flashinfer refuses to import when their versions differ): read beside
  the package whenever a commit pins them, and a companion pinned to another exact version than its
  package is a problem of that pin set (its commits are untestable with that reason);
- **the wheels' own exact requirements** (torch pins its CUDA packages ``==``): read from each pinned
  wheel's ``METADATA`` in ``[build] wheel_dir`` (``wheel_requirements``) and carried by the pin set.

With a patch stack that edits a pin file (a local patch bumping ``sgl-kernel``), the pins are read
from the files as patched: the stack is applied to them in a small temporary index
(``PatchStack.patched_files``), so the environment matches what the patched worktree declares. Where
the stack does not apply, the commit is untestable for that reason, and its upstream pins are shown.
"""

from __future__ import annotations

import re
import sys
import zipfile
from dataclasses import dataclass, field, replace
from email.parser import HeaderParser
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

# One package under several names across history: a role → its names. SGLang's compiled kernels were
# `sgl-kernel` up to 0.5.9 and are `sglang-kernel` from 0.5.10 (python/pyproject.toml).
KERNEL_ROLE = "sglang-kernel"
BUILTIN_ALIASES: dict[str, tuple[str, ...]] = {KERNEL_ROLE: ("sgl-kernel", "sglang-kernel")}
# Packages that must be installed beside another at the same version: a package → its companions.
# SGLang pins flashinfer_cubin == flashinfer_python from 0.5.6, and flashinfer refuses to import when
# the two differ.
BUILTIN_COMPANIONS: dict[str, tuple[str, ...]] = {"flashinfer-python": ("flashinfer-cubin",)}


def normalize(name: str) -> str:
    """A package name as PEP 503 compares them: ``Flashinfer_Python`` → ``flashinfer-python``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    """One pinned requirement: ``sgl-kernel==0.3.9`` and where it was declared."""

    name: str  # normalized
    spec: str  # the version specifiers as written ("==0.3.9", ">=2.8,<2.9")
    source: str  # "python/pyproject.toml", or "torch-2.8.0-….whl METADATA" for a wheel's own requirement
    marker: str = ""  # an environment marker ("; sys_platform == 'linux'"), passed on to the installer
    role: str = ""  # the role it answers ("sglang-kernel" for an sgl-kernel pin too); "" for a companion
    companion_of: str = ""  # the pinned package it moves with (a declared companion or a wheel's requirement)

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
    """The pins of one commit: the packages of ``pinned_packages`` it declares a version of, with
    their companions."""

    pins: tuple[Pin, ...] = ()
    problems: tuple[str, ...] = ()  # why this set cannot work as declared (companions apart); not part of the key

    @property
    def key(self) -> str:
        """Identity of the set (what is installed, not where it was declared or under which role)."""
        return content_hash("pin-set-v1", [[p.name, p.spec, p.marker] for p in self.pins])

    @property
    def requirements(self) -> list[str]:
        return [p.requirement for p in self.pins]

    @property
    def kernel(self) -> Pin | None:
        """SGLang's kernel pin under whichever name the commit uses (``sgl-kernel`` or ``sglang-kernel``, or
        the names ``[build] package_aliases`` gives the role)."""
        return next((p for p in self.pins if p.role == KERNEL_ROLE), None)

    @property
    def companions(self) -> tuple[Pin, ...]:
        return tuple(p for p in self.pins if p.companion_of)

    def describe(self) -> str:
        return ", ".join(self.requirements) or "no pins"

    def with_pins(self, extra: Iterable[Pin]) -> "PinSet":
        """This set with ``extra`` pins added (a name already pinned keeps its pin), sorted by name."""
        have = {p.name for p in self.pins}
        added = [p for p in extra if p.name not in have]
        return replace(self, pins=tuple(sorted((*self.pins, *added), key=lambda p: p.name))) if added else self

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


@dataclass(frozen=True)
class PinRules:
    """What to read as pins: ``[build] pinned_packages`` with their renames and companions."""

    packages: tuple[str, ...]
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # role -> names (built-ins added)
    companions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # package -> companions (built-ins added)

    @classmethod
    def of(cls, packages: "Iterable[str] | PinRules", aliases: Mapping[str, Iterable[str]] | None = None,
           companions: Mapping[str, Iterable[str]] | None = None) -> "PinRules":
        if isinstance(packages, PinRules):
            return packages
        return cls(tuple(packages),
                   {normalize(k): tuple(normalize(n) for n in v) for k, v in {**BUILTIN_ALIASES, **(aliases or {})}.items()},
                   {normalize(k): tuple(normalize(n) for n in v) for k, v in {**BUILTIN_COMPANIONS, **(companions or {})}.items()})

    def family(self, name: str) -> tuple[str, tuple[str, ...]]:
        """(role, its names) of a configured name: the role whose names (or own name) include it."""
        name = normalize(name)
        for role, names in self.aliases.items():
            if name == role or name in names:
                return role, names or (role,)
        return name, (name,)

    def wanted(self) -> dict[str, tuple[str, str]]:
        """Every name to read → (the role it answers, the package it is a companion of, or "")."""
        out: dict[str, tuple[str, str]] = {}
        for configured in self.packages:
            role, names = self.family(configured)
            for name in names:
                out.setdefault(name, (role, ""))
        for package in list(out):
            for companion in self.companions.get(package, ()):
                out.setdefault(companion, (companion, package))
        return out

    @property
    def roles(self) -> tuple[str, ...]:
        """The configured packages as roles ("sglang-kernel" for a configured "sgl-kernel")."""
        return tuple(dict.fromkeys(self.family(p)[0] for p in self.packages))


def read_pins(files: Mapping[str, str | None], packages: "Iterable[str] | PinRules") -> PinSet:
    """The pins of ``packages`` declared in ``files`` (path → text, None for a missing file): each under
    any of its role's names, with the companions the files pin beside it.

    A package without a version specifier pins nothing (the interpreter's own is used); one
    declared more than once with different specifiers gets them joined, as the installer would
    have to satisfy all of them.
    """
    rules = PinRules.of(packages)
    wanted = rules.wanted()
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
    pins = []
    for name in sorted(specs):
        role, companion_of = wanted[name]
        if companion_of and companion_of not in specs:
            continue  # a companion pinned without its package: nothing here moves with it
        pins.append(Pin(name, ",".join(specs[name]), sources[name], markers[name],
                        role="" if companion_of else role, companion_of=companion_of))
    pin_set = PinSet(tuple(pins))
    return replace(pin_set, problems=companion_problems(pin_set))


def companion_problems(pin_set: PinSet) -> tuple[str, ...]:
    """A declared companion pinned to another exact version than its package: what would break."""
    by_name = {p.name: p for p in pin_set.pins}
    out = []
    for pin in pin_set.pins:
        package = by_name.get(pin.companion_of)
        if package is None or pin.source.endswith("METADATA"):
            continue
        mine, theirs = pin.exact_version, package.exact_version
        if mine is not None and theirs is not None and mine != theirs:
            out.append(f"{pin.name}{pin.spec} beside {package.name}{package.spec} ({pin.source}): they must be the "
                       f"same version (the one refuses to import beside another version of the other)")
    return tuple(out)


def wheel_metadata_requirements(wheel: Path) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel's ``METADATA`` (read from the archive, nothing installed)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            name = next((n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None)
            if name is None:
                return []
            text = zf.read(name).decode("utf-8", "replace")
    except (OSError, zipfile.BadZipFile):
        return []
    return HeaderParser().parsestr(text).get_all("Requires-Dist") or []


def wheel_requirements(pin_set: PinSet, wheel_dir: Path | None) -> list[Pin]:
    """The exact (``==``) requirements that ``pin_set``'s own wheels in ``wheel_dir`` declare (torch pins
    its CUDA packages so), as companion pins of the package whose wheel declares them; a requirement
    of an extra (``; extra == "…"``) is not one. Installs are ``--no-deps``, so what a pinned wheel
    needs at an exact version must travel with the set."""
    out: dict[str, Pin] = {}
    for wheel in wheel_files(pin_set, wheel_dir):
        if not wheel.name.endswith(".whl"):
            continue
        owner = next((p for p in pin_set.pins if _dist_version(wheel.name, p.name) is not None), None)
        if owner is None:
            continue
        for raw in wheel_metadata_requirements(wheel):
            parsed = parse_requirement(raw)
            if parsed is None or "extra" in parsed[2]:
                continue
            name, spec, marker = parsed
            if re.fullmatch(r"===?[^,*]+", spec) and name not in out:
                out[name] = Pin(name, spec, f"{wheel.name} METADATA", marker, companion_of=owner.name)
    return [p for name, p in sorted(out.items()) if name not in {q.name for q in pin_set.pins}]


def commit_pins(repo: TargetRepo, commit: Commit | str, pin_files: Sequence[str], packages: "Sequence[str] | PinRules",
                stack: "PatchStack | None" = None) -> PinSet:
    """The pins of ``packages`` at ``commit``, read from its ``pin_files`` in git (no checkout); with a
    ``stack`` that edits a pin file, from the files as the stack patches them (upstream where it does
    not apply: the commit is untestable then, for the patch conflict)."""
    packages = PinRules.of(packages)
    if not packages.packages:
        return PinSet()
    if stack is not None and stack.touched_paths & set(pin_files):
        patched = stack.patched_files(commit, pin_files)
        if patched is not None:
            return read_pins(patched, packages)
    return read_pins({path: repo.file_at(commit, path) for path in pin_files}, packages)


class PinReader:
    """``commit_pins`` with the ``[build]`` settings and the patch stack bound, each commit read once."""

    def __init__(self, repo: TargetRepo, pin_files: Sequence[str], packages: "Sequence[str] | PinRules",
                 stack: "PatchStack | None" = None):
        self.repo = repo
        self.pin_files = tuple(pin_files)
        self.rules = PinRules.of(packages)
        # Only a stack that edits a pin file changes what is read; it is then re-read at commits
        # changing any file the stack touches (what decides whether and how it applies).
        self.stack = stack if stack is not None and stack.touched_paths & set(self.pin_files) else None
        self._watched = set(self.pin_files) | (set(self.stack.touched_paths) if self.stack is not None else set())
        self._seen: dict[str, PinSet] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.rules.packages)

    def upstream(self, commit: Commit | str) -> PinSet:
        """The pins as ``commit`` has them, the patch stack not applied (a checkout used as it is)."""
        return commit_pins(self.repo, commit, self.pin_files, self.rules)

    def __call__(self, commit: Commit | str) -> PinSet:
        sha = commit.sha if isinstance(commit, Commit) else str(commit)
        if sha not in self._seen:
            parent = commit.parents[0] if isinstance(commit, Commit) and commit.parents else None
            if parent in self._seen and not set(self.repo.changed_paths(commit)) & self._watched:
                self._seen[sha] = self._seen[parent]  # no pin file changed: its parent's pins (one git call less per file)
            else:
                self._seen[sha] = commit_pins(self.repo, sha, self.pin_files, self.rules, self.stack)
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
    kernel: str | None = None  # SGLang's kernel as pinned, under the commit's name for it ("sglang-kernel==0.4.0")
    companions: tuple[str, ...] = ()  # requirements carried because a pinned package needs them beside it

    def span(self, short: Callable[[str], str] = lambda s: s[:10]) -> str:
        """"a1b2c3d4e5..f6a7b8c9d0 (12 commits)", or one sha."""
        return span_text(self.commits, short)


def span_text(commits: Sequence[str], short: Callable[[str], str] = lambda s: s[:10]) -> str:
    """"a1b2c3d4e5..f6a7b8c9d0 (12 commits)" for consecutive commits, or one sha."""
    if len(commits) == 1:
        return short(commits[0])
    return f"{short(commits[0])}..{short(commits[-1])} ({len(commits)} commits)"


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
