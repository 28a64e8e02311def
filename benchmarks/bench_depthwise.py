"""The depthwise direct conv (dsl_compiler.cutlass.grouped_conv) on the H200's slow shapes, with
``MUCUTLASS_DEPTHWISE_SPLIT`` off (CUTLASS's grid of ceil(K / 64) CTAs walking every output tile) and on (the tiles
spread over about 4 CTAs per SM), beside torch's F.conv2d (channels-last and contiguous); and BatchNorm's
statistics step (``var_mean`` over a channels-last activation) against the same reduction over the NHWC rows.
Writes <out>/<date>-<gpu>-depthwise.{json,md}.

    python3 benchmarks/bench_depthwise.py --out $OUT                # on a GPU: builds 6 kernels, about 3 minutes

Times are CUDA-event medians per call with the L2 flushed before each call (evals.judge.timing.time_cuda,
host_sync "end": the host runs ahead, so the events hold the GPU's work, not the Python launch). Our kernel's
time includes CUTLASS's filter reorder, a launch of its own every call. Each kernel is checked against F.conv2d
plus the same epilogue (fp32: 1e-4).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from results_io import write_result  # noqa: E402

# name -> (N, C, H, W, epilogue, measured us per call of the kernel in the H200 step profile / offline run)
SHAPES = {
    "mobilenetv2": (2, 192, 224, 224, "relu6", "2213 / 2430 (models 11, 2026-12-01)"),
    "efficientnet": (4, 192, 112, 112, "silu", "1098 / 2692 (models 12, 2026-12-01)"),
    "builtin28": (16, 256, 128, 128, "relu6", "6955 (builtin 28, 2026-11-30)"),
}
EPILOGUES = {"relu6": "hardtanh(acc + b[col], 0.0, 6.0)", "silu": "silu(acc + b[col])"}
SPLITS = ("off", "on")
DRAM_TB_S = 4.8  # the H200's datasheet bandwidth, for the "at bandwidth" column
NO_GPU = "bench_depthwise: needs a CUDA GPU (torch.cuda.is_available() is False); nothing was built or timed"


def program_text(name: str) -> str:
    n, c, h, w, epi, _ = SHAPES[name]
    return (f"program dw_{name}\ninput x: f32[{n}, {c}, {h}, {w}] channels_last\n"
            f"param w: f32[{c}, 1, 3, 3] channels_last = \"conv.weight\"\nparam b: f32[{c}] = \"conv.bias\"\n"
            f"kernel c = conv2d(x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups={c}) {{\n"
            f"  math = f32\n  store y: f32 = {EPILOGUES[epi]}\n}}\noutput y\n")


def program(name: str):
    from dsl_compiler.parser import parse

    prog, diags = parse(program_text(name))
    if prog is None:
        raise ValueError("; ".join(d.message for d in diags))
    return prog


def _build(job: tuple[str, str]) -> tuple[str, str, dict, str, float]:
    """One (shape, split) kernel built in a process of its own (the setting is read at emit time, per process)."""
    name, split = job
    os.environ["MUCUTLASS_DEPTHWISE_SPLIT"] = split
    from dsl_compiler.build import build_program

    start = time.perf_counter()
    res = build_program(program(name), jobs=1)
    error = "" if res.ok else (res.diagnostics[0].message if res.diagnostics else "build failed")
    return name, split, dict(res.artifacts) if res.ok else {}, error, time.perf_counter() - start


def _median_us(fn, flusher, calls: int) -> float:
    import statistics

    from evals.judge.timing import time_cuda

    sample = time_cuda(lambda _: fn(), [[]], flusher=flusher, warmup=5, min_trials=calls, max_trials=calls,
                       host_sync="end")
    return statistics.median(sample.event_us)


def call_spec(name: str) -> tuple[str, dict, dict]:
    """The kernel's name, op and ABI as ``cutlass_runtime.call_kernel`` takes them (the same with either setting)."""
    from dsl_compiler.cutlass.emit import emit_program

    prog = program(name)
    (kernel,) = prog.kernels
    (emitted,), diags = emit_program(prog)
    if diags:
        raise ValueError("; ".join(d.message for d in diags))
    return kernel.name, kernel.op.model_dump(mode="json"), dataclasses.asdict(emitted.abi)


