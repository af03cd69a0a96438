"""The workload kinds: what each ``[workload] kind`` is, in one registry (a value module: the standard library only).

Every layer acts on a kind's traits ("command" has no server, so no GPU lock, no port check and no run-count
choice; "bench_serving" needs a dataset or random ids, and names its own metrics; ...). Each kind is one
``WorkloadKind`` with the traits those places ask about, and ``kind_of(workload)`` is the one way to get it, so
no layer compares ``workload.kind`` with a string. A new kind is one more entry in ``KINDS`` (its request format,
if it streams HTTP requests of a new shape, is ``measure.workload``'s ``_payload``/``_on_event``; a client of its
own is a module in ``measure/`` like ``external_workloads``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WorkloadKind:
    """One ``[workload] kind``: what a trial of it starts, sends and records."""

    name: str
    # How doctor and plan name a target measured this way (an SGLang target is named "SGLang" whatever its kind).
    title: str
    # Each trial starts the target's server (so it holds the GPUs' lock and a port, and needs server.command);
    # False: the workload's own command starts whatever it measures.
    serves: bool = True
    # Who sends the trial's work: "perfbisect" (its own streaming HTTP client), "bench_serving" (SGLang's client of
    # a pinned revision) or "command" (the workload's own command, which prints its result).
    client: str = "perfbisect"
    # The HTTP requests perfbisect's own client streams: "sglang" (/generate, meta_info), "completions" or "chat"
    # (OpenAI-compatible); None: another program is the client (a command, SGLang's bench_serving).
    requests: str | None = None
    # Whether a target measured this way is an SGLang target: True, False, or None (as its server command says).
    sglang: bool | None = None
    # The metric keys it records: "quantities" (perfbisect's recorded quantities and their aliases),
    # "bench_serving" (bench_serving's result keys) or "any" (whatever key its command prints).
    metric_keys: str = "quantities"
    # Why a trial's run count is not chosen (one measured invocation yields the trial's one result); None: the
    # count is workload.runs, or chosen from the stored trials when that is 0.
    single_invocation: str | None = None
    # The workload key it cannot run without (None: none beyond the defaults).
    requires: str | None = None


KINDS: dict[str, WorkloadKind] = {k.name: k for k in (
    WorkloadKind("sglang", "SGLang", requests="sglang", sglang=True),
    WorkloadKind("openai-completions", "OpenAI-compatible server", requests="completions"),
    WorkloadKind("openai-chat", "OpenAI-compatible server", requests="chat"),
    WorkloadKind("command", "command workload", serves=False, client="command", sglang=False, metric_keys="any",
                 single_invocation="one measured invocation of workload.command per trial", requires="command"),
    WorkloadKind("bench_serving", "OpenAI-compatible server", client="bench_serving", metric_keys="bench_serving",
                 single_invocation="bench_serving runs every request in one invocation, one measured result per trial"),
)}


def kind_of(workload: Any) -> WorkloadKind:
    """The kind of a ``settings.WorkloadConfig`` (or anything with ``.kind``; "sglang" when it has none)."""
    return KINDS[getattr(workload, "kind", "sglang")]
