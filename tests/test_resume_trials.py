"""A kill between the trials of one observation (a ratio metric measures two modes per commit)
must not cost the finished trial: the resumed bisection uses it instead of measuring it again.

Real demo repository, real emulator servers, real SQLite; the kill is stood for by a new runner
(what a resumed process builds), so the test does not race a signal against a trial.
"""

from __future__ import annotations

import pytest

from perfbisect.measure.trials import TrialRunner
from perfbisect.app.workspace import Workspace
from perfbisect.config import load_config
from perfbisect.demo.target import make_demo_target

pytestmark = pytest.mark.slow


def test_a_stored_trial_no_observation_holds_is_used_once_not_remeasured(tmp_path):
    target = make_demo_target(tmp_path / "demo", commits=10)
    with Workspace.open(load_config(target.config), tmp_path / "r.sqlite") as ws:
        store = ws.store
        commit = ws.repo.resolve(target.bad)
        bid = store.begin_bisection(good=target.good, bad=target.bad, commits=[target.good, target.bad], metric="ratio:eagle3/baseline")
        first = TrialRunner(ws).trial(commit, "baseline", purpose="bisect", bisection_id=bid)
        assert first.summary is not None
        # ... killed here, before the eagle3 trial and the observation. The resumed process:
        resumed = TrialRunner(ws)
        again = resumed.trial(commit, "baseline", purpose="bisect", bisection_id=bid)
        assert again.id == first.id and len(store.trials(bisection_id=bid, status=None)) == 1
        spec = resumed.trial(commit, "eagle3", purpose="bisect", bisection_id=bid)  # the other mode is measured
        assert spec.id != first.id
        store.add_observation(bid, 0, commit.sha, spec.summary - again.summary, [again.id, spec.id])
        # Handed out once: the next observation of the same commit measures anew.
        later = resumed.trial(commit, "baseline", purpose="bisect", bisection_id=bid)
        assert later.id not in (first.id, spec.id)
        # A fresh runner (another resume) takes the one no observation holds (later), never the
        # trials the observation holds (first, spec).
        fresh = TrialRunner(ws).trial(commit, "baseline", purpose="bisect", bisection_id=bid)
        assert fresh.id == later.id
