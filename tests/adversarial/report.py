"""Runs the adversarial set and the honest controls through the harness on this machine (its GPU when
there is one, else the CPU) and writes a table: candidate, kind, property, expected rule, got, caught,
whether the next attempt started clean.

    python -m tests.adversarial.report [--out benchmarks/results]     # on the H200: every case at its stage
    python -m tests.adversarial.report --device cpu --out /tmp        # a CPU run (validate only)

The honest controls run first. The results file is rewritten after every case (each row also appended to
``<stem>.jsonl``), so a run stopped by a time limit leaves a valid file with the cases done and those not
reached (``not_reached``); ``--budget-s`` stops starting cases that would not finish in time.

Shards run side by side (each with its own judge) and are merged into the one table:

    python -m tests.adversarial.report --shard 0/4 --out DIR & ... ; python -m tests.adversarial.report --merge DIR/*.shard*.json --out DIR
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from evals.judge.client import Harness, HarnessSettings
from tests.adversarial.cases import CASES, CONTROLS, PROPERTIES
from tests.adversarial.runner import SECRET_VARS, Scratch, run_case, run_control, stage_of


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "benchmarks" / "results"))
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--watchdog-s", type=float, default=60.0)
    ap.add_argument("--only", nargs="*", help="case files to run (default: all)")
    ap.add_argument("--problem", help="SUITE/NAME: run every case and control on this Linear + ReLU problem instead "
                    "(e.g. builtin-huge/10_linear_bias_relu_4gib_out)")
    ap.add_argument("--cpu-timing", action="store_true", help="without a GPU, profile the timing cases and the "
                    "controls on the CPU (sealed calls bound the time; on a busy host the times are noisy)")
    ap.add_argument("--shard", help="K/N: run every N-th case and control starting at the K-th; writes a partial table")
    ap.add_argument("--merge", nargs="+", metavar="SHARD_JSON", help="merge the partial tables of --shard runs")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="start no case that would end past this many seconds (the slowest case so far as the "
                    "guess); the ones left are listed as not reached")
    args = ap.parse_args(argv)
    if args.merge:
        return _write(_merged([json.loads(Path(p).read_text()) for p in args.merge]), Path(args.out))
    shard_k, shard_n = (int(v) for v in args.shard.split("/")) if args.shard else (0, 1)
    if args.problem:
        from tests.adversarial.cases import PROBLEM_ENV

        os.environ[PROBLEM_ENV] = args.problem
    os.environ.update(SECRET_VARS)  # the judge's environment holds keys a candidate must not see
    started = time.monotonic()
    harness = Harness(HarnessSettings(device=args.device, watchdog_s=args.watchdog_s, cpu_timing=args.cpu_timing,
                                      n_input_sets=3 if args.device == "cpu" else 5))
    info = harness.worker_info()
    on_gpu = args.device != "cpu" and bool(info.get("cuda"))
    controls = [c for i, c in enumerate(CONTROLS) if not (args.only and c.file not in args.only)
                and (on_gpu or c.cpu) and not c.why_not_here() and i % shard_n == shard_k]
    cases = [(i, c) for i, c in enumerate(CASES) if not (args.only and c.file not in args.only) and i % shard_n == shard_k
             and not c.why_not_here()]
    doc = {"date": dt.date.today().isoformat(), "device": "gpu" if on_gpu else "cpu", "gpu_name": info.get("gpu_name"),
           "torch": info.get("torch"), "rows": [], "controls": [], "problem": args.problem,
           "not_reached": [c.file for c in controls] + [c.id for _, c in cases]}
    out = Path(args.out)
    stem = _stem(doc) + (f".shard{shard_k}" if args.shard else "")
    results = Results(out, stem, markdown=not args.shard)
    slowest_s = 0.0
    try:
        with tempfile.TemporaryDirectory(prefix="redteam-") as tmp:
            # the honest controls first: a judge that rejects them makes every caught case meaningless
            for i, control in enumerate(controls):
                t0 = time.monotonic()
                out_c = run_control(harness, control, on_gpu, Scratch(Path(tmp) / f"control{i}", harness.settings))
                row = {"control": control.file, "passed": out_c.caught, "rule": out_c.rule, "flags": out_c.flags,
                       "problems": out_c.problems, "wall_s": round(time.monotonic() - t0, 2)}
                doc["controls"].append(row)
                doc["not_reached"].remove(control.file)
                results.add(doc, row)
                slowest_s = max(slowest_s, row["wall_s"])
                print(f"control {control.file:<26} passed={out_c.caught} {out_c.problems}", file=sys.stderr)
            for i, case in cases:
                if args.budget_s is not None and time.monotonic() - started + slowest_s > args.budget_s:
                    print(f"stopping: {len(doc['not_reached'])} left would pass the {args.budget_s:g} s budget",
                          file=sys.stderr)
                    break
                row = {"case": case.id, "kind": case.kind, "property": f"{case.prop} {PROPERTIES[case.prop]}",
                       "expected": "/".join(case.rules), "stage": stage_of(harness, case, on_gpu),
                       "pending_today": bool(case.pending)}
                t0 = time.monotonic()
                if (on_gpu and not case.gpu) or (not on_gpu and not case.cpu):
                    row |= {"skipped": "not on this device"}
                else:
                    try:
                        res = run_case(harness, case, on_gpu, Scratch(Path(tmp) / str(i), harness.settings))
                        row |= {"got": res.rule, "caught": res.caught, "reason": res.reason[:300],
                                "problems": res.problems, "next_clean": res.next_clean, "wall_s": round(res.wall_s, 2)}
                        if not res.next_clean:
                            row["next_reason"] = (res.next_reason or "")[:300]
                    except Exception as exc:  # a harness crash is a finding too
                        row |= {"got": None, "caught": False, "reason": f"harness raised {type(exc).__name__}: {exc}"[:300]}
                    slowest_s = max(slowest_s, time.monotonic() - t0)
                    print(f"{case.id:<34} expected {row['expected']:<28} got {str(row.get('got')):<18} "
                          f"caught={row.get('caught')} next_clean={row.get('next_clean')}", file=sys.stderr)
                doc["rows"].append(row)
                doc["not_reached"].remove(case.id)
                results.add(doc, row)
    finally:  # a time limit, a harness failure: what ran is kept, and what did not is listed
        doc["wall_s"] = round(time.monotonic() - started, 1)
        results.write(doc)
        harness.close()
    print(_written(doc, results.json_path), file=sys.stderr)
    return _exit_code(doc)


class Results:
    """The results file, kept valid while the run goes: each row is appended to ``<stem>.jsonl`` and the
    whole table (``<stem>.json``, and ``.md`` unless a shard) is rewritten, through a renamed temporary
    file, after every case; a run stopped at any point leaves the cases done and those not reached."""

    def __init__(self, out_dir: Path, stem: str, markdown: bool):
        out_dir.mkdir(parents=True, exist_ok=True)
        self.json_path = out_dir / f"{stem}.json"
        self.jsonl_path = out_dir / f"{stem}.jsonl"
        self.md_path = out_dir / f"{stem}.md" if markdown else None
        self.jsonl_path.write_text("")

    def add(self, doc: dict, row: dict) -> None:
        with self.jsonl_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        self.write(doc)

    def write(self, doc: dict) -> None:
        _write_tables(doc, self.json_path, self.md_path)


def _stem(doc: dict) -> str:
    problem = doc.get("problem")
    tail = f"-{problem.split('/')[0]}" if problem else ""
    return f"{doc['date']}-{'h200' if doc['device'] == 'gpu' else 'cpu'}-adversarial{tail}"


def _write_tables(doc: dict, json_path: Path, md_path: Path | None) -> None:
    """The table with its summary, as JSON and (unless ``md_path`` is None) markdown, each replaced whole."""
    doc.update(_summary(doc))
    _replace(json_path, json.dumps(doc, indent=2))
    if md_path is not None:
        _replace(md_path, _markdown(doc))


def _written(doc: dict, where) -> str:
    return (f"wrote {where}: caught {doc['caught']}/{doc['cases']}, next attempt clean {doc['next_clean']}/"
            f"{doc['cases']}, controls {doc['controls_passed']}"
            + (f", not reached {len(doc['not_reached'])}" if doc.get("not_reached") else ""))


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _exit_code(doc: dict) -> int:
    return 0 if (doc["caught"] == doc["cases"] and all(c["passed"] for c in doc["controls"])
                 and not doc.get("not_reached")) else 1


def _summary(doc: dict) -> dict:
    run = [r for r in doc["rows"] if "skipped" not in r]
    controls = doc["controls"]
    return doc | {"cases": len(run), "caught": sum(bool(r.get("caught")) for r in run),
                  "next_clean": sum(bool(r.get("next_clean")) for r in run), "complete": not doc.get("not_reached"),
                  "controls_passed": f"{sum(c['passed'] for c in controls)}/{len(controls)}"}


def _merged(parts: list[dict]) -> dict:
    """One table from the shards' files, partial ones included (their cases not reached stay listed)."""
    order = {c.id: i for i, c in enumerate(CASES)}
    rows = sorted((r for p in parts for r in p["rows"]), key=lambda r: order.get(r["case"], len(order)))
    controls = [c for p in parts for c in p["controls"]]
    not_reached = [n for p in parts for n in p.get("not_reached", [])]
    first = parts[0]
    return _summary({k: first.get(k) for k in ("date", "device", "gpu_name", "torch", "problem")}
                    | {"rows": rows, "controls": controls, "shards": len(parts), "not_reached": not_reached})


def _write(doc: dict, out_dir: Path) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = _stem(doc)
    _write_tables(doc, out_dir / f"{stem}.json", out_dir / f"{stem}.md")
    print(_written(doc, f"{out_dir / stem}.{{json,md}}"), file=sys.stderr)
    return _exit_code(doc)


def _markdown(doc: dict) -> str:
    partial = "" if not doc.get("not_reached") else f", partial: {len(doc['not_reached'])} not reached"
    lines = [f"# Adversarial set on {doc['gpu_name'] or 'the CPU'} ({doc['date']}, torch {doc['torch']}{partial})", "",
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
    if doc.get("not_reached"):
        lines += ["", f"Not reached (the run stopped first; partial results): {', '.join(doc['not_reached'])}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    # `timeout` sends SIGTERM: the results so far are written on the way out (they are after every case anyway)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    sys.exit(main())
