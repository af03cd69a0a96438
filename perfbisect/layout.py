"""Layouts: what a trial varies that the commit under test does not control.

The size of the environment, the length of the working directory's path and Python's hash order
move where the stack, the heap and the interpreter's tables land, and with them timings: by several
percent with no change on the hot path (Mytkowicz et al., "Producing wrong data without doing
anything obviously wrong", ASPLOS 2009; measured here: +7-8% from a commit that only edited an
unused file, at one worktree path length only). Held fixed, such an effect is *bias*: it rides on
whichever commit happens to shift the layout and gets blamed on it. Drawn anew for every trial it
becomes *noise*, which the between-trial noise model already absorbs (Stabilizer, Curtsinger and
Berger, ASPLOS 2013, re-randomises layout for the same reason).

A ``Layout`` is one draw: the worktree slot (``worktrees.slot_name``: paths of clearly different
lengths), the bytes of padding added to the environment, and a ``PYTHONHASHSEED`` (or None: left as
it is). Each trial records the one it ran under (``TrialResult.layout``, the store's
``trials.layout``), so a resumed bisection and the report know it. This module is a value module:
the standard library only, nothing of perfbisect.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

PAD_VAR = "PERFBISECT_LAYOUT_PAD"
HASH_SEED_VAR = "PYTHONHASHSEED"
# 1..HASH_SEED_MAX: 0 would turn hash randomisation off, and a short number keeps the id short; the
# point is a different hash order per trial, not many of them.
HASH_SEED_MAX = 65535
_ID = re.compile(r"s(\d+)-e(\d+)(?:-h(\d+))?")
_DRAW_VERSION = "perfbisect-layout-v1"  # change it and every draw changes: stored ids stay what ran


@dataclass(frozen=True)
class Layout:
    """One trial's layout: worktree slot, environment padding (bytes), PYTHONHASHSEED or None."""

    slot: int = 0
    env_pad: int = 0
    hash_seed: int | None = None  # None: PYTHONHASHSEED not set by the layout (the config's or none)

    @property
    def id(self) -> str:
        """Short and stable, e.g. "s2-e1733-h40211" (slot 2, 1733 bytes of padding, hash seed 40211)."""
        seed = "" if self.hash_seed is None else f"-h{self.hash_seed}"
        return f"s{self.slot}-e{self.env_pad}{seed}"

    @property
    def fixed(self) -> bool:
        """True for the fixed layout (``[layout] randomize = false``): slot 0, no padding, the hash seed left alone."""
        return self == FIXED

    def env(self) -> dict[str, str]:
        """The variables this layout adds to the server's and the workload command's environment.

        The padding is ``env_pad`` bytes of one character in ``PERFBISECT_LAYOUT_PAD``; the fixed
        layout adds nothing at all, so its trials run exactly as trials stored without a layout ran.
        """
        env = {}
        if self.env_pad:
            env[PAD_VAR] = "x" * self.env_pad
        if self.hash_seed is not None:
            env[HASH_SEED_VAR] = str(self.hash_seed)
        return env

    @classmethod
    def parse(cls, text: str) -> "Layout":
        """The layout an ``id`` names; ValueError for anything else."""
        match = _ID.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"{text!r} is not a layout id (like 's2-e1733-h40211')")
        slot, pad, seed = match.groups()
        return cls(int(slot), int(pad), None if seed is None else int(seed))


FIXED = Layout()


class LayoutSettings(Protocol):
    """What ``choose`` reads: ``settings.LayoutConfig`` (``[layout]``) has these fields."""

    randomize: bool
    env_pad_max: int
    path_slots: int
    hash_seed: bool


def choose(settings: LayoutSettings, *, commit: str, mode: str, counter: int, hash_seed_pinned: bool = False,
           vary: bool = False) -> Layout:
    """The layout of a trial of ``commit`` in ``mode``: ``FIXED`` unless ``settings.randomize``.

    The draw is a hash of the trial's identity as known before it is built (commit, mode) and a
    per-trial counter — the caller passes how many trials of that commit and mode the results
    database already holds — so it is reproducible (tests are deterministic; the same database
    state gives the same draw), differs between the trials of one commit, and needs no state of its
    own: a resumed bisection or a cluster job continues the sequence where the store left it rather
    than repeating its first draws (two cluster jobs measuring one commit at the same moment may
    count alike and share a draw: two trials under one layout, each recorded as such). The worktree slot
    *rotates*: trial ``counter`` of a commit runs in slot (start + counter) mod ``path_slots``, the start a
    hash of (commit, mode) — so any ``path_slots`` consecutive trials of one commit cover every slot once, and
    a commit's trials never pile up in a few slots its neighbour never ran (a slot that shifts the level then
    rides on every commit alike, instead of on whichever commit happened to draw it more often: blocking, not
    only randomising). Uniform over 0..``env_pad_max`` bytes (which covers every stack alignment up to a page
    at the default 4096) and over 1..65535 for the hash seed. ``hash_seed_pinned``: the config's own env sets
    PYTHONHASHSEED, so the layout leaves it (and records None). What ran is what the trial stores, not
    this recipe: changing it later never changes a stored layout. ``vary``: the search asks for this trial
    under another layout (a layout re-check of a small change, ``observations.Measure.vary_layout``): with
    ``randomize = false`` it draws the padding and the hash seed anyway, in the one worktree slot there is.
    """
    if not settings.randomize and not vary:
        return FIXED
    digest = hashlib.sha256(f"{_DRAW_VERSION}\0{commit}\0{mode}\0{counter}".encode()).digest()
    # bytes 8-15 draw the padding, 16-23 the hash seed; 0-7 go unused (the slot rotates from its own start, below),
    # so that every draw under this _DRAW_VERSION keeps its padding and seed
    pad_word, seed_word = (int.from_bytes(digest[i : i + 8], "big") for i in (8, 16))
    seed = 1 + seed_word % HASH_SEED_MAX if settings.hash_seed and not hash_seed_pinned else None
    if not settings.randomize:  # a re-check with layouts held fixed: vary what needs no second worktree
        seed = 1 + seed_word % HASH_SEED_MAX if not hash_seed_pinned else None
        return Layout(slot=0, env_pad=1 + pad_word % max(settings.env_pad_max, 4096), hash_seed=seed)
    start = int.from_bytes(hashlib.sha256(f"{_DRAW_VERSION}\0{commit}\0{mode}".encode()).digest()[:8], "big")
    slot = (start + counter) % max(1, settings.path_slots)
    return Layout(slot=slot, env_pad=pad_word % (settings.env_pad_max + 1), hash_seed=seed)


def joined(layouts: Sequence[Layout | None]) -> str | None:
    """The layouts of the trials behind one observation as one string: ids joined with "+" (a
    ratio metric's two modes, in the order of ``Config.metric_modes``); None when none is known."""
    ids = [layout.id for layout in layouts if layout is not None]
    return "+".join(ids) if ids else None
