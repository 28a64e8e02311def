"""The `models` suite (whole models, KernelBench Level 3 style) under the offline tier: per problem PyTorch's eager
fp32, eager TF32 and torch.compile times, ours, the program's coverage (the share of the problem's FLOPs its
CUTLASS kernels take, at the file's sizes), correctness and the reasons a problem falls short; the suite's
geomeans against the issue's targets. Reads a finished `mucutlass eval --suite models` (its results.sqlite) and
writes <date>-<gpu>-models.{json,md} into --out.

    python3 benchmarks/bench_models.py --from-eval .cache/eval-models/results.sqlite --out $OUT
    python3 benchmarks/bench_models.py --prebuild-only --max-attempts 1 --jobs 16   # build the kernels first

--prebuild-only lists every problem's first candidate programs in parallel processes (a whole model's
configuration search takes seconds to minutes of one core) and builds their kernels, one nvcc per core.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from evals.metrics import geomean  # noqa: E402
from bench_offline import _fmt, _timed  # noqa: E402  (the same cell formats as the offline table)
from results_io import write_result  # noqa: E402

SUITE = "models"
# the targets on the H200
TARGET_VS_EAGER_TF32 = 1.3
TARGET_VS_COMPILE = 1.2
TARGET_COVERAGE = {name: 0.8 for name in ("13_transformer_encoder", "14_lstm_layer", "15_gru_bidirectional_classifier",
                                          "16_lstm_language_model", "17_rnn_relu_tagger")}  # CNNs and MLPs: 0.9


def _candidates(args: tuple[str, str, int]) -> tuple[str, list[str], float]:
    """One problem's first ``count`` candidate programs (as JSON), in a worker process: the ones an evaluation with
    that many attempts tries (bench_offline's prebuild adds every other precision's best, a later attempt's
    fallback after a wrong 16-bit result, which a run of one attempt never reaches)."""
    from dsl_compiler.parser import parse
    from evals.problems import load_suite
    from nodes.offline.policy import OfflineTier

    name, gpu, count = args
    start = time.perf_counter()
    problem = next(p for p in load_suite(SUITE) if p.name == name)
    try:
        listed = OfflineTier(use_record=True).candidates(problem, gpu)[:count]
        programs = [p for p in (parse(c.program_text)[0] for c in listed) if p is not None and p.kernels]
    except Exception as exc:  # a problem without candidates still leaves the others to build
        print(f"{name}: no candidates ({type(exc).__name__}: {exc})", flush=True)
        programs = []
    return name, [p.model_dump_json() for p in programs], time.perf_counter() - start


def prebuild(names: list[str], gpu: str, count: int, jobs: int) -> dict:
    """List every problem's candidates in parallel processes and build each problem's kernels as soon as its list
    is ready (one nvcc per core): a slow listing (the LSTM's 65 kernels) holds back only its own builds."""
    from concurrent.futures import as_completed

    from dsl_compiler.build import build_program
    from dsl_compiler.cutlass.emit import emit_program
    from dsl_compiler.ir import Program

    start = time.perf_counter()
    failures: list[str] = []
    unique: set[str] = set()
    counts = {"programs": 0, "built": 0, "cached": 0}

    def build(name: str, program) -> None:
        result = build_program(program, jobs=1)
        if not result.ok:
            failures.append(f"{name}: {result.diagnostics[0].message if result.diagnostics else 'build failed'}")
        else:
            counts["cached" if result.cached else "built"] += 1

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as builders, \
            ProcessPoolExecutor(max_workers=max(1, min(jobs, len(names)))) as listers:
        pending = [listers.submit(_candidates, (n, gpu, count)) for n in names]
        builds = []
        for done in as_completed(pending):
            name, texts, seconds = done.result()
            programs = [Program.model_validate_json(text) for text in texts]
            for program in programs:
                unique.update(e.source for e in emit_program(program)[0])
            counts["programs"] += len(programs)
            print(f"prebuild: {name}: {len(programs)} program(s) listed in {seconds:.0f} s, "
                  f"+{time.perf_counter() - start:.0f} s", flush=True)
            builds += [builders.submit(build, name, program) for program in programs]
        for b in builds:
            b.result()
    print(f"prebuild: {counts['programs']} programs, {len(unique)} unique kernels: {counts['built']} programs built, "
          f"{counts['cached']} cached, {len(failures)} failed in {time.perf_counter() - start:.0f} s", flush=True)
    for f in failures:
        print(f"  {f}", flush=True)
    return {**counts, "unique_kernels": len(unique), "failed": failures}


def coverage_columns(problem) -> dict:
    from sol_models.trace import trace_report

    try:
        report = trace_report(problem)
    except Exception as exc:  # the row still shows the timings
        return {"coverage": None, "coverage_error": f"{type(exc).__name__}: {exc}"}
    lines = [line.strip() for line in report.program.splitlines()]
    return {"coverage": report.coverage, "kernels": report.kernels, "torch_steps": report.torch_steps,
            # a channel concatenation: kernels storing into their channels (store y[a:b]) or a cat step copying
            "slice_stores": sum(1 for line in lines if re.match(r"store \w+\[\d+:\d+\]", line)),
            "cat_steps": sum(1 for line in lines if re.match(r"torch \w+ = cat\(", line)),
            "coverage_target": TARGET_COVERAGE.get(problem.name, 0.9),
            "left_to_pytorch": sorted({f"{o.target}: {o.reason}" for o in report.torch_ops})[:4]}


def table(problems: list, results_path: Path, gpu: str) -> dict:
    from bench_offline import rows_from_evaluation

    doc = rows_from_evaluation(problems, results_path, gpu)
    by_name = {p.name: p for p in problems}
    for row in doc["rows"]:
        row.update(coverage_columns(by_name[row["problem"]]))
    rows = doc["rows"]
    ours = [r for r in rows if r.get("correct") and not r.get("fallback")]
    s = doc["summary"]
    s.update({
        "coverage_met": sum(1 for r in rows if r.get("coverage") is not None and r["coverage"] >= r["coverage_target"]),
        "geomean_coverage": geomean([r["coverage"] for r in rows if r.get("coverage")]),
        "ours_geomean_vs_eager_tf32": geomean([r["speedup_vs_eager_tf32"] for r in ours if r.get("speedup_vs_eager_tf32")]),
        "ours_geomean_vs_compile": geomean([r["speedup_vs_compile"] for r in ours if r.get("speedup_vs_compile")]),
        "targets": {"vs_eager_tf32": TARGET_VS_EAGER_TF32, "vs_compile": TARGET_VS_COMPILE},
    })
    return doc


def _concat_note(row: dict) -> str:
    parts = [f"{row[k]} {what}" for k, what in (("slice_stores", "slice stores"), ("cat_steps", "cat steps")) if row.get(k)]
    return f" ({', '.join(parts)})" if parts else ""


def to_markdown(doc: dict) -> str:
    s = doc["summary"]
    lines = [
        f"# The models suite under the offline tier ({doc['gpu']}, {doc['backend']}, {doc['date']})",
        "",
        f"Up to {doc.get('max_attempts')} attempt(s) per problem, policy fixed. Times in us (median, L2 flushed). "
        "Coverage: the share of the problem's FLOPs the program's CUTLASS kernels take (target 0.9, 0.8 for the "
        "transformer block and the LSTM). The kept time is the faster of ours and PyTorch's fastest eligible variant (one whose outputs pass the tolerance: a failing one says so beside its time); "
        "a **fallback** row's speedups are PyTorch's. Targets: geomean >= "
        f"{TARGET_VS_EAGER_TF32}x over eager TF32 and >= {TARGET_VS_COMPILE}x over torch.compile, none slower than "
        "PyTorch's best.",
        "",
        "| problem | eager fp32 | eager TF32 | torch.compile | ours | ours / PyTorch best | kept | fallback | "
        "coverage | kernels / steps | precision | vs TF32 | vs compile | correct |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for r in doc["rows"]:
        lines.append(
            f"| {r['problem']} | {_timed(r, 'eager_fp32')} | {_timed(r, 'eager_tf32')} | "
            f"{_timed(r, 'compile')} | {_fmt(r.get('ours_us'))} | {_fmt(r.get('ours_vs_floor'), 'x')} | "
            f"{_fmt(r.get('kept_us', r.get('ours_us')))} | {('**' + r['fallback'] + '**') if r.get('fallback') else '-'} | "
            f"{_fmt(r.get('coverage'), 'pct')} | {r.get('kernels', '-')} / {r.get('torch_steps', '-')}"
            f"{_concat_note(r)} | "
            f"{r.get('precision') or '-'} | {_fmt(r.get('speedup_vs_eager_tf32'), 'x')} | "
            f"{_fmt(r.get('speedup_vs_compile'), 'x')} | {'yes' if r.get('correct') else 'no'} |")
    lines += [
        f"| **geomean** | | | | | slowest {_fmt(s.get('slowest_vs_pytorch_best'), 'x')} | | "
        f"{len(s.get('fallbacks') or [])} fallback(s) | {_fmt(s.get('geomean_coverage'), 'pct')} "
        f"({s['coverage_met']} met) | | | **{_fmt(s.get('geomean_speedup_vs_eager_tf32'), 'x')}** | "
        f"**{_fmt(s.get('geomean_speedup_vs_compile'), 'x')}** | {s.get('correct')}/{s.get('total')} |",
        "",
        f"Ours only (rows not kept from PyTorch): {_fmt(s.get('ours_geomean_vs_eager_tf32'), 'x')} over eager TF32, "
        f"{_fmt(s.get('ours_geomean_vs_compile'), 'x')} over torch.compile.",
        "",
        "## Reasons, per problem",
        "",
    ]
    for r in doc["rows"]:
        left = "; ".join(r.get("left_to_pytorch") or []) or "nothing"
        lines.append(f"- **{r['problem']}**: {r.get('why') or 'at or near its bound'}. Left to PyTorch: {left}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-eval", metavar="RESULTS", help="a finished evaluation's results.sqlite")
    parser.add_argument("--prebuild-only", action="store_true", help="build the candidates' kernels and stop")
    parser.add_argument("--max-attempts", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--gpu", default="h200")
    args = parser.parse_args(argv)
    from evals.problems import load_suite

    problems = load_suite(SUITE)
    if args.prebuild_only:
        done = prebuild([p.name for p in problems], args.gpu, args.max_attempts, args.jobs)
        return 0 if not done["failed"] else 1
    if not args.from_eval:
        parser.error("give --from-eval RESULTS or --prebuild-only")
    doc = {"suite": SUITE, "gpu": args.gpu, "date": dt.date.today().isoformat()}
    doc.update(table(problems, Path(args.from_eval), args.gpu))
    doc["gpu"] = (doc.get("environment") or {}).get("gpu") or args.gpu
    doc["versions"] = (doc.get("environment") or {}).get("versions", {})
    write_result(Path(args.out) / f"{doc['date']}-{args.gpu}-models", doc, to_markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
