"""Workloads that run an outside program once per trial: the ``command`` workload (any benchmark
that prints a JSON object; exit 125 = untestable, as in ``git bisect run``) and SGLang's own
``python -m sglang.bench_serving`` (its ``--output-file`` JSON read back).

The built-in streaming client is ``perfbisect.measure.workload``; both produce ``model.RunResult``s.
"""

from __future__ import annotations

import json
import math
import os
import re
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import metrics
from ..runtime.children import LINGER_GRACE_S, TAIL_BYTES, run_bounded
from ..errors import ConfigError, InfrastructureError, Untestable, WorkloadError
from ..runtime.logtail import log_tail
from ..model import RunResult
from ..placeholders import expand
from ..settings import WorkloadConfig


# ---------------------------------------------------------------------------------------------
# Command workloads


# A command that exits with this status says "this commit cannot be tested", as in `git bisect run`.
UNTESTABLE_EXIT = 125


# A measured value beyond this is no throughput or latency of anything: the benchmark printed garbage.
MAX_METRIC = 1e18
_MAX_INT_DIGITS = 40


class _TooLong:
    """A JSON integer too long to be a measurement (json would refuse past 4,300 digits with a ValueError)."""

    def __init__(self, digits: str):
        self.digits = len(digits.lstrip("-"))

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits"


def _parse_int(text: str) -> int | _TooLong:
    return _TooLong(text) if len(text) > _MAX_INT_DIGITS else int(text)


class _Pairs(dict):
    """A JSON object that remembers the keys it was given more than once (json keeps the last, silently)."""

    duplicates: tuple[str, ...] = ()


