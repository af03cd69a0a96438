"""The fixed ruler: perfbisect's own streaming client for SGLang and OpenAI-compatible servers.

By default every trial measures with this client, not the target's in-tree ``bench_serving.py``
(which changes with the code being bisected); ``kind = "bench_serving"`` runs that one instead
(``run_bench_serving``) for users who trust it, and ``kind = "command"`` any other benchmark. A run is one request with a fixed prompt and a fixed output
length (``ignore_eos``), streamed; the client timestamps each chunk as it arrives and computes:

- ``decode_tok_s`` = (tokens − tokens of the first chunk) / (t_last − t_first), where t_first and
  t_last are the arrival times of the first and last token-bearing chunks. The first chunk carries
  one token on SGLang (it comes out of prefill), so this is DESIGN.md's (tokens − 1) / (t_last −
  t_first): prefill and queueing do not leak into it.
- ``ttft_s`` = t_first − t_request; ``e2e_tok_s`` = tokens / (t_last − t_request).
- ``itl_p50_ms`` / ``itl_p99_ms`` per token: a chunk carrying k tokens after a gap g counts as k
  tokens of g/k each (SGLang batches tokens per chunk with ``stream_interval``; EAGLE emits
  several per verify cycle).
- token counts from ``meta_info.completion_tokens`` (SGLang) or the final ``usage`` (OpenAI,
  requested with ``stream_options.include_usage``), falling back to counting chunks.

With ``concurrency = C > 1`` one "run" fires C requests at once (threads) and the RunResult
aggregates them: ``requested_tokens`` / ``output_tokens`` / ``prompt_tokens`` are sums,
``decode_tok_s`` is the aggregate decode throughput Σ(tokens_i − first_i) / (latest t_last −
earliest t_first), ``e2e_tok_s`` is Σ tokens / (latest t_last − earliest t_request), ``ttft_s`` is the mean
TTFT, the ITL percentiles pool every request's tokens, ``spec_verify_ct`` is the sum,
``spec_accept_length`` is Σ tokens / Σ verify_ct and ``spec_accept_rate`` the mean. The run is
complete only when every request returned all its tokens.

Server info (``read_server_info``): SGLang serves it at ``/server_info`` since 0.5.6 and keeps
``/get_server_info`` as a deprecated alias that logs a warning per call; older builds have only the
latter. The new path is tried first, the old one on a 404, and the one that answered is remembered per
server address. ``server_info_warnings`` says when a speculative mode's server-wide accept length is
gone (no endpoint, or no ``avg_spec_accept_length`` in what it returns) instead of reading that as
"no data".
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import httpx

from .. import metrics
from ..settings import WorkloadConfig
from ..errors import ConfigError, ServerDied, WorkloadError
from ..model import RunResult
from .warmup import MIN_LATER_RUNS, extra_runs_bound, leading_warmup
from ..workload_kinds import KINDS, kind_of

# The user's protocol: short prompts of 26–34 tokens (counted as words and punctuation marks,
# which is close to what a BPE tokenizer gives for plain English).
DEFAULT_PROMPTS: tuple[str, ...] = (
    "Explain, in plain words, how a large language model turns a prompt into text one token at a time, "
    "and why the decode phase is memory bound.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle that was written "
    "by her own grandmother, fifty years ago.",
    "List the main differences between tensor parallelism and pipeline parallelism when serving a "
    "large mixture of experts model on eight GPUs that are linked only by PCIe.",
    "Describe the water cycle to a curious ten year old, using an example from a rainy afternoon in "
    "a small mountain village, and end with one simple experiment.",
    "Summarise the causes of the French Revolution in a few short paragraphs, and say which one most "
    "historians consider the most important today, and why.",
    "Give step by step instructions for baking a loaf of sourdough bread at home, starting from an "
    "active starter and ending with cooling it on a rack.",
    "Compare the strengths and weaknesses of Python and Rust for writing a high performance web "
    "server that must handle many thousands of slow clients at once.",
    "Plan a three day walking trip through Kyoto for someone who loves gardens, quiet temples, good "
    "green tea and small family restaurants away from the crowds.",
)

_SERVER_PROBE_TIMEOUT_S = 5.0
_CONNECT_TIMEOUT_S = 10.0
# The endpoint of each request format perfbisect's own client speaks (workload_kinds.WorkloadKind.requests).
_ENDPOINTS = {
    "sglang": "/generate",
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}


# ---------------------------------------------------------------------------------------------
# Prompts


def load_prompts(cfg: WorkloadConfig) -> list[str]:
    """The prompts a workload cycles through: cfg.prompts, else cfg.prompts_file, else the default set."""
    if cfg.prompts:
        return list(cfg.prompts)
    if cfg.prompts_file is None:
        return list(DEFAULT_PROMPTS)
    path = Path(cfg.prompts_file)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"The prompts file {path} (workload.prompts_file) does not exist. Create it (one JSON object "
            f'{{"prompt": "..."}} or one plain-text prompt per line) or fix the path in the config.'
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"Cannot read the prompts file {path} (workload.prompts_file): {exc}. Fix the file or the path.") from None
    prompts = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("{"):
            try:
                obj = json.loads(stripped)
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"{path}:{lineno}: this line starts with '{{' but is not valid JSON ({exc.msg}). "
                    f'Write it as {{"prompt": "..."}} or as a plain-text prompt that does not start with "{{".'
                ) from None
            prompt = obj.get("prompt") if isinstance(obj, dict) else None
            if not isinstance(prompt, str) or not prompt.strip():
                raise ConfigError(
                    f'{path}:{lineno}: the JSON object has no non-empty string "prompt" key. '
                    f'Write each JSON line as {{"prompt": "..."}}.'
                )
            prompts.append(prompt)
        else:
            prompts.append(stripped)
    if not prompts:
        raise ConfigError(
            f"The prompts file {path} (workload.prompts_file) holds no prompts. Add one prompt per line, "
            f"or remove workload.prompts_file to use the built-in set."
        )
    return prompts


# ---------------------------------------------------------------------------------------------
# Server info


# Where SGLang serves its server-wide info: /server_info since 0.5.6 (the old path stays as a
# deprecated alias that logs a warning on every call), /get_server_info before. The first is tried
# first; the path that answered is remembered per server address, so a session asks once.
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
_info_path: dict[str, str] = {}  # base URL -> the path that answered there last


@dataclass(frozen=True)
class ServerInfo:
    """What a server said about itself: its info ({} when it has none) and the path that answered."""

    info: dict[str, Any]
    path: str | None  # "/server_info" or "/get_server_info"; None when both answered 404


def read_server_info(base_url: str, *, client: httpx.Client | None = None) -> ServerInfo:
    """GET /server_info, or /get_server_info where that is 404 (SGLang before 0.5.6); ``path`` None
    and ``info`` {} when both are 404 (a server with no such endpoint). The path that answered is
    tried first next time at this address; a 404 there (another server on the same port) falls
    back to the other path, so the memory can cost one request, never a wrong answer."""
    base = base_url.rstrip("/")
    first = _info_path.get(base, SERVER_INFO_PATHS[0])
    for path in (first, *(p for p in SERVER_INFO_PATHS if p != first)):
        url = base + path
        try:
            resp = (client or httpx).get(url, timeout=30.0)
        except httpx.ConnectError as exc:
            raise ServerDied(
                f"Cannot connect to the server at {base_url} to read {path} ({exc}). The server is "
                f"not running: look at its log for why it stopped."
            ) from None
        except httpx.HTTPError as exc:
            raise WorkloadError(f"GET {url} failed: {exc}. Check that the server is healthy (see its log).") from None
        if resp.status_code == 404:
            continue
        if resp.status_code != 200:
            raise WorkloadError(f"GET {url} answered HTTP {resp.status_code}: {resp.text[:300]}. Check the server log.")
        try:
            info = resp.json()
        except ValueError:
            raise WorkloadError(f"GET {url} did not return JSON (got {resp.text[:200]!r}). Is this an SGLang server?") from None
        _info_path[base] = path
        return ServerInfo(info if isinstance(info, dict) else {}, path)
    _info_path.pop(base, None)
    return ServerInfo({}, None)


def server_info(base_url: str, *, client: httpx.Client | None = None) -> dict[str, Any]:
    """The server's info (``read_server_info``): /server_info, else /get_server_info; {} when neither exists."""
    return read_server_info(base_url, client=client).info