def tensors(name: str, device: str) -> tuple:
    """x (NCHW), the filter, the bias, and the kernel's env: x and the filter channels-last, as it reads them in place."""
    import torch

    n, c, h, w, _, _ = SHAPES[name]
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(n, c, h, w, device=device, generator=gen)
    weight = torch.randn(c, 1, 3, 3, device=device, generator=gen) * 0.3
    bias = torch.randn(c, device=device, generator=gen)
    env = {"x": x.contiguous(memory_format=torch.channels_last), "w": weight.contiguous(memory_format=torch.channels_last),
           "b": bias}
    return x, weight, bias, env


def measure_conv(name: str, built: dict, flusher, calls: int) -> dict:
    import torch
    import torch.nn.functional as F

    from dsl_compiler.cutlass_runtime import call_kernel

    n, c, h, w, epi, measured = SHAPES[name]
    x, weight, bias, env = tensors(name, "cuda")
    x_cl, w_cl = env["x"], env["w"]
    act = (lambda t: F.hardtanh(t, 0.0, 6.0)) if epi == "relu6" else F.silu
    with torch.no_grad():
        ref = act(F.conv2d(x, weight, bias, padding=1, groups=c))
    moved = 2 * x.numel() * 4
    row: dict = {"shape": name, "nchw": [n, c, h, w], "epilogue": epi, "profiled_us": measured, "bytes": moved,
                 "at_bandwidth_us": round(moved / (DRAM_TB_S * 1e6), 1)}
    kernel_name, op, abi = call_spec(name)
    for split in SPLITS:
        key = f"ours_split_{split}"
        entry = built.get((name, split), {})
        if entry.get("error") or kernel_name not in entry.get("artifacts", {}):
            row[key] = {"error": entry.get("error", "not built")}
            continue
        lib = entry["artifacts"][kernel_name]
        try:
            with torch.no_grad():
                got = call_kernel(lib, kernel_name, op, abi, env)["y"]
                torch.cuda.synchronize()
                err = (got.float() - ref).abs().max().item()
                t_us = _median_us(lambda: call_kernel(lib, kernel_name, op, abi, env), flusher, calls)
            row[key] = {"t_us": round(t_us, 1), "max_abs_err": err, "correct": bool(err <= 1e-4 * max(1.0, ref.abs().max().item())),
                        "tb_s": round(moved / t_us / 1e6, 3)}
        except Exception as exc:  # noqa: BLE001 - one kernel's failure is a cell, not the end of the run
            row[key] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    with torch.no_grad():
        for key, xs, ws in (("torch_channels_last", x_cl, w_cl), ("torch_contiguous", x, weight)):
            t_us = _median_us(lambda: F.conv2d(xs, ws, bias, padding=1, groups=c), flusher, calls)
            row[key] = {"t_us": round(t_us, 1), "tb_s": round(moved / t_us / 1e6, 3)}
    return row


def measure_var_mean(flusher, calls: int) -> dict:
    """BatchNorm's statistics step as the program runs it (var_mean over N, H, W of a channels-last tensor) against
    the reduction over the [N*H*W, C] rows of the same memory (a view, no copy)."""
    import torch

    x = torch.randn(2, 192, 224, 224, device="cuda").contiguous(memory_format=torch.channels_last)
    rows = x.permute(0, 2, 3, 1).reshape(-1, 192)
    assert rows.data_ptr() == x.data_ptr(), "the NHWC rows of a channels-last tensor are a view"
    with torch.no_grad():
        v0, m0 = torch.var_mean(x, dim=(0, 2, 3), correction=0)
        v1, m1 = torch.var_mean(rows, dim=0, correction=0)
        same = bool(torch.allclose(v0, v1, rtol=1e-4, atol=1e-5) and torch.allclose(m0, m1, rtol=1e-4, atol=1e-5))
        t_dims = _median_us(lambda: torch.var_mean(x, dim=(0, 2, 3), correction=0), flusher, calls)
        t_rows = _median_us(lambda: torch.var_mean(rows, dim=0, correction=0), flusher, calls)
    moved = x.numel() * 4
    return {"shape": [2, 192, 224, 224], "bytes": moved, "at_bandwidth_us": round(moved / (DRAM_TB_S * 1e6), 1),
            "dims_0_2_3_us": round(t_dims, 1), "nhwc_rows_dim_0_us": round(t_rows, 1), "same_result": same,
            "profiled_us": "298 (models 11, block_1_var; 2026-12-01)"}


