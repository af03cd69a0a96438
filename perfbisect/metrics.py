"""What a bisection measures: one description of the metric (name, unit, direction, format).

Every place that prints or reports a value asks ``describe(config)`` (or ``describe_workload``)
instead of assuming decode tok/s, so a ``seconds`` metric prints seconds and a lower-is-better
metric's rise is a regression. ``workload.metric`` names the metric:

- built-in streaming client (``sglang``, ``openai-*``): one of ``QUANTITIES`` (``tok_s``, the old
  default, is ``decode_tok_s``); each run's value is that field of its ``RunResult``;
- ``bench_serving``: a key of ``sglang.bench_serving``'s JSON output (``BENCH_SERVING_KEYS``);
- ``command``: the JSON key the command prints; its direction is ``workload.higher_is_better`` and
  its unit is read off the key's suffix (``_ms``, ``_s``/``seconds``, ``tok_s``...).

Stdlib only; imports ``model`` and ``settings``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

from .model import RunResult


@dataclass(frozen=True)
class Metric:
    """One metric: its key, what it is, its unit, which way is better, and how many decimals."""

    name: str
    label: str
    unit: str = ""
    higher_is_better: bool = True
    decimals: int | None = None  # None: four significant digits

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"

    def number(self, value: float | None) -> str:
        """The value alone with this metric's precision ("94.3", "0.03121"), "n/a" when missing."""
        if value is None or not math.isfinite(value):
            return "n/a"
        if self.decimals is not None:
            return f"{value:.{self.decimals}f}"
        if value == 0:
            return "0"
        digits = max(0, 3 - math.floor(math.log10(abs(value))))
        return f"{value:.{digits}f}"

    def format(self, value: float | None) -> str:
        """"94.3 tok/s", "12.41 ms", "0.03121 s", or the key after a unitless value."""
        text = self.number(value)
        if text == "n/a":
            return text
        return f"{text} {self.unit}" if self.unit else f"{text} ({self.name})"

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "unit": self.unit, "higher_is_better": self.higher_is_better,
                "direction": self.direction}


DECODE = Metric("decode_tok_s", "decode throughput", "tok/s", True, 1)

# The built-in client's quantities: a metric and how to read it off one RunResult.
_ms = 2
QUANTITIES: dict[str, tuple[Metric, Callable[[RunResult], float | None]]] = {
    "decode_tok_s": (DECODE, lambda r: r.decode_tok_s),
    "e2e_tok_s": (Metric("e2e_tok_s", "end-to-end throughput (prefill included)", "tok/s", True, 1), lambda r: r.e2e_tok_s),
    # bench_serving's output_throughput from the built-in client: Σ output tokens of a run's
    # workload.concurrency requests / (last token − first request sent); the same number as e2e_tok_s.
    "output_tok_s": (Metric("output_tok_s", "output throughput at workload.concurrency", "tok/s", True, 1),
                     lambda r: r.e2e_tok_s),
    "ttft_ms": (Metric("ttft_ms", "time to first token", "ms", False, _ms),
                lambda r: 1000.0 * r.ttft_s if r.ttft_s is not None else None),
    "itl_p50_ms": (Metric("itl_p50_ms", "inter-token latency p50", "ms", False, _ms), lambda r: r.itl_p50_ms),
    "itl_p99_ms": (Metric("itl_p99_ms", "inter-token latency p99", "ms", False, _ms), lambda r: r.itl_p99_ms),
    "accept_length": (Metric("accept_length", "speculative accept length", "tokens/verify", True, 2),
                      lambda r: r.spec_accept_length),
    "cycle_time_ms": (Metric("cycle_time_ms", "speculative verify cycle time", "ms", False, _ms),
                      lambda r: r.cycle_time_ms),
}
ALIASES = {"tok_s": "decode_tok_s"}  # the default of workload.metric before it chose a quantity

# Keys of `python -m sglang.bench_serving --output-file` (one JSON object per line) worth bisecting on.
BENCH_SERVING_KEYS: dict[str, Metric] = {
    m.name: m for m in (
        Metric("output_throughput", "output token throughput", "tok/s", True, 1),
        Metric("total_token_throughput", "total token throughput", "tok/s", True, 1),
        Metric("input_throughput", "input token throughput", "tok/s", True, 1),
        Metric("request_throughput", "request throughput", "req/s", True, 3),
        Metric("accept_length", "speculative accept length", "tokens/verify", True, 2),
        *(Metric(f"{stat}_{what}_ms", f"{label} {stat}", "ms", False, _ms)
          for what, label in (("ttft", "TTFT"), ("itl", "ITL"), ("tpot", "TPOT"), ("e2e_latency", "E2E latency"))
          for stat in ("mean", "median", "p95", "p99")),
    )
}
BENCH_SERVING_DEFAULT = "output_throughput"

