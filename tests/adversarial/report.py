"""Runs the adversarial set and the honest controls through the harness on this machine (its GPU when
there is one, else the CPU) and writes a table: candidate, kind, property, expected rule, got, caught,
whether the next attempt started clean.

    python -m tests.adversarial.report [--out benchmarks/results]     # on the H200: every case at its stage
    python -m tests.adversarial.report --device cpu --out /tmp        # a CPU run (validate only)

Shards run side by side (each with its own judge) and are merged into the one table:

    python -m tests.adversarial.report --shard 0/4 --out DIR & ... ; python -m tests.adversarial.report --merge DIR/*.shard*.json --out DIR
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
from pathlib import Path

from evals.harness import Harness, HarnessSettings
from tests.adversarial.cases import CASES, CONTROLS, PROPERTIES
from tests.adversarial.runner import SECRET_VARS, Scratch, run_case, run_control, stage_of


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "benchmarks" / "results"))
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--watchdog-s", type=float, default=60.0)
    ap.add_argument("--only", nargs="*", help="case files to run (default: all)")
    ap.add_argument("--cpu-timing", action="store_true", help="without a GPU, profile the timing cases and the "
                    "controls on the CPU (sealed calls bound the time; on a busy host the times are noisy)")
    ap.add_argument("--shard", help="K/N: run every N-th case and control starting at the K-th; writes a partial table")
    ap.add_argument("--merge", nargs="+", metavar="SHARD_JSON", help="merge the partial tables of --shard runs")
    args = ap.parse_args(argv)
    if args.merge:
        return _write(_merged([json.loads(Path(p).read_text()) for p in args.merge]), Path(args.out))
    shard_k, shard_n = (int(v) for v in args.shard.split("/")) if args.shard else (0, 1)
    os.environ.update(SECRET_VARS)  # the judge's environment holds keys a candidate must not see
    harness = Harness(HarnessSettings(device=args.device, watchdog_s=args.watchdog_s, cpu_timing=args.cpu_timing,
                                      n_input_sets=3 if args.device == "cpu" else 5))
    info = harness.worker_info()
    on_gpu = args.device != "cpu" and bool(info.get("cuda"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="redteam-") as tmp:
        for i, case in enumerate(CASES):
            if (args.only and case.file not in args.only) or i % shard_n != shard_k:
                continue
            row = {"case": case.id, "kind": case.kind, "property": f"{case.prop} {PROPERTIES[case.prop]}",
                   "expected": "/".join(case.rules), "stage": stage_of(harness, case, on_gpu),
                   "pending_today": bool(case.pending)}
            if (on_gpu and not case.gpu) or (not on_gpu and not case.cpu):
                rows.append(row | {"skipped": "not on this device"})
                continue
            try:
                out = run_case(harness, case, on_gpu, Scratch(Path(tmp) / str(i), harness.settings))
                row |= {"got": out.rule, "caught": out.caught, "reason": out.reason[:300], "problems": out.problems,
                        "next_clean": out.next_clean, "wall_s": round(out.wall_s, 2)}
            except Exception as exc:  # a harness crash is a finding too
                row |= {"got": None, "caught": False, "reason": f"harness raised {type(exc).__name__}: {exc}"[:300]}
            rows.append(row)
            print(f"{case.id:<34} expected {row['expected']:<28} got {str(row.get('got')):<18} "
                  f"caught={row.get('caught')} next_clean={row.get('next_clean')}", file=sys.stderr)
        controls = []
        for i, control in enumerate(CONTROLS):
            if (args.only and control.file not in args.only) or (not on_gpu and not control.cpu) or i % shard_n != shard_k:
                continue
            out = run_control(harness, control, on_gpu, Scratch(Path(tmp) / f"control{i}", harness.settings))
            controls.append({"control": control.file, "passed": out.caught, "rule": out.rule, "flags": out.flags,
                             "problems": out.problems})
            print(f"control {control.file:<26} passed={out.caught} {out.problems}", file=sys.stderr)
    harness.close()
    doc = _summary({"date": dt.date.today().isoformat(), "device": "gpu" if on_gpu else "cpu",
                    "gpu_name": info.get("gpu_name"), "torch": info.get("torch"), "rows": rows, "controls": controls})
    if args.shard:
        stem = f"{doc['date']}-{'h200' if on_gpu else 'cpu'}-adversarial.shard{shard_k}"
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / f"{stem}.json").write_text(json.dumps(doc, indent=2))
        return 0
    return _write(doc, Path(args.out))


def _summary(doc: dict) -> dict:
    run = [r for r in doc["rows"] if "skipped" not in r]
    controls = doc["controls"]
    return doc | {"cases": len(run), "caught": sum(bool(r.get("caught")) for r in run),
                  "next_clean": sum(bool(r.get("next_clean")) for r in run),
                  "controls_passed": f"{sum(c['passed'] for c in controls)}/{len(controls)}"}


def _merged(parts: list[dict]) -> dict:
    order = {c.id: i for i, c in enumerate(CASES)}
    rows = sorted((r for p in parts for r in p["rows"]), key=lambda r: order.get(r["case"], len(order)))
    controls = [c for p in parts for c in p["controls"]]
    first = parts[0]
    return _summary({k: first[k] for k in ("date", "device", "gpu_name", "torch")} | {"rows": rows, "controls": controls,
                                                                                    "shards": len(parts)})


def _write(doc: dict, out_dir: Path) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{doc['date']}-{'h200' if doc['device'] == 'gpu' else 'cpu'}-adversarial"
    (out_dir / f"{stem}.json").write_text(json.dumps(doc, indent=2))
    (out_dir / f"{stem}.md").write_text(_markdown(doc))
    print(f"wrote {out_dir / stem}.{{json,md}}: caught {doc['caught']}/{doc['cases']}, next attempt clean "
          f"{doc['next_clean']}/{doc['cases']}, controls {doc['controls_passed']}", file=sys.stderr)
    return 0 if doc["caught"] == doc["cases"] and all(c["passed"] for c in doc["controls"]) else 1


def _markdown(doc: dict) -> str:
    lines = [f"# Adversarial set on {doc['gpu_name'] or 'the CPU'} ({doc['date']}, torch {doc['torch']})", "",
             f"Caught for their rule: {doc['caught']}/{doc['cases']}; next attempt clean: {doc['next_clean']}/"
             f"{doc['cases']}; honest controls passed: {doc['controls_passed']}. "
             "Run: `python -m tests.adversarial.report`.", "",
             "| candidate | kind | property | stage | expected | got | caught | next clean |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in doc["rows"]:
        if "skipped" in r:
            continue
        lines.append(f"| {r['case']} | {r['kind']} | {r['property']} | {r['stage']} | {r['expected']} | "
                     f"{r.get('got') or '-'} | {'yes' if r.get('caught') else 'no'} | "
                     f"{'yes' if r.get('next_clean') else 'no'} |")
    lines += ["", "| control | passed | flags |", "| --- | --- | --- |"]
    lines += [f"| {c['control']} | {'yes' if c['passed'] else 'no'} | {', '.join(c['flags']) or '-'} |"
              for c in doc["controls"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
