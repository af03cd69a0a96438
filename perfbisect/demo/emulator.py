"""A stand-in for `python -m sglang.launch_server`: an SGLang-compatible HTTP server with no GPU.

This is an emulator, not SGLang. It exists so the whole perfbisect pipeline (worktrees, patch stack,
build, server process group, streaming runs, SQLite, statistics, bisection, report) can run on a
laptop and in the integration tests. It speaks SGLang's HTTP API (``/health_generate``, streaming
``/generate`` with ``meta_info``, ``/v1/completions``, ``/v1/chat/completions``,
``/server_info`` and its older name ``/get_server_info``, ``/get_model_info``, ``/v1/models``) and
says what it is in every server-info answer (``"emulator": true``).

Its speed comes from the checked-out code of the worktree it serves: module-level assignments in
``W/python/sglang/**/*.py`` such as ``DECODE_STEP_MS = 2.0`` set the time per decode step, so a
commit that edits such a line is a real, bisectable slowdown. On top of that it adds the noise a
real GPU server has: a between-session factor drawn once per process (clocks, placement, heat) and
within-session run-to-run jitter.

Run: ``python -m perfbisect.demo.emulator --port P --worktree W [SGLang flags] [test knobs]``.
Stdlib only: it runs under the target's interpreter, which need not have perfbisect's dependencies.

Speed knobs read from the code (``^NAME = value`` at module level; the last one found in path
order wins): ``DECODE_STEP_MS`` (ms per baseline decode step, default 2.0), ``VERIFY_CYCLE_MS``
(ms per speculative verify cycle, 4.0), ``SPEC_ACCEPT_LENGTH`` (mean tokens per cycle, 2.4),
``STARTUP_S`` (seconds until /health_generate answers 200, 0.3), ``EAGLE3_CAPTURE_FIX =
True/False`` (default True; False caps the accept length at 1.3, modelling the missing
deepseek_v2 hidden-state fix) and ``COLD_REQUESTS`` / ``COLD_SLOWDOWN`` (the first N generate
requests of a session run that many times slower, default 0 / 2.0: compilation and cold caches that
a fixed warm-up count may not cover).

Environment:
- ``PERFBISECT_DEMO_SEED``: seeds the session RNG, combined with pid and time so sessions differ.
- ``PERFBISECT_DEMO_SESSION_SIGMA`` (log-sd, default 0.02): the between-session factor, drawn
  once at start and applied to every step of the session (runs within a session are correlated).
- ``PERFBISECT_DEMO_RUN_SIGMA`` (log-sd, default 0.01): within-session jitter, drawn once per
  request (run-to-run spread) and again per step (which averages out over a run).
- ``PERFBISECT_DEMO_DRIFT_PER_SESSION`` (e.g. 0.02) with ``PERFBISECT_DEMO_DRIFT_FILE``: a
  counter file shared by the sessions of one demo; session n is (1 + drift)^n slower, a slow
  monotone drift with no code change.
- ``PERFBISECT_EMULATOR_SERVER_INFO``: the info paths it answers, comma-separated (default both,
  ``/server_info,/get_server_info``; ``/get_server_info`` alone is an SGLang before 0.5.6,
  ``/server_info`` alone one that dropped the deprecated alias, ``none`` neither). The others 404.
- ``PERFBISECT_EMULATOR_OVERRIDE_ENV`` (``NAME=VALUE,NAME=VALUE``): set in its own ``os.environ``
  before it starts its workers, as SGLang's ``_set_envs_and_config`` does (up to 0.5.3 it sets
  NCCL_CUMEM_ENABLE and NCCL_NVLS_ENABLE): the workers run with these values, while the server
  process's /proc/<pid>/environ still shows what it was started with. Needs ``--workers``.
- ``PERFBISECT_EMULATOR_TREE_CORE_FALLBACK`` (a reason): with ``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND``
  unset or ``rust``, it logs SGLang's ``Using the Python TreeCore: <reason>`` while it starts, as a 2026
  SGLang does when the machine or the configuration cannot run the Rust TreeCore.

Speculative mode: ``--speculative-algorithm EAGLE3`` (or EAGLE / NEXTN; ``--speculative`` is
short for EAGLE3). Each verify cycle yields 1 + Binomial(num_draft_tokens − 1, p) tokens with mean
accept length, as SGLang's ``spec_verify_ct`` / ``spec_accept_length`` / ``spec_accept_rate``.

Why one module of ~940 lines: it runs as ``python -m perfbisect.demo.emulator`` in the target's
interpreter with the standard library only, so it cannot import perfbisect's other modules; the
HTTP API, the worker processes and the speed model are one program.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

from ..runtime.children import die_with_parent

EMULATOR_VERSION = "0.0.0+perfbisect.emulator"

# Defaults for the speed knobs read from the worktree's code.
DEFAULT_DECODE_STEP_MS = 2.0
DEFAULT_VERIFY_CYCLE_MS = 4.0
DEFAULT_SPEC_ACCEPT_LENGTH = 2.4
DEFAULT_STARTUP_S = 0.3
# Accept length when the EAGLE-3 hidden-state capture fix is missing: the drafter sees the wrong
# layers and most drafts are rejected (models the user's deepseek_v2.py patch).
BROKEN_CAPTURE_ACCEPT_LENGTH = 1.3

# Prefill: a fixed cost plus a per-prompt-token cost, in ms (keeps TTFT small but real).
PREFILL_BASE_MS = 2.0
PREFILL_PER_TOKEN_MS = 0.01
# Like SGLang's stream_interval: when steps are shorter than this, several steps share one chunk so
# that writing chunks does not dominate; the server-side timing stays exact.
MIN_CHUNK_S = 0.001
# Lateness up to this is caught up by the next chunks (it is sleep overshoot); more is a stall
# (the host was busy) and shifts the rest of the schedule instead of bursting.
MAX_CATCH_UP_S = 0.002
EOS_TOKEN_ID = 2

_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_NUMERIC_KNOBS = {
    "DECODE_STEP_MS": "decode_step_ms",
    "VERIFY_CYCLE_MS": "verify_cycle_ms",
    "SPEC_ACCEPT_LENGTH": "spec_accept_length",
    "STARTUP_S": "startup_s",
    "COLD_REQUESTS": "cold_requests",
    "COLD_SLOWDOWN": "cold_slowdown",
}
_BOOL_KNOBS = {"EAGLE3_CAPTURE_FIX": "eagle3_capture_fix"}

_WORDS = (
    "the quick model streams tokens while the verifier checks every draft and the scheduler "
    "keeps batches warm so that each step lands on time across all ranks of the node"
).split()

# Worker children stand in for SGLang's scheduler / TP worker processes: they only sleep, and
# exit on their own once their parent is gone (so a hard os._exit of the server leaks nothing).
# One line, because it shows up as the worker's command line in env-check reports.
_WORKER_SOURCE = (
    "import os, time; parent = os.getppid(); "
    "[time.sleep(0.2) for _ in iter(lambda: os.getppid() == parent, False)]"
)


# ---------------------------------------------------------------------------------------------
# What the checked-out code says


@dataclass(frozen=True)
class CodeSpeed:
    """Speed knobs read from the worktree's code (module-level assignments)."""

    decode_step_ms: float = DEFAULT_DECODE_STEP_MS
    verify_cycle_ms: float = DEFAULT_VERIFY_CYCLE_MS
    spec_accept_length: float = DEFAULT_SPEC_ACCEPT_LENGTH
    startup_s: float = DEFAULT_STARTUP_S
    eagle3_capture_fix: bool = True
    cold_requests: float = 0.0  # the first N generate requests of a session are slow (warm-up)
    cold_slowdown: float = 2.0  # ... by this factor
    sources: dict[str, str] = field(default_factory=dict)  # knob name -> "relative/path.py:line"

    @property
    def effective_accept_length(self) -> float:
        """Mean tokens per verify cycle, after the capture fix (or its absence) is applied."""
        if self.eagle3_capture_fix:
            return self.spec_accept_length
        return min(self.spec_accept_length, BROKEN_CAPTURE_ACCEPT_LENGTH)


