"""The search's tuning constants: one table, every value with the reason it has (issue #35).

Each constant of ``bisect.SearchPolicy`` lives here as a field of the frozen ``Tuning``; the policy reads
``self.tuning`` (``DEFAULT_TUNING`` unless one is passed), so a test or a benchmark that wants another value
builds ``replace(DEFAULT_TUNING, name=value)`` and hands it to the policy instead of patching a module. The
numbers quoted in the comments are simulations of ``benchmarks/strategies.py`` (cells named as there; the
rounds are those of docs/benchmarks.md), measured on seeds 0–299; the held-out seeds of issue #35 (from
100,000) are where they are checked.
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
    # next to the change differ by residual_gap_z standard errors or more: one step would leave each side flat
    # (S5: the endpoints differ by ~16% while the located step is ~10%; what is left over is the second
    # change). Then each side must show a step of the usual size at residual_probe_z standard errors (the
    # floor stays: looking for a floor-sized step at this z is what cost S1 ~17 trials).
    residual_gap_z: float = 2.0  # at 1.0: S5 88%, S2 31.2 trials; at 2.0: S5 79%, S2 25.5 (docs/benchmarks.md)
    residual_probe_z: float = 4.0
    # Between residual_confirm_z and residual_gap_z standard errors the gap is measured again before one change is
    # accepted: the commit of the pair with fewer trials, until each has residual_confirm_max, while at least
    # residual_confirm_hidden commits between them have no trial (where a second change could hide unseen). S5's misses
    # were named after 14–19 trials with the second change's gap at 1–2 se on two trials a side; a real gap then grows
    # past residual_gap_z and the probe looks, noise shrinks back (100 seeds, round 7: S5 80 → 92%, S2 27.3 → 28.3
    # trials, S1 unchanged; at 4 a side 86%, at 8 no better than 6; without the unmeasured stretch S1 paid +1.6 trials).
    # Each side's gap is looked at, the larger first: a gap on the bad side was left alone while the good side's pair,
    # noise, used up its re-measures. From 0.85 se (round 8, 300 seeds: S5 89.0 → 91.7%, S2 27.6 → 28.4 trials; from
    # 0.7 S5 93.0% but S2 29.2; 1.0 with both sides looked at: 88% on seeds 100–199 against 87).
    residual_confirm_z: float = 0.85
    residual_confirm_max: int = 6
    residual_confirm_hidden: int = 4
    # Prior sd of one node's level offset (percent): how differently two nodes of one cluster may run the
    # same build. Modelled (a random effect integrated out of the change-point posterior) only when the
    # trials come from more than one node.
    host_offset_prior_pct: float = 5.0
    # No verdict of any kind rests on fewer trials than this on each side: `same` and `improved` on each
    # endpoint, `regressed` on the culprit and on its parent (min_trials_at_change).
    min_trials_per_side: int = 2
    # Trials before wild sessions are looked for (changepoint.outlier_scale): below it nothing is an outlier yet.
    robust_min_trials: int = 5
    # `same` by tolerance needs "no change" to be at least this likely: a regression the search can see is
    # located, not waved through because it is smaller than the tolerance.
    same_no_change: float = 0.5
    # The share of alpha one look may spend on "no regression ≥ X%" and on "the bad end is faster": both are
    # checked after every trial, and a fixed-level bound checked that often crosses by chance (checked by
    # simulation at the tolerance's edge, benchmarks/strategies.py TE and TE-R, and on every A/A twin).
    same_alpha_share: float = LOOK_ALPHA_SHARE
    # Layout re-check of a change smaller than stats.layout_check_pct: its commit and its parent each run
    # under at least layout_min_distinct layouts, and with any one layout's trials left out the step keeps
    # layout_keep of its size; up to layout_extra_trials trials beyond min_trials_at_change each go to it.
    layout_min_distinct: int = 2
    # A named change's own commit and its parent differ by at least this many standard errors on their own trials.
    local_z: float = 2.0
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
    # ends_before_naming on each endpoint: two sessions a side of a few-valued noise (R1 replays 4 sessions)
    # line up with a wrong split too often.
    small_step_sigmas: float = 4.0
    small_step_trials: int = 3
    ends_before_naming: int = 2
    # The t test above is looked at again after every further trial of the pair: look k (k = trials of the pair
    # beyond 2·min_trials_at_change, plus one) is at pure_alpha / k for the first pure_look_knee looks, so a pair
    # measured many times cannot cross it through a lucky run of sessions (R2's and TE-R's late wrong names came
    # after 18–70 trials; at 1/k, 300 seeds: false R2 2.7 → 1.0%, TE-R 2.7 → 0.7%, R1 1.0 → 0.3%, S1 11.1 → 11.4
    # trials). Past the knee the level falls as 1/k² (pure_alpha·KNEE / k²; the whole divisor is raised to
    # pure_look_power, 0 = one look): at 1/k alone the level spent grows like log k without bound, and with the
    # budget at 120 trials TE-R's pairs were looked at up to ~90 times (false names 1.0 → 1.3%); with the knee the
    # sum over any number of looks stays under 4·pure_alpha and no pair of at most 13 trials (k ≤ 10) is judged
    # differently from before (TE-R 1.0%, R1 56.4 → 61.6 trials, R2 43.5 → 46.7; 300 seeds each, round 6).
    pure_look_power: float = 1.0
    pure_look_knee: float = 10.0
    # One σ served the whole range: on a host whose sessions spread far more on one side of a change than on
    # the other (the H200 of the validation runs: 10.9% host-bound before its planted slowdown, 0.8% after), the
    # noisy side's wobble was named as a change (benchmarks/strategies.py HS: 2.7% of runs, its twin 1.0%). When
    # the repeats' spreads of the best answer's segments differ beyond chance (the two-sided F test of the
    # noisiest against the quietest at this level), each trial's variance is scaled by its segment's spread over
    # the quietest one's and the posterior refitted (HS 0.7%, twin 0.3%, at ~5 more trials; 21 cells with one
    # spread as before).
    side_scale_alpha: float = 0.02
    # Largest variance ratio a noisy segment's trials are given (20× the quietest segment's σ).
    side_scale_max: float = 400.0
    # Futility: while the endpoints are what is left to settle ("no change" likeliest, or the bad end faster) and
    # each has at least futility_min_per_end trials, the search stops `inconclusive` at once when ruling out the
    # tolerance would need more trials than the budget has left even on a hopeful reading of what was measured:
    # the noise at the lower futility_sigma_q bound of its estimate, the endpoints' difference one standard error
    # better than measured, and the normal quantile (as if the noise were known). On a shared dev machine (R2-AA:
    # ~16% a trial, the known-σ test needs ~800) the budget was spent to its end for a 13% chance of `same`; now
    # the answer comes with the price after ~20 trials. The hopeful reading takes the true difference as no worse
    # than none, so a regression measured so far never makes the count larger (R1's −8% and TE-R's −5% sit in
    # this branch while "no change" is likelier: their noise, not their difference, decides); and never while the
    # endpoints point to a regression of the tolerance or more: that is a range to locate, not to rule out.
    futility_min_per_end: int = 8
    futility_sigma_q: float = 0.1


DEFAULT_TUNING = Tuning()
