"""The look-ahead asked about both change positions (issue #35's "what would move the engine onto the curve").

Run from the repository root:
    .venv/bin/python benchmarks/issue35/pair_lookahead.py S2,S5 100 300000 out.json [default,pair]
(WORKERS=N processes, 2 by default).

The engine's look-ahead scores a trial by the information it gives about "where is the first change" and "how
many changes" while one change is likelier (``lookahead.answer_groups``); ``bayes-learner-2`` scores it by the
information about the pair (k1, k2) itself, whose entropy also holds where a second change would be. Variant
"pair": the engine's look-ahead with the whole answer as its target at every step (the rest of the engine as it
is). This is an exploration: the variant is the look-ahead's ``groups`` in its own policy's ``Locate`` and
``SecondChangeDoubt`` gates (``gates.Search.groups``); nothing of the product changes. Seeds are paired: each variant sees the same targets.
"""
import json
import sys

import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks"))
import strategies as S  # noqa: E402
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import paired  # noqa: E402
from dataclasses import replace  # noqa: E402

from perfbisect.engine import gates, lookahead  # noqa: E402

_ORIGINAL = lookahead.answer_groups


def _looking_at(groups):
    """A variant: the search's look-ahead scores trials by the information they give about ``groups``."""
    def variant(policy):
        policy.gates = tuple(replace(g, search=replace(g.search, groups=groups))
                             if isinstance(g, (gates.Locate, gates.SecondChangeDoubt)) else g for g in policy.gates)
    return variant


def _pair_groups(post, keep):
    """One one-hot map: the answer itself ((), (b,) or (b1, b2)) at every step."""
    keys = [post.keys[i] for i in keep.tolist()]
    ids: dict = {}
    col = np.array([ids.setdefault(k, len(ids)) for k in keys])
    oh = np.zeros((len(keys), len(ids)))
    oh[np.arange(len(keys)), col] = 1.0
    return [oh]


VARIANTS = {"default": _ORIGINAL, "pair": _pair_groups}


def one(args):
    variant, cell, seed = args
    t = S.make_target(S.SCENARIOS[cell], seed)
    t.seed = seed
    row = S.score(t, S.run_perfbisect(t, variant=_looking_at(VARIANTS[variant])))
    return variant, cell, {k: row[k] for k in ("correct", "false_blame", "trials", "wrong_first", "extra_named")}


def main():
    summary, base, out, seconds = paired.run(one, list(VARIANTS), sys.argv[1:])
    json.dump({"summary": summary, "seed_base": base, "seconds": seconds}, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