def read_code_speed(worktree: Path) -> CodeSpeed:
    """Scan ``worktree/python/sglang/**/*.py`` for the speed knobs; the last one found wins."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    patterns = [(name, re.compile(rf"^{name}\s*=\s*{_NUMBER}\s*(?:#.*)?$")) for name in _NUMERIC_KNOBS]
    bool_patterns = [(name, re.compile(rf"^{name}\s*=\s*(True|False)\s*(?:#.*)?$")) for name in _BOOL_KNOBS]
    root = Path(worktree) / "python" / "sglang"
    files = sorted(root.rglob("*.py")) if root.is_dir() else []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        # Cheap pre-filter: a real SGLang checkout has ~1,500 files.
        if not any(name in text for name in (*_NUMERIC_KNOBS, *_BOOL_KNOBS)):
            continue
        rel = path.relative_to(worktree).as_posix()
        for lineno, line in enumerate(text.splitlines(), start=1):
            for name, pattern in patterns:
                m = pattern.match(line)
                if m:
                    value = float(m.group(1))
                    if value > 0 and math.isfinite(value):
                        values[_NUMERIC_KNOBS[name]] = value
                        sources[name] = f"{rel}:{lineno}"
            for name, pattern in bool_patterns:
                m = pattern.match(line)
                if m:
                    values[_BOOL_KNOBS[name]] = m.group(1) == "True"
                    sources[name] = f"{rel}:{lineno}"
    return CodeSpeed(**values, sources=sources)


# ---------------------------------------------------------------------------------------------
# Session noise (what the machine adds on top of the code)


@dataclass(frozen=True)
class SessionNoise:
    """The between-session factor drawn once at start, and the within-session jitter."""

    factor: float  # multiplies every step time of this session
    run_sigma: float  # log-sd of the per-request factor and of the per-step jitter
    session_sigma: float
    drift_per_session: float
    session_index: int  # from the drift counter file (0 without one)


def _env_float(env: dict[str, str], name: str, default: float) -> float:
    raw = env.get(name, "")
    if not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        print(f"emulator: ignoring {name}={raw!r}: not a number", file=sys.stderr, flush=True)
        return default
    return value


def _next_session_index(counter_file: Path) -> int:
    """Read-and-increment a session counter shared by every emulator of one demo (file-locked)."""
    import fcntl  # POSIX only, like SGLang itself

    counter_file.parent.mkdir(parents=True, exist_ok=True)
    with open(counter_file, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        raw = fh.read().strip()
        index = int(raw) if raw.isdigit() else 0
        fh.seek(0)
        fh.truncate()
        fh.write(f"{index + 1}\n")
        fh.flush()
    return index


def draw_session_noise(env: dict[str, str], rng: random.Random) -> SessionNoise:
    """Draw this session's factor from PERFBISECT_DEMO_* variables (see the module docstring)."""
    session_sigma = max(0.0, _env_float(env, "PERFBISECT_DEMO_SESSION_SIGMA", 0.02))
    run_sigma = max(0.0, _env_float(env, "PERFBISECT_DEMO_RUN_SIGMA", 0.01))
    drift = _env_float(env, "PERFBISECT_DEMO_DRIFT_PER_SESSION", 0.0)
    index = 0
    counter = env.get("PERFBISECT_DEMO_DRIFT_FILE", "")
    if drift and not counter:
        print(
            "emulator: PERFBISECT_DEMO_DRIFT_PER_SESSION is set but PERFBISECT_DEMO_DRIFT_FILE is not; "
            "without a counter file every session is session 0, so no drift is applied",
            file=sys.stderr,
            flush=True,
        )
    elif counter:
        index = _next_session_index(Path(counter))
    factor = math.exp(rng.gauss(0.0, session_sigma)) * (1.0 + drift) ** index
    return SessionNoise(
        factor=factor,
        run_sigma=run_sigma,
        session_sigma=session_sigma,
        drift_per_session=drift,
        session_index=index,
    )


