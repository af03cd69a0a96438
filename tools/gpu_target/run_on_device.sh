#!/usr/bin/env bash
# GPU validation of perfbisect on one H200 (the device machine), against a real GPU-backed server.
#
#   bash tools/gpu_target/run_on_device.sh STAGE [OUTDIR]        (OUTDIR defaults to $OUT)
#
# STAGE:
#   all      planted, then aa, inside one budget (the usual call: ~6-9 min on a fresh machine)
#   planted  `perfbisect run good=.. bad=..` over the planted range (16 commits, one slowdown)
#   aa       the same over the A/A range (same history, the planted commit only adds a comment)
#   smoke    in-process decode check, then `perfbisect measure` sessions good/planted interleaved
#            (PBGPU_SMOKE_ORDER, default "G P P G G"), with a per-session noise/power table
#   setup    wheels + model + targets only
# planted/aa/all first start the server once (gate.py): below PBGPU_MIN_TOK_S (100) decode tok/s
# over HTTP they stop with exit 5 rather than bisect a host-bound server.
# Every stage does what setup does first (idempotent: the model is built once per machine, in
# /dev/shm, ~35 s). The stages stop starting work when PBGPU_BUDGET_S (default 560) seconds have
# passed since the script started; a bisection cut short is resumable: run the same stage again on
# the same (still warm) machine and it continues with `perfbisect resume`.
#
# Writes to OUTDIR (at most 8 files, the device tool's limit): env.txt, STAGE.json (perfbisect's
# --json), STAGE.log (its progress), STAGE-noise.txt (per-session table), engine-check.txt and
# noise.txt (smoke), artifacts.tgz (databases, server logs, NVML power trace, noise JSON).
#
# Environment: PYTHON (default python3), PBGPU_PERFBISECT (tree holding perfbisect/ and db/;
# default this checkout), PBGPU_WORK (/tmp/pbgpu), PBGPU_MODEL (model dir), PBGPU_NO_WHEELS=1
# (deps already importable), PBGPU_SERVER_SCRIPT (serve with another entry point; tests only),
# PBGPU_MAX_TRIALS (the targets' stats.max_trials_total, default 30).
# Needs the repo's .whl/ (tools/gpu_target/fetch_wheels.sh; name ".whl" in the run call's carry).
set -u -o pipefail
stage=${1:?usage: run_on_device.sh all|planted|aa|smoke|setup [OUTDIR]}
out=${2:-${OUT:-/tmp/pbgpu-out}}
mkdir -p "$out" && out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${PBGPU_WORK:-/tmp/pbgpu}
budget=${PBGPU_BUDGET_S:-560}
py=${PYTHON:-python3}
mkdir -p "$work/artifacts"
cd "$work" || exit 4   # never run python from the checkout: its cwd would shadow PBGPU_PERFBISECT
t0=$SECONDS
say() { echo "[pbgpu +$((SECONDS - t0))s] $*" >&2; }
art=$work/artifacts
finish() {  # everything bulky goes back as one file
    # SQLite's online backup, not cp: the databases are in WAL mode, and a copy of the main file alone
    # misses every trial still in its -wal file (round 6's last A/A call came back with 20 of 33 trials)
    for db in "$work"/*.sqlite; do
        [ -f "$db" ] && $py -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))' \
            "$db" "$art/$(basename "$db")" 2>/dev/null
    done
    for t in planted aa; do
        [ -d "$work/$t/server/.git/perfbisect/logs" ] && tar -czf "$art/$t-server-logs.tgz" -C "$work/$t/server/.git/perfbisect" logs
    done
    tar -czf "$out/artifacts.tgz" -C "$art" . 2>/dev/null
}

# -- 1. wheels: starlette/uvicorn for the server, GitPython/SQLAlchemy/Alembic for perfbisect
if [ -z "${PBGPU_NO_WHEELS:-}" ]; then
    if [ ! -f /tmp/site/.pbgpu-installed ]; then
        ls "$repo"/.whl/*.whl >/dev/null 2>&1 || { say "no wheels in $repo/.whl: run tools/gpu_target/fetch_wheels.sh here and carry .whl"; exit 4; }
        $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$repo"/.whl/*.whl || exit 4
        touch /tmp/site/.pbgpu-installed
    fi
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
pbsrc=${PBGPU_PERFBISECT:-$repo}
export PYTHONPATH=$pbsrc${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
$py - <<'PY' >"$out/env.txt" 2>&1 || { cat "$out/env.txt" >&2; exit 4; }
import importlib, platform, sys
print("python", platform.python_version(), sys.executable)
missing = []
for m in ["perfbisect", "starlette", "uvicorn", "anyio", "h11", "click", "httpx", "git", "sqlalchemy", "alembic",
          "mako", "typer", "rich", "scipy", "numpy", "torch", "transformers", "tokenizers", "pynvml"]:
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, "__version__", "") or "", getattr(mod, "__file__", "") if m == "perfbisect" else "")
    except Exception as exc:
        print(m, "MISSING:", exc)
        missing.append(m)
try:
    import torch
    print("cuda", torch.version.cuda, torch.cuda.get_device_name(0))
except Exception as exc:
    print("no GPU visible to torch:", exc)
if set(missing) & {"perfbisect", "starlette", "uvicorn", "git", "sqlalchemy", "alembic"}:
    sys.exit(1)
PY
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.sm,temperature.gpu,power.draw --format=csv >>"$out/env.txt" 2>&1

# -- 2. the model, once per machine (~15 GB; /dev/shm when it has room)
model=${PBGPU_MODEL:-}
if [ -z "$model" ]; then
    free_gb=$(df -BG --output=avail /dev/shm 2>/dev/null | tail -1 | tr -dc 0-9)
    if [ "${free_gb:-0}" -ge 24 ] || [ -f /dev/shm/pb-gpu-model/READY ]; then model=/dev/shm/pb-gpu-model; else model=/tmp/pb-gpu-model; fi
fi
say "model: $model"
$py "$here/build_model.py" --out "$model" 2>&1 | grep -v "Writing model shards" >&2
[ -f "$model/READY" ] || { say "model build failed"; exit 4; }

# -- 3. the targets (deterministic history: the same shas on every machine)
for name in planted aa; do
    if [ ! -f "$work/$name.json" ]; then
        flags="--max-trials-total ${PBGPU_MAX_TRIALS:-30}"; [ $name = aa ] && flags="$flags --no-plant"
        [ -n "${PBGPU_SERVER_SCRIPT:-}" ] && flags="$flags --server-script $PBGPU_SERVER_SCRIPT"
        $py "$here/make_target.py" --root "$work/$name" --model-dir "$model" --python "$(command -v $py)" $flags >"$work/$name.json" || exit 4
    fi
done
field() { $py -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]] or '')" "$work/$1.json" "$2"; }
G=$(field planted good); P=$(field planted planted); B=$(field planted bad); BA=$(field aa bad)
say "planted range $G..$B (planted $P); A/A range $G..$BA"
[ "$stage" = setup ] && exit 0

pb() { $py -m perfbisect.cli "$@"; }
$py "$here/power_sampler.py" --out "$art/power.csv" --append &
sampler=$!
trap 'kill $sampler 2>/dev/null; wait $sampler 2>/dev/null; finish' EXIT

bisect_range() {  # bisect_range planted|aa: one perfbisect run (or resume) within the budget
    local name=$1 bad=$B rc
    [ "$name" = aa ] && bad=$BA
    local cfg=$work/$name/perfbisect.toml db=$work/$name.sqlite
    local left=$((budget - (SECONDS - t0)))
    if [ $left -lt 60 ]; then say "only ${left}s of the ${budget}s budget left: run '$name' again to do it"; return 3; fi
    if [ -f "$work/$name.started" ] && [ ! -f "$work/$name.done" ]; then
        say "resuming the $name bisection (${left}s left)"
        timeout --signal=INT --kill-after=30 $left $py -m perfbisect.cli resume -c "$cfg" --db "$db" --json >"$out/$name.json" 2>>"$out/$name.log"
    else
        touch "$work/$name.started"; rm -f "$work/$name.done" "$out/$name.log"
        say "$name: perfbisect run good=$G bad=$bad (${left}s left)"
        timeout --signal=INT --kill-after=30 $left $py -m perfbisect.cli run good="$G" bad="$bad" -c "$cfg" --db "$db" --json >"$out/$name.json" 2>>"$out/$name.log"
    fi
    rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 130 ]; then
        say "$name: out of time (exit $rc): run '$name' again on this machine to resume it"
    else
        touch "$work/$name.done"
        say "$name: perfbisect exit $rc"
    fi
    grep -v "^  \(warm-up\|run [0-9]\)" "$out/$name.log" | tail -15 >&2
    $py - "$out/$name.json" "$P" "$name" <<'PY' >&2
import json, sys
path, planted, name = sys.argv[1:]
try:
    r = json.load(open(path))
except Exception as exc:
    print(f"{name}: no JSON result ({exc})"); sys.exit()
if r.get("kind") == "Interrupted":
    print(f"{name}: interrupted, not finished: {r.get('resume')} (this script's next call does it)"); sys.exit()
culprit = r.get("culprit")
print(f"{name}: verdict {r.get('verdict')}, culprit {culprit}, effect {r.get('effect_pct')}, trials {r.get('trials_used')}")
if name == "planted":
    print("✓ planted" if culprit == planted else f"✗ expected {planted}")
else:
    print("✓ A/A: nothing blamed" if not culprit and r.get("verdict") != "regressed" else "✗ A/A range blamed a commit")
PY
    $py "$here/noise.py" "$db" --power "$art/power.csv" --names "good=$G,planted=$P" --json "$art/$name-noise.json" >"$out/$name-noise.txt"
    return $rc
}

gate() {  # one server start at the A/A tip (the good engine): is decode GPU-bound over HTTP?
    [ -f "$work/gate.ok" ] && return 0
    $py "$here/gate.py" --worktree "$work/aa/server" --model-dir "$model" --min-tok-s "${PBGPU_MIN_TOK_S:-100}" \
        --log "$art/gate-server.log" ${PBGPU_SERVER_SCRIPT:+--server-script "$PBGPU_SERVER_SCRIPT"} 2>&1 | tee "$art/gate.txt" >&2
    local rc=${PIPESTATUS[0]}
    [ $rc -eq 0 ] && touch "$work/gate.ok"
    return $rc
}

case "$stage" in
smoke)
    cfg=$work/planted/perfbisect.toml db=$work/smoke.sqlite
    # The decode loop in-process first (good commit's engine), then server sessions over HTTP.
    [ -d "$work/good-engine" ] || git -C "$work/planted/server" worktree add -q --detach "$work/good-engine" "$G"
    $py "$here/diag_decode.py" --model-dir "$model" --engine-dir "$work/good-engine" 2>&1 | grep -v "Loading weights" | tee "$out/engine-check.txt"
    for s in ${PBGPU_SMOKE_ORDER:-G P P G G}; do
        [ $((SECONDS - t0)) -ge $budget ] && { say "budget spent: stopping the smoke sessions"; break; }
        [ "$s" = G ] && rev=$G || rev=$P
        pb measure "$rev" -n 1 -c "$cfg" --db "$db" 2>&1 | grep -v "^  \(warm-up\|run [0-9]\)"
    done
    $py "$here/noise.py" "$db" --power "$art/power.csv" --names "good=$G,planted=$P" --json "$art/noise.json" | tee "$out/noise.txt"
    ;;
planted|aa) gate || exit 5; bisect_range "$stage" ;;
all) gate || exit 5; bisect_range planted; bisect_range aa ;;
*) say "unknown stage $stage"; exit 2 ;;
esac