def to_markdown(doc: dict) -> str:
    lines = [f"# Depthwise conv and BatchNorm statistics ({doc['gpu']}, {doc['date']})", "",
             "CUDA-event median per call, L2 flushed before each call; ours includes CUTLASS's filter reorder launch. "
             f"`split off`: CUTLASS's grid of ceil(K/64) CTAs (the default); `split on`: MUCUTLASS_DEPTHWISE_SPLIT = on. "
             f"TB/s over x read + y written once (datasheet {DRAM_TB_S}).", "",
             "| shape | N,C,H,W | epilogue | profiled us | at bandwidth us | ours split off us | ours split on us | "
             "torch channels-last us | torch contiguous us | correct off / on |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]

    def cell(d: dict) -> str:
        return d["error"][:60] if "error" in d else f"{d['t_us']} ({d['tb_s']} TB/s)"

    for r in doc["conv"]:
        ok = " / ".join(str(r[f"ours_split_{s}"].get("correct", "-")) for s in SPLITS)
        lines.append(f"| {r['shape']} | {','.join(map(str, r['nchw']))} | {r['epilogue']} | {r['profiled_us']} | "
                     f"{r['at_bandwidth_us']} | {cell(r['ours_split_off'])} | {cell(r['ours_split_on'])} | "
                     f"{cell(r['torch_channels_last'])} | {cell(r['torch_contiguous'])} | {ok} |")
    vm = doc.get("var_mean")
    if vm:
        lines += ["", "BatchNorm statistics over a channels-last [2, 192, 224, 224] fp32 tensor "
                  f"({vm['bytes'] / 1e6:.0f} MB, {vm['at_bandwidth_us']} us at bandwidth; profiled {vm['profiled_us']}): "
                  f"`torch.var_mean(x, dim=(0, 2, 3))` {vm['dims_0_2_3_us']} us, "
                  f"`torch.var_mean(x.permute(0, 2, 3, 1).reshape(-1, 192), dim=0)` {vm['nhwc_rows_dim_0_us']} us; "
                  f"same result: {vm['same_result']}."]
    lines += ["", f"Builds: {doc['build_s']} s wall for {len(doc['builds'])} kernels."]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for <date>-<gpu>-depthwise.{json,md}")
    ap.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    ap.add_argument("--calls", type=int, default=50, help="timed calls per case (after 5 warm-up calls)")
    ap.add_argument("--jobs", type=int, default=6, help="kernels built side by side")
    ap.add_argument("--gpu", default="h200", help="the GPU's name in the file name")
    ap.add_argument("--date", default=dt.date.today().isoformat())
    args = ap.parse_args(argv)
    if args.calls < 1 or args.jobs < 1:
        ap.error("--calls and --jobs must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(NO_GPU, file=sys.stderr)
        return 2
    from evals.judge.timing import L2Flusher

    start = time.perf_counter()
    jobs = [(name, split) for name in args.shapes for split in SPLITS]
    built: dict = {}
    # spawn: the workers set the setting before they emit, and never share the parent's CUDA state
    with ProcessPoolExecutor(max_workers=min(args.jobs, len(jobs)), mp_context=get_context("spawn")) as pool:
        for name, split, artifacts, error, build_s in pool.map(_build, jobs):
            built[(name, split)] = {"artifacts": artifacts, "error": error, "build_s": round(build_s, 1)}
            print(f"built {name} split {split}: {error or 'ok'} ({build_s:.0f} s)", flush=True)
    build_s = round(time.perf_counter() - start, 1)
    flusher = L2Flusher(torch.device("cuda"))
    rows = []
    for name in args.shapes:
        rows.append(measure_conv(name, built, flusher, args.calls))
        print(rows[-1], flush=True)
    var_mean = measure_var_mean(flusher, args.calls)
    print(var_mean, flush=True)
    from evals.environment import collect_environment

    env = collect_environment("cutlass")
    doc = {"gpu": args.gpu, "date": args.date, "versions": env["versions"], "environment": env, "build_s": build_s,
           "builds": [{"shape": n, "split": s, "error": b["error"], "build_s": b["build_s"]} for (n, s), b in built.items()],
           "conv": rows, "var_mean": var_mean}
    write_result(Path(args.out) / f"{args.date}-{args.gpu}-depthwise", doc, to_markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
