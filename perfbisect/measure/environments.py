"""Each commit's environment over a range: requirements → lock → environment, and what moves between them.

``Environments`` is what a command uses (``Workspace.environments``): the commit's requirement input
(``perfbisect.git.requirements``), its lock as of the range's resolution date (``resolver``), and the
environment built from the lock (``envs``). ``groups`` walks a range for ``plan``: the commits per
lock in order, whether each environment is built, why one cannot be (its commits untestable), and the
packages that change between consecutive environments, compiled ones first. ``prepare`` builds every
environment of a range before any GPU time is spent.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from ..errors import EnvironmentBuildError, InfrastructureError
from ..git.gitrepo import TargetRepo
from ..git.plan import span_text
from ..git.requirements import RequirementReader, RequirementSet
from ..model import Commit
from .envs import EnvCache, LockedEnv
from .resolver import Lock, Resolver, resolution_date

# Packages whose wheels carry compiled code (CUDA, C++): what a reader looks at first when an environment moves.
_COMPILED = re.compile(
    r"^(torch|torchaudio|torchvision|triton|xformers|flashinfer.*|sgl-.*|sglang-.*|.*kernel.*|nvidia-.*|cuda-.*|"
    r"cupy.*|deep-?gemm|deep-?ep|flash-?attn.*|flash-mla|tilelang|quack-kernels|vllm|numpy|numba|llvmlite|"
    r"xgrammar|outlines-core|tokenizers|safetensors|apache-tvm-ffi|humming-kernels|mooncake.*|nixl.*|cutlass.*|"
    r"decord.*|torchao|fastokens)$"
)


_FIRST = ("torch", "transformers", "triton", "flashinfer-python", "sgl-kernel", "sglang-kernel")


def is_compiled(name: str) -> bool:
    """Whether ``name`` is a package whose wheels carry compiled code (by name: known CUDA/C++ packages)."""
    return bool(_COMPILED.match(name))


@dataclass(frozen=True)
class Move:
    """One package that differs between two consecutive environments."""

    name: str
    old: str | None  # None: added
    new: str | None  # None: removed

    @property
    def compiled(self) -> bool:
        return is_compiled(self.name)

    def text(self) -> str:
        if self.old is None:
            return f"+{self.name} {self.new}"
        if self.new is None:
            return f"-{self.name} {self.old}"
        return f"{self.name} {self.old} → {self.new}"


def moves(old: dict[str, str], new: dict[str, str]) -> list[Move]:
    """What changes from ``old`` to ``new`` (name → version): torch, transformers, triton, flashinfer and the
    kernel first, then other compiled packages, then the rest, each by name."""
    out = [Move(n, old.get(n), new.get(n)) for n in sorted(set(old) | set(new)) if old.get(n) != new.get(n)]
    return sorted(out, key=lambda m: (_FIRST.index(m.name) if m.name in _FIRST else len(_FIRST), not m.compiled, m.name))


@dataclass(frozen=True)
class EnvGroup:
    """Consecutive commits of a range that run in one environment (or share one reason they cannot)."""

    commits: tuple[str, ...]  # full shas, oldest first
    lock_key: str | None  # None: no lock (see problem)
    packages: dict[str, str] = field(default_factory=dict)
    env: str | None = None  # where its environment is (or would be) kept
    built: bool = False
    problem: str | None = None  # why its commits are untestable (the commit's: no resolution, requires-python)
    unavailable: str | None = None  # why it could not be resolved here (the machine's: no network); not the commit's
    moves: tuple[Move, ...] = ()  # against the previous group with a lock
    resolved_as_of: str = ""
    first_subject: str = ""
    moved_since: str | None = None  # the first commit of the environment ``moves`` compares with
    unresolved_between: int = 0  # commits between the two that could not be resolved here (their moves are in these)

    def span(self) -> str:
        return span_text(self.commits)

    def highlights(self, limit: int = 5) -> list[str]:
        """The packages a reader looks for first: torch, transformers, triton, flashinfer and the kernel, then
        other compiled ones, ``limit`` at most."""
        first = [n for n in _FIRST if n in self.packages]
        rest = [n for n in sorted(self.packages) if is_compiled(n) and n not in first]
        return [f"{n}=={self.packages[n]}" for n in (first + rest)[:limit]]


@dataclass
class Environments:
    """Requirements → lock → environment for each commit of the commands' range."""

    repo: TargetRepo
    reader: RequirementReader
    resolver: Resolver
    cache: EnvCache
    policy: str = "bad"  # [environment] resolve_date
    bad_date: str | None = None  # the bad endpoint's commit date, once a command names its range (anchor)
    env_from: Commit | None = None  # every commit runs in this commit's environment (`compare --env-from`)
    last_resolution: tuple[int, float] = (0, 0.0)  # what the last ``groups`` resolved: distinct requirement sets, seconds
    _dates: dict[str, str] = field(default_factory=dict, repr=False)

    def anchor(self, bad: Commit | str) -> None:
        """Resolve unpinned requirements as of ``bad``'s commit date (the "bad" policy) for this command."""
        self.bad_date = self.commit_date(bad)

    def commit_date(self, commit: Commit | str) -> str:
        sha = commit.sha if isinstance(commit, Commit) else str(commit)
        if sha not in self._dates:
            status, out, _ = self.repo.run("show", "-s", "--format=%cI", sha, "--")
            self._dates[sha] = out.strip() if status == 0 and out.strip() else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return self._dates[sha]

    def date_for(self, commit: Commit | str) -> str:
        """The resolution cut-off for ``commit`` under the policy ("" for none)."""
        if self.policy == "now":
            return ""
        needs_own = self.policy == "commit" or (self.policy == "bad" and self.bad_date is None)
        own = self.commit_date(commit) if needs_own else ""
        return resolution_date(self.policy, commit_date=own, bad_date=self.bad_date)

    def _prefetch_dates(self, commits: Sequence[Commit]) -> None:
        """Every commit date of a first-parent range in one ``git log`` (a range of 7,000 commits is one call)."""
        if not commits or self.policy not in ("commit", "bad") or (self.policy == "bad" and self.bad_date):
            return
        status, out, _ = self.repo.run("log", "--first-parent", "--format=%H %cI", "-n", str(len(commits) + 1),
                                       commits[-1].sha, "--")
        if status == 0:
            for line in out.splitlines():
                sha, _, date = line.partition(" ")
                if date:
                    self._dates.setdefault(sha, date)

    def requirements(self, commit: Commit | str) -> RequirementSet:
        return self.reader(commit)

    def lock(self, commit: Commit | str) -> Lock:
        """``commit``'s lock (resolved unless kept; with ``env_from``, that commit's); EnvironmentBuildError /
        InfrastructureError as ``Resolver``."""
        if self.env_from is not None:
            commit = self.env_from
        return self.resolver.resolve(self.reader(commit), self.date_for(commit))

    def moved_at(self, parent: Commit | str, commit: Commit | str) -> list[Move] | None:
        """What moves between ``parent``'s environment and ``commit``'s (None when either has no lock)."""
        try:
            old = self.resolver.resolve(self.reader(parent), self.date_for(parent))
            new = self.resolver.resolve(self.reader(commit), self.date_for(commit))
        except (EnvironmentBuildError, InfrastructureError):
            return None
        return moves(old.packages, new.packages)

    def ensure(self, commit: Commit | str, *, upstream: bool = False) -> LockedEnv:
        """``commit``'s environment, resolved and built unless cached (``upstream``: of its requirement file as
        the commit has it, the patch stack not applied: a checkout used as it is)."""
        if upstream:
            return self.cache.ensure(self.resolver.resolve(self.reader.upstream(commit), self.date_for(commit)))
        return self.cache.ensure(self.lock(commit))

    def groups(self, commits: Sequence[Commit], *, resolve: bool = True, jobs: int = 4,
               on_progress: Callable[[int, int, float], None] | None = None) -> list[EnvGroup]:
        """The commits grouped by lock, in order (consecutive commits with one lock form a group; a lock met
        again after another is a new group), resolving every distinct requirement set (``jobs`` at once)
        unless ``resolve`` is False (then only what is kept is shown)."""
        self._prefetch_dates(commits)
        inputs = [(c, self.reader(c), self.date_for(c)) for c in commits]
        distinct: dict[str, tuple[RequirementSet, str]] = {}
        for _c, reqs, date in inputs:
            distinct.setdefault(self.resolver.key(reqs, date), (reqs, date))
        results: dict[str, Lock | str | InfrastructureError | None] = {}
        start = time.perf_counter()

        def one(item: tuple[str, tuple[RequirementSet, str]]) -> tuple[str, Lock | str | InfrastructureError | None]:
            key, (reqs, date) = item
            if not resolve:
                return key, self.resolver.cached(reqs, date)
            try:
                return key, self.resolver.resolve(reqs, date)
            except EnvironmentBuildError as exc:
                return key, str(exc)
            except InfrastructureError as exc:
                return key, exc

        todo = list(distinct.items())
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for i, (key, result) in enumerate(pool.map(one, todo), 1):
                results[key] = result
                if on_progress is not None:
                    on_progress(i, len(todo), time.perf_counter() - start)
        self.last_resolution = (len(todo), time.perf_counter() - start)
        out: list[EnvGroup] = []
        last_packages: dict[str, str] | None = None
        last_start: str | None = None  # the first commit of the last group with a lock
        gap = 0  # commits since it that have no lock
        for commit, reqs, date in inputs:
            result = results[self.resolver.key(reqs, date)]
            lock = result if isinstance(result, Lock) else None
            if lock is not None:
                group = EnvGroup((commit.sha,), lock.key, dict(lock.packages), str(self.cache.path(lock)),
                                 moves=tuple(moves(last_packages, lock.packages)) if last_packages is not None else (),
                                 resolved_as_of=lock.resolved_as_of, first_subject=commit.subject)
            elif isinstance(result, InfrastructureError):
                group = EnvGroup((commit.sha,), None, unavailable=str(result), resolved_as_of=date, first_subject=commit.subject)
            elif result is None:
                group = EnvGroup((commit.sha,), None, unavailable="not resolved yet (`perfbisect plan` resolves it)",
                                 resolved_as_of=date, first_subject=commit.subject)
            else:
                group = EnvGroup((commit.sha,), None, problem=str(result), resolved_as_of=date, first_subject=commit.subject)
            if out and _ident(out[-1]) == _ident(group):
                out[-1] = _extend(out[-1], commit.sha)
                gap += lock is None
                continue
            if lock is not None:
                failed = self.cache.failure(lock)
                group = replace(group, built=self.cache.lookup(lock) is not None, problem=failed,
                                moved_since=last_start if group.moves else None, unresolved_between=gap if group.moves else 0)
                last_packages, last_start, gap = lock.packages, commit.sha, 0
            else:
                gap += 1
            out.append(group)
        return out

    def prepare(self, commits: Sequence[Commit], on_step: Callable[[str], None] | None = None) -> list[tuple[EnvGroup, str]]:
        """Resolve and build the environment of every commit in ``commits``; per group what happened ("built in
        12.3 s", "cached", or why not)."""
        say = on_step or (lambda _m: None)
        done: list[tuple[EnvGroup, str]] = []
        groups = self.groups(commits)
        built: dict[str, str] = {}
        for i, group in enumerate(groups, 1):
            if group.lock_key is None:
                done.append((group, group.problem or group.unavailable or "no lock"))
                continue
            if group.lock_key in built:
                done.append((group, built[group.lock_key]))
                continue
            say(f"environment {i}/{len(groups)}: {group.span()} ({len(group.packages)} packages) ...")
            try:
                env = self.cache.ensure(self.lock(group.commits[0]))
                outcome = "cached" if env.cached else f"built in {env.seconds:.1f} s"
            except EnvironmentBuildError as exc:
                outcome = f"cannot be built: {exc}"
            except InfrastructureError as exc:  # this machine's: said, never kept against the commits
                outcome = f"not installed here: {exc}"
            built[group.lock_key] = outcome
            say(f"environment {i}/{len(groups)}: {outcome}")
            done.append((group, outcome))
        return done

    def close(self) -> None:
        self.cache.close()


def _ident(group: EnvGroup) -> object:
    return group.lock_key if group.lock_key else ("problem", group.problem or group.unavailable or "unresolved")


def _extend(group: EnvGroup, sha: str) -> EnvGroup:
    return replace(group, commits=group.commits + (sha,))
