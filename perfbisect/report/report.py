"""The HTML regression report: jinja2 renders ``templates/`` into one self-contained file.

Charts are Vega-Lite specifications drawn by the vendored Vega/Vega-Lite/vega-embed JavaScript
(``templates/vendor/``), inlined once per file: the report opens offline, prints as SVG, and needs no
chart code of its own. Everything that came from the repository or the config goes through jinja2's
autoescape (and ``tojson`` inside scripts); control characters are made visible first, so a commit
subject holding HTML, a script or a terminal escape shows up as text.
"""

from __future__ import annotations

import json
import math
import os
import stat
import re
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import jinja2

from .. import __version__
from ..errors import UsageError
from ..metrics import level_text, pct_text, readable
from ..resources import data_dir

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
VENDOR = ("vega.min.js", "vega-lite.min.js", "vega-embed.min.js")
PALETTE = {"regressed": "#c62828", "improved": "#2e7d32", "same": "#2e7d32", "inconclusive": "#ef6c00"}


def inert(value: Any) -> Any:
    """``value`` with every control character (ESC, BEL, NUL...) shown as ``\\xNN`` text, recursively."""
    if isinstance(value, str):
        return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", value)
    if isinstance(value, Mapping):
        return {inert(k): inert(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [inert(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        autoescape=True,  # every template is HTML: nothing from the repository is ever trusted
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pct"] = lambda v, digits=1: "—" if v is None else f"{v:+.{digits}f}%"
    env.filters["num"] = lambda v, digits=1: "—" if v is None else f"{v:,.{digits}f}"
    env.policies["json.dumps_kwargs"] = {"sort_keys": False, "ensure_ascii": False}
    return env


@lru_cache(maxsize=1)
def vendored_js() -> str:
    """Vega, Vega-Lite and vega-embed, concatenated for one inline <script>."""
    parts = []
    for name in VENDOR:
        text = (data_dir("templates") / "vendor" / name).read_text(encoding="utf-8")
        # Defensive: a literal "</script" inside the library would end the inline element early.
        parts.append(text.replace("</script", "<\\/script"))
    return "\n;\n".join(parts)


# ------------------------------------------------------------------------------------------------
# Chart specifications (Vega-Lite)

_TOOLTIP_TRIAL = [
    {"field": "commit", "title": "commit"}, {"field": "subject", "title": "subject"},
    {"field": "mode", "title": "mode"}, {"field": "trial", "title": "trial #"},
    {"field": "value", "title": "trial median", "format": ",.2f"}, {"field": "runs", "title": "runs"},
    {"field": "detected_warmup", "title": "slow leading runs counted as warm-up"},
    {"field": "within_cv_pct", "title": "within-trial CV %", "format": ".1f"},
    {"field": "started", "title": "started"}, {"field": "excluded", "title": "excluded because"},
    {"field": "node", "title": "node"}, {"field": "job", "title": "Slurm job"},
    {"field": "layout", "title": "layout"},
]


# Excluded (throttled, contended) trials are drawn as crosses; the tooltip says why.
_SHAPE = {"field": "state", "type": "nominal", "title": "trial",
          "scale": {"domain": ["used", "excluded"], "range": ["circle", "cross"]}}
_STATE = {"calculate": "datum.excluded ? 'excluded' : 'used'", "as": "state"}

# One colour per side of the answer and per role, the same on every page: before the culprit and the
# good end in blue, the culprit and after and the bad end in red; A and B of a comparison alike.
SIDE_COLORS = {
    "before the culprit": "#1565c0", "the culprit and after": "#c62828", "good end": "#1565c0",
    "between": "#757575", "bad end": "#c62828", "A": "#1565c0", "B": "#c62828", "all commits": "#455a64",
}
ROLE_COLORS = {
    "good": "#1565c0", "bad": "#ef6c00", "culprit": "#c62828", "culprit set": "#ad1457", "measured": "#757575",
    "A": "#42a5f5", "B": "#ef5350",
}
CULPRIT_COLOR = "#c62828"
# The range axis names every commit up to this many; past it, an evenly spaced subset that always
# holds the endpoints and the culprit (a label Vega would drop for overlapping is never the culprit's).
MAX_AXIS_LABELS = 40


def _base(width: int | str = "container", height: int = 260) -> dict[str, Any]:
    return {"$schema": "https://vega.github.io/schema/vega-lite/v6.json", "width": width, "height": height,
            "autosize": {"type": "fit-x", "contains": "padding"},
            "config": {"font": "system-ui, sans-serif", "axis": {"labelFontSize": 10, "titleFontSize": 11},
                       "legend": {"orient": "top", "labelLimit": 0, "titleLimit": 0, "columns": 4},
                       "view": {"stroke": "#ddd"}}}


def _side_color(values: Sequence[str], title: str = "side") -> dict[str, Any]:
    """A colour encoding of the side field with the fixed colours, listing only the sides present."""
    domain = [k for k in SIDE_COLORS if k in set(values)]
    return {"field": "side", "type": "nominal", "title": title,
            "scale": {"domain": domain, "range": [SIDE_COLORS[k] for k in domain]}}


def axis_values(order: Sequence[str], keep: Sequence[str], limit: int = MAX_AXIS_LABELS) -> list[str]:
    """Commits to label on a range axis: all of them up to ``limit``, else an even subset that always holds
    the ends and ``keep`` (the culprit), with the subset's neighbours of a kept label left out."""
    if len(order) <= limit:
        return list(order)
    stride = math.ceil(len(order) / (limit - 2 - len(keep)))
    pos = {c: i for i, c in enumerate(order)}
    pinned = [order[0], order[-1], *[k for k in keep if k in pos]]
    near = {pos[k] for k in pinned}
    out = set(pinned)
    for i in range(0, len(order), stride):
        if all(abs(i - j) >= max(1, stride // 2) for j in near):
            out.add(order[i])
    return [c for c in order if c in out]


def with_unit(title: str, unit: str) -> str:
    """An axis title with its unit in parentheses; a metric whose key states no unit gets none."""
    return f"{title} ({unit})" if unit else title


def chart_modes(view: Mapping[str, Any]) -> list[str]:
    """The modes the range is drawn for, one chart each: the mode the answer was decided on first (the one
    the levels are fitted to), then the metric's other mode, then any mode measured besides (a speculative
    culprit's which-path trials of ``baseline``), in the order they ran."""
    modes = list(view.get("modes") or [])
    present = list(dict.fromkeys(p["mode"] for p in view["points"] if p["value"] is not None))
    ordered = [m for m in [*modes[::-1], *present] if m in present]
    return list(dict.fromkeys(ordered))


def range_specs(view: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """One range chart per mode, (mode, spec), the decided mode's first: a mode's chart holds its trials
    only, so trials of another mode (on another scale, at two commits) never read as a level of this one."""
    modes = chart_modes(view)
    specs = [(m, range_spec(view, m, decided=i == 0)) for i, m in enumerate(modes)]
    return [(m, s) for m, s in specs if s]


def value_title(title: str, unit: str, higher_is_better: bool | None) -> str:
    """A value axis's title: what, its unit, and which way is worse ("trial median (tok/s) · ↓ worse")."""
    text = with_unit(title, unit)
    if higher_is_better is None:
        return text
    return f"{text} · {'↓' if higher_is_better else '↑'} worse"


def range_spec(view: Mapping[str, Any], mode: str | None = None, decided: bool = True) -> dict[str, Any] | None:
    """One mode's trial summaries at every measured commit per side, culprit and skips marked; the decided
    mode's chart (``decided``) also draws the fitted levels and their noise band. ``mode`` None: the first
    of ``chart_modes``."""
    mode = mode if mode is not None else next(iter(chart_modes(view)), None)
    points = [p for p in view["points"] if p["value"] is not None and p["mode"] == mode]
    if not points:
        return None
    order = view["order"]
    if not decided:  # a mode measured besides the search (at the culprit and its parent): only its commits
        measured = {p["commit"] for p in points}
        order = [c for c in order if c in measured]
    culprits = [c for c in [view.get("culprit_short"), *(view.get("culprit_set_short") or [])] if c in order]
    culprit = view.get("culprit_short") if view.get("culprit_short") in order else None
    label_test = " || ".join(f"datum.value === {json.dumps(c)}" for c in culprits) or "false"
    x_title = "commits, oldest first (good … bad)" if decided else f"commits measured in {mode}, oldest first"
    x = {"field": "commit", "type": "ordinal", "scale": {"domain": order}, "sort": order,
         "axis": {"labelAngle": -60, "title": x_title, "labelOverlap": False,
                  "values": axis_values(order, culprits),
                  "labelColor": {"condition": {"test": label_test, "value": CULPRIT_COLOR}, "value": "#333"},
                  "labelFontWeight": {"condition": {"test": label_test, "value": "bold"}, "value": "normal"}}}
    several = len(chart_modes(view)) > 1
    # A ratio metric's modes are each measured in their own unit, never in "×".
    unit = "" if several and view["unit"] == "×" else view["unit"]
    y_title = value_title(f"{mode} trial median" if several else "trial median", unit, view.get("higher_is_better"))
    layers: list[dict[str, Any]] = []
    segs = (view["levels"].get("segments") or []) if decided else []
    level_pct = view["levels"].get("level_pct")
    interval = f"{level_pct:g}% interval" if level_pct else "interval"
    if segs:
        layers.append({"data": {"values": segs}, "mark": {"type": "rect", "opacity": 0.12, "color": "#1565c0"},
                       "encoding": {"x": {**x, "field": "from"}, "x2": {"field": "to"},
                                    "y": {"field": "band_low", "type": "quantitative"}, "y2": {"field": "band_high"},
                                    "tooltip": [{"field": "label", "title": "noise band (±1σ per trial)"},
                                                {"field": "band_low", "format": ",.1f", "title": "low"},
                                                {"field": "band_high", "format": ",.1f", "title": "high"}]}})
        layers.append({"data": {"values": segs}, "mark": {"type": "rule", "strokeWidth": 2.5, "color": "#1565c0"},
                       "encoding": {"x": {**x, "field": "from"}, "x2": {"field": "to"},
                                    "y": {"field": "value", "type": "quantitative"},
                                    "tooltip": [{"field": "label", "title": "fitted level"},
                                                {"field": "value", "format": ",.2f", "title": "level"},
                                                {"field": "low", "format": ",.2f", "title": f"{interval} low"},
                                                {"field": "high", "format": ",.2f", "title": f"{interval} high"},
                                                {"field": "n", "title": "trials"}]}})
    marks = [] if not decided else [{"commit": c["short"], "what": w, "subject": c["subject"]} for c in view["commits"]
             for w in (("skipped (untestable)",) if "skipped" in c["role"] else ())
             + (("filtered (paths ignored)",) if "filtered" in c["role"] else ())]
    if marks:
        layers.append({"data": {"values": marks}, "mark": {"type": "tick", "thickness": 3, "size": 14, "orient": "vertical"},
                       "encoding": {"x": x, "y": {"value": 292},
                                    "color": {"field": "what", "type": "nominal", "title": "not measured",
                                              "scale": {"domain": ["skipped (untestable)", "filtered (paths ignored)"],
                                                        "range": ["#9e9e9e", "#6d4c41"]}},
                                    "tooltip": [{"field": "commit"}, {"field": "what"}, {"field": "subject"}]}})
    if culprit:
        mark = [{"commit": culprit, "label": f"culprit {culprit}"}]
        layers.append({"data": {"values": mark},
                       "mark": {"type": "rule", "color": CULPRIT_COLOR, "strokeDash": [6, 3], "strokeWidth": 2},
                       "encoding": {"x": x, "tooltip": [{"field": "commit", "title": "culprit"}]}})
        layers.append({"name": "culprit_label", "data": {"values": mark},
                       "mark": {"type": "text", "color": CULPRIT_COLOR, "fontWeight": "bold", "align": "left", "dx": 4,
                                "baseline": "top"},
                       "encoding": {"x": x, "y": {"value": 2}, "text": {"field": "label"}}})
    layers.append({
        "name": "trials",
        "data": {"values": points},
        "transform": [_STATE],
        "mark": {"type": "point", "filled": True, "size": 60, "opacity": 0.8},
        "encoding": {
            "x": x, "y": {"field": "value", "type": "quantitative", "scale": {"zero": False}, "title": y_title},
            "color": _side_color([p["side"] for p in points]),
            "shape": _SHAPE,
            "tooltip": [{"field": "side"}, *_TOOLTIP_TRIAL],
        },
    })
    spec = _base(height=300 if decided else 200)
    spec["layer"] = layers
    spec["resolve"] = {"scale": {"color": "independent"}}
    return spec


def timeline_spec(view: Mapping[str, Any]) -> dict[str, Any] | None:
    """The metric against wall-clock time, sides apart in colour, the fitted drift when the model found
    some, and the sampled machine state on the same time axis below.

    A concatenation cannot take the container's width in Vega-Lite: its views are ``"width": "container"``
    markers that the page's script replaces with the chart's measured width (templates/_layout.html.j2).
    """
    modes = chart_modes(view)
    points = [p for p in view["points"] if p["value"] is not None and p["started"] and p["mode"] == modes[0]] if modes else []
    if not points:
        return None
    x = {"field": "t", "type": "temporal", "title": "wall-clock time", "axis": {"format": "%H:%M:%S", "labelOverlap": True}}
    unit = "" if len(modes) > 1 and view["unit"] == "×" else view["unit"]
    y = {"field": "value", "type": "quantitative", "scale": {"zero": False},
         "title": value_title(f"{modes[0]} trial median" if len(modes) > 1 else "trial median", unit, view.get("higher_is_better"))}
    lines = list(view.get("drift_lines") or [])
    color = _side_color([p["side"] for p in points] + [r["side"] for r in lines])
    layers: list[dict[str, Any]] = []
    gaps = list(view.get("gaps") or [])
    if gaps:  # an interruption is a shaded, labelled band: the axis jumps there, nothing ran
        layers.append({"name": "gaps", "data": {"values": gaps},
                       "mark": {"type": "rect", "color": "#9e9e9e", "opacity": 0.18},
                       "encoding": {"x": {**x, "field": "from"}, "x2": {"field": "to"},
                                    "tooltip": [{"field": "label", "title": "nothing ran"},
                                                {"field": "from", "type": "temporal", "timeUnit": "yearmonthdatehoursminutes", "title": "from"},
                                                {"field": "to", "type": "temporal", "timeUnit": "yearmonthdatehoursminutes", "title": "to"}]}})
        layers.append({"name": "gap_label", "data": {"values": gaps},
                       "mark": {"type": "text", "color": "#616161", "baseline": "top", "fontSize": 11},
                       "encoding": {"x": {**x, "field": "mid"}, "y": {"value": 4}, "text": {"field": "label"}}})
    if lines:
        layers.append({
            "name": "drift", "data": {"values": lines}, "mark": {"type": "line", "strokeDash": [5, 3], "strokeWidth": 1.5},
            "encoding": {"x": x, "y": {**y, "field": "value"}, "detail": {"field": "line"}, "color": {**color, "legend": None},
                         "tooltip": [{"field": "line", "title": "fitted level + drift"},
                                     {"field": "value", "format": ",.2f", "title": "fitted"},
                                     {"field": "drift_pct", "format": "+.2f", "title": "drift %"}]},
        })
    layers.append({
        "data": {"values": [{**p, "t": p["started"]} for p in points]},
        "transform": [_STATE],
        "name": "trials",
        "mark": {"type": "point", "filled": True, "size": 60},
        "encoding": {
            "x": x, "y": y, "color": color, "shape": _SHAPE,
            "tooltip": [{"field": "side"}, *_TOOLTIP_TRIAL,
                        {"field": "sm_clock_mhz", "title": "SM clock MHz", "format": ".0f"},
                        {"field": "temperature_c", "title": "max temp °C"},
                        {"field": "throttle", "title": "throttle reasons"}],
        },
    })
    top = {"width": "container", "height": 200, "layer": layers}
    spec = _base()
    spec.pop("width")
    spec.pop("height")
    spec["autosize"] = {"type": "pad"}
    spec["vconcat"] = [top]
    if view["samples"]:
        # Each panel's axis starts at 0 and ends above its largest value (the CPU load's at 1 or more): a
        # near-constant series reads as the level it holds, never stretched to the panel's height as noise.
        ceilings = [{"var": var, "t": first, "ceiling": top} for var, first, top in sample_ceilings(view["samples"])]
        y = {"type": "quantitative", "scale": {"zero": True, "nice": True}, "title": None}
        spec["vconcat"].append({
            "data": {"values": [*view["samples"], *ceilings]},
            "facet": {"row": {"field": "var", "type": "nominal", "title": None, "header": {"labelAngle": 0, "labelOrient": "top", "labelAnchor": "start", "labelAlign": "left", "labelFontSize": 11, "labelLimit": 0}}},
            "spec": {"width": "container", "height": 70, "layer": [
                {"name": "state", "transform": [{"filter": "datum.value != null"}],
                 "mark": {"type": "line", "point": {"size": 12}, "interpolate": "step-after"},
                 "encoding": {"x": x, "y": {**y, "field": "value"},
                              "detail": {"field": "trial"}, "color": {"field": "mode", "type": "nominal", "legend": None},
                              "tooltip": [{"field": "var"}, {"field": "value"}, {"field": "trial"}, {"field": "commit"}, {"field": "t", "type": "temporal", "timeUnit": "hoursminutesseconds"}]}},
                {"name": "ceiling", "transform": [{"filter": "datum.ceiling != null"}], "mark": {"type": "point", "opacity": 0},
                 "encoding": {"x": x, "y": {**y, "field": "ceiling"}}},
            ]},
            "resolve": {"scale": {"y": "independent"}},
        })
    spec["resolve"] = {"scale": {"x": "shared", "color": "independent"}}
    return spec


# The one-minute load average counts runnable tasks; its panel reaches at least this high, so that an idle
# machine's 0.5 reads as little, not as a line across the panel's top.
LOAD_FLOOR_TOP = 1.0


def sample_ceilings(samples: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, float]]:
    """(variable, its first sample's time, the top of its panel): a quarter above its largest value, and at
    least ``LOAD_FLOOR_TOP`` for the CPU load."""
    out: dict[str, tuple[str, float]] = {}
    for r in samples:
        first, top = out.get(r["var"], (r["t"], 0.0))
        out[r["var"]] = (first, max(top, float(r["value"])))
    return [(var, first, max(1.25 * top, LOAD_FLOOR_TOP if var.startswith("CPU load") else 0.0) or 1.0)
            for var, (first, top) in out.items()]


def posterior_spec(view: Mapping[str, Any]) -> dict[str, Any] | None:
    """Posterior over where the change is, after each step of the search (a heatmap, step × commit)."""
    reasoning = view.get("reasoning") or {}
    cells = reasoning.get("cells") or []
    if not cells:
        return None
    domain = view["order"] + ["no change"]
    culprits = [c for c in [view.get("culprit_short"), *(view.get("culprit_set_short") or [])] if c]
    spec = _base(height=max(120, 14 * len(reasoning["steps"])))
    spec["data"] = {"values": cells}
    spec["mark"] = {"type": "rect"}
    spec["encoding"] = {
        "x": {"field": "commit", "type": "ordinal", "scale": {"domain": domain},
              "axis": {"labelAngle": -60, "title": "where the (first) change is", "labelOverlap": False,
                       "values": axis_values(view["order"], culprits) + ["no change"]}},
        "y": {"field": "step", "type": "ordinal", "title": "after trial"},
        "color": {"field": "p", "type": "quantitative", "scale": {"scheme": "blues", "domain": [0, 1]}, "title": "posterior"},
        "tooltip": [{"field": "step", "title": "after trial"}, {"field": "commit"}, {"field": "p", "format": ".3f", "title": "posterior"}],
    }
    return spec


def history_spec(points: Sequence[Mapping[str, Any]], mode: str) -> dict[str, Any]:
    """One mode's levels per commit (oldest first, as asv and Bencher plot history), with their noise
    bands, coloured by role with the same colours on every page; each point links to its report."""
    spec = _base(height=240)
    spec["data"] = {"values": list(points)}
    order = list(dict.fromkeys(p["commit"] for p in sorted(points, key=lambda p: p["x"])))
    roles = [r for r in ROLE_COLORS if r in {p["role"] for p in points}]
    color = {"field": "role", "type": "nominal", "title": "role",
             "scale": {"domain": roles, "range": [ROLE_COLORS[r] for r in roles]}}
    x = {"field": "commit", "type": "ordinal", "sort": order, "scale": {"domain": order},
         "title": "commit, oldest first", "axis": {"labelAngle": -60, "labelOverlap": "greedy"}}
    spec["layer"] = [
        {"mark": {"type": "rule", "strokeWidth": 6, "opacity": 0.25},
         "encoding": {"x": x, "y": {"field": "band_low", "type": "quantitative", "scale": {"zero": False},
                                    "title": value_title(f"{mode} level", points[0]["unit"] if points else "",
                                                         points[0].get("higher_is_better") if points else None)},
                      "y2": {"field": "band_high"}, "color": color}},
        {"name": "history", "mark": {"type": "point", "filled": True, "size": 80, "cursor": "pointer"},
         "encoding": {"x": x, "y": {"field": "value", "type": "quantitative"},
                      "color": color, "href": {"field": "href"},
                      "tooltip": [{"field": "label", "title": "report"}, {"field": "commit"}, {"field": "subject"},
                                  {"field": "role"},
                                  {"field": "value", "format": ",.2f", "title": "level"},
                                  {"field": "band_low", "format": ",.2f", "title": "noise band low"},
                                  {"field": "band_high", "format": ",.2f", "title": "noise band high"},
                                  {"field": "verdict"}, {"field": "date", "type": "temporal", "timeUnit": "yearmonthdatehoursminutes"}]}},
    ]
    return spec


# ------------------------------------------------------------------------------------------------
# Rendering


def verdict_line(view: Mapping[str, Any], path: Path | None = None) -> str:
    """The verdict sentence after its headline (what `perfbisect report` prints)."""
    line = f"{view['verdict']['headline']}: {view['verdict']['sentence']}"
    return line + (f"  report: {path}" if path else "")


def short_line(view: Mapping[str, Any], path: Path | None = None) -> str:
    """The short line `run` ends with: headline, effect in % and unit, interval, culprit, report path."""
    bits = [view["verdict"]["headline"]]
    cmp = next((c for c in view["comparisons"] if c["label"].startswith("from the culprit")), None)
    cmp = cmp or (view["comparisons"][0] if view["comparisons"] else None)
    levels = view.get("levels") or {}
    if cmp:
        unit = ""
        lower = "lower is better" if view.get("higher_is_better") is False else ""
        if levels.get("before") is not None and levels.get("after") is not None:
            unit = f" ({readable(levels['after'] - levels['before'], view['unit'], sign=True)}{', ' + lower if lower else ''})"
        elif lower:
            unit = f" ({lower})"
        level = f"{level_text(view['level_pct'])} " if view.get("level_pct") else ""
        bits.append(f"{pct_text(cmp['effect_pct'])}{unit} {level}[{pct_text(cmp['ci_low_pct'])}, {pct_text(cmp['ci_high_pct'])}]")
    if view.get("culprit"):
        bits.append(f"culprit {view['culprit']['short']}")
    if path:
        bits.append(f"report: {path}")
    return " · ".join(bits)


def render_report(view: Mapping[str, Any]) -> str:
    """One self-contained HTML document for a bisection, comparison or calibration."""
    safe = inert(view)
    ranges = range_specs(safe)
    charts = {name: spec for name, spec in (
        ("range", ranges[0][1] if ranges else None), ("timeline", timeline_spec(safe)), ("posterior", posterior_spec(safe)),
    ) if spec}
    other_ranges = [{"mode": m, "spec": spec, "in_metric": m in safe.get("modes", ())} for m, spec in ranges[1:]]
    return _environment().get_template("report.html.j2").render(
        v=safe, charts=charts, range_mode=ranges[0][0] if ranges else None, other_ranges=other_ranges, vendor=vendored_js(), color=PALETTE.get(safe["verdict"]["cls"], "#555"),
        generated=time.strftime("%Y-%m-%d %H:%M:%S"), version=__version__,
    )


def render_index(entries: Sequence[Mapping[str, Any]], history: Mapping[str, Sequence[Mapping[str, Any]]], db: str) -> str:
    """The static site's index: every bisection and comparison, and a history chart per mode."""
    safe_entries = inert(list(entries))
    charts = {mode: history_spec(inert(list(points)), inert(mode)) for mode, points in history.items() if points}
    return _environment().get_template("index.html.j2").render(
        entries=safe_entries, charts=charts, vendor=vendored_js(), db=inert(db),
        generated=time.strftime("%Y-%m-%d %H:%M:%S"), version=__version__,
    )


def write_html(html: str, path: Path) -> Path:
    """Write atomically (a half-written report is never left where a colleague might open it); a
    path that cannot take the file is a UsageError, and no temporary file is left behind."""
    path = Path(path).expanduser().absolute()
    if path.is_dir():
        raise UsageError(
            f"The report path {path} is a directory. Give a file name (-o {path / 'report.html'}), or leave -o "
            f"out to write it beside the results database."
        )
    try:
        st = os.lstat(path)
    except OSError:
        st = None  # nothing there (or no way there: the write below says why)
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = ("a symbolic link" if stat.S_ISLNK(st.st_mode) else "a named pipe (FIFO)" if stat.S_ISFIFO(st.st_mode)
                else "a character device" if stat.S_ISCHR(st.st_mode) else "a block device" if stat.S_ISBLK(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise UsageError(
            f"The report path {path} is {what}; a report is only written as a regular file (a new one, or over a "
            f"regular file), so {path} was left as it is. Choose a file path with -o FILE."
        )
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(html, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass  # its folder is not one: nothing was written
        raise UsageError(
            f"Cannot write the report to {path}: {exc.strerror or exc}. Choose a writable path with -o FILE."
        ) from None
    return path


def dumps(value: Any) -> str:
    """JSON for a <script type="application/json"> block: '<', '>' and '&' escaped like jinja2's tojson."""
    text = json.dumps(value, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("'", "\\u0027")
