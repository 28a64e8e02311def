"""The runtime's two settings measured on built programs: whole-program CUDA graph replay
(``MUCUTLASS_CUDA_GRAPH``) and the input casts as one launch (``MUCUTLASS_FUSED_CASTS``), each on and
off, on the offline tier's first program of each chosen problem. Writes
<out>/<date>-<gpu>-runtime.{json,md}.

    python benchmarks/bench_runtime.py --out /tmp/x                 # smoke + the builtin problems with casts
    python benchmarks/bench_runtime.py --list                       # the problems and their plans (CPU only)

Per problem and setting: the time of one forward as a caller sees it (``calls`` back-to-back calls between
two CUDA events, host overhead included: what a graph removes), its correctness against the reference (the
problem's tolerance) and against the plain setting (a replay and the fused casts must give the same bits), and
the estimate's decision on ``auto``, and the host time of one call alone (to calibrate the estimate's
``HOST_US_*`` constants against the ``host_est_us`` it predicts). Per problem with casts: the casts alone, as torch steps and as one launch,
with their bandwidth (the bytes the one launch reads and writes over each time: a cast then a pad as steps
moves more; the H200's datasheet is 4.8 TB/s).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from results_io import write_result  # noqa: E402

# (suite, problem): the smoke problems are launch-bound (a graph's case); the others read fp32 inputs that f16
# kernels need cast (two GEMM operands, a conv's NCHW activation): the fused casts' case
PROBLEMS = [
    ("smoke", "01_gemm_tiny"), ("smoke", "02_linear_relu_tiny"), ("smoke", "03_conv2d_relu_tiny"),
    ("smoke", "04_mlp_tiny"), ("smoke", "05_bmm_scale_tiny"),
    ("builtin", "01_gemm_square"), ("builtin", "03_gemm_batched"), ("builtin", "10_gemm_irregular"),
    ("builtin", "20_conv2d_bias_relu"), ("builtin", "25_conv2d_residual_add"), ("builtin", "26_conv1d"),
    ("builtin", "30_mlp3"), ("builtin-large", "01_gemm_4096"), ("builtin-large", "12_conv2d_3x3_large"),
]
SETTINGS = [("off", "off"), ("off", "on"), ("on", "off"), ("on", "on")]  # (cuda graph, fused casts)


def chosen_problems(names: list[str] | None = None) -> list:
    from evals.problems import load_suite

    suites: dict[str, dict] = {}
    out = []
    for suite, name in PROBLEMS:
        if names and name not in names:
            continue
        if suite not in suites:
            suites[suite] = {p.name: p for p in load_suite(suite)}
        out.append(suites[suite][name])
    return out


def plan_rows(problems: list, gpu: str = "h200") -> list[dict]:
    """The first program of each problem, its fused-cast plan and the estimate's graph decision (CPU only)."""
    from bench_offline import candidate_programs

    from dsl_compiler import fused_cast
    from sol_models.estimate import estimate_program, graph_estimate
    from sol_models.hardware import get_gpu

    spec = get_gpu(gpu)
    rows = []
    for p in problems:
        programs = candidate_programs(p, gpu, 1)
        if not programs:
            rows.append({"problem": p.key, "program": None})
            continue
        program = programs[0]
        jobs = fused_cast.plan_input_casts(program)
        apart, fused = estimate_program(program, spec, fused_casts=False), estimate_program(program, spec, fused_casts=True)
        decision = graph_estimate(program, apart, spec)
        rows.append({"problem": p.key, "program": program, "casts": [j.dst for j in jobs], "steps": len(program.steps),
                     "t_est_us": round(apart.t_us, 1), "t_est_fused_us": round(fused.t_us, 1),
                     "graph_auto": decision.pays, "graph_reason": decision.reason,
                     "host_est_us": round(decision.t_host_us, 1)})
    return rows


