import json
from pathlib import Path

OUT = Path("/work/validation/issue34/out")
recs = [json.loads(l) for l in (OUT / "runs.jsonl").read_text().splitlines()]
lines = []
for r in recs:
    n = r["name"]
    try:
        d = json.loads((OUT / f"{n}.json").read_text())
    except Exception as e:
        lines.append(f"{n} NO-JSON rc {r['rc']} ({e})  load before {' '.join(r['load_before'])} after {' '.join(r['load_after'])}")
        continue
    e = d.get("endpoint_comparison") or {}
    cul = d["culprit"][:10] if d.get("culprit") else "-"
    cal = f"  calib_sigma_b {r['calib_sigma_b']} (calibrate rc {r['calibrate_rc']}, {r['calibrate_wall_s']}s, load after it {', '.join(r['load_after_calibrate'])})" if "calib_sigma_b" in r else ""
    lines.append(f"{n} {d['verdict']} {cul} {d['effect_pct']} ends {e.get('effect_pct')} {e.get('ci_low_pct')} {e.get('ci_high_pct')} "
                 f"ruled_out {d.get('ruled_out_pct')} trials {d['trials_used']} stopped_by {d.get('stopped_by')} "
                 f"improvements {d.get('improvements')} {cal}  rc {r['rc']} wall {r['wall_s']}s  "
                 f"load before {', '.join(r['load_before'])} after {', '.join(r['load_after'])}  {r['start_utc']}..{r['end_utc']}")
(OUT / "summary.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
