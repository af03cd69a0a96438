"""The search's tuning constants: one table, every value with the reason it has (issue #35).

Each constant of ``bisect.SearchPolicy`` lives here as a field of the frozen ``Tuning``; the policy reads
``self.tuning`` (``DEFAULT_TUNING`` unless one is passed), so a test or a benchmark that wants another value
builds ``replace(DEFAULT_TUNING, name=value)`` and hands it to the policy instead of patching a module. Each
comment says what its constant means and why it has its value; the simulations that chose the values
(benchmarks/strategies.py, cells and rounds named as there) are in docs/archive/benchmarks-notebook.md, "The
engine's tuning constants: how each value was chosen".
"""

from __future__ import annotations

from dataclasses import dataclass

from .stats import LOOK_ALPHA_SHARE


@dataclass(frozen=True)
class Tuning:
    """The search policy's constants (``SearchPolicy(..., tuning=...)``)."""

    # Prior probability that the range holds two changes rather than one.
    two_change_prior: float = 0.1
    # Prior probability that nothing changed in the range (the endpoints differ by noise only).
    no_change_prior: float = 0.5
    # Posterior of "no change" below which a located change may be named.
    no_change_doubt: float = 0.02
    # Posterior of a second change above which one change is not accepted yet, while trials can still
    # move it by at least min_gain_bits each.
    second_change_doubt: float = 0.04
    min_gain_bits: float = 0.05
    # The commits on each side of a named change carry at least this many trials each.
    min_trials_at_change: int = 2
    # While locating, a search whose decisive commits are out of budget and whose best next trial is
    # expected to remove less than this stops: the remaining budget cannot change the answer.
    locate_min_gain_bits: float = 0.01
    # Before one change is accepted, each side of it must carry enough trials, split anywhere, to show a
    # second level step of second_change_pct at settings.second_change_z standard errors: a second change
    # hides where nothing was measured.
    second_change_pct: float = 5.0
    # ...or second_change_share of the located step, or this many noise σ, whichever is biggest: below
    # second_change_sigmas·σ no affordable number of trials shows a step.
    second_change_share: float = 0.5
    second_change_sigmas: float = 1.5
    # Once the posterior suspects a second change (p_two ≥ second_change_doubt), each side must show a
    # step of the floor size at this many standard errors: the located step is overestimated when a second
    # change sits on its bad side, so a share of it would look weakest exactly there.
    suspected_change_z: float = 3.5
    # A second change is suspected too when, on either side of the located change, the endpoint and the commit
    # next to the change differ by this many standard errors or more: one step would leave each side flat.
    residual_gap_z: float = 2.0
    # ...then each side must show a step of the usual size at this many standard errors (the floor size at this
    # z costs a one-change range too many trials).
    residual_probe_z: float = 4.0
    # A gap between residual_confirm_z and residual_gap_z standard errors is measured again before one change is
    # accepted (each side's, the larger first): a real one grows past residual_gap_z and the probe looks, noise
    # shrinks back.
    residual_confirm_z: float = 0.85
    # ...on the pair's commit with fewer trials, until each has residual_confirm_max (more found nothing more),
    # while at least residual_confirm_hidden commits between them have no trial (where a second change could hide).
    residual_confirm_max: int = 6
    residual_confirm_hidden: int = 4
    # Prior sd of one node's level offset (percent): how differently two nodes of one cluster may run the
    # same build. Modelled (a random effect integrated out of the change-point posterior) only when the
    # trials come from more than one node.
    host_offset_prior_pct: float = 5.0
    # No verdict of any kind rests on fewer trials than this on each side: `same` and `improved` on each
    # endpoint, `regressed` on the culprit and on its parent (min_trials_at_change).
    min_trials_per_side: int = 2
    # `improved` (the bad end faster beyond min_effect_pct) on at least this many trials of each endpoint; on fewer
    # the endpoints may still end `same` by the tolerance ("the bad end is, if anything, faster").
    improved_min_per_side: int = 4
    # Trials before wild sessions are looked for (changepoint.outlier_scale): below it nothing is an outlier yet.
    robust_min_trials: int = 5
    # "No change" is the likelier story from this posterior on: the endpoints settle it (interleaved) rather than a
    # search locate a change, and `same` by tolerance needs it (a regression the search can see is located, not
    # waved through because it is smaller than the tolerance).
    same_no_change: float = 0.5
    # The share of alpha one look may spend on "no regression ≥ X%" and on "the bad end is faster": both are
    # checked after every trial, and a fixed-level bound checked that often crosses by chance.
    same_alpha_share: float = LOOK_ALPHA_SHARE
    # Layout re-check of a change smaller than stats.layout_check_pct: its commit and its parent each run
    # under at least layout_min_distinct layouts, and with any one layout's trials left out the step keeps
    # layout_keep of its size; up to layout_extra_trials trials beyond min_trials_at_change each go to it.
    layout_min_distinct: int = 2
    # Trials of a named change's commit and of its parent: enough that their own contrast would show the
    # step at change_trials_z standard errors (at least min_trials_at_change, at most max_trials_at_change).
    change_trials_z: float = 3.0
    max_trials_at_change: int = 8
    layout_keep: float = 0.5
    layout_extra_trials: int = 6
    # A named change's commit and parent must also differ on their own trials by a one-sided t test at this
    # level, with σ from the spread *within* commits (repeats of one build: it does not depend on where the change
    # is put, so a split that happens to line up with a few lucky sessions cannot shrink it) and its own dof.
    pure_alpha: float = 0.003
    # A named change smaller than this many σ (the larger of that spread and the stated σ: a few repeats of a
    # lumpy noise look tight by chance) carries at least small_step_trials trials on each side and
    # ends_before_naming on each endpoint: two sessions a side of a few-valued noise line up with a wrong split.
    small_step_sigmas: float = 4.0
    small_step_trials: int = 3
    ends_before_naming: int = 2
    # The t test above is looked at again after every further trial of the pair: look k (k = trials of the pair
    # beyond 2·min_trials_at_change, plus one) is at pure_alpha / k up to pure_look_knee looks and at
    # pure_alpha·knee / k² after it (the divisor raised to pure_look_power; 0 = one look), so a lucky run of sessions
    # cannot cross it and the level spent over any number of looks stays under 4·pure_alpha.
    pure_look_power: float = 1.0
    pure_look_knee: float = 10.0
    # When the repeats' spreads of the best answer's segments differ beyond chance (two-sided F test of the noisiest
    # against the quietest at this level), each trial's variance is scaled by its segment's spread over the quietest
    # one's and the posterior refitted: one σ for the whole range named a noisy side's wobble as a change.
    side_scale_alpha: float = 0.02
    # Largest variance ratio a noisy segment's trials are given (20× the quietest segment's σ).
    side_scale_max: float = 400.0
    # Futility: while the endpoints are what is left to settle and each has futility_min_per_end trials, the search
    # stops `inconclusive` at once, with the price, when ruling out the tolerance needs more trials than the budget
    # has left even on a hopeful reading — the noise at the lower futility_sigma_q bound of its estimate, the
    # difference a standard error better than measured and no worse than none, the normal quantile — rather than
    # spend the budget to its end for a small chance of `same`.
    futility_min_per_end: int = 8
    futility_sigma_q: float = 0.1


DEFAULT_TUNING = Tuning()