def server_info_warnings(read: ServerInfo, base_url: str, speculative: bool) -> tuple[str, ...]:
    """What a trial should warn about in what the server said of itself: a speculative mode whose
    server-wide accept length is gone (no info endpoint at all, or info without
    avg_spec_accept_length), which would otherwise read as "no data"."""
    if not speculative:
        return ()
    paths = " nor ".join(f"GET {p}" for p in SERVER_INFO_PATHS)
    if read.path is None:
        return (f"the server at {base_url} answers neither {paths} (HTTP 404): this speculative trial has no "
                f"server-wide accept length (avg_spec_accept_length); only the per-request spec_accept_length "
                f"of the runs' meta_info is recorded. Check that the server is SGLang and that its log shows "
                f"no error at start-up.",)
    if avg_spec_accept_length(read.info) is None:
        return (f"GET {read.path} at {base_url} reports no avg_spec_accept_length (neither in internal_states "
                f"nor at its top level) although the mode is speculative: did the speculative flags take effect "
                f"at this commit? Look for the speculative algorithm in the server log and in the server info "
                f"(speculative_algorithm = {read.info.get('speculative_algorithm')!r}).",)
    return ()


def avg_spec_accept_length(info: dict[str, Any]) -> float | None:
    """Server-wide mean accept length: internal_states[i].avg_spec_accept_length (older builds: top level)."""
    values = []
    for state in info.get("internal_states") or ():
        if isinstance(state, dict) and isinstance(state.get("avg_spec_accept_length"), (int, float)):
            values.append(float(state["avg_spec_accept_length"]))
    if values:
        return sum(values) / len(values)
    top = info.get("avg_spec_accept_length")
    if isinstance(top, (int, float)) and not isinstance(top, bool):
        return float(top)
    return None


