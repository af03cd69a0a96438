"""How big a change is, read off the change-point posterior: the numbers behind a bisection's verdict.

Pure functions of a ``change_posterior.ChangePosterior`` and the trial counts per commit (no I/O):

- ``located_step``: the step at a located change under the most probable hypothesis naming it, with
  the trials on each side;
- ``step_comparison``: that step as the culprit's ``Comparison`` (effect, interval, noise, trials);
- ``endpoint_comparison``: bad vs good endpoint from every trial (each measured commit its own
  level, drift as in the posterior), and the probability that the bad end is faster;
- ``ruled_out_pct``: the size of regression the endpoints already rule out.

Both comparisons are Student-t intervals on a difference of posterior levels (``change_posterior.level_step``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .change_posterior import ChangePosterior, level_step
from ..settings import StatsConfig
from ..model import Comparison, Verdict
from ..metrics import level_text
from .stats import log_of_pct, pct, t_cdf, t_quantile


@dataclass(frozen=True)
class Step:
    """A change's size under the posterior: step (log), its scale, dof and the trials on each side."""

    at: int
    parent: int
    step: float
    se: float
    dof: float
    n_before: int
    n_after: int
    sigma: float


def is_regression(step: float, higher_is_better: bool) -> bool:
    """Whether a step (log) makes the metric worse."""
    return step < 0 if higher_is_better else step > 0


def located_step(post: ChangePosterior, key: tuple[int, ...], b: int, parent: int, counts: Sequence[int]) -> Step:
    """Size of the change at ``b`` under the most probable hypothesis with answer ``key``.

    ``counts``: usable trials per commit; ``parent``: the testable commit before ``b``.
    """
    h = post.top(key)
    k = 1 if len(key) == 1 or b == key[0] else 2  # which boundary of the hypothesis b is
    # The culprit's step has always read the lower triangle cov[b, a]; transposed here, its interval
    # keeps the same bits (inversion leaves cov not quite symmetric, see level_step).
    d, se = level_step(post.beta[h], post.cov[h].T, post.s2[h], k - 1, k)
    bounds = [0, int(post.b1[h]), int(post.b2[h]), post.n]
    n_before, n_after = (sum(counts[bounds[i]:bounds[i + 1]]) for i in (k - 1, k))
    return Step(b, parent, float(d), float(se), post.dof, n_before, n_after, math.sqrt(post.s2[h]))


def step_comparison(st: Step, verdict: Verdict, settings: StatsConfig) -> Comparison:
    """The located step as a comparison of the commits from it on against the commits before it."""
    p_not = t_cdf(-abs(st.step) / st.se, st.dof) if st.se > 0 else 0.0
    return _comparison(
        verdict, st.step, st.se, st.dof, st.sigma, st.n_before, st.n_after, settings, p_value=p_not,
        lead="",
        tail=(f" from {st.n_before} trials before the change to {st.n_after} from it on; "
              f"probability the step goes the other way {p_not:.1g}."),
    )


def endpoint_comparison(
    post: ChangePosterior, counts: Sequence[int], level_ratio: float, settings: StatsConfig, higher_is_better: bool,
    dof: float | None = None, noise_text: str | None = None, hypothesis: int | None = None,
) -> tuple[Comparison, float]:
    """Bad vs good endpoint from every trial: one level per measured commit, drift as in the posterior.

    The drift scale is the posterior's most probable one; the noise is the posterior's σ, so
    midpoint trials sharpen the endpoints' comparison through σ and the drift path. ``level_ratio``
    is the level prior's width as in the posterior; ``dof`` (default the posterior's) the Student-t
    degrees of freedom of the interval; ``noise_text`` what its explanation says of the noise (default
    "noise X% per trial" at the posterior's σ); ``hypothesis`` the (hypothesis, ρ) pair whose drift scale and σ
    it reads (default the most probable: a verdict naming a change passes its own, so that the endpoints'
    noise is the verdict's). Returns the comparison and the probability that the bad end is *better* beyond
    the minimum effect.
    """
    s = settings
    h = post.top() if hypothesis is None else int(hypothesis)
    fit = post.fits[int(post.rho_index[h])]
    # Saturated model: every measured commit its own level (level prior as in the posterior).
    # (a long range's posterior keeps columns for its measured commits and endpoints only: the others'
    # levels are the prior's and do not enter the endpoints' contrast)
    M = fit.W.T @ fit.W + np.eye(fit.W.shape[1]) / level_ratio
    rhs = fit.W.T @ fit.u
    cov = np.linalg.inv(M)
    beta = cov @ rhs
    good, bad = 0, fit.W.shape[1] - 1
    s2 = float(post.s2[h])
    d, se = (float(x) for x in level_step(beta, cov, s2, good, bad))
    dof = post.dof if dof is None else dof
    m = log_of_pct(s.min_effect_pct)
    p_worse = t_cdf((-m - d) / se, dof) if higher_is_better else 1.0 - t_cdf((m - d) / se, dof)
    p_better = 1.0 - t_cdf((m - d) / se, dof) if higher_is_better else t_cdf((-m - d) / se, dof)
    if p_worse >= s.confidence:
        verdict = Verdict.REGRESSED
    elif p_better >= s.confidence:
        verdict = Verdict.IMPROVED
    elif t_cdf((m - d) / se, dof) - t_cdf((-m - d) / se, dof) >= s.confidence:
        verdict = Verdict.SAME
    else:
        verdict = Verdict.INCONCLUSIVE
    sigma = math.sqrt(s2)
    n_a, n_b = counts[good], counts[bad]
    return _comparison(
        verdict, d, se, dof, sigma, n_a, n_b, settings, p_value=None,
        lead="bad vs good ",
        tail=(f" from {n_b} + {n_a} trials, {noise_text or f'noise {pct(sigma):.1f}% per trial'}; "
              f"probability of a regression beyond {s.min_effect_pct:g}% (stats.min_effect_pct): {p_worse:.2g}."),
    ), p_better


def ruled_out_pct(cmp: Comparison, higher_is_better: bool) -> float | None:
    """The size of regression the endpoints already rule out at 1 − alpha (one-sided), in percent."""
    bound = cmp.ci_low_pct if higher_is_better else cmp.ci_high_pct
    if not math.isfinite(bound):
        return None
    size = -bound if higher_is_better else bound
    return max(size, 0.0)


def _comparison(verdict: Verdict, d: float, se: float, dof: float, sigma: float, n_a: int, n_b: int,
                settings: StatsConfig, *, p_value: float | None, lead: str, tail: str) -> Comparison:
    """A posterior step (log) as a Comparison with its one-sided 1 − alpha bounds (a 1 − 2·alpha interval)."""
    half = t_quantile(1.0 - settings.alpha, dof) * se
    lo, hi = pct(d - half), pct(d + half)
    return Comparison(
        verdict=verdict,
        effect_pct=pct(d),
        ci_low_pct=lo,
        ci_high_pct=hi,
        sigma_b_pct=pct(sigma),
        sigma_source=f"{dof:g} dof, drift integrated out",
        n_a=n_a,
        n_b=n_b,
        p_value=p_value,
        min_effect_pct=settings.min_effect_pct,
        explanation=(
            f"{lead}{pct(d):+.1f}% ({level_text(100 * (1 - 2 * settings.alpha))} interval [{lo:+.1f}%, {hi:+.1f}%])" + tail
        ),
        level_pct=100 * (1 - 2 * settings.alpha),
    )


__all__ = ["Step", "endpoint_comparison", "is_regression", "located_step", "ruled_out_pct", "step_comparison"]
