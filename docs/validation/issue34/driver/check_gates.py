"""Issue #34 validation: for each stored bisection, is its verdict one whose own checks passed?

Per database: (1) the stored decisions replayed through the engine (every prefix of the observations; a
decision that differs from the live one is counted) and the final step's action recomputed from all of them;
(2) budget_exhausted / stopped_by from the stored outcome; (3) for a named culprit, an outside check that
does not use the engine: the culprit's and its parent's own stored trials (≥ 2 each) and Welch's t-test between
them (one-sided, scipy), with the pooled effect in percent.
"""
import json
import math
import sqlite3
import sys
from types import SimpleNamespace

from scipy import stats

from perfbisect.engine.observations import Done
from perfbisect.engine.search_start import observations_of, policy_for
from perfbisect.report.replay import replay, stored_start

for path in sys.argv[1:]:
    con = sqlite3.connect(path)
    row = con.execute("select commits, settings, search_start, outcome, verdict, culprit from bisections order by id desc limit 1").fetchone()
    commits, settings, start, outcome, verdict, culprit = row
    rec = SimpleNamespace(commits=json.loads(commits), settings=json.loads(settings),
                          search_start=json.loads(start) if start else None)
    out = json.loads(outcome)
    stored = [SimpleNamespace(commit=c, value=v, covariates=json.loads(cv), seq=s, recorded_at=at, flag=f, host=h,
                              layout=l, decision=json.loads(d) if d else None)
              for c, v, cv, s, at, f, h, l, d in con.execute(
                  "select commit_sha, value, covariates, seq, recorded_at, flag, host, layout, decision "
                  "from observations where bisection_id = (select max(id) from bisections) order by seq")]
    rp = replay(rec, stored, max_steps=10**6, work=10**12, cpu_cap_s=600)
    s, _ = stored_start(rec)
    final = policy_for(rec, s).next(observations_of(stored))
    again = final.outcome.verdict.value if isinstance(final, Done) else f"not done: {final.phase}"
    line = (f"{path.rsplit('/', 1)[-1]}: verdict {verdict}; replayed {rp['shown']}/{rp['total']} steps, "
            f"{rp['compared']} live decisions compared, {rp['mismatches']} differ; final step recomputed: {again}; "
            f"budget_exhausted {out.get('budget_exhausted')}, stopped_by {out.get('stopped_by')}")
    if culprit:
        i = rec.commits.index(culprit)
        vals = {}
        for o in stored:
            if o.value is not None and not o.flag:
                vals.setdefault(o.commit, []).append(o.value)
        # the parent is the nearest earlier commit with trials (filtered commits carry none)
        j = next(k for k in range(i - 1, -1, -1) if rec.commits[k] in vals)
        a, b = vals[rec.commits[j]], vals[culprit]
        t = stats.ttest_ind(b, a, equal_var=False, alternative="less" if out["effect_pct"] < 0 else "greater")
        eff = 100 * (math.exp(sum(b) / len(b) - sum(a) / len(a)) - 1)
        line += (f"; culprit {culprit[:10]} vs parent {rec.commits[j][:10]}: {len(b)} vs {len(a)} trials, "
                 f"{eff:+.1f}%, Welch t {t.statistic:.2f}, one-sided p {t.pvalue:.2g}")
    print(line)