# ---------------------------------------------------------------------------------------------
# One streamed request


@dataclass
class _Stream:
    """Raw observations of one streamed request, before they become a RunResult."""

    t_request: float
    arrivals: list[tuple[float, float]] = field(default_factory=list)  # (arrival time, tokens carried)
    reported_tokens: int | None = None  # completion tokens the server reported
    prompt_tokens: int | None = None
    final_meta: dict[str, Any] = field(default_factory=dict)
    request_id: str | None = None
    finished: bool = False  # a finish_reason or [DONE] was seen
    error: str | None = None
    connection_lost: bool = False  # refused, reset or cut mid-stream: the server may have died

    @property
    def tokens(self) -> int:
        if self.reported_tokens is not None:
            return self.reported_tokens
        return int(round(sum(k for _, k in self.arrivals)))


def _payload(style: str, cfg: WorkloadConfig, prompt: str, ignore_eos: bool) -> dict[str, Any]:
    if style == "sglang":
        return {
            "text": prompt,
            "sampling_params": {
                "max_new_tokens": cfg.max_tokens,
                "ignore_eos": ignore_eos,
                "temperature": cfg.temperature,
            },
            "stream": True,
        }
    body: dict[str, Any] = {
        "model": cfg.model,
        "max_tokens": cfg.max_tokens,
        "temperature": cfg.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": ignore_eos,  # SGLang's extra field; OpenAI proper ignores it
    }
    if style == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def _on_event(style: str, event: dict[str, Any], t: float, rec: _Stream, state: dict[str, Any]) -> None:
    """Fold one SSE data object into the record."""
    if "error" in event and not event.get("choices") and "meta_info" not in event:
        err = event["error"]
        rec.error = f"server error in stream: {err.get('message', err) if isinstance(err, dict) else err}"
        return
    if style == "sglang":
        meta = event.get("meta_info") or {}
        rec.request_id = meta.get("id", rec.request_id)
        if meta.get("prompt_tokens") is not None:
            rec.prompt_tokens = int(meta["prompt_tokens"])
        done = meta.get("completion_tokens")
        if isinstance(done, int):
            carried = done - state.get("last_done", 0)
            state["last_done"] = done
            rec.reported_tokens = done
        else:  # no count: one chunk = one token
            carried = 1 if event.get("text") != state.get("last_text") else 0
            state["last_text"] = event.get("text")
        if carried > 0:
            rec.arrivals.append((t, float(carried)))
        if meta.get("finish_reason") is not None:
            rec.finished = True
            rec.final_meta = meta
        return
    rec.request_id = event.get("id", rec.request_id)
    usage = event.get("usage")
    if isinstance(usage, dict):
        if usage.get("completion_tokens") is not None:
            rec.reported_tokens = int(usage["completion_tokens"])
        if usage.get("prompt_tokens") is not None:
            rec.prompt_tokens = int(usage["prompt_tokens"])
    for choice in event.get("choices") or ():
        piece = choice.get("text")
        if piece is None:
            piece = (choice.get("delta") or {}).get("content")
        if piece:
            rec.arrivals.append((t, 1.0))
        if choice.get("finish_reason") is not None:
            rec.finished = True