def _time_calls(fn, calls: int) -> float:
    """Microseconds per call of ``calls`` back-to-back calls between two CUDA events (host time included)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def _median(fn, calls: int, repeats: int) -> float:
    return sorted(_time_calls(fn, calls) for _ in range(repeats))[repeats // 2]


def _host_us(fn, calls: int = 20) -> float:
    """Median host time of one call (the CPU side alone: what the estimate's HOST_US_* constants model)."""
    import torch

    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return sorted(times)[calls // 2]


def measure(problem, row: dict, artifacts: dict, calls: int, repeats: int) -> dict:
    import torch

    from dsl_compiler import cutlass_runtime, fused_cast, runtime, torch_steps
    from dsl_compiler.run_settings import RuntimeOptions

    program = row["program"]
    model = problem.make_model(seed=0, device="cuda")
    inputs = problem.make_inputs(seed=1, device="cuda")
    with torch.no_grad():
        ref = model(*inputs)
    refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
    params = runtime.bind_params(program, model)
    modules = runtime.bind_modules(program, model)
    out: dict = {"settings": {}}
    base_outputs = None
    for graph, fused in SETTINGS:
        opts = RuntimeOptions(cuda_graph=graph == "on", fused_casts=fused == "on")
        mod = runtime.load(program, "cutlass", params, artifacts, modules, options=opts).cuda()
        fresh = [problem.make_inputs(seed=10 + i, device="cuda") for i in range(3)]  # new memory each call
        with torch.no_grad():
            for xs in fresh:  # the first call is eager, the second captures
                mod(*xs)
            got = mod(*inputs)
            got = list(got) if isinstance(got, (tuple, list)) else [got]
            torch.cuda.synchronize()
            tol = problem.tolerance
            correct = all(torch.allclose(g.float(), r.float(), atol=tol, rtol=tol) for g, r in zip(got, refs))
            if base_outputs is None:
                base_outputs, same_bits = got, True
            else:
                same_bits = all(torch.equal(g, b) for g, b in zip(got, base_outputs))
            t_us = _median(lambda: mod(*inputs), calls, repeats)
            host_us = _host_us(lambda: mod(*inputs))
        graphs = getattr(mod, "graphs", None)
        out["settings"][f"graph {graph}, fused {fused}"] = {
            "t_us": round(t_us, 2), "host_us": round(host_us, 2), "correct": bool(correct), "same_bits_as_plain": bool(same_bits),
            "replays": graphs.replays if graphs is not None else 0,
            "last_reason": graphs.last_reason if graphs is not None else "",
            "fused_jobs": len(getattr(mod, "cast_jobs", [])),
        }
    jobs = [j.as_dict() for j in fused_cast.plan_input_casts(program)]
    if jobs and fused_cast.ARTIFACT in artifacts:
        env = {d.name: x for d, x in zip(program.inputs, inputs)}
        steps = [program.steps[i] for j in jobs for i in j["steps"]]
        moved = sum(env[j["src"]].numel() * env[j["src"]].element_size() for j in jobs) + sum(
            t.numel() * t.element_size() for t in cutlass_runtime.run_fused_casts(artifacts[fused_cast.ARTIFACT], jobs, env).values())

        def as_steps():
            local = dict(env)
            for s in steps:
                local.update(torch_steps.run(s, local))

        def as_one():
            cutlass_runtime.run_fused_casts(artifacts[fused_cast.ARTIFACT], jobs, env)

        t_steps, t_one = _median(as_steps, 20, repeats), _median(as_one, 20, repeats)
        out["cast_timing"] = {"jobs": len(jobs), "bytes": moved, "t_steps_us": round(t_steps, 2), "t_fused_us": round(t_one, 2),
                        "steps_tb_s": round(moved / t_steps / 1e6, 2), "fused_tb_s": round(moved / t_one / 1e6, 2)}
    return out


def build_all(rows: list[dict], jobs: int, log=print) -> dict[str, dict]:
    import os

    from dsl_compiler import build

    from bench_offline import kernels_per_unit_for, unique_kernels

    os.environ["MUCUTLASS_FUSED_CASTS"] = "on"  # the build adds the fused-cast library
    programs = [r["program"] for r in rows if r.get("program") is not None]
    kernels = len(unique_kernels(programs))
    os.environ["MUCUTLASS_KERNELS_PER_UNIT"] = str(kernels_per_unit_for(kernels, jobs))
    os.environ["MUCUTLASS_BUILD_JOBS"] = str(jobs)
    log(f"building {kernels} unique kernels of {len(programs)} programs on {jobs} cores")
    start = time.perf_counter()
    build.build_ahead(programs)
    build.wait_ahead()
    artifacts = {}
    for r in rows:
        if r.get("program") is None:
            continue
        res = build.build_program(r["program"], jobs=jobs)
        if res.ok:
            artifacts[r["problem"]] = dict(res.artifacts)
        else:
            r["build_error"] = res.diagnostics[0].message if res.diagnostics else "build failed"
    log(f"built {len(artifacts)} of {len(programs)} programs in {time.perf_counter() - start:.0f} s")
    return artifacts


def to_markdown(doc: dict) -> str:
    lines = [f"# Runtime settings: CUDA graph and fused casts ({doc['gpu']}, {doc['date']})", "",
             "Time of one forward as a caller sees it (back-to-back calls between CUDA events, host included), "
             "median of repeats; correct against the reference at the problem's tolerance; `bits` = identical to the "
             "plain setting. Graph auto: the estimate's decision (sol_models.estimate.graph_estimate).", "",
             "| problem | steps | casts | plain us | fused us | graph us | both us | best vs plain | correct | bits "
             "| graph auto | host us: plain / estimate | casts: steps us / one launch us (TB/s) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- | --- |"]
    for r in doc["rows"]:
        s = r.get("settings") or {}
        if not s:
            lines.append(f"| {r['problem']} | - | - | - | - | - | - | - | - | - | - | - | {r.get('error', '')} |")
            continue
        t = [s[f"graph {g}, fused {f}"]["t_us"] for g, f in SETTINGS]
        correct = all(v["correct"] for v in s.values())
        bits = all(v["same_bits_as_plain"] for v in s.values())
        c = r.get("cast_timing")
        casts = f"{c['t_steps_us']} / {c['t_fused_us']} ({c['steps_tb_s']} / {c['fused_tb_s']})" if c else "-"
        lines.append(f"| {r['problem']} | {r['steps']} | {len(r['casts'])} | {t[0]:.1f} | {t[1]:.1f} | {t[2]:.1f} | "
                     f"{t[3]:.1f} | {t[0] / min(t):.2f}x | {'yes' if correct else '**no**'} | {'yes' if bits else '**no**'} "
                     f"| {'on' if r['graph_auto'] else 'off'} | {s['graph off, fused off'].get('host_us', '-')} / "
                     f"{r.get('host_est_us', '-')} | {casts} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--problems", nargs="*", help="problem names (default: all of PROBLEMS)")
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--list", action="store_true", help="print the problems, their casts and graph decisions; no GPU")
    ap.add_argument("--date", default=dt.date.today().isoformat())
    args = ap.parse_args(argv)
    rows = plan_rows(chosen_problems(args.problems), args.gpu)
    if args.list:
        for r in rows:
            print(json.dumps({k: v for k, v in r.items() if k != "program"}))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("needs a GPU (use --list on the CPU)", file=sys.stderr)
        return 2
    artifacts = build_all(rows, args.jobs)
    problems = {p.key: p for p in chosen_problems(args.problems)}
    for r in rows:
        if r["problem"] not in artifacts:
            r["error"] = r.get("build_error", "no program")
            continue
        try:
            r.update(measure(problems[r["problem"]], r, artifacts[r["problem"]], args.calls, args.repeats))
        except Exception as exc:  # noqa: BLE001 - one problem's failure is a row, not the end of the run
            r["error"] = f"{type(exc).__name__}: {exc}"[:300]
        print(json.dumps({k: v for k, v in r.items() if k != "program"}), flush=True)
    from evals.environment import collect_environment

    doc = {"gpu": args.gpu, "date": args.date, "environment": collect_environment("cutlass"),
           "rows": [{k: v for k, v in r.items() if k != "program"} for r in rows]}
    write_result(Path(args.out) / f"{args.date}-{args.gpu}-runtime", doc, to_markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
