"""The error model on a suite, on the CPU: every precision's predicted error at each problem's tolerance (f16,
bf16, tf32, tf32x3, f32: the largest error over the tolerance on sampled inputs, the accumulation order charged;
``dsl_compiler.frontend.error_model``), the accumulation-order term alone, and the math of the offline tier's
first attempt. Writes benchmarks/results/<date>-cpu-error-model-<suite>.{json,md}.

    python benchmarks/bench_error_model.py --suite builtin-strict
    python benchmarks/bench_error_model.py --suite builtin-large-strict --only gemm
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from results_io import suite_problems, write_result  # noqa: E402


def problem_row(problem) -> dict:
    """One problem: the predicted ratio of every math, which the problem admits, and the first attempt's math."""
    from dsl_compiler.frontend.error_model import MATHS, PASS_RATIO, predict_all
    from dsl_compiler.precision import admitted
    from nodes.offline.policy import OfflineTier

    start = time.perf_counter()
    errors = predict_all(problem, float(problem.tolerance))
    row = {"problem": problem.name, "tolerance": problem.tolerance, "allowed": list(problem.allowed_precisions),
           "predict_s": round(time.perf_counter() - start, 2), "pass_ratio": PASS_RATIO}
    for m in MATHS:
        e = errors.get(m)
        row[m] = None if e is None else e.ratio
        row[f"{m}_admitted"] = admitted(m, problem.allowed_precisions)
    any_error = next(iter(errors.values()), None)
    row["order"] = any_error.order if any_error else None
    row["rows"] = any_error.rows if any_error else None
    row["fastest_passing"] = next((m for m in MATHS if m in errors and errors[m].passes and row[f"{m}_admitted"]),
                                  None)
    try:
        first = OfflineTier(use_record=False).candidates(problem, "h200")
        kernels = first[0].program.kernels if first else ()
        row["first_attempt"] = ",".join(sorted({k.config.math or "default" for k in kernels})) or "no kernel"
    except Exception as exc:  # the prediction is still worth the row
        row["first_attempt"] = f"error: {type(exc).__name__}"
    return row


def _fmt(v) -> str:
    if v is None:
        return "-"
    if v == float("inf"):
        return "inf"
    return f"{v:.3g}"


def to_markdown(doc: dict) -> str:
    from run_vocabulary.floor import tolerance_text

    lines = [
        f"# Error model on {doc['suite']} ({doc['date']}, CPU)",
        "",
        "Predicted error of each math: the largest |out - ref| / (tol + tol |ref|) on the problem's own inputs "
        "(sampled rows), every GEMM / conv operand rounded to the math and each product charged its accumulation "
        "order against the reference's (dsl_compiler/frontend/error_model.py). A math is predicted to pass at "
        f"{doc['pass_ratio']} or less (the sampled maximum underestimates the whole output's). **Bold**: the "
        "fastest admitted math predicted to pass; `order`: the accumulation term alone (an fp32 product in "
        "another order than the reference's). `first`: the math of the offline tier's first program.",
        "",
        "| problem | tol | f16 | bf16 | tf32 | tf32x3 | f32 | order | first | rows | s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for r in doc["rows"]:
        cells = []
        for m in ("f16", "bf16", "tf32", "tf32x3", "f32"):
            text = _fmt(r.get(m))
            if not r.get(f"{m}_admitted"):
                text = f"({text})"  # not admitted by the problem's precisions
            elif m == r.get("fastest_passing"):
                text = f"**{text}**"
            cells.append(text)
        lines.append(f"| {r['problem']} | {tolerance_text(r['tolerance'])} | " + " | ".join(cells) +
                     f" | {_fmt(r.get('order'))} | {r.get('first_attempt')} | {r.get('rows') or '-'} | "
                     f"{r.get('predict_s')} |")
    s = doc["summary"]
    lines += ["", "Parenthesised: not admitted by the problem's precisions. Fastest admitted math predicted to pass: "
              + ", ".join(f"{m} {n}" for m, n in s["fastest_passing"].items()) + f"; {s['none_passing']} problem(s) "
              "where none is (there only the reference's own operation matches it: the floor, eager fp32, is kept "
              "unless a program is measured correct). No prediction: "
              f"{s['no_prediction']}.", ""]
    return "\n".join(lines)


def summarize(rows: list[dict]) -> dict:
    from collections import Counter

    counts = Counter(r.get("fastest_passing") for r in rows if r.get("tf32") is not None)
    return {"fastest_passing": {m: n for m, n in counts.items() if m}, "none_passing": counts.get(None, 0),
            "no_prediction": [r["problem"] for r in rows if r.get("tf32") is None]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="builtin-strict")
    ap.add_argument("--only", nargs="*", default=None, help="problem names (or parts of them)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    problems = suite_problems(args.suite, args.only)
    if problems is None:
        return 1
    rows = []
    for p in problems:
        rows.append(problem_row(p))
        print(f"{p.name}: {rows[-1]['predict_s']} s", file=sys.stderr, flush=True)
    date = dt.date.today().isoformat()
    from dsl_compiler.frontend.error_model import PASS_RATIO

    doc = {"suite": args.suite, "date": date, "pass_ratio": PASS_RATIO, "rows": rows, "summary": summarize(rows)}
    write_result(Path(args.out) / f"{date}-cpu-error-model-{args.suite}", doc, to_markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
