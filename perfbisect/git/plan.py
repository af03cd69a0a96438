"""The plan of a range good..bad: which commits would be measured, filtered or skipped, and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .gitrepo import TargetRepo
from ..model import Commit
from .pathfilter import PathFilter
from .patches import PatchCheck, PatchConflict, PatchStack


def span_text(commits: Sequence[str], short: Callable[[str], str] = lambda s: s[:10]) -> str:
    """"a1b2c3d4e5..f6a7b8c9d0 (12 commits)" for consecutive commits, or one sha."""
    if len(commits) == 1:
        return short(commits[0])
    return f"{short(commits[0])}..{short(commits[-1])} ({len(commits)} commits)"


@dataclass(frozen=True)
class PlanWarning:
    """Bad input found while planning that does not stop the run (shown to the user)."""

    kind: str  # "filter-matches-nothing"
    message: str
    pattern: str = ""

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class PlanEntry:
    """One commit of the range: whether it would be measured, and why (not)."""

    commit: Commit
    measure: bool
    reason: str
    changed_paths: tuple[str, ...] = ()
    filtered: bool = False  # only ignorable paths changed: inherits the result of `inherits_from`
    inherits_from: str | None = None
    patch_variants: tuple[tuple[str, str], ...] | None = None  # (patch, file applied); None = not checked
    applied_hash: str | None = None
    conflict: PatchConflict | None = None
    merged_count: int = 0
    skip: str | None = None  # marked untestable by hand or in [filters] skip: why

    @property
    def skipped(self) -> bool:
        """Cannot be tested (patch conflict, or marked so): never measured, never blamed."""
        return self.conflict is not None or self.skip is not None


@dataclass(frozen=True)
class StepSpan:
    """Consecutive commits of a range at which a build step builds from one source directory."""

    source: str | None  # the directory of its [build.steps] sources; None: none exists, the step does not run
    commits: tuple[str, ...]  # full shas, oldest first

    def span(self) -> str:
        return span_text(self.commits)


@dataclass(frozen=True)
class StepPlan:
    """One build step across the range: what it is keyed on, and where its sources are at each commit."""

    name: str
    cached: bool  # declares artifacts (restored by content) rather than running at every trial
    python_only: bool
    spans: tuple[StepSpan, ...] = ()  # only for a step with sources; empty: it builds the same paths everywhere
    paths: tuple[str, ...] = ()


def step_plans(repo: TargetRepo, commits: Sequence[Commit], steps: Sequence) -> tuple[StepPlan, ...]:
    """Each build step of ``steps`` over ``commits``: for a step with ``sources``, the first of them that is a
    directory at each commit (read from git, no checkout), as spans of consecutive commits."""
    out = []
    for step in steps:
        spans: list[StepSpan] = []
        if step.sources:
            for c in commits:
                source = step.source_at(lambda rel, sha=c.sha: repo.is_dir_at(sha, rel))
                if spans and spans[-1].source == source:
                    spans[-1] = StepSpan(source, spans[-1].commits + (c.sha,))
                else:
                    spans.append(StepSpan(source, (c.sha,)))
        out.append(StepPlan(step.name, bool(step.artifacts) and step.cache, step.python_only, tuple(spans), tuple(step.paths)))
    return tuple(out)


@dataclass(frozen=True)
class Plan:
    """The range good..bad (first-parent), one entry per commit, plus warnings about bad input."""

    good: Commit
    bad: Commit
    entries: tuple[PlanEntry, ...]
    warnings: tuple[PlanWarning, ...] = ()
    filters: tuple[str, ...] = ()
    patch_hash: str | None = None
    default_filters: tuple[str, ...] = ()  # the target's built-in patterns among ``filters`` (SGLang's)
    default_filters_of: str | None = None  # whose they are ("SGLang"); None: no defaults apply
    user_filters: tuple[str, ...] = ()  # [filters] ignore
    filters_note: str = ""  # which filters apply and why, in one line
    # commits by environment ([environment]: measure.environments.EnvGroup, one lock each), in order
    environments: tuple[Any, ...] = ()
    environments_note: str = ""  # how they were resolved (as of which date, how long it took)
    build_steps: tuple[StepPlan, ...] = ()  # [[build.steps]] over the range: where each builds from, cached or not

    @property
    def measured(self) -> list[PlanEntry]:
        return [e for e in self.entries if e.measure]

    @property
    def filtered(self) -> list[PlanEntry]:
        return [e for e in self.entries if e.filtered and not e.measure and not e.skipped]

    @property
    def skipped(self) -> list[PlanEntry]:
        return [e for e in self.entries if e.skipped]

    def entry(self, sha: str) -> PlanEntry:
        """The entry of a commit (full sha or unique prefix)."""
        for e in self.entries:
            if e.commit.sha.startswith(sha):
                return e
        raise KeyError(sha)

    @property
    def commits(self) -> list[Commit]:
        return [e.commit for e in self.entries]


def plan_range(
    repo: TargetRepo,
    good: str,
    bad: str,
    filters: PathFilter | None = None,
    stack: PatchStack | None = None,
    check_patches: bool = False,
    skipped: Mapping[str, str] | None = None,
) -> Plan:
    """List good..bad: which commits would be measured, which are skipped or filtered, and why.

    ``skipped``: commits marked untestable (sha -> why); an endpoint is measured all the same
    (a warning says so), a commit only filtered paths changed stays filtered.
    """
    filters = filters or PathFilter(())
    skipped = skipped or {}
    commits = repo.first_parent_range(good, bad)
    checks = {c.commit.sha: c for c in stack.check_range(commits)} if (stack is not None and check_patches) else {}
    return Plan(
        good=commits[0],
        bad=commits[-1],
        entries=tuple(_entries(repo, commits, filters, checks, skipped)),
        warnings=tuple(_skipped_endpoints(commits, skipped) + _unused_filters(repo, commits, filters)),
        filters=filters.patterns,
        patch_hash=stack.hash if stack is not None else None,
    )


def _entries(repo: TargetRepo, commits: Sequence[Commit], filters: PathFilter, checks: Mapping[str, PatchCheck],
             skipped: Mapping[str, str]) -> list[PlanEntry]:
    """One entry per commit, oldest first: measured (an endpoint, a merge, a change), or not and why (a
    patch conflict; only filtered paths changed, so it inherits the last testable commit's result; marked
    untestable)."""
    entries: list[PlanEntry] = []
    last_testable: str | None = None
    for i, c in enumerate(commits):
        endpoint = "good endpoint" if i == 0 else ("bad endpoint" if i == len(commits) - 1 else "")
        paths = repo.changed_paths(c) if i > 0 else ()
        filtered = i > 0 and filters.only_ignored(paths)
        merged = repo.merged_count(c) if c.is_merge else 0
        check = checks.get(c.sha)
        variants = check.applied.applied if check is not None and check.applied is not None else None
        applied_hash = check.applied.hash if check is not None and check.applied is not None else None
        common = dict(
            commit=c, changed_paths=paths, patch_variants=variants, applied_hash=applied_hash, merged_count=merged
        )
        if check is not None and check.conflict is not None:
            entries.append(
                PlanEntry(measure=False, reason=f"patch conflict: {check.conflict.describe()}", conflict=check.conflict, filtered=filtered, **common)
            )
            continue
        if endpoint:
            extra = f", merge of {merged} commits" if merged else ""
            entries.append(PlanEntry(measure=True, reason=endpoint + extra, filtered=filtered, **common))
        elif filtered:
            what = f"only {_describe_paths(paths)}" if paths else "no changed paths"
            entries.append(
                PlanEntry(measure=False, reason=f"filtered: {what}", filtered=True, inherits_from=last_testable, **common)
            )
            continue
        elif c.sha in skipped:
            entries.append(PlanEntry(measure=False, reason=skipped[c.sha], skip=skipped[c.sha], **common))
            continue
        elif merged:
            entries.append(PlanEntry(measure=True, reason=f"merge of {merged} commits", **common))
        else:
            entries.append(PlanEntry(measure=True, reason=f"changes {len(paths)} path{'s' if len(paths) != 1 else ''}", **common))
        last_testable = c.sha
    return entries


def _skipped_endpoints(commits: Sequence[Commit], skipped: Mapping[str, str]) -> list[PlanWarning]:
    """An endpoint marked untestable: measured all the same, and said so."""
    warnings = []
    for c in (commits[0], commits[-1]):
        if c.sha in skipped:
            warnings.append(PlanWarning(
                "endpoint-skipped",
                f"{c.short} is marked untestable ({skipped[c.sha]}) but is an endpoint of the range: endpoints are "
                f"always measured. Pick another endpoint, or undo the mark (`perfbisect skip --undo {c.short}`).",
            ))
    return warnings


def _unused_filters(repo: TargetRepo, commits: Sequence[Commit], filters: PathFilter) -> list[PlanWarning]:
    """A path filter that matches no changed path of the range and no file of either endpoint (a typo)."""
    warnings = []
    if filters.patterns:
        universe: set[str] = set()
        for c in commits[1:]:
            universe.update(repo.changed_paths(c))
        unused = filters.unused_patterns(universe)
        if unused:
            for path in (*repo.files_at(commits[0]), *repo.files_at(commits[-1])):
                universe.add(path)
            unused = filters.unused_patterns(universe)
        for pat in unused:
            warnings.append(
                PlanWarning(
                    "filter-matches-nothing",
                    f"Path filter '{pat}' matches no file in {commits[0].short}..{commits[-1].short} (neither "
                    f"the endpoints' files nor any changed path). Fix its spelling in [filters] ignore; "
                    f"patterns are full paths from the repository root and '**' spans directories.",
                    pat,
                )
            )
    return warnings


def _describe_paths(paths: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")