def _pairs(items: list[tuple[str, Any]]) -> _Pairs:
    obj = _Pairs(items)
    if len(obj) != len(items):
        seen: set[str] = set()
        obj.duplicates = tuple(dict.fromkeys(k for k, _ in items if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
    return obj


def _last_json_object(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line, parse_int=_parse_int, object_pairs_hook=_pairs)
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
            continue
        if isinstance(obj, dict):
            return obj
    return None


def measured_value(value: Any) -> tuple[float | None, str | None]:
    """A metric as printed → (the value, None) when it is a finite positive number below MAX_METRIC,
    else (what can be kept or None, why the run is flagged)."""
    if value is None:  # JSON null: what a benchmark prints for a NaN it could not encode
        return None, "null, not a finite positive number"
    if isinstance(value, bool) or not isinstance(value, (int, float, _TooLong)):
        return None, f"{value!r}, not a number"
    if isinstance(value, _TooLong):
        return None, f"{value!r}, out of range"
    try:
        number = float(value)
    except OverflowError:
        return None, f"an integer of {len(str(abs(value)))} digits, out of range"
    if not math.isfinite(number):
        return None, f"{number!r}, not a finite positive number"
    if number <= 0:
        return number, f"{number!r}, not a finite positive number"
    if number > MAX_METRIC:
        return None, f"{number:g}, out of range (above {MAX_METRIC:g})"
    return number, None


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_command_workload(
    cfg: WorkloadConfig, worktree: Path, python: str, env: dict[str, str], log_path: Path,
    extra_env: Mapping[str, str] | None = None,
) -> list[RunResult]:
    """Run ``cfg.command`` in the worktree: cfg.warmup warm-up invocations, then one measured one.

    One measured invocation is one trial's evidence: the command prints a JSON object (the last
    JSON line on stdout) whose ``cfg.metric`` key is the RunResult's ``metric_value``. Warm-up
    invocations (caches, compilation, page cache) run first and come back with ``warmup=True``.
    The command runs with os.environ updated by ``env`` (placeholders filled) and then by
    ``extra_env`` (as given: the trial's layout), and at most ``cfg.request_timeout_s``.
    Output of every invocation is appended to ``log_path``.
    """
    if not cfg.command:
        raise WorkloadError("workload.kind is 'command' but workload.command is empty: set the benchmark command in the config.")
    argv = expand(cfg.command, python=python, worktree=str(worktree))
    full_env = _full_env(env, extra_env, python, worktree, importable=_runs_a_script_outside(argv, worktree))
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    results = []
    for index in range(cfg.warmup + 1):
        warmup = index < cfg.warmup
        value, why = measured_value(_invoke_command(cfg, argv, Path(worktree), full_env, log_path, warmup, index))
        # inf, NaN, 0, negative or absurd is a broken measurement, not a very fast or slow one: the run
        # is kept, flagged, and stays out of every statistic (they work on the log of the metric).
        error = f"workload.metric '{cfg.metric}' came back as {why}; run flagged, not used" if why else None
        results.append(
            RunResult(index=index, warmup=warmup, requested_tokens=0, output_tokens=0, metric_value=value, error=error)
        )
    return results


_SCRIPT_SUFFIXES = (".py", ".pyw")


def _runs_a_script_outside(argv: list[str], worktree: Path) -> bool:
    """Whether the command runs a Python script kept outside the worktree (as with `git bisect run`): its own
    folder, not the worktree, would come first on sys.path."""
    root = os.path.realpath(worktree)
    for arg in argv[1:]:
        if arg.endswith(_SCRIPT_SUFFIXES) and os.path.isabs(arg):
            real = os.path.realpath(arg)
            return not (real == root or real.startswith(root.rstrip(os.sep) + os.sep))
    return False


def _full_env(env: Mapping[str, str], extra_env: Mapping[str, str] | None, python: str, worktree: Path,
              importable: bool = False) -> dict[str, str]:
    """os.environ, then ``env`` with its placeholders filled, then ``extra_env`` as it is. ``importable``: the
    worktree first on PYTHONPATH, so a benchmark kept outside the repository imports the commit's code (only then:
    a script in the worktree has it first already, and a command that imports an installed build keeps it)."""
    filled = {k: expand((v,), python=python, worktree=str(worktree))[0] for k, v in env.items()}
    full = {**os.environ, **filled, **(extra_env or {})}
    if importable:
        rest = [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(worktree)]
        full["PYTHONPATH"] = os.pathsep.join([str(worktree), *rest])
    return full


def _invoke_command(
    cfg: WorkloadConfig, argv: list[str], worktree: Path, env: dict[str, str], log_path: Path, warmup: bool, index: int
) -> Any:
    """One invocation; the metric's value as printed (checked by ``measured_value``)."""
    shown = " ".join(argv)
    label = f"{'warm-up' if warmup else 'measured'} invocation {index}"
    try:
        run = run_bounded(argv, cwd=worktree, env=env, timeout_s=cfg.request_timeout_s, log_path=log_path,
                          header=f"=== {label}: {shown}")
    except FileNotFoundError:
        raise WorkloadError(
            f"The workload command {argv[0]!r} was not found (workload.command = {shown}). "
            f"Give a full path or a program on PATH; {{python}} expands to the target's interpreter."
        ) from None
    except OSError as exc:
        raise WorkloadError(f"Cannot start the workload command {shown}: {exc.strerror}. Fix workload.command.") from None
    if run.timed_out:
        raise WorkloadError(
            f"The workload command {shown} ran longer than workload.request_timeout_s = "
            f"{cfg.request_timeout_s:g} s in {worktree} and was killed with every process it started. Raise the "
            f"timeout or make the command shorter; its output is in {log_path}."
        )
    if run.lingering:
        raise WorkloadError(
            f"The workload command {shown} exited (status {run.returncode}, {label}) but left a process holding its "
            f"output open (waited up to {LINGER_GRACE_S:g} s, within workload.request_timeout_s): {run.lingering}; "
            f"perfbisect killed it. A benchmark must wait for "
            f"what it starts (or start it with its output redirected away from stdout/stderr): a process left "
            f"running would disturb the next trial. Output in {log_path}."
        )
    stdout, stderr = run.stdout, run.stderr
    if run.returncode == UNTESTABLE_EXIT:
        raise Untestable(
            f"the workload command exited {UNTESTABLE_EXIT} ({label}): it says this commit cannot be tested"
            + (f": {_tail(stderr, 1)}" if stderr.strip() else "")
        )
    if run.returncode != 0:
        raise WorkloadError(
            f"The workload command {shown} exited with status {run.returncode} in {worktree} "
            f"({label}). Last lines of its stderr:\n{_tail(stderr) or '(empty)'}\n"
            f"Run it by hand in that worktree to see why; full output in {log_path}."
        )
    obj = _last_json_object(stdout)
    if obj is None:
        raise WorkloadError(
            f"The workload command {shown} printed no JSON object on stdout ({label}); it must print one "
            f'line like {{"{cfg.metric}": 123.4}} (the last one counts, within its last {TAIL_BYTES // 1024} KiB). '
            f'Last lines of its stdout:\n{_tail(stdout) or "(empty)"}'
        )
    if cfg.metric in getattr(obj, "duplicates", ()):
        raise WorkloadError(
            f"The workload command {shown} printed a JSON object with the key '{cfg.metric}' (workload.metric) more than "
            f"once ({label}); which value it meant cannot be told, so none is taken. Print each key once. Last lines of "
            f"its stdout:\n{_tail(stdout)}"
        )
    if cfg.metric not in obj:
        # The config asks for a key this command does not print: no commit can be measured, so it
        # is the config's error (exit 2), not a failed trial that would end a bisection inconclusive.
        raise ConfigError(
            f"The workload command {shown} printed a JSON object without the key '{cfg.metric}' "
            f"(workload.metric); it has: {', '.join(sorted(obj)) or '(no keys)'}. Print that key or set "
            f"workload.metric to one of these."
        )
    value = obj[cfg.metric]
    if isinstance(value, (str, list, dict)):
        raise WorkloadError(
            f"The workload command {shown} printed '{cfg.metric}': {value!r:.80}, which is not a number. "
            f"Print the metric as a JSON number."
        )
    return value


# ---------------------------------------------------------------------------------------------
# SGLang's own benchmark: `python -m sglang.bench_serving` through the target's interpreter

# Set for the client unless the environment it gets sets either: a download it would need fails at once
# (and is reported as the machine's problem) instead of waiting out DNS and proxy timeouts on a node
# without internet. What is already in the Hugging Face cache still loads: the tokenizer of the model
# the server serves (the server loaded it on this machine), a dataset fetched beforehand.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def bench_serving_dataset(cfg: WorkloadConfig) -> list[str]:
    """The dataset flags: ``--dataset-name random-ids`` (random token ids: nothing to download), or
    with ``workload.dataset_path`` ``--dataset-name random --dataset-path PATH`` (prompt tokens
    sampled from that ShareGPT-format JSON file). Both read ``--random-input-len``,
    ``--random-output-len`` and ``--random-range-ratio``; a plain ``random`` without a path would
    download ShareGPT from the Hugging Face hub at every trial's start."""
    if cfg.dataset_path is None:
        return ["--dataset-name", "random-ids"]
    return ["--dataset-name", "random", "--dataset-path", str(cfg.dataset_path)]


def bench_serving_argv(base_url: str, cfg: WorkloadConfig, python: str, worktree: Path, output_file: Path) -> list[str]:
    """The bench_serving command line: runs × concurrency requests of ``max_tokens`` fixed-length
    outputs at ``--max-concurrency concurrency`` (``warmup`` warm-up requests first), its JSON to
    ``output_file``, prompts from ``bench_serving_dataset``. ``workload.command`` is appended:
    argparse lets a later flag win, so a user's ``--dataset-name sharegpt`` or ``--tokenizer PATH``
    overrides these."""
    concurrency = max(1, cfg.concurrency)
    argv = [
        python, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", base_url.rstrip("/"),
        *bench_serving_dataset(cfg), "--num-prompts", str(max(1, cfg.runs) * concurrency),
        "--random-output-len", str(cfg.max_tokens), "--random-range-ratio", "1.0",
        "--max-concurrency", str(concurrency), "--warmup-requests", str(cfg.warmup),
        "--output-file", str(output_file), "--disable-tqdm",
    ]
    return argv + expand(cfg.command, python=python, worktree=str(worktree))


# What a client that could not reach the network prints in its last traceback: the Hugging Face hub
# refusing in offline mode or finding nothing cached, and connections that never got out.
_OFFLINE_MARKERS = (
    "LocalEntryNotFoundError", "OfflineModeIsEnabled", "outgoing traffic has been disabled",
    "offline mode is enabled", "Cannot find the requested files in the disk cache",
    "couldn't connect to 'https://huggingface.co'", "NameResolutionError", "Temporary failure in name resolution",
    "Name or service not known", "nodename nor servname", "Network is unreachable",
)
# Connection failures that are the network's only when they name a host other than the server's
# (the server's own, refused, is the server's failure).
_CONNECTION_MARKERS = ("Max retries exceeded", "ConnectionError", "ProxyError", "ConnectTimeout", "ConnectTimeoutError")
# urllib3's "HTTPSConnectionPool(host='huggingface.co', port=443)", quoted as it is or in a repr (\').
_POOL_HOST = re.compile(r"ConnectionPool\(host=\\?'([^'\\]*)\\?', port=(\d+)\)")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Enabled)(?::|$)")  # "OSError: ...", unindented


def _last_traceback(stderr: str) -> str:
    """The last traceback in ``stderr`` (the exception that ended the client), else its last lines."""
    at = stderr.rfind("Traceback (most recent call last):")
    return stderr[at:] if at >= 0 else _tail(stderr, 30)


def network_failure(stderr: str, base_url: str) -> str | None:
    """The line saying why, when the client failed because it could not reach the network (a dataset or
    tokenizer download from the Hugging Face hub, offline or with no route out); else None."""
    text = _last_traceback(stderr)
    parsed = urllib.parse.urlsplit(base_url)
    server = ((parsed.hostname or "").lower(), str(parsed.port or (443 if parsed.scheme == "https" else 80)))
    outside = any((host.lower(), port) != server for host, port in _POOL_HOST.findall(text))
    if not any(m in text for m in _OFFLINE_MARKERS) and not (outside and any(m in text for m in _CONNECTION_MARKERS)):
        return None
    lines = [ln.strip() for ln in text.splitlines() if _EXCEPTION_LINE.match(ln)]
    line = lines[-1] if lines else _tail(text, 1).strip()
    return line if len(line) <= 400 else line[:397] + "..."


def _network_failure_message(why: str, stderr: str, offline_set: bool, log_path: Path) -> str:
    text = _last_traceback(stderr)
    dataset = any(m in text for m in ("ShareGPT", "sample_random_requests", "sample_sharegpt_requests",
                                      "get_dataset", "repo_type=\"dataset\"", "/datasets/"))
    tokenizer = not dataset and any(m in text for m in ("okenizer", "from_pretrained", "config.json"))
    dataset_fix = (
        "keep perfbisect's default prompts, --dataset-name random-ids (random token ids, nothing to download: drop "
        "--dataset-name from workload.command), or set workload.dataset_path to a ShareGPT-format JSON file on this "
        "machine, or download the dataset into the Hugging Face cache here beforehand (HF_HOME)"
    )
    tokenizer_fix = (
        "give the client a tokenizer on this machine (workload.command = [\"--tokenizer\", \"/path/to/model\"]) "
        "or download the model's tokenizer into the Hugging Face cache here beforehand (HF_HOME); the client "
        "loads the tokenizer of the model the server reports unless --tokenizer is given"
    )
    what, fix = (("its dataset", dataset_fix) if dataset else ("its tokenizer", tokenizer_fix) if tokenizer
                 else ("a dataset or tokenizer", f"{dataset_fix}; for the tokenizer, {tokenizer_fix}"))
    if offline_set:
        cause = ("perfbisect runs it with HF_HUB_OFFLINE=1 (unless its environment sets HF_HUB_OFFLINE or "
                 "TRANSFORMERS_OFFLINE), so what is not in this machine's Hugging Face cache fails at once instead "
                 "of waiting out timeouts on a node without internet.")
        online = ('; or, where this machine does reach the hub, let the client download: HF_HUB_OFFLINE = "0" in '
                  "[server.env]")
    else:
        cause = "This machine did not reach the Hugging Face hub (or its environment keeps the client offline)."
        online = ""
    return (
        f"sglang.bench_serving could not fetch {what}: {why.rstrip('.')}. {cause} That is the machine's failure, "
        f"not the commit's, so no commit is skipped or blamed for it. Fix: {fix}{online}. Full output in {log_path}."
    )


def parse_bench_serving(obj: dict[str, Any], key: str, index: int = 0) -> RunResult:
    """One bench_serving result line as a measured RunResult: ``key`` is its value; TTFT, ITL p50/p99
    and accept length are kept beside it. No completed request, or a key that is not a finite
    positive number, flags the run."""
    number, why = measured_value(obj.get(key))
    error = None
    if not obj.get("completed"):
        error = "bench_serving completed no request; run flagged, not used"
    elif why:
        error = f"bench_serving's '{key}' is {why}; run flagged, not used"

    def num(name: str) -> float | None:
        v, bad = measured_value(obj.get(name))
        return v if bad is None or v == 0 else None

    ttft_ms = num("median_ttft_ms")
    return RunResult(
        index=index, warmup=False, requested_tokens=0, output_tokens=int(num("total_output_tokens") or 0),
        prompt_tokens=int(v) if (v := num("total_input_tokens")) is not None else None,
        ttft_s=ttft_ms / 1000.0 if ttft_ms is not None else None,
        itl_p50_ms=num("median_itl_ms"), itl_p99_ms=num("p99_itl_ms"),
        spec_accept_length=num("accept_length"),
        metric_value=number,
        error=error,
    )


def run_bench_serving(
    base_url: str, cfg: WorkloadConfig, client: Path, python: str, env: dict[str, str], log_path: Path,
    extra_env: Mapping[str, str] | None = None,
) -> list[RunResult]:
    """Run SGLang's bench_serving once against a live server and read its JSON line back.

    The module comes from ``client``, a checkout of one fixed revision (the pinned client: every
    trial of a bisection runs the same benchmark, so a change to it inside the range cannot be
    blamed), through ``python`` with the server's env whose ``{worktree}`` is that checkout, and
    its ``python/`` directory first on ``PYTHONPATH``. One invocation is the trial's one measured
    run (its own warm-up requests come first); the key is ``workload.metric`` (``output_throughput``
    by default). ``extra_env`` (the trial's layout) is added as it is, after ``env``. Output goes
    to ``log_path``.
    """
    key = metrics.describe_workload(cfg).name
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    output_file = log_path.with_name(log_path.stem + ".bench_serving.jsonl")
    output_file.unlink(missing_ok=True)
    if cfg.dataset_path is not None and not Path(cfg.dataset_path).is_file():
        raise ConfigError(
            f"workload.dataset_path is {cfg.dataset_path}, which is not a file on this machine: sglang.bench_serving "
            f"would download ShareGPT in its place. Give the path of a ShareGPT-format JSON file here, or remove "
            f"workload.dataset_path for random token ids (--dataset-name random-ids)."
        )
    argv = bench_serving_argv(base_url, cfg, python, client, output_file)
    full_env, offline_set = _bench_serving_env(env, extra_env, python, client)
    shown = " ".join(argv)
    try:
        run = run_bounded(argv, cwd=client, env=full_env, timeout_s=cfg.request_timeout_s, log_path=log_path,
                          header=f"=== bench_serving: {shown}")
    except OSError as exc:
        raise WorkloadError(f"Cannot start sglang.bench_serving with {python}: {exc.strerror}. Fix target.python.") from None
    if run.timed_out:
        raise WorkloadError(
            f"sglang.bench_serving ran longer than workload.request_timeout_s = {cfg.request_timeout_s:g} s and was "
            f"killed. Raise the timeout or ask for fewer requests; its output is in {log_path}."
        )
    if run.returncode != 0:
        _bench_serving_failed(run.returncode, run.stderr, base_url, client, python, shown, offline_set, log_path)
    return [parse_bench_serving(_bench_serving_result(output_file, key, shown, log_path), key)]


def _bench_serving_env(env: dict[str, str], extra_env: Mapping[str, str] | None, python: str,
                       client: Path) -> tuple[dict[str, str], bool]:
    """The client's environment: the server's with the layout's on top, kept off the Hugging Face hub
    unless the user chose otherwise (whether it was, the second value), and the client checkout's
    ``python/`` first on ``PYTHONPATH``."""
    full_env = _full_env(env, extra_env, python, client)
    # Either variable set (to anything) is the user's choice, and decides for both: TRANSFORMERS_OFFLINE=1
    # beside a user's HF_HUB_OFFLINE=0 would still keep transformers offline.
    offline_set = not any(name in full_env for name in OFFLINE_ENV)
    if offline_set:
        full_env.update(OFFLINE_ENV)
    source = client / "python" if (client / "python").is_dir() else client
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(source), full_env.get("PYTHONPATH", "")) if p)
    return full_env, offline_set