def make_rng(env: dict[str, str]) -> random.Random:
    """A session RNG: PERFBISECT_DEMO_SEED combined with pid and time, so sessions still differ."""
    seed = env.get("PERFBISECT_DEMO_SEED", "")
    return random.Random(f"{seed}:{os.getpid()}:{time.time_ns()}")


# ---------------------------------------------------------------------------------------------
# Generation


def count_prompt_tokens(text: str) -> int:
    """A tokenizer stand-in: words and punctuation marks (close to BPE counts for English prose)."""
    return max(1, len(re.findall(r"\w+|[^\w\s]", text)))


@dataclass
class Generation:
    """One request's decode: how many tokens, why it stops, and its step schedule."""

    rid: str
    prompt: str
    prompt_tokens: int
    max_tokens: int
    n_tokens: int  # tokens it will produce (max_tokens, or fewer at EOS)
    stop_reason: dict[str, Any]
    die_at: int | None = None  # os._exit once this many tokens were streamed (test knob)
    number: int = 0  # the n-th generate request of this session (1 = first)
    # Filled while it runs:
    completion_tokens: int = 0
    verify_ct: int = 0
    accepted_drafts: int = 0
    t_arrival: float = 0.0
    t_first: float | None = None
    t_last: float | None = None
    first_chunk_tokens: int = 0

    def token_text(self, start: int, stop: int) -> str:
        base = zlib.crc32(self.prompt.encode())
        return "".join(" " + _WORDS[(base + i) % len(_WORDS)] for i in range(start, stop))


