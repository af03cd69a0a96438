"""What a bisection measures: one description of the metric (name, unit, direction, format).

Every place that prints or reports a value asks ``describe(config)`` (or ``describe_workload``)
instead of assuming decode tok/s, so a ``seconds`` metric prints seconds and a lower-is-better
metric's rise is a regression. ``workload.metric`` names the metric:

- built-in streaming client (``sglang``, ``openai-*``): one of ``QUANTITIES`` (``tok_s``, the
  default of ``workload.metric``, is ``decode_tok_s``); each run's value is that field of its ``RunResult``;
- ``bench_serving``: a key of ``sglang.bench_serving``'s JSON output (``BENCH_SERVING_KEYS``);
- ``command``: the JSON key the command prints; its direction is ``workload.higher_is_better`` and
  its unit is read off the key's suffix (``_ms``, ``_s``/``seconds``, ``tok_s``...).

Stdlib only; imports ``model`` and ``settings``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, Callable

from .model import RunResult
from .workload_kinds import kind_of


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
        return f"{value:,.{digits}f}"

    def format(self, value: float | None) -> str:
        """"94.3 tok/s", "12.41 ms", "19.00 µs" (a time in the unit that reads: never "0.00001900 s"),
        "1,234,567 ops/s"; a unitless metric's value alone."""
        if value is not None and math.isfinite(value) and value and self.unit in _SECONDS and not 1 <= abs(value) < 1000:
            return readable(value, self.unit)  # 0.003705 s reads 3.71 ms; 12.35 ms keeps the metric's precision
        text = self.number(value)
        if text == "n/a":
            return text
        return f"{text} {self.unit}" if self.unit else text

    def as_json(self) -> dict[str, Any]:
        """The description stored with a bisection or comparison (``from_json`` reads it back)."""
        return {"name": self.name, "label": self.label, "unit": self.unit, "higher_is_better": self.higher_is_better,
                "direction": self.direction, "decimals": self.decimals}

    @classmethod
    def from_json(cls, data: Any) -> "Metric | None":
        """A stored description back (None for a row stored before descriptions were: migration 0007)."""
        if not isinstance(data, dict) or not data.get("name"):
            return None
        decimals = data.get("decimals")
        return cls(str(data["name"]), str(data.get("label") or data["name"]), str(data.get("unit") or ""),
                   bool(data.get("higher_is_better", True)), int(decimals) if isinstance(decimals, int) else None)


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
# workload.metric's default: decode tok/s for the streaming client (bench_serving reads it as its own default key)
ALIASES = {"tok_s": "decode_tok_s"}

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

# Unit of a command workload's key, read off its ending (first match wins). Rates come before times:
# "ops_per_s" ends in "_s" too, and is a rate, not a time. A key no row matches has no unit.
_SUFFIX_UNITS = (
    ("tok_s", "tok/s"), ("tokens_per_s", "tok/s"), ("tok_per_s", "tok/s"), ("tokens_per_sec", "tok/s"),
    ("tokens_per_second", "tok/s"),
    ("_ms", "ms"), ("_us", "µs"), ("_ns", "ns"), ("seconds", "s"), ("_sec", "s"), ("_s", "s"),
)
# "<thing>_per_s", "<thing>_per_sec", "<thing>_per_second", "<thing>_ps": a rate of <thing> ("ops/s").
_RATE = re.compile(r"^(?:.*_)?([a-z]+)_?(?:per_s|per_sec|per_second|ps)$")
# "<count>_s" where the word before "_s" counts things is a rate like "tok_s" ("ops_s" → "ops/s"), not a time:
# round 8's public-project runs printed packaging's "ops_s" as "24,903 s". Any other word ("wall_s",
# "latency_s") is a time.
_COUNT_S = re.compile(r"^(?:.*_)?(ops|op|req|reqs|requests|queries|calls|it|its|iters|iterations|items|samples|"
                      r"images|frames|rows|records|events|msgs|messages|bytes|kb|mb|gb|flops|gflops|tflops)_s$")


def unit_of_key(key: str) -> str:
    """The unit a key's name states ("ops_per_s" → "ops/s", "lat_ms" → "ms", "score" → "")."""
    low = key.lower()
    for suffix, unit in _SUFFIX_UNITS[:5]:
        if low.endswith(suffix) or low == suffix:
            return unit
    count = _COUNT_S.match(low)
    if count:
        return f"{count.group(1)}/s"
    rate = _RATE.match(low)
    if rate and (low.endswith("per_s") or low.endswith("per_sec") or low.endswith("per_second") or low.endswith("_ps")):
        return f"{rate.group(1)}/s"
    for suffix, unit in _SUFFIX_UNITS[5:]:
        if low.endswith(suffix) or low == suffix.lstrip("_"):
            return unit
    return ""


_unit_of_key = unit_of_key


def quantity_name(name: str) -> str:
    return ALIASES.get(name, name)