def _bench_serving_failed(returncode: int, stderr: str, base_url: str, client: Path, python: str, shown: str,
                          offline_set: bool, log_path: Path) -> None:
    """Raise what a failed bench_serving means: the machine's network (InfrastructureError), a client too
    old for the config (ConfigError), else the workload failed (WorkloadError, with its stderr's tail)."""
    if why := network_failure(stderr, base_url):
        raise InfrastructureError(_network_failure_message(why, stderr, offline_set, log_path))
    if "invalid choice: 'random-ids'" in stderr:
        raise ConfigError(
            f"The benchmark client's sglang.bench_serving ({client}) predates --dataset-name random-ids (SGLang "
            f"0.4.5.post1 added it). Set workload.client_rev to a newer revision, or workload.dataset_path to a "
            f"ShareGPT-format JSON file on this machine (its prompts then come from --dataset-name random). "
            f"Full output in {log_path}."
        )
    missing = "No module named" in stderr and "sglang" in stderr
    hint = (f"The target's interpreter {python} cannot import sglang.bench_serving (with the server's env); "
            if missing else "")
    raise WorkloadError(
        f"{hint}sglang.bench_serving exited with status {returncode} ({shown}). Last lines of its stderr:\n"
        f"{_tail(stderr) or '(empty)'}\nFull output in {log_path}."
    )


def _bench_serving_result(output_file: Path, key: str, shown: str, log_path: Path) -> dict[str, Any]:
    """The last JSON object bench_serving wrote to ``output_file``; WorkloadError when there is none,
    ConfigError when it has no ``key`` (workload.metric)."""
    lines = log_tail(output_file, lines=50, max_bytes=TAIL_BYTES).splitlines()
    obj = None
    for line in reversed(lines):
        try:
            obj = json.loads(line, parse_int=_parse_int)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            break
        obj = None
    if obj is None:
        raise WorkloadError(
            f"sglang.bench_serving wrote no JSON result to {output_file} ({shown}); it writes one when at least "
            f"one request succeeded. Its output is in {log_path}."
        )
    if key not in obj:
        raise ConfigError(
            f"sglang.bench_serving's result has no key '{key}' (workload.metric); it has: "
            f"{', '.join(sorted(k for k, v in obj.items() if isinstance(v, (int, float)))) or '(no numbers)'}. "
            f"Set workload.metric to one of these."
        )
    return obj