class EmulatedEngine:
    """Decides step times and token counts; keeps the server-wide stats /get_server_info reports."""

    def __init__(self, args: argparse.Namespace, code: CodeSpeed, noise: SessionNoise, rng: random.Random):
        self.args = args
        self.code = code
        self.noise = noise
        self.rng = rng
        self.rng_lock = threading.Lock()
        self.stats_lock = threading.Lock()
        self.started = time.perf_counter()
        self.generate_requests = 0
        self.total_tokens = 0
        self.total_verify_ct = 0
        self.last: dict[str, Any] = {}

    # -- configuration -----------------------------------------------------------------------
    @property
    def speculative(self) -> bool:
        algo = (self.args.speculative_algorithm or "").upper()
        return algo in {"EAGLE", "EAGLE3", "NEXTN"}

    @property
    def num_draft_tokens(self) -> int:
        if self.args.speculative_num_draft_tokens:
            return max(1, self.args.speculative_num_draft_tokens)
        return (self.args.speculative_num_steps or 3) + 1

    def ready(self) -> bool:
        if self.args.never_ready:
            return False
        return time.perf_counter() - self.started >= self.code.startup_s

    # -- one request -------------------------------------------------------------------------
    def new_generation(self, prompt: str, max_tokens: int, ignore_eos: bool, prompt_tokens: int | None = None) -> Generation:
        with self.stats_lock:
            self.generate_requests += 1
            number = self.generate_requests
        max_tokens = max(1, int(max_tokens))
        n_tokens, stop = max_tokens, {"type": "length", "length": max_tokens}
        if not ignore_eos:
            if self.args.eos_after is not None:
                eos_at = max(1, self.args.eos_after)
            else:
                # A deterministic "natural" end of answer, like the 1687-token run of the user's data.
                eos_at = 200 + zlib.crc32(prompt.encode()) % 1800
            if eos_at < max_tokens:
                n_tokens, stop = eos_at, {"type": "stop", "matched": EOS_TOKEN_ID}
        die_at = None
        if self.args.die_after_requests and number == self.args.die_after_requests:
            die_at = max(1, n_tokens // 2)
        return Generation(
            rid=uuid.uuid4().hex,
            prompt=prompt,
            prompt_tokens=prompt_tokens if prompt_tokens is not None else count_prompt_tokens(prompt),
            max_tokens=max_tokens,
            n_tokens=n_tokens,
            stop_reason=stop,
            die_at=die_at,
            number=number,
            t_arrival=time.perf_counter(),
        )

    def _jitter(self) -> float:
        sigma = self.noise.run_sigma
        if sigma <= 0:
            return 1.0
        with self.rng_lock:
            return math.exp(self.rng.gauss(0.0, sigma))

    def _accepted_tokens(self) -> int:
        """Tokens one verify cycle yields: 1 bonus token + accepted drafts, mean ≈ accept length."""
        draft = self.num_draft_tokens
        mean = min(max(self.code.effective_accept_length, 1.0), float(draft))
        if draft <= 1:
            return 1
        p = (mean - 1.0) / (draft - 1)
        with self.rng_lock:
            return 1 + sum(1 for _ in range(draft - 1) if self.rng.random() < p)

    def schedule(self, gen: Generation) -> Iterator[tuple[float, int]]:
        """Yield (due time, cumulative tokens) per chunk; the caller sleeps until each is due."""
        factor = self.noise.factor * self._jitter()  # session factor × this run's factor
        if gen.number <= self.code.cold_requests:  # not warm yet: compilation, cold caches
            factor *= self.code.cold_slowdown
        prefill_s = (PREFILL_BASE_MS + PREFILL_PER_TOKEN_MS * gen.prompt_tokens) * factor / 1000.0
        due = gen.t_arrival + prefill_s
        # The first token comes out of prefill, alone in its chunk (as in SGLang).
        gen.completion_tokens = 1
        yield due, 1
        step_s = (self.code.verify_cycle_ms if self.speculative else self.code.decode_step_ms) * factor / 1000.0
        steps_per_chunk = max(1, round(MIN_CHUNK_S / step_s))
        while gen.completion_tokens < gen.n_tokens:
            chunk_s = 0.0
            tokens = gen.completion_tokens
            for _ in range(steps_per_chunk):
                if tokens >= gen.n_tokens:
                    break
                chunk_s += step_s * self._jitter()
                if self.speculative:
                    got = min(self._accepted_tokens(), gen.n_tokens - tokens)
                    gen.verify_ct += 1
                    gen.accepted_drafts += got - 1
                    tokens += got
                else:
                    tokens += 1
            due += chunk_s
            gen.completion_tokens = tokens
            yield due, tokens

    def finish(self, gen: Generation) -> None:
        """Record the server-side timing of a finished request."""
        decode_tok_s = None
        if gen.t_first is not None and gen.t_last is not None and gen.t_last > gen.t_first:
            decode_tok_s = (gen.completion_tokens - gen.first_chunk_tokens) / (gen.t_last - gen.t_first)
        with self.stats_lock:
            self.total_tokens += gen.completion_tokens
            self.total_verify_ct += gen.verify_ct
            self.last = {
                "last_request_id": gen.rid,
                "last_decode_tok_s": decode_tok_s,
                "last_completion_tokens": gen.completion_tokens,
                "last_decode_s": (gen.t_last - gen.t_first) if gen.t_first is not None and gen.t_last is not None else None,
            }
        rate = f"{decode_tok_s:.1f} tok/s" if decode_tok_s else "n/a"
        print(f"emulator: request {gen.rid[:8]} done: {gen.completion_tokens} tokens, decode {rate}", flush=True)

    # -- reporting ---------------------------------------------------------------------------
    def meta_info(self, gen: Generation, final: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": gen.rid,
            "finish_reason": gen.stop_reason if final else None,
            "prompt_tokens": gen.prompt_tokens,
            "completion_tokens": gen.completion_tokens,
            "completion_tokens_wo_jump_forward": gen.completion_tokens,
            "cached_tokens": 0,
        }
        if final:
            meta["e2e_latency"] = time.perf_counter() - gen.t_arrival
        if self.speculative:
            meta["spec_verify_ct"] = gen.verify_ct
            if gen.verify_ct:
                meta["spec_accept_length"] = gen.completion_tokens / gen.verify_ct
                proposed = gen.verify_ct * max(1, self.num_draft_tokens - 1)
                meta["spec_accept_rate"] = gen.accepted_drafts / proposed
        return meta

    def server_info(self) -> dict[str, Any]:
        a = self.args
        with self.stats_lock:
            last = dict(self.last)
            total_tokens, total_verify = self.total_tokens, self.total_verify_ct
        state: dict[str, Any] = {"last_gen_throughput": last.get("last_decode_tok_s") or 0.0}
        if self.speculative:
            state["avg_spec_accept_length"] = (total_tokens / total_verify) if total_verify else 0.0
        return {
            "model_path": a.model_path,
            "tokenizer_path": a.model_path,
            "served_model_name": a.model_path,
            "tp_size": a.tp_size,
            "host": a.host,
            "port": a.port,
            "load_format": a.load_format,
            "speculative_algorithm": a.speculative_algorithm,
            "speculative_draft_model_path": a.speculative_draft_model_path,
            "speculative_num_steps": a.speculative_num_steps if self.speculative else None,
            "speculative_eagle_topk": a.speculative_eagle_topk if self.speculative else None,
            "speculative_num_draft_tokens": self.num_draft_tokens if self.speculative else None,
            "version": EMULATOR_VERSION,
            "emulator": True,
            "emulator_worktree": str(a.worktree),
            "emulator_code": {
                "DECODE_STEP_MS": self.code.decode_step_ms,
                "VERIFY_CYCLE_MS": self.code.verify_cycle_ms,
                "SPEC_ACCEPT_LENGTH": self.code.spec_accept_length,
                "STARTUP_S": self.code.startup_s,
                "EAGLE3_CAPTURE_FIX": self.code.eagle3_capture_fix,
                "sources": dict(self.code.sources),
            },
            "emulator_session_factor": self.noise.factor,
            "emulator_session_index": self.noise.session_index,
            "internal_states": [state],
            "last_decode_tok_s": last.get("last_decode_tok_s"),
            "last_request_id": last.get("last_request_id"),
            "last_completion_tokens": last.get("last_completion_tokens"),
        }


# ---------------------------------------------------------------------------------------------
# HTTP


INFO_PATHS = frozenset({"/server_info", "/get_server_info"})


def info_paths_from_env(env: dict[str, str]) -> frozenset[str]:
    """PERFBISECT_EMULATOR_SERVER_INFO: the info paths to answer (default both; "none": neither)."""
    raw = env.get("PERFBISECT_EMULATOR_SERVER_INFO", "").strip()
    if not raw:
        return INFO_PATHS
    if raw.lower() == "none":
        return frozenset()
    paths = frozenset(p.strip() for p in raw.split(",") if p.strip())
    unknown = paths - INFO_PATHS
    if unknown:
        print(f"emulator: ignoring PERFBISECT_EMULATOR_SERVER_INFO entries {sorted(unknown)}: it knows "
              f"{sorted(INFO_PATHS)}", file=sys.stderr, flush=True)
    return paths & INFO_PATHS


def apply_env_overrides(env: dict[str, str]) -> dict[str, str]:
    """PERFBISECT_EMULATOR_OVERRIDE_ENV ("NAME=VALUE,..."): set in os.environ, so workers started
    afterwards inherit them (as SGLang's own os.environ[...] = ... before it spawns schedulers)."""
    raw = env.get("PERFBISECT_EMULATOR_OVERRIDE_ENV", "")
    done = {}
    for item in raw.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep or not name:
            if item.strip():
                print(f"emulator: ignoring PERFBISECT_EMULATOR_OVERRIDE_ENV entry {item.strip()!r}: not NAME=VALUE",
                      file=sys.stderr, flush=True)
            continue
        os.environ[name] = value
        done[name] = value
    return done


class EmulatorServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], engine: EmulatedEngine, info_paths: frozenset[str] = INFO_PATHS):
        super().__init__(address, EmulatorHandler)
        self.engine = engine
        self.info_paths = info_paths  # which of /server_info, /get_server_info it answers


