"""summary.txt of a batch: one line per run, from out/runs.jsonl and each run's ``--json`` result (the format every
round's kept summary.txt has)."""

from __future__ import annotations

import json
from pathlib import Path


def lines(out: Path) -> list[str]:
    if not (out / "runs.jsonl").is_file():
        raise SystemExit(f"{out / 'runs.jsonl'} is missing: no run of this batch has ended there yet")
    recs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines() if line.strip()]
    rows = []
    for r in recs:
        n = r["name"]
        try:
            d = json.loads((out / f"{n}.json").read_text())
        except Exception as e:  # an interrupted run, or one that printed no JSON: said, and the next run goes on
            rows.append(f"{n} NO-JSON rc {r['rc']} ({e})  load before {' '.join(r['load_before'])} "
                        f"after {' '.join(r['load_after'])}")
            continue
        e = d.get("endpoint_comparison") or {}
        cul = d["culprit"][:10] if d.get("culprit") else "-"
        cal = (f"  calib_sigma_b {r['calib_sigma_b']} (calibrate rc {r['calibrate_rc']}, {r['calibrate_wall_s']}s, "
               f"load after it {', '.join(r['load_after_calibrate'])})" if "calib_sigma_b" in r else "")
        rows.append(f"{n} {d['verdict']} {cul} {d['effect_pct']} ends {e.get('effect_pct')} {e.get('ci_low_pct')} "
                    f"{e.get('ci_high_pct')} ruled_out {d.get('ruled_out_pct')} trials {d['trials_used']} "
                    f"stopped_by {d.get('stopped_by')} improvements {d.get('improvements')} {cal}  rc {r['rc']} "
                    f"wall {r['wall_s']}s  load before {', '.join(r['load_before'])} after {', '.join(r['load_after'])}  "
                    f"{r['start_utc']}..{r['end_utc']}")
    return rows


def write(out: Path) -> str:
    text = "\n".join(lines(out)) + "\n"
    (out / "summary.txt").write_text(text)
    return text