def _stream_one(client: httpx.Client, url: str, style: str, payload: dict[str, Any]) -> _Stream:
    """Send one streaming request and timestamp every chunk as it arrives. Never raises."""
    rec = _Stream(t_request=time.perf_counter())
    state: dict[str, Any] = {}
    try:
        with client.stream("POST", url, json=payload) as resp:
            if resp.status_code != 200:
                body = resp.read().decode(errors="replace")[:300]
                rec.error = f"HTTP {resp.status_code} from {url}: {body}"
                return rec
            buf = b""
            for data in resp.iter_bytes():
                t = time.perf_counter()  # every event in this network read arrived now
                buf += data
                while True:
                    nl = buf.find(b"\n")
                    if nl < 0:
                        break
                    line, buf = buf[:nl].rstrip(b"\r"), buf[nl + 1 :]
                    if not line.startswith(b"data:"):
                        continue  # blank separators, comments, "event:" lines
                    body = line[5:].strip()
                    if body == b"[DONE]":
                        rec.finished = True
                        continue
                    try:
                        event = json.loads(body)
                    except json.JSONDecodeError:
                        rec.error = f"unparseable stream chunk from {url}: {body[:200]!r}"
                        return rec
                    if isinstance(event, dict):
                        _on_event(style, event, t, rec, state)
    except httpx.ConnectError as exc:
        rec.error, rec.connection_lost = f"connection refused by {url}: {exc}", True
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        rec.error = f"connection lost mid-stream after {rec.tokens} tokens: {type(exc).__name__}: {exc}"
        rec.connection_lost = True
    except httpx.TimeoutException as exc:
        rec.error = f"request timed out after {time.perf_counter() - rec.t_request:.1f} s ({type(exc).__name__}); raise workload.request_timeout_s if the server is just slow"
        rec.connection_lost = True  # a hung server looks the same: probe it
    except httpx.HTTPError as exc:
        rec.error = f"request to {url} failed: {type(exc).__name__}: {exc}"
    if rec.error is None and not rec.finished:
        rec.error = f"the stream from {url} ended without a final chunk after {rec.tokens} tokens"
    if style != "sglang" and rec.reported_tokens is not None and len(rec.arrivals) > 1:
        # OpenAI chunks don't say how many tokens they carry: spread the reported total evenly
        # over the chunks after the first (which carries the prefill token).
        per_chunk = (rec.reported_tokens - 1) / (len(rec.arrivals) - 1)
        rec.arrivals = [rec.arrivals[0]] + [(t, per_chunk) for t, _ in rec.arrivals[1:]]
    return rec


def _weighted_percentile(pairs: list[tuple[float, float]], q: float) -> float | None:
    """Nearest-rank percentile of (value, weight) pairs; q in [0, 1]."""
    if not pairs:
        return None
    pairs = sorted(pairs)
    total = sum(w for _, w in pairs)
    target = q * total
    acc = 0.0
    for value, weight in pairs:
        acc += weight
        if acc >= target - 1e-12:
            return value
    return pairs[-1][0]


def _itl_pairs(rec: _Stream) -> list[tuple[float, float]]:
    """Per-token inter-token latencies in ms, as (gap/k, k) pairs."""
    pairs = []
    for (t_prev, _), (t, k) in zip(rec.arrivals, rec.arrivals[1:]):
        if k > 0:
            pairs.append((1000.0 * (t - t_prev) / k, k))
    return pairs