class _BadRequest(Exception):
    pass


class EmulatorHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, like uvicorn
    # Each chunk must leave when written: with Nagle's algorithm small SSE writes wait for the
    # client's delayed ACK and arrive in lumps, which would corrupt every client-side timing.
    disable_nagle_algorithm = True
    server: EmulatorServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        # Per-request access lines would drown the server log the trial keeps; finish() logs runs.
        return

    # -- plumbing ----------------------------------------------------------------------------
    def _send_json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send_json(status, {"error": {"message": message, "code": status}, "object": "error"})

    def _read_json(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            raise _BadRequest(f"request body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise _BadRequest("request body must be a JSON object")
        return body

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _send_event(self, payload: Any) -> None:
        data = b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self._send_event(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # -- routes ------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        engine = self.server.engine
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/health_generate"):
            if engine.ready():
                self._send_json(200, {})
            else:
                self._error(503, "server is starting (emulated model load / warm-up)")
        elif path in ("/get_server_info", "/server_info") and path in self.server.info_paths:
            self._send_json(200, engine.server_info())
        elif path in ("/get_model_info", "/model_info"):
            self._send_json(
                200,
                {
                    "model_path": engine.args.model_path,
                    "tokenizer_path": engine.args.model_path,
                    "is_generation": True,
                    "preferred_sampling_params": None,
                    "weight_version": "default",
                },
            )
        elif path == "/v1/models":
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": engine.args.model_path,
                            "object": "model",
                            "created": int(time.time()),
                            "owned_by": "sglang",
                            "root": engine.args.model_path,
                            "max_model_len": 131072,
                        }
                    ],
                },
            )
        else:
            self._error(404, f"no route {path}")

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        engine = self.server.engine
        path = self.path.split("?", 1)[0]
        handlers = {
            "/generate": self._generate,
            "/v1/completions": self._completions,
            "/v1/chat/completions": self._chat,
        }
        handler = handlers.get(path)
        if handler is None:
            self._error(404, f"no route {path}")
            return
        try:
            body = self._read_json()
        except _BadRequest as exc:
            self._error(400, str(exc))
            return
        if not engine.ready():
            self._error(503, "server is not ready yet")
            return
        try:
            handler(body)
        except _BadRequest as exc:
            self._error(400, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away; nothing to answer

    def _run(self, gen: Generation, emit) -> None:
        """Drive one generation: sleep until each chunk is due, emit it, keep exact server timing."""
        engine = self.server.engine
        shown = 0
        lag = 0.0  # how far the schedule has been pushed back by hiccups
        for due, tokens in engine.schedule(gen):
            due += lag
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            elif -delay > MAX_CATCH_UP_S or gen.t_first is None:
                # A real server never makes up for a stall with a burst of instant tokens, and
                # decode starts when the first token is out: shift the rest of the schedule.
                # Smaller lateness (sleep overshoot) is caught up so the rate stays exact.
                lag -= delay
            if gen.die_at is not None and tokens >= gen.die_at:
                print(f"emulator: dying mid-stream at token {shown} (--die-after-requests)", flush=True)
                os._exit(3)
            final = tokens >= gen.n_tokens
            emit(gen, shown, tokens, final)
            now = time.perf_counter()
            if gen.t_first is None:
                gen.t_first, gen.first_chunk_tokens = now, tokens
            gen.t_last = now
            shown = tokens
        engine.finish(gen)

    def _generate(self, body: dict[str, Any]) -> None:
        text = body.get("text")
        if isinstance(text, list):
            raise _BadRequest("batched 'text' lists are not supported by the emulator; send one prompt")
        if text is None and body.get("input_ids") is not None:
            ids = body["input_ids"]
            text, prompt_tokens = " ".join(map(str, ids)), len(ids)
        else:
            text, prompt_tokens = str(text or ""), None
        sp = body.get("sampling_params") or {}
        gen = self.server.engine.new_generation(
            text, sp.get("max_new_tokens", 128), bool(sp.get("ignore_eos", False)), prompt_tokens
        )
        engine = self.server.engine
        if body.get("stream"):
            self._start_stream()
            state = {"text": ""}

            def emit(gen: Generation, shown: int, tokens: int, final: bool) -> None:
                state["text"] += gen.token_text(shown, tokens)  # SGLang streams cumulative text
                self._send_event({"text": state["text"], "meta_info": engine.meta_info(gen, final)})

            self._run(gen, emit)
            self._end_stream()
        else:
            self._run(gen, lambda *a: None)
            self._send_json(200, {"text": gen.token_text(0, gen.completion_tokens), "meta_info": engine.meta_info(gen, True)})

    def _openai_finish(self, gen: Generation) -> str:
        return "length" if gen.stop_reason["type"] == "length" else "stop"

    def _usage(self, gen: Generation) -> dict[str, int]:
        return {
            "prompt_tokens": gen.prompt_tokens,
            "completion_tokens": gen.completion_tokens,
            "total_tokens": gen.prompt_tokens + gen.completion_tokens,
        }

    def _openai(self, body: dict[str, Any], prompt: str, prompt_tokens: int, chat: bool) -> None:
        engine = self.server.engine
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 16
        gen = engine.new_generation(prompt, max_tokens, bool(body.get("ignore_eos", False)), prompt_tokens)
        model = body.get("model") or engine.args.model_path
        created = int(time.time())
        cid = ("chatcmpl-" if chat else "cmpl-") + gen.rid
        obj = "chat.completion.chunk" if chat else "text_completion"
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._start_stream()
            if chat:
                self._send_event(
                    {"id": cid, "object": obj, "created": created, "model": model,
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]}
                )

            def emit(gen: Generation, shown: int, tokens: int, final: bool) -> None:
                piece = gen.token_text(shown, tokens)
                choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": self._openai_finish(gen) if final else None}
                if chat:
                    choice["delta"] = {"content": piece}
                else:
                    choice["text"] = piece
                self._send_event({"id": cid, "object": obj, "created": created, "model": model, "choices": [choice], "usage": None})

            self._run(gen, emit)
            if include_usage:
                self._send_event({"id": cid, "object": obj, "created": created, "model": model, "choices": [], "usage": self._usage(gen)})
            self._end_stream()
            return
        self._run(gen, lambda *a: None)
        text = gen.token_text(0, gen.completion_tokens)
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": self._openai_finish(gen)}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": self._openai_finish(gen)}
        self._send_json(
            200,
            {"id": cid, "object": "chat.completion" if chat else "text_completion", "created": created,
             "model": model, "choices": [choice], "usage": self._usage(gen)},
        )

    def _completions(self, body: dict[str, Any]) -> None:
        prompt = body.get("prompt", "")
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise _BadRequest("the emulator serves one prompt per request")
            prompt = prompt[0]
        self._openai(body, str(prompt), count_prompt_tokens(str(prompt)), chat=False)

    def _chat(self, body: dict[str, Any]) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _BadRequest("'messages' must be a non-empty list")
        parts = []
        for m in messages:
            content = m.get("content", "") if isinstance(m, dict) else ""
            if isinstance(content, list):  # OpenAI content parts
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            parts.append(str(content))
        prompt = "\n".join(parts)
        # A chat template adds a few tokens per message, as real templates do.
        self._openai(body, prompt, count_prompt_tokens(prompt) + 4 * len(messages), chat=True)


