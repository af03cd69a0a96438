"""The search a stored bisection started: its settings, noise, history and direction, and the policy rebuilt from them.

``bisect.SearchPolicy`` is a pure function of its settings, what it started from and the observations; what it
started from is stored with the bisection (``SearchStart``: the noise model, the endpoint history, the metric's
direction), so a resumed search, every Slurm job of a bisection and the report's replay (``report.replay``) decide
with the policy that ran (``policy_for``), on the observations as it saw them (``observations_of``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .bisect import SearchPolicy
from .stats import NoiseModel
from ..model import Observation
from ..settings import StatsConfig


@dataclass(frozen=True)
class SearchStart:
    """What a bisection's search started from: the noise model, the endpoint history, the direction."""

    noise: NoiseModel
    history: tuple[Observation, ...] = ()
    higher_is_better: bool = True

    def as_json(self) -> dict[str, Any]:
        """Plain JSON values for ``bisections.search_start``."""
        return {
            "noise": dataclasses.asdict(self.noise),
            "history": [{"commit": o.commit, "value": o.value, "day": o.day} for o in self.history],
            "higher_is_better": bool(self.higher_is_better),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SearchStart":
        """The stored form back (fields this version lacks are dropped)."""
        names = {f.name for f in dataclasses.fields(NoiseModel)}
        noise = NoiseModel(**{k: v for k, v in dict(data["noise"]).items() if k in names})
        history = tuple(Observation(commit=h["commit"], value=h["value"], day=h.get("day", ""))
                        for h in data.get("history") or ())
        return cls(noise, history, bool(data.get("higher_is_better", True)))


def stats_config(settings: Mapping[str, Any]) -> StatsConfig:
    """The stats settings a bisection stored, as a StatsConfig (keys this version lacks are dropped)."""
    names = {f.name for f in dataclasses.fields(StatsConfig)}
    return StatsConfig(**{k: v for k, v in dict(settings or {}).items() if k in names})


def stats_over(settings: Mapping[str, Any] | None, metric: str | None, base: StatsConfig) -> StatsConfig:
    """The [stats] a stored bisection started with: its stored ``settings`` over ``base`` (a key it
    predates keeps ``base``'s value), its ``metric`` where the settings lack one. A resumed search, and
    every Slurm job of a bisection, decides and measures with these, never with the config's of today."""
    names = {f.name for f in dataclasses.fields(StatsConfig)}
    stored = {k: v for k, v in dict(settings or {}).items() if k in names}
    if "metric" not in stored and metric:
        stored["metric"] = metric
    return dataclasses.replace(base, **stored)


def observations_of(stored: Sequence[Any]) -> list[Observation]:
    """Stored observations as the search saw them (node and layout included)."""
    return [Observation(commit=o.commit, value=o.value, covariates=dict(o.covariates), seq=o.seq,
                        at=o.recorded_at or None, flag=o.flag, host=getattr(o, "host", None), layout=o.layout)
            for o in stored]


def policy_for(record: Any, start: SearchStart) -> SearchPolicy:
    """The search policy exactly as the bisection built it."""
    return SearchPolicy(list(record.commits), stats_config(record.settings), start.noise, history=start.history,
                        higher_is_better=start.higher_is_better)


__all__ = ["SearchStart", "observations_of", "policy_for", "stats_config", "stats_over"]
