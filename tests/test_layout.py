"""Layouts (issue #19): what a trial varies that the commit does not control, and what it records."""

from __future__ import annotations

import pytest

from perfbisect.layout import FIXED, HASH_SEED_MAX, PAD_VAR, Layout, choose, joined
from perfbisect.settings import LayoutConfig


# --- the draw ----------------------------------------------------------------------------------


def test_a_layout_id_names_it_and_its_env_is_what_it_adds():
    layout = Layout(slot=2, env_pad=1733, hash_seed=40211)
    assert layout.id == "s2-e1733-h40211" and Layout.parse(layout.id) == layout
    assert layout.env() == {PAD_VAR: "x" * 1733, "PYTHONHASHSEED": "40211"}
    assert FIXED.id == "s0-e0" and Layout.parse("s0-e0") == FIXED and FIXED.fixed and FIXED.env() == {}
    assert Layout(slot=1, env_pad=0).env() == {}
    with pytest.raises(ValueError, match="not a layout id"):
        Layout.parse("s2-e1733-h")
    assert joined([Layout(1, 2, 3), None, FIXED]) == "s1-e2-h3+s0-e0" and joined([None]) is None


def test_draws_are_reproducible_differ_between_trials_and_stay_in_range():
    settings = LayoutConfig()
    draws = [choose(settings, commit="a" * 40, mode="baseline", counter=n) for n in range(64)]
    assert draws == [choose(settings, commit="a" * 40, mode="baseline", counter=n) for n in range(64)]
    assert {d.slot for d in draws} == set(range(settings.path_slots))
    assert len({d.env_pad for d in draws}) > 50 and all(0 <= d.env_pad <= settings.env_pad_max for d in draws)
    assert all(1 <= d.hash_seed <= HASH_SEED_MAX for d in draws)
    assert choose(settings, commit="b" * 40, mode="baseline", counter=0) != draws[0]
    assert choose(settings, commit="a" * 40, mode="eagle3", counter=0) != draws[0]
    assert choose(settings, commit="a" * 40, mode="baseline", counter=0, hash_seed_pinned=True).hash_seed is None
    assert choose(LayoutConfig(randomize=False), commit="a" * 40, mode="baseline", counter=5) == FIXED
    narrow = LayoutConfig(env_pad_max=0, path_slots=1, hash_seed=False)
    assert {choose(narrow, commit="a" * 40, mode="m", counter=n) for n in range(16)} == {FIXED}