def describe_workload(workload: Any) -> Metric:
    """The metric each run of this workload yields (``settings.WorkloadConfig``)."""
    keys = kind_of(workload).metric_keys
    key = getattr(workload, "metric", "tok_s")
    if keys == "any":
        return Metric(key, key, _unit_of_key(key), bool(getattr(workload, "higher_is_better", True)))
    if keys == "bench_serving":
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


def pct_text(pct: float | None) -> str:
    """An effect in percent ("-25.1%"), or as a factor past +900% ("×7,520" reads where "+751980.4%" does not)."""
    if pct is None or not math.isfinite(pct):
        return "n/a"
    if pct >= 900:
        ratio = 1 + pct / 100
        return f"×{ratio:,.0f}" if ratio >= 100 else f"×{ratio:,.1f}"
    return f"{pct:+.1f}%"


# Interval levels as people state them: a level is shown as the largest of these it reaches (never more
# than it is), so a per-look 1 − 0.00037 reads "99.9%", not "99.963%".
_LEVELS = (99.9, 99.5, 99.0, 98.0, 95.0, 90.0, 80.0)


def level_text(level_pct: float | None) -> str:
    """"99%", "99.9%", "95%": an interval's two-sided level, rounded down to a level people state."""
    if level_pct is None or not math.isfinite(level_pct):
        return "the"
    for level in _LEVELS:
        if level_pct >= level - 1e-9:
            return f"{level:g}%"
    return f"{math.floor(level_pct):.0f}%"


def short_probability(p: float, places: int = 2) -> str:
    """A probability that fell short of a threshold, rounded down: 0.985 against a needed 0.99 must not
    read "0.99" (an H200 bisection ran out of budget saying its best answer "holds 0.99")."""
    scale = 10 ** places
    return f"{math.floor(p * scale + 1e-9) / scale:.{places}f}"


# A time unit a metric's key may state, in seconds; readable() writes a time in the one of these that
# puts one to three digits before the point.
_SECONDS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}
_TIME_SCALES = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))


def readable(value: float | None, unit: str = "", *, sign: bool = False, like: float | None = None) -> str:
    """A value as a person reads it: a time in s, ms, µs or ns with three significant digits ("3.71 ms", not
    "0.003705 s"); any other unit with ``Metric.number``'s four ("86.96 tok/s"). ``sign``: always signed
    ("+3.71 ms"); ``like``: pick the time unit for this magnitude instead (a before → after pair shares one).
    The one formatter of a metric's absolute values and effects, for the report and the terminal alike."""
    if value is None or not math.isfinite(value):
        return "n/a"
    prefix = ("+" if value >= 0 else "-") if sign else ("-" if value < 0 else "")
    if unit not in _SECONDS:
        return f"{prefix}{Metric('', '').number(abs(value))} {unit}".rstrip()
    seconds = abs(value) * _SECONDS[unit]
    ref = abs(like) * _SECONDS[unit] if like is not None and math.isfinite(like) and like else seconds
    name, scale = next(((n, f) for n, f in _TIME_SCALES if ref >= f * 0.9995), _TIME_SCALES[-1])
    if ref >= 1000 * _TIME_SCALES[0][1]:
        name, scale = "s", 1.0  # past 999 s, seconds with thousands separators read better than minutes
    x = float(f"{seconds / scale:.3g}")
    if x == 0:
        return f"{prefix}0 {unit}"
    digits = max(0, 2 - math.floor(math.log10(x)))
    return f"{prefix}{x:,.{digits}f} {name}"


def signed(value: float, unit: str = "") -> str:
    """A difference with its sign and its unit ("-25.31 ops/s", "+3.71 ms": ``readable``; never
    "+0.003705 s", never "+1.900e-05")."""
    return readable(value, unit, sign=True)


def stored_or_described(stored: Any, config: Any = None) -> Metric:
    """The metric of a stored bisection or comparison: the description stored with it, else (a row from
    before migration 0007) what the config describes, else decode tok/s as those versions assumed."""
    return Metric.from_json(stored) or (describe(config) if getattr(config, "workload", None) is not None else DECODE)


def unknown_quantity(workload: Any) -> str | None:
    """Why ``workload.metric`` names nothing this workload kind records (for a ConfigError), or None."""
    kind = getattr(workload, "kind", "sglang")
    key = getattr(workload, "metric", "tok_s")
    if kind_of(workload).metric_keys != "quantities" or quantity_name(key) in QUANTITIES:
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
    "describe", "describe_workload", "direction_conflict", "level_text", "pct_text", "signed", "stored_or_described",
    "unit_of_key", "quantity_name", "unknown_quantity", "with_quantity",
]


def trials_text(total: int, used: int | None = None) -> str:
    """A bisection's trial count in the words every command and page uses: "17 trials (9 observations used by
    the search)", "9 trials (all used by the search)"; ``used`` None: "17 trials". The two differ because a
    ratio metric's observation holds a trial per mode, and re-runs, failures and which-path trials add some."""
    run = f"{total} trial{'s' if total != 1 else ''}"
    if used is None:
        return run
    if used == total:
        return f"{run} (all used by the search)" if total else run
    return f"{run} ({used} observation{'s' if used != 1 else ''} used by the search)"