# Unit of a command workload's key, read off its ending (first match wins).
_SUFFIX_UNITS = (
    ("tok_s", "tok/s"), ("tokens_per_s", "tok/s"), ("tok_per_s", "tok/s"), ("throughput", "tok/s"),
    ("_ms", "ms"), ("_us", "µs"), ("_ns", "ns"), ("seconds", "s"), ("_sec", "s"), ("_s", "s"),
)


def _unit_of_key(key: str) -> str:
    low = key.lower()
    for suffix, unit in _SUFFIX_UNITS:
        if low.endswith(suffix) or low == suffix.lstrip("_"):
            return unit
    return ""


def quantity_name(name: str) -> str:
    return ALIASES.get(name, name)


def describe_workload(workload: Any) -> Metric:
    """The metric each run of this workload yields (``settings.WorkloadConfig``)."""
    kind = getattr(workload, "kind", "sglang")
    key = getattr(workload, "metric", "tok_s")
    if kind == "command":
        return Metric(key, key, _unit_of_key(key), bool(getattr(workload, "higher_is_better", True)))
    if kind == "bench_serving":
        key = BENCH_SERVING_DEFAULT if key in ALIASES else key
        known = BENCH_SERVING_KEYS.get(key)
        return known or Metric(key, key, _unit_of_key(key), bool(getattr(workload, "higher_is_better", True)))
    known_q = QUANTITIES.get(quantity_name(key))
    return known_q[0] if known_q else DECODE


def describe(config: Any) -> Metric:
    """The bisection metric of a Config: the workload's metric, or a ratio of it between two modes."""
    base = describe_workload(getattr(config, "workload", None))
    stats_metric = getattr(getattr(config, "stats", None), "metric", "")
    if stats_metric.startswith("ratio:"):
        return Metric(f"{stats_metric}:{base.name}", f"{stats_metric[6:]} ratio of {base.label}", "×",
                      base.higher_is_better, 3)
    return base


def unknown_quantity(workload: Any) -> str | None:
    """Why ``workload.metric`` names nothing this workload kind records (for a ConfigError), or None."""
    kind = getattr(workload, "kind", "sglang")
    key = getattr(workload, "metric", "tok_s")
    if kind == "command" or kind == "bench_serving" or quantity_name(key) in QUANTITIES:
        return None
    known = ", ".join(list(QUANTITIES) + list(ALIASES))
    return (f"key 'workload.metric' is {key!r}, which workload.kind = {kind!r} does not record. Known quantities: "
            f"{known}. Bisect on one of those, or use kind = \"bench_serving\" / \"command\" for other keys.")


def direction_conflict(workload: Any, explicit: bool | None) -> str | None:
    """A ConfigError message when ``higher_is_better`` is set against a known metric's direction."""
    if explicit is None or getattr(workload, "kind", "") == "command":
        return None
    metric = describe_workload(workload)
    if getattr(workload, "kind", "") == "bench_serving" and metric.name not in BENCH_SERVING_KEYS:
        return None
    if explicit != metric.higher_is_better:
        return (f"key 'workload.higher_is_better' is {str(explicit).lower()}, but {metric.name} ({metric.label}) is "
                f"{metric.direction}. Remove workload.higher_is_better: the direction of a known metric is known.")
    return None


def with_quantity(run: RunResult, workload: Any) -> RunResult:
    """A built-in client's run with its value set to the chosen quantity (decode tok/s stays as it is)."""
    name = quantity_name(getattr(workload, "metric", "tok_s"))
    if name == "decode_tok_s" or name not in QUANTITIES:
        return run
    value = QUANTITIES[name][1](run)
    if value is None and run.error is None and not run.warmup:
        return replace(run, error=f"no {name} recorded for this run; flagged, not used")
    return replace(run, metric_value=value)


__all__ = [
    "ALIASES", "BENCH_SERVING_DEFAULT", "BENCH_SERVING_KEYS", "DECODE", "Metric", "QUANTITIES",
    "describe", "describe_workload", "direction_conflict", "quantity_name", "unknown_quantity", "with_quantity",
]
