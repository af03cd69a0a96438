"""The search's state as the gates read it: the range and its budget (``Range``), and one decision's immutable view
(``View``) — the data, the posterior fitted on it and what the endpoints say under it.

``look`` builds a view once both endpoints are measured; a gate that passes knowing more (a kept doubt, the located
changes sized, the ones a layout re-check set aside) hands the next gate ``dataclasses.replace``'s copy, so what the
verdict reads is what every gate before it saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from .change_posterior import ChangePosterior
from .effects import Step, endpoint_comparison, ruled_out_pct
from .kernel import level_prior_ratio, own_dof
from .observations import Named, SearchData
from ..model import Comparison, Reason


@dataclass(frozen=True)
class Range:
    """The candidate commits (good first, bad last) and the trial budget over them."""

    commits: tuple[str, ...]
    max_total: int  # stats.max_trials_total
    max_per_commit: int  # stats.max_trials_per_commit (0: no cap per commit)
    index: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", {c: i for i, c in enumerate(self.commits)})

    @property
    def n(self) -> int:
        return len(self.commits)

    @property
    def cap(self) -> int:
        """Trials one commit may carry."""
        return self.max_per_commit or self.max_total

    def left(self, data: SearchData) -> int:
        """Trials of the budget not yet started."""
        return self.max_total - data.spent - len(data.pending)

    def budget_left(self, data: SearchData, i: int) -> bool:
        """Whether commit ``i`` may have one more trial (the total and the per-commit cap)."""
        return data.spent + len(data.pending) < self.max_total and data.count(i) < self.cap

    def parent(self, b: int, data: SearchData) -> int:
        """The testable commit before ``b`` (the good endpoint at the latest)."""
        p = b - 1
        while p > 0 and p in data.untestable:
            p -= 1
        return p

    def skipped_before(self, b: int, data: SearchData) -> list[int]:
        """The untestable commits right before ``b``, oldest first: they share a change located at ``b``."""
        out = []
        i = b - 1
        while i > 0 and i in data.untestable:
            out.append(i)
            i -= 1
        return sorted(out)

    def sets(self, key, data: SearchData) -> tuple[tuple[str, ...], ...]:
        """Each change of ``key`` as the commits that may carry it: the untestable ones before it, then it."""
        return tuple(tuple(self.commits[i] for i in (*self.skipped_before(b, data), b)) for b in key)

    def named(self, key, data: SearchData) -> Named:
        """Each change of ``key`` as progress names it: the testable commit at or after it, and how many untestable
        commits before that one share the blame (never an untestable commit by name)."""
        parts = []
        for b in key:
            while b in data.untestable and b < self.n - 1:
                b += 1
            parts.append((self.commits[b], len(self.skipped_before(b, data))))
        return tuple(parts)


@dataclass(frozen=True)
class View:
    """What one decision knows once both endpoints are measured (``look``), and what the gates found on the way."""

    data: SearchData  # the observations regrouped, with the trials in flight
    host: str | None  # the node this decision is for (``next_batch`` with hosts); None = any
    post: ChangePosterior
    counts: tuple[int, ...]  # usable trials per commit
    ends: Comparison  # the endpoints' comparison (bad vs good) at alpha
    p_better: float  # probability of a gain beyond the minimum effect, at this look's share of alpha, own dof
    ruled_out: float | None  # the regression the endpoints rule out at this look's level (percent)
    top_key: tuple[int, ...]  # the best answer: () no change, (k,) one change, (k1, k2) two
    top_p: float  # its posterior probability
    ends_ok: bool  # both endpoints carry tuning.min_trials_per_side trials
    tol: float  # the regression a `same` must rule out (percent; 0 = none)
    level_ratio: float  # the levels' prior variance in σ² units (kernel.level_prior_ratio)
    doubt: float | None = None  # p_two a second change keeps that no trial is expected to settle
    steps: tuple[Step, ...] = ()  # each located change, sized under the posterior
    layout_sensitive: tuple[Step, ...] = ()  # changes that did not survive another layout
    # a later change located beside a named one whose own check the budget could not settle: said, not named
    unsettled: tuple[Step, ...] = ()
    unsettled_check: "Reason | None" = None  # what it still had to show
    unsettled_price: int | None = None  # about how many more trials would settle it (None: beyond counting)


def look(data: SearchData, host: str | None, post: ChangePosterior, settings, *, sigma0: float,
         higher_is_better: bool, same_alpha_share: float, min_trials_per_side: int, tol: float) -> View:
    """The view of one decision: the posterior and what the endpoints say under it.

    What the endpoints rule out is looked at after every trial, so each look uses a stricter level
    (``same_alpha_share`` of alpha) for the claim "no regression ≥ X% at 1 − alpha" to hold over all looks, and
    with the degrees of freedom of this bisection's own trials, not the prior's pseudo-trials: a stored σ may be
    several times too small (issue #19), so it must not make the bound tight early. No verdict rests on fewer
    than ``min_trials_per_side`` trials of each endpoint (``ends_ok``)."""
    counts = [len(v) for v in data.values]
    ratio = level_prior_ratio(data, sigma0)
    ends, _ = endpoint_comparison(post, counts, ratio, settings, higher_is_better)
    seq, p_better_seq = endpoint_comparison(
        post, counts, ratio, replace(settings, alpha=settings.alpha * same_alpha_share), higher_is_better,
        dof=own_dof(post, data),
    )
    top_key, top_p = post.answer()
    ends_ok = min(counts[0], counts[-1]) >= min_trials_per_side
    return View(data, host, post, tuple(counts), ends, p_better_seq, ruled_out_pct(seq, higher_is_better), top_key,
                top_p, ends_ok, tol, ratio)


__all__ = ["Range", "View", "look"]
