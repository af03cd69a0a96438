"""Telling the user what a check found: one line, and optionally a webhook and a command.

The line is what `perfbisect status` shows and what the next pull's hook prints. The webhook (a JSON
POST) and the user's command are best effort: whatever they do, the check and its record stand, and
a failure is one warning in the check's log.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any, Callable, Mapping, Sequence

from ..placeholders import expand

WEBHOOK_TIMEOUT_S = 10.0
COMMAND_TIMEOUT_S = 120.0

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def one_line(text: str) -> str:
    """Repository text made one inert line: no newline, escape sequence or bidi override reaches a terminal."""
    return _CONTROL.sub("?", " ".join(str(text).split()))


def summary_line(result: Mapping[str, Any]) -> str:
    """``perfbisect: 1a2b3c4d5e..6f7a8b9c0d regressed eagle3 -14.8% · culprit bdc5a04 "subject" · report: PATH``."""
    rng = f"{str(result.get('old', ''))[:10]}..{str(result.get('new', ''))[:10]}"
    bits = [f"perfbisect: {rng} {result.get('verdict', '?')}"]
    mode = result.get("mode")
    effect = result.get("effect_pct")
    if mode:
        bits[0] += f" [{mode}]"
    if isinstance(effect, (int, float)):
        bits[0] += f" {effect:+.1f}%"
    if result.get("coalesced", 1) > 1:
        bits[0] += f" ({result['coalesced']} pulls)"
    if result.get("culprit"):
        subject = result.get("culprit_subject") or ""
        bits.append(f"culprit {str(result['culprit'])[:10]}" + (f" \"{subject[:60]}\"" if subject else ""))
    elif result.get("culprit_is_set"):
        bits.append("culprit one of " + ", ".join(str(s)[:10] for s in result.get("culprit_set") or ()))
    if result.get("error"):
        bits.append(f"error: {str(result['error'])[:200]}")
    if result.get("report"):
        bits.append(f"report: {result['report']}")
    return one_line(" · ".join(bits))


def payload(result: Mapping[str, Any], line: str) -> dict[str, Any]:
    """The webhook's JSON body."""
    return {
        "verdict": result.get("verdict"),
        "culprit": result.get("culprit"),  # null when the answer is a set
        "culprit_set": list(result.get("culprit_set") or ()),
        "culprit_is_set": bool(result.get("culprit_is_set")),
        "effect_pct": result.get("effect_pct"),
        "mode": result.get("mode"),
        "report": result.get("report"),
        "old": result.get("old"),
        "new": result.get("new"),
        "bisection": result.get("bisection"),
        "line": line,
    }


def post_webhook(url: str, body: Mapping[str, Any], timeout_s: float = WEBHOOK_TIMEOUT_S) -> str | None:
    """POST ``body`` as JSON; None when it was accepted (2xx), else why not."""
    import httpx  # here, not at the top: `perfbisect status` formats lines with this module

    try:
        response = httpx.post(url, json=dict(body), timeout=timeout_s)
    except httpx.HTTPError as exc:
        return f"webhook {url} failed: {type(exc).__name__}: {exc}"
    if response.status_code // 100 != 2:
        return f"webhook {url} answered HTTP {response.status_code}"
    return None


def run_command(argv: Sequence[str], result: Mapping[str, Any], line: str, timeout_s: float = COMMAND_TIMEOUT_S) -> str | None:
    """Run the user's notify command (an argument list, never a shell); None when it exited 0, else why not.

    Placeholders {verdict} {culprit} {effect} {report} {line} {old} {new} are filled in each argument;
    the same values are in the environment as PERFBISECT_VERDICT, ... .
    """
    values = {
        "verdict": str(result.get("verdict") or ""),
        "culprit": str(result.get("culprit") or ""),
        "culprit_set": " ".join(str(s) for s in result.get("culprit_set") or ()),
        "effect": "" if result.get("effect_pct") is None else f"{result['effect_pct']:+.1f}",
        "report": str(result.get("report") or ""),
        "line": line,
        "old": str(result.get("old") or ""),
        "new": str(result.get("new") or ""),
    }
    args = expand(tuple(argv), **values)
    env = {**os.environ, **{f"PERFBISECT_{k.upper()}": v for k, v in values.items()}}
    try:
        done = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"notify command {args[0]!r} could not run: {exc}"
    if done.returncode != 0:
        tail = one_line((done.stderr or done.stdout)[-300:])
        return f"notify command {args[0]!r} exited {done.returncode}" + (f": {tail}" if tail else "")
    return None


def notify(result: Mapping[str, Any], line: str, webhook_url: str | None, command: Sequence[str],
           warn: Callable[[str], None]) -> list[str]:
    """Send the webhook and run the command when configured; every failure is warned and returned, never raised."""
    problems = []
    if webhook_url:
        problems.append(post_webhook(webhook_url, payload(result, line)))
    if command:
        problems.append(run_command(command, result, line))
    out = [p for p in problems if p]
    for p in out:
        warn(p)
    return out
