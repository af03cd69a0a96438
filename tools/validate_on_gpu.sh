#!/usr/bin/env bash
# Run perfbisect's real pipeline on a GPU machine: the demo (emulated server, real NVML sampling),
# doctor, the busy-GPU refusal under a real matmul load, and a measured trial afterwards.
# Usage: tools/validate_on_gpu.sh OUTDIR   (perfbisect importable, e.g. PYTHONPATH=$PWD)
set -u
out=${1:?OUTDIR}
mkdir -p "$out"
py=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
echo "== demo"; $py -m perfbisect.cli demo --json --dir /tmp/pb-demo >"$out/demo.json" 2>"$out/demo.log"; echo "exit $?"
cfg=/tmp/pb-demo/perfbisect.toml; db=/tmp/pb-demo/results.sqlite
echo "== doctor"; $py -m perfbisect.cli doctor -c $cfg --db $db --launch 2>&1 | tee "$out/doctor.txt"
echo "== busy GPU"
$py - <<'PY' &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 25
while time.time() < end:
    a @ a
torch.cuda.synchronize()
PY
load=$!
sleep 8
$py -m perfbisect.cli measure HEAD -m baseline -c $cfg --db $db 2>&1 | tee "$out/busy.txt"; echo "exit ${PIPESTATUS[0]}"
wait $load
echo "== measure after the load"
$py -m perfbisect.cli measure HEAD -n 2 -c $cfg --db $db --json 2>"$out/measure.log" | tee "$out/measure.json"
cp $db "$out/results.sqlite"
