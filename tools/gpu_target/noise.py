#!/usr/bin/env python3
"""Per-session numbers from a perfbisect results database (plain sqlite3, no perfbisect import).

    python3 noise.py DB [--power CSV] [--names planted=SHA,good=SHA] [--json OUT]

For every finished trial (one server session): mean/median decode tok/s of its measured runs, the
within-session CV, the server's own decode rate when it reported one, and the mean GPU power/SM
clock/utilisation while its measured runs ran (from power_sampler.py's CSV; the trial's own NVML
summary from the database otherwise). Per commit: mean of session means, between-session CV
(raw, and with the within-session part σ_w²/n removed) and pooled within-session CV.
"""

import argparse
import csv
import json
import math
import os
import sqlite3
import statistics as st
import sys


def cv(xs):
    return 100.0 * st.stdev(xs) / st.mean(xs) if len(xs) >= 2 else None


def load_power(path):
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path) as fh:
        for r in csv.DictReader(fh):
            try:
                rows.append((float(r["t"]), float(r["power_w"]), float(r["sm_mhz"]), float(r["util_pct"]), r["reasons"]))
            except (TypeError, ValueError):
                continue
    return rows


def window_stats(power, t0, t1):
    sel = [r for r in power if t0 <= r[0] <= t1]
    if not sel:
        return {}
    reasons = sorted({r[4] for r in sel})
    return {"power_w": st.mean(r[1] for r in sel), "sm_mhz": st.mean(r[2] for r in sel),
            "util_pct": st.mean(r[3] for r in sel), "samples": len(sel), "reasons": reasons}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("--power")
    ap.add_argument("--names", default="", help="label=sha[,label=sha]: names for commits in the output")
    ap.add_argument("--json")
    args = ap.parse_args()
    names = {}
    for item in filter(None, args.names.split(",")):
        label, _, sha = item.partition("=")
        names[sha] = label
    power = load_power(args.power) if args.power else []

    con = sqlite3.connect(args.db)
    trials = con.execute("SELECT id, commit_sha, status, system, started_at, finished_at FROM trials ORDER BY id").fetchall()
    sessions = []
    for tid, sha, status, system, started, finished in trials:
        runs = con.execute(
            "SELECT warmup, decode_tok_s, server_decode_tok_s, output_tokens, requested_tokens, recorded_at, error "
            "FROM runs WHERE trial_id = ? ORDER BY id", (tid,)).fetchall()
        measured = [r for r in runs if not r[0] and r[1] and not r[6] and r[3] >= r[4]]
        warm = [r for r in runs if r[0]]
        vals = [r[1] for r in measured]
        srv = [r[2] for r in measured if r[2]]
        sysd = json.loads(system) if system else {}
        s = {"trial": tid, "commit": sha[:10], "label": names.get(sha, next((v for k, v in names.items() if sha.startswith(k)), "")),
             "status": status, "runs": len(vals), "warmup_tok_s": [round(r[1], 1) for r in warm if r[1]],
             "mean_tok_s": st.mean(vals) if vals else None, "median_tok_s": st.median(vals) if vals else None,
             "within_cv_pct": cv(vals), "server_tok_s": st.mean(srv) if srv else None,
             "session_s": (finished - started) if finished and started else None,
             "nvml_power_w": sysd.get("power_mean_w"), "nvml_sm_mhz": sysd.get("sm_clock_mean_mhz"),
             "throttled_fraction": sysd.get("throttled_fraction")}
        if power and measured:
            t0 = (warm[-1][5] if warm else started)
            s.update({"decode_" + k: v for k, v in window_stats(power, t0, measured[-1][5]).items()})
        sessions.append(s)

    by_commit = {}
    for s in sessions:
        if s["mean_tok_s"]:
            by_commit.setdefault(s["commit"], []).append(s)
    summary = []
    for sha, ss in by_commit.items():
        means = [s["mean_tok_s"] for s in ss]
        w = [s["within_cv_pct"] for s in ss if s["within_cv_pct"] is not None]
        sw = math.sqrt(st.mean([x * x for x in w])) if w else None
        sb = cv(means)
        n = st.mean(s["runs"] for s in ss)
        sb_corr = math.sqrt(max(0.0, sb * sb - (sw or 0) ** 2 / n)) if sb is not None else None
        pw = [s.get("decode_power_w") or s.get("nvml_power_w") for s in ss]
        pw = [p for p in pw if p]
        summary.append({"commit": sha, "label": ss[0]["label"], "sessions": len(ss), "mean_tok_s": st.mean(means),
                        "session_means": [round(m, 1) for m in means], "sigma_b_pct": sb, "sigma_b_corr_pct": sb_corr,
                        "sigma_w_pct": sw, "power_w": st.mean(pw) if pw else None,
                        "sm_mhz": st.mean([s["decode_sm_mhz"] for s in ss if s.get("decode_sm_mhz")] or [0]) or None,
                        "session_s": st.mean([s["session_s"] for s in ss if s["session_s"]] or [0]) or None})

    f = lambda v, d=1: "-" if v is None else (f"{v:.{d}f}" if isinstance(v, float) else str(v))
    print("trial commit     label    runs  mean tok/s  within CV%  server tok/s  power W  SM MHz  util%  session s  warm-ups")
    for s in sessions:
        print(f"{s['trial']:>5} {s['commit']} {s['label']:<8} {s['runs']:>4}  {f(s['mean_tok_s']):>10}  {f(s['within_cv_pct'], 2):>10}"
              f"  {f(s['server_tok_s']):>12}  {f(s.get('decode_power_w') or s['nvml_power_w']):>7}  {f(s.get('decode_sm_mhz'), 0):>6}"
              f"  {f(s.get('decode_util_pct'), 0):>5}  {f(s['session_s']):>9}  {s['warmup_tok_s']} {s['status'] if s['status'] != 'ok' else ''}")
    print()
    for c in summary:
        print(f"{c['commit']} {c['label']:<8} sessions {c['sessions']}: mean {f(c['mean_tok_s'])} tok/s, session means {c['session_means']}, "
              f"σ_b {f(c['sigma_b_pct'], 2)}% (minus σ_w²/n: {f(c['sigma_b_corr_pct'], 2)}%), σ_w {f(c['sigma_w_pct'], 2)}%, "
              f"power {f(c['power_w'])} W, SM {f(c['sm_mhz'], 0)} MHz, session {f(c['session_s'])} s")
    if len(summary) >= 2:
        a, b = summary[0], summary[-1]
        print(f"{b['label'] or b['commit']} vs {a['label'] or a['commit']}: {100 * (b['mean_tok_s'] / a['mean_tok_s'] - 1):+.1f}% tok/s"
              + (f", {100 * (b['power_w'] / a['power_w'] - 1):+.1f}% power" if a["power_w"] and b["power_w"] else ""))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"sessions": sessions, "commits": summary}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