# ---------------------------------------------------------------------------------------------
# Process


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the flags this emulator uses; other SGLang flags are accepted and ignored."""
    p = argparse.ArgumentParser(
        prog="python -m perfbisect.demo.emulator",
        description="SGLang-compatible emulator (a stand-in for sglang.launch_server; no GPU, no model).",
        allow_abbrev=False,  # an unknown SGLang flag must never be taken for a prefix of one of ours
    )
    p.add_argument("--port", type=int, required=True, help="port to listen on (0: any free port, printed)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--worktree", type=Path, default=Path.cwd(), help="checkout whose python/sglang code sets the speed")
    p.add_argument("--model-path", "--model", dest="model_path", default="emulated/model")
    p.add_argument("--tp", "--tp-size", dest="tp_size", type=int, default=1)
    p.add_argument("--load-format", default="auto")
    p.add_argument("--speculative-algorithm", default=None)
    p.add_argument("--speculative", dest="speculative_algorithm", action="store_const", const="EAGLE3",
                   help="short for --speculative-algorithm EAGLE3")
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path", default=None)
    p.add_argument("--speculative-num-steps", type=int, default=3)
    p.add_argument("--speculative-eagle-topk", type=int, default=1)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    # Test knobs.
    p.add_argument("--never-ready", action="store_true", help="health endpoints never answer 200")
    p.add_argument("--die-after-requests", type=int, default=0, help="os._exit in the middle of the N-th generate request")
    p.add_argument("--ignore-sigterm", action="store_true", help="ignore SIGTERM (teardown must use SIGKILL)")
    p.add_argument("--workers", type=int, default=0, help="spawn N sleeping worker processes, like SGLang's schedulers")
    p.add_argument("--drop-env", action="append", default=[], help="remove this variable from the workers' environment")
    p.add_argument("--eos-after", type=int, default=None, help="without ignore_eos, stop after K tokens")
    args, unknown = p.parse_known_args(argv)
    args.ignored_flags = unknown
    return args


def start_workers(count: int, drop_env: list[str]) -> list[subprocess.Popen]:
    """Spawn sleeping children in our process group, with some variables removed from their env."""
    env = {k: v for k, v in os.environ.items() if k not in set(drop_env)}
    return [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER_SOURCE, f"perfbisect-emulator-worker-TP{rank}"],
            env=env,
            stdin=subprocess.DEVNULL,
            # Like SGLang's schedulers (kill_itself_when_parent_died): workers die with the server.
            preexec_fn=die_with_parent(),
        )
        for rank in range(count)
    ]


def stop_workers(workers: list[subprocess.Popen]) -> None:
    """Terminate worker children and reap them (SIGKILL for any that outlive a short grace)."""
    for w in workers:
        if w.poll() is None:
            w.terminate()
    deadline = time.monotonic() + 2.0
    for w in workers:
        try:
            w.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()


class _Shutdown(Exception):
    pass


def _raise_shutdown(signum: int, frame: Any) -> None:
    raise _Shutdown()


def pinned_version_errors(worktree: Path) -> list[str]:
    """What SGLang's launch check would refuse: every package ``python/pyproject.toml`` pins exactly
    (``name==V`` in ``[project] dependencies``) must be installed at that version in this interpreter
    (SGLang: ``assert_pkg_version("sgl-kernel", ...)`` in ``_set_envs_and_config``)."""
    path = Path(worktree) / "python" / "pyproject.toml"
    try:
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - exercised on 3.10 only
            import tomli as tomllib
        deps = tomllib.loads(path.read_text()).get("project", {}).get("dependencies", [])
    except (OSError, ValueError):
        return []
    from importlib import metadata

    errors = []
    for dep in deps:
        m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;,]+)\s*", str(dep))
        if not m:
            continue
        name, wanted = m.groups()
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            errors.append(f"{name} with required version {wanted} is not installed. Please install it: pip install {name}=={wanted}")
            continue
        if have != wanted:
            errors.append(f"{name} is installed with version {have}, but this commit requires {wanted}. "
                          f"Please reinstall: pip install {name}=={wanted} --force-reinstall")
        elif name.endswith("-cubin"):  # as flashinfer refuses to import beside another flashinfer-cubin
            try:
                base = metadata.version(name[: -len("-cubin")])
            except metadata.PackageNotFoundError:
                continue
            if base != have:
                errors.append(f"{name} {have} does not match {name[: -len('-cubin')]} {base}: they must be the same version")
    return errors


def main(argv: list[str] | None = None) -> int:
    """Run the emulator until SIGTERM / SIGINT."""
    args = parse_args(argv)
    args.worktree = args.worktree.resolve()
    if not args.worktree.is_dir():
        print(f"emulator: --worktree {args.worktree} is not a directory", file=sys.stderr, flush=True)
        return 2
    mismatched = pinned_version_errors(args.worktree)
    for error in mismatched:  # SGLang refuses to start on a kernel version mismatch
        print(f"emulator: Exception: {error}", file=sys.stderr, flush=True)
    if mismatched:
        return 1
    code = read_code_speed(args.worktree)
    env = dict(os.environ)
    rng = make_rng(env)
    noise = draw_session_noise(env, rng)
    engine = EmulatedEngine(args, code, noise, rng)

    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the workers too
    else:
        signal.signal(signal.SIGTERM, _raise_shutdown)
    signal.signal(signal.SIGINT, _raise_shutdown)

    httpd = EmulatorServer((args.host, args.port), engine, info_paths_from_env(env))
    args.port = httpd.server_address[1]
    fallback = env.get("PERFBISECT_EMULATOR_TREE_CORE_FALLBACK", "").strip()
    if fallback and env.get("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", "rust").strip().lower() == "rust":
        print(f"[emulator] INFO tree_core_registry: Using the Python TreeCore: {fallback}", file=sys.stderr, flush=True)
    overridden = apply_env_overrides(env)
    if overridden:
        print(f"emulator: set in its own environment before starting workers: {overridden}", flush=True)
    workers = start_workers(args.workers, args.drop_env)
    mode = f"speculative {args.speculative_algorithm}" if engine.speculative else "baseline"
    print(
        f"emulator (stand-in for sglang.launch_server) listening on http://{args.host}:{args.port} "
        f"pid={os.getpid()} mode={mode} step={code.decode_step_ms}ms cycle={code.verify_cycle_ms}ms "
        f"accept={code.effective_accept_length} session_factor={noise.factor:.4f} "
        f"session_index={noise.session_index} workers={len(workers)}",
        flush=True,
    )
    if args.ignored_flags:
        print(f"emulator: ignoring flags {' '.join(args.ignored_flags)}", flush=True)
    try:
        httpd.serve_forever(poll_interval=0.1)
    except (_Shutdown, KeyboardInterrupt):
        print("emulator: shutting down", flush=True)
    finally:
        stop_workers(workers)
        httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