def _summarise(index: int, warmup: bool, cfg: WorkloadConfig, recs: list[_Stream]) -> RunResult:
    """Turn the streams of one run into its RunResult (see the module docstring for aggregation)."""
    tokens = sum(r.tokens for r in recs)
    with_tokens = [r for r in recs if r.arrivals]
    decode_tok_s = e2e_tok_s = ttft_s = None
    if with_tokens:
        t_first = min(r.arrivals[0][0] for r in with_tokens)
        t_last = max(r.arrivals[-1][0] for r in with_tokens)
        decode_tokens = sum(r.tokens - r.arrivals[0][1] for r in with_tokens)
        if t_last > t_first and decode_tokens > 0:
            decode_tok_s = decode_tokens / (t_last - t_first)
        t_sent = min(r.t_request for r in recs)
        if t_last > t_sent and tokens > 0:
            e2e_tok_s = tokens / (t_last - t_sent)
        ttft_s = sum(r.arrivals[0][0] - r.t_request for r in with_tokens) / len(with_tokens)
    itl = [p for r in recs for p in _itl_pairs(r)]
    p50, p99 = _weighted_percentile(itl, 0.50), _weighted_percentile(itl, 0.99)

    verify = [r.final_meta.get("spec_verify_ct") for r in recs]
    spec_verify_ct = spec_accept_length = spec_accept_rate = None
    if recs and all(isinstance(v, int) for v in verify):
        spec_verify_ct = sum(verify)  # type: ignore[arg-type]
        if len(recs) == 1 and isinstance(recs[0].final_meta.get("spec_accept_length"), (int, float)):
            spec_accept_length = float(recs[0].final_meta["spec_accept_length"])
        elif spec_verify_ct:
            spec_accept_length = tokens / spec_verify_ct
        rates = [r.final_meta.get("spec_accept_rate") for r in recs]
        if all(isinstance(x, (int, float)) for x in rates):
            spec_accept_rate = sum(rates) / len(rates)  # type: ignore[arg-type]
    prompts = [r.prompt_tokens for r in recs]
    errors = [r.error for r in recs if r.error]
    return RunResult(
        index=index,
        warmup=warmup,
        requested_tokens=cfg.max_tokens * len(recs),
        output_tokens=tokens,
        prompt_tokens=sum(prompts) if all(p is not None for p in prompts) else None,  # type: ignore[misc]
        ttft_s=ttft_s,
        decode_tok_s=decode_tok_s,
        e2e_tok_s=e2e_tok_s,
        itl_p50_ms=p50,
        itl_p99_ms=p99,
        spec_verify_ct=spec_verify_ct,
        spec_accept_length=spec_accept_length,
        spec_accept_rate=spec_accept_rate,
        error="; ".join(errors) if errors else None,
    )


def _server_alive(base_url: str) -> bool:
    """Does anything still answer HTTP at base_url? (any status counts as alive)."""
    try:
        httpx.get(base_url.rstrip("/") + "/health", timeout=_SERVER_PROBE_TIMEOUT_S)
        return True
    except httpx.HTTPError:
        return False


def _describe(run: RunResult) -> str:
    what = "warm-up" if run.warmup else "run"
    if run.error:
        return f"{what} {run.index}: error: {run.error}"
    rate = f"{run.decode_tok_s:.1f} tok/s" if run.decode_tok_s else "no rate"
    flag = "" if run.complete else f" (only {run.output_tokens}/{run.requested_tokens} tokens: flagged)"
    return f"{what} {run.index}: {run.output_tokens} tokens, {rate}{flag}"


