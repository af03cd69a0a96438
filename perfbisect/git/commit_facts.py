"""What a report shows of the target's commits, read from the repository by the use case that renders it.

A report renders from the results database and from ``model.RepoFacts``, plain values gathered here
once: each commit's subject, author and date, the files the commits the answer names changed, the
forge (``origin``) the report links to, and which patch variants applied where. The target may have
moved since the bisection ran: then every fact is simply missing and the report says so; nothing
here stops a report from rendering.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

from ..errors import PerfbisectError
from ..model import RepoFacts


class _Repo:
    """Commit details from the target repository through ``gitrepo.TargetRepo``, or nothing."""

    def __init__(self, path: str | None):
        self.repo = None
        self.remote = None
        if not path or not Path(path).is_dir():
            return
        try:
            from .gitrepo import TargetRepo

            self.repo = TargetRepo(path)
            code, out, _ = self.repo.run("remote", "get-url", "origin")
            self.remote = out.strip() if code == 0 else None
        except (PerfbisectError, OSError):
            self.repo = None

    def commits(self, shas: Sequence[str]) -> dict[str, dict[str, Any]]:
        if self.repo is None or not shas:
            return {}
        out: dict[str, dict[str, Any]] = {}
        try:
            text = self.repo.git("show", "-s", "--format=%H%x1f%an%x1f%ae%x1f%aI%x1f%cI%x1f%s%x1e", *dict.fromkeys(shas))
        except (PerfbisectError, OSError):
            return {}
        for record in text.split("\x1e"):
            parts = record.strip().split("\x1f")
            if len(parts) == 6:
                sha, name, email, date, committed, subject = parts
                out[sha] = {"author": name, "email": email, "date": date, "committed": committed, "subject": subject}
        return out

    def files(self, sha: str) -> list[str]:
        if self.repo is None:
            return []
        try:
            return list(self.repo.changed_paths(sha))
        except (PerfbisectError, OSError):
            return []

    def range(self, good: str, bad: str) -> list[str]:
        """Every first-parent commit of good..bad, oldest first (filtered ones included)."""
        if self.repo is None:
            return []
        try:
            return [c.sha for c in self.repo.first_parent_range(good, bad)]
        except (PerfbisectError, OSError):
            return []


def patch_variants(repo: _Repo, config: Any, shas: Sequence[str]) -> dict[str, str]:
    """Per commit, which patch files of the stack applied where a variant replaced the default one."""
    patches = getattr(config, "patches", None)
    if repo.repo is None or patches is None or not (patches.dir or patches.branch):
        return {}
    from .patches import PatchStack

    out: dict[str, str] = {}
    try:
        stack = PatchStack.load(patches, repo.repo)
    except (PerfbisectError, OSError):
        return {}
    try:
        for sha in shas:
            check = stack.check_at(sha)
            if not check.ok:
                out[sha] = "stack does not apply: " + check.conflict.describe()
            elif check.applied is not None:
                used = [Path(str(f)).name for _, f in check.applied.applied]
                out[sha] = "applied: " + ", ".join(used)
    except (PerfbisectError, OSError):
        pass
    finally:
        stack.cleanup()
    return out


def bisection_facts(store: Any, bisection_id: int, config: Any = None) -> RepoFacts:
    """What the report of one stored bisection shows of its commits: the whole range good..bad (the
    stored candidates when the repository no longer holds them all), every commit's details, the files
    of the commits the answer names, and the patch variants at each measured commit."""
    record = store.bisection(bisection_id)
    out = record.outcome
    repo = _Repo(record.target)
    candidates = list(record.commits)
    full = repo.range(record.good, record.bad) or candidates
    if not set(candidates) <= set(full):
        full = candidates
    extra = list(out.culprit_set) if out else []
    named = [s for s in (out.named_culprit, *out.culprit_set, *out.extra_changes, *out.improvements) if s] if out else []
    measured = {t.identity.commit for t in store.trials(bisection_id=bisection_id, status=None)}
    return RepoFacts(
        range=tuple(full),
        commits=repo.commits(list(dict.fromkeys(full + extra))),
        files={sha: tuple(repo.files(sha)) for sha in dict.fromkeys(named)},
        variants=patch_variants(repo, config, [s for s in full if s in measured]),
        remote=repo.remote,
    )


def comparison_facts(store: Any, comparison_id: int, config: Any = None) -> RepoFacts:
    """What the report of one stored comparison shows of its two commits (nothing when there is no
    such comparison: the report says so)."""
    record = next((c for c in store.comparisons(1 << 30) if c.id == comparison_id), None)
    if record is None:
        return RepoFacts()
    return commit_facts(config, (record.a, record.b))


def commit_facts(config: Any, shas: Iterable[str]) -> RepoFacts:
    """Each commit's details (author, date, subject) from the target repository ``config`` names
    (none without a config: a comparison stores no target)."""
    repo = _Repo(str(getattr(getattr(config, "target", None), "repo", "") or ""))
    return RepoFacts(commits=repo.commits(list(dict.fromkeys(shas))), remote=repo.remote)
