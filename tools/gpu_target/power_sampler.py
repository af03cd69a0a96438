#!/usr/bin/env python3
"""Sample GPU 0 with NVML every --interval seconds into a CSV until killed (SIGTERM/SIGINT).

Columns: epoch time, power W, SM clock MHz, GPU utilisation %, temperature C, clock-event reasons.
"""

import argparse
import os
import signal
import sys
import time



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--interval", type=float, default=0.25)
    ap.add_argument("--append", action="store_true", help="add to an existing CSV")
    args = ap.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception as exc:  # no nvidia-ml-py, no driver
        print(f"power_sampler: no NVML ({exc}): nothing sampled", file=sys.stderr)
        return 0
    fresh = not (args.append and os.path.exists(args.out))
    with open(args.out, "a" if args.append else "w") as fh:
        if fresh:
            fh.write("t,power_w,sm_mhz,util_pct,temp_c,reasons\n")
        while not stop:
            t = time.time()
            try:
                p = pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0
                sm = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
                util = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
                temp = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
                reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
                fh.write(f"{t:.3f},{p:.1f},{sm},{util},{temp},{reasons:#x}\n")
                fh.flush()
            except pynvml.NVMLError as exc:
                fh.write(f"{t:.3f},,,,,{exc}\n")
            time.sleep(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