def run_workload(
    base_url: str,
    cfg: WorkloadConfig,
    on_run: Callable[[RunResult], None] | None = None,
    progress: Callable[[str], None] | None = None,
    *,
    ignore_eos: bool = True,
    on_warmup_detected: Callable[[list[RunResult]], None] | None = None,
) -> list[RunResult]:
    """cfg.warmup warm-up runs then cfg.runs measured runs against a live server, streamed.

    ``on_run(run)`` is called as each run lands (warm-ups included), so the caller can commit it at
    once. A bad request becomes a RunResult with ``error`` set; a server that refuses or drops the
    connection raises ServerDied after the partial run has been passed to ``on_run``.
    ``ignore_eos=False`` exists for tests of the early-EOS flag; measurements always keep it True.

    With ``cfg.detect_warmup``, once the measured runs are in, leading ones slower than the rest
    beyond their spread (``warmup.leading_warmup``) become warm-up (``warmup=True``,
    ``detected_warmup=True``; ``on_warmup_detected(runs)`` gets them as re-marked, so the caller can
    re-mark what it stored) and as many more runs are measured, up to ``warmup.extra_runs_bound``, so
    the trial keeps its run count; the runs that replace them are looked at again the same way.
    """
    style = kind_of(cfg).requests
    if style is None:
        speaks = ", ".join(k.name for k in KINDS.values() if k.requests)
        raise WorkloadError(
            f"run_workload cannot run workload.kind = {cfg.kind!r}: it speaks {speaks}. "
            f"Use run_command_workload for kind = 'command'."
        )
    base = base_url.rstrip("/")
    url = base + _ENDPOINTS[style]
    prompts = load_prompts(cfg)
    concurrency = max(1, cfg.concurrency)
    timeout = httpx.Timeout(cfg.request_timeout_s, connect=_CONNECT_TIMEOUT_S)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    results: list[RunResult] = []
    next_prompt = 0
    total = cfg.warmup + cfg.runs
    higher_is_better = metrics.describe_workload(cfg).higher_is_better
    detect = cfg.detect_warmup and cfg.runs > MIN_LATER_RUNS
    extra_left = extra_runs_bound(cfg.runs) if detect else 0
    with httpx.Client(timeout=timeout, limits=limits) as client, ThreadPoolExecutor(max_workers=concurrency) as pool:
        # Servers that report their own timing of the last request (the emulator does) get it read
        # back after each single-stream run; real SGLang has no such field and gets no extra calls.
        try:
            reports_timing = "last_decode_tok_s" in server_info(base, client=client)
        except (WorkloadError, ServerDied):
            reports_timing = False
        index = 0
        while index < total:  # total grows when detected warm-up runs are replaced
            warmup = index < cfg.warmup
            batch = [prompts[(next_prompt + j) % len(prompts)] for j in range(concurrency)]
            next_prompt += concurrency
            if concurrency == 1:
                recs = [_stream_one(client, url, style, _payload(style, cfg, batch[0], ignore_eos))]
            else:
                futures = [pool.submit(_stream_one, client, url, style, _payload(style, cfg, p, ignore_eos)) for p in batch]
                recs = [f.result() for f in futures]
            run = metrics.with_quantity(_summarise(index, warmup, cfg, recs), cfg)
            lost = any(r.connection_lost for r in recs)
            if reports_timing and concurrency == 1 and not lost and recs[0].request_id:
                run = _with_server_timing(client, base, run, recs[0].request_id)
            results.append(run)
            if on_run is not None:
                on_run(run)
            if progress is not None:
                progress(f"{_describe(run)} [{index + 1}/{total}]")
            if lost and not _server_alive(base):
                raise ServerDied(
                    f"The server at {base} stopped answering during {'warm-up' if warmup else 'measured'} run "
                    f"{index} ({run.error}). The {len(results)} run(s) so far were kept; the trial is failed. "
                    f"Look at the server log for why it died (out of memory, a crash in a worker)."
                )
            index += 1
            if detect and index == total:
                more = _detect_warmup(results, higher_is_better, extra_left, on_warmup_detected, progress)
                extra_left -= more
                total += more
    return results


def _detect_warmup(results: list[RunResult], higher_is_better: bool, extra_left: int,
                   on_detected: Callable[[list[RunResult]], None] | None,
                   progress: Callable[[str], None] | None) -> int:
    """Re-mark leading measured runs that were warm-up (in ``results``); how many more runs to measure."""
    measured = [i for i, r in enumerate(results) if r.usable]
    count = leading_warmup([results[i].value for i in measured], higher_is_better)  # type: ignore[misc]
    if not count:
        return 0
    marked = []
    for i in measured[:count]:
        results[i] = replace(results[i], warmup=True, detected_warmup=True)
        marked.append(results[i])
    if on_detected is not None:
        on_detected(marked)
    more = min(count, extra_left)
    if progress is not None:
        which = ", ".join(str(r.index) for r in marked)
        tail = (f"{more} more measured in their place" if more == count
                else f"{more} more measured in their place: the trial's extra runs (warmup.extra_runs_bound) are spent")
        progress(f"run{'s' if count > 1 else ''} {which}: slower than the later runs beyond their spread, counted as warm-up; {tail}")
    return more


def _with_server_timing(client: httpx.Client, base: str, run: RunResult, request_id: str) -> RunResult:
    """Attach the server's own decode rate of this request, when it reports one."""
    try:
        info = server_info(base, client=client)
    except (WorkloadError, ServerDied):
        return run
    value = info.get("last_decode_tok_s")
    if info.get("last_request_id") == request_id and isinstance(value, (int, float)):
        return replace(run, server_decode_tok_s=float(value))
    return run
