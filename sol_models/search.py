"""Configuration search for one kernel of a program: propose legal configurations, ranked by the
config-aware SOL estimate, and remember the best measured one per shape.

Candidates cover the CUTLASS levers that matter on sm_90a: tensor-core math allowed by the
problem's tolerance, the CTA tile (64/128/256 x 64/128/256 x 32 for tf32, x 64 for 16-bit types),
the cluster (1x1, 2x1, 1x2), the schedule (cooperative, ping-pong; conv has one), split-K and
stream-K when K is large and M x N gives too few tiles to fill the GPU, and raster / swizzle
variants of the best tile for grids large enough that L2 locality matters. Every candidate passes
``dsl_compiler.checks.check``; the estimate (``sol_models.estimate``) orders them.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsl_compiler import ir
from dsl_compiler.ir import KernelConfig, Program
from dsl_compiler.precision import MATH_MODES, admitted, default_math
from run_vocabulary.problem import ALL_PRECISIONS, STRICT_PRECISIONS, Problem

RECORD_ENV = "MUCUTLASS_RECORD"
# Enumeration order breaks ties of the estimate: the shapes measured best on the H200 come first.
TILES_MN = ((128, 256), (256, 128), (128, 128), (64, 256), (256, 64), (64, 128), (128, 64), (256, 256), (64, 64))
CLUSTERS = ((2, 1, 1), (1, 2, 1), (1, 1, 1))
SPLITS = (2, 4, 8)
SWIZZLE_VARIANT_PENALTY = 1.02  # untested by the estimate: ranked just after the config they vary


@dataclass(frozen=True)
class RankedConfig:
    """A candidate configuration of one kernel and its estimated kernel time."""

    config: KernelConfig
    t_est_us: float
    source: str = "estimate"  # "estimate" or "record" (the best measured for this shape)
    t_record_us: float | None = None


# ---------------------------------------------------------------------------------------------
# Program helpers


def kernel_of(program: Program, kernel_name: str) -> ir.Kernel:
    for k in program.kernels:
        if k.name == kernel_name:
            return k
    raise KeyError(f"no kernel '{kernel_name}' in the program (kernels: {', '.join(k.name for k in program.kernels)})")


def with_config(program: Program, kernel_name: str, config: KernelConfig) -> Program:
    """The program with one kernel's configuration replaced."""
    steps = tuple(s.model_copy(update={"config": config}) if isinstance(s, ir.Kernel) and s.name == kernel_name else s
                  for s in program.steps)
    return program.model_copy(update={"steps": steps})


def _precisions(problem_info: Problem | dict | None) -> tuple[str, ...]:
    """What a problem allows: all precisions with no problem, f32 and tf32 where it names none."""
    if problem_info is None:
        return ALL_PRECISIONS
    if isinstance(problem_info, dict):
        allowed = problem_info.get("allowed_precisions")
    else:
        allowed = problem_info.allowed_precisions
    return tuple(allowed) if allowed else STRICT_PRECISIONS


def epilogue_class(kernel: ir.Kernel) -> str:
    """What the epilogue costs in memory traffic: none < elementwise < bias < residual < reduction."""
    from dsl_compiler.walk import epilogue_nodes, epilogue_refs

    rank = {"none": 0, "elementwise": 1, "bias": 2, "residual": 3, "reduction": 4}
    nodes = list(epilogue_nodes(kernel))
    kinds = {"none"} | {"residual" if ref.index == "full" else "bias" for ref in epilogue_refs(kernel)}
    if any(isinstance(node, ir.Reduce) for node in nodes):
        kinds.add("reduction")
    if any(isinstance(node, (ir.Unary, ir.Binary, ir.ParamCall, ir.Const)) for node in nodes):
        kinds.add("elementwise")
    found = max(kinds, key=rank.__getitem__)
    if len(kernel.stores) > 1 and rank[found] < rank["residual"]:
        found = "residual"  # an extra full store moves as much as a residual read
    return found


def shape_key(program: Program, kernel_name: str) -> str:
    """The record key of a kernel: op (with layout and conv geometry), GEMM dims, dtype, epilogue class."""
    from dsl_compiler import shapes

    kernel = kernel_of(program, kernel_name)
    types = shapes.infer(program)
    dims = shapes.gemm_dims(program, kernel, types)
    op = kernel.op
    if isinstance(op, ir.ConvOp):
        desc = (f"{op.fn}_s{'x'.join(map(str, op.stride))}_p{'x'.join(map(str, op.padding))}"
                f"_d{'x'.join(map(str, op.dilation))}_g{op.groups}")
        if isinstance(op, ir.ConvTransposeOp):
            desc += f"_o{'x'.join(map(str, op.output_padding))}"
        dtype = types[op.x.name].dtype
    elif isinstance(op, ir.GemmOp):
        desc = f"gemm_{'t' if op.a.transpose else 'n'}{'t' if op.b.transpose else 'n'}"
        dtype = types[op.a.name].dtype
    else:
        desc, dtype = op.kind, types[op.a.name].dtype
    return f"{desc}|{dims.l}x{dims.m}x{dims.n}x{dims.k}|{dtype}|{epilogue_class(kernel)}"


def kernel_signature(program: Program, kernel_name: str, types: dict | None = None) -> str:
    """What a kernel's configurations are ranked on: its text with every tensor it names replaced by the order
    in which it names them, and those tensors' types (dtype, shape, layout). Two kernels with one signature
    (an LSTM's recurrent GEMM at every step, a ResNet's repeated blocks) have the same legal configurations in
    the same order, so a plan ranks them once."""
    import re

    from dsl_compiler import shapes
    from dsl_compiler.printer import format_kernel
    from dsl_compiler.walk import epilogue_refs

    kernel = kernel_of(program, kernel_name)
    types = types if types is not None else shapes.infer(program)
    names: list[str] = []
    for name in [kernel.name, *(o.name for o in kernel.operands), *(r.name for r in epilogue_refs(kernel)),
                 *(s.name for s in kernel.stores), *(let.name for let in kernel.lets)]:
        if name not in names:
            names.append(name)
    alias = {n: f"%{i}" for i, n in enumerate(names)}
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")\b")
    text = pattern.sub(lambda m: alias[m.group(1)], format_kernel(kernel))
    return text + "\n" + "\n".join(f"{alias[n]}: {types[n]!r}" for n in names if n in types)


# ---------------------------------------------------------------------------------------------
# The per-shape record of best measured configurations


def default_record_path() -> Path:
    env = os.environ.get(RECORD_ENV)
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("mucutlass")) / "offline_record.json"


class ConfigRecord:
    """Best measured configuration per shape key, in a small JSON file. A corrupt or missing file
    reads as empty; writes are atomic (temp file + rename), so concurrent runs never see half a file."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else default_record_path()
        self.entries: dict[str, dict] = {}
        try:
            data = json.loads(self.path.read_text())
            if isinstance(data, dict):
                self.entries = {k: v for k, v in data.get("entries", {}).items() if isinstance(v, dict)}
        except (OSError, ValueError):
            self.entries = {}

    def best(self, key: str) -> tuple[KernelConfig, float] | None:
        entry = self.entries.get(key)
        if not entry:
            return None
        try:
            return KernelConfig.model_validate(entry["config"]), float(entry["t_us"])
        except (KeyError, TypeError, ValueError):
            return None

    def update(self, key: str, config: KernelConfig, t_us: float, gpu: str = "") -> bool:
        """Keep ``config`` when it beats the recorded time (or none is recorded); True when kept."""
        if not (t_us > 0 and math.isfinite(t_us)):
            return False
        current = self.best(key)
        if current is not None and current[1] <= t_us:
            return False
        self.entries[key] = {"config": config.model_dump(mode="json"), "t_us": t_us, "gpu": gpu,
                             "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.save()
        return True

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".record-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"version": 1, "entries": self.entries}, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)


# ---------------------------------------------------------------------------------------------
# Proposals


def _candidates(kernel: ir.Kernel, dims, math_mode: str | None, operand_bytes: int, sm_count: int) -> list[KernelConfig]:
    is_conv = isinstance(kernel.op, ir.ConvOp)
    if math_mode in MATH_MODES and MATH_MODES[math_mode].split:
        return _split_gemm_candidates(math_mode)
    tk = 32 if operand_bytes == 4 else 64
    if is_conv and kernel.op.groups > 1:
        return _grouped_conv_candidates(kernel.op.groups, dims, math_mode, tk)
    schedules = ("auto",) if is_conv else ("cooperative", "pingpong")
    out: list[KernelConfig] = []
    for tm, tn in TILES_MN:
        for schedule in schedules:
            if schedule == "cooperative" and tm < 128:
                continue
            for cluster in CLUSTERS:
                out.append(KernelConfig(math=math_mode, tile=(tm, tn, tk), cluster=cluster, schedule=schedule))
    # split-K / stream-K: large K, and too few output tiles to fill the GPU
    tiles = dims.l * math.ceil(dims.m / 128) * math.ceil(dims.n / 128)
    if not is_conv and dims.k >= 1024 and tiles < sm_count:
        for tm, tn in ((128, 64), (128, 128)):
            for split in SPLITS:
                if dims.k // split >= 4 * tk:
                    out.append(KernelConfig(math=math_mode, tile=(tm, tn, tk), schedule="cooperative",
                                            decomposition="split_k", split_k=split))
            out.append(KernelConfig(math=math_mode, tile=(tm, tn, tk), schedule="cooperative", decomposition="stream_k"))
    return out


def _split_gemm_candidates(math_mode: str) -> list[KernelConfig]:
    """A tf32x3 GEMM runs a CUTLASS 2.x kernel (no clusters or schedules): the compiler's tile, then the tiles
    it builds (``dsl_compiler.cutlass.split_gemm.split_plan``), each at K 32 and 16."""
    from dsl_compiler.cutlass.split_gemm import SPLIT_TILE_K, split_plan

    out = [KernelConfig(math=math_mode)]
    for tm, tn in ((128, 128), (256, 128), (128, 256), (128, 64), (64, 128), (64, 64)):
        for tk in reversed(SPLIT_TILE_K):
            if "error" not in split_plan((tm, tn, tk), "auto"):
                out.append(KernelConfig(math=math_mode, tile=(tm, tn, tk)))
    return out


def _grouped_conv_candidates(groups: int, dims, math_mode: str | None, tk: int) -> list[KernelConfig]:
    """Grouped and depthwise convs run CUTLASS 2.x kernels (no clusters or schedules). The compiler's own
    choice comes first (one group per CTA where it fits); then tiles whose N is a multiple or a divisor of
    the output channels per group, so no CTA computes a group's tile with another group's zeros."""
    out = [KernelConfig(math=math_mode)]
    per_group = dims.n // groups
    if per_group <= 1:  # depthwise: the direct kernel picks its own tile
        return out
    for tm in (128, 64):
        for tn in (32, 64, 128):
            if per_group % tn == 0 or tn % per_group == 0:
                out.append(KernelConfig(math=math_mode, tile=(tm, tn, tk)))
    return out


def rank_configs(program: Program, kernel_name: str, problem_info: Problem | dict | None = None, gpu: Any = "h200",
                 record: ConfigRecord | None = None, limit: int = 8) -> list[RankedConfig]:
    """Legal configurations of one kernel, best estimate first (a recorded best measured config
    for the same shape goes first). Deterministic."""
    from dsl_compiler import shapes
    from dsl_compiler.checks import check
    from sol_models.estimate import estimate_program
    from sol_models.hardware import get_gpu

    gpu = get_gpu(gpu) if isinstance(gpu, str) else gpu
    kernel = kernel_of(program, kernel_name)
    types = shapes.infer(program)
    dims = shapes.gemm_dims(program, kernel, types)
    a = kernel.op.x if isinstance(kernel.op, ir.ConvOp) else kernel.op.a
    storage = types[a.name].dtype
    allowed = _precisions(problem_info)
    math_mode = kernel.config.math
    if math_mode is None or not admitted(math_mode, allowed):  # the problem's precisions bound the search
        math_mode = default_math(storage, allowed)
    operand_bytes = ir.ELEMENT_BYTES[storage]
    index = [k.name for k in program.kernels].index(kernel_name)

    def legal(config: KernelConfig) -> bool:
        diags = check(with_config(program, kernel_name, config))
        return not any(d.severity == "error" and kernel_name in d.message for d in diags)

    def estimate(config: KernelConfig) -> float:
        est = estimate_program(with_config(program, kernel_name, config), gpu)
        t = est.kernels[index].t_us
        return t if est.kernels[index].feasible else math.inf

    ranked: list[tuple[float, int, KernelConfig]] = []
    for order, config in enumerate(_candidates(kernel, dims, math_mode, operand_bytes, gpu.sm_count)):
        if not legal(config):
            continue
        t = estimate(config)
        if math.isfinite(t):
            ranked.append((t, order, config))
    ranked.sort(key=lambda r: (round(r[0], 6), r[1]))
    results = [RankedConfig(config=c, t_est_us=t) for t, _, c in ranked]
    # raster / swizzle variants of the best, for grids of several waves (L2 reuse across tiles)
    if results and results[0].config.tile is not None:
        best = results[0]
        tm, tn, _ = best.config.tile
        grid = dims.l * math.ceil(dims.m / tm) * math.ceil(dims.n / tn)
        if grid >= 2 * gpu.sm_count:
            variants = []
            for raster, swizzle in (("along_n", 2), ("along_m", 2), ("along_n", 4)):
                config = best.config.model_copy(update={"raster": raster, "swizzle": swizzle})
                if legal(config):
                    variants.append(RankedConfig(config=config, t_est_us=best.t_est_us * SWIZZLE_VARIANT_PENALTY))
            results = sorted(results + variants, key=lambda r: r.t_est_us)
    if record is not None:
        try:
            recorded = record.best(shape_key(program, kernel_name))
        except Exception:  # an unreadable program shape: no record applies
            recorded = None
        if recorded is not None and legal(recorded[0]):
            config, t_us = recorded
            results = [r for r in results if r.config != config]
            results.insert(0, RankedConfig(config=config, t_est_us=estimate(config), source="record", t_record_us=t_us))
    # a configuration listed twice (a swizzle variant equal to a candidate) keeps its first place
    seen: set[KernelConfig] = set()
    unique = []
    for r in results:
        if r.config not in seen:
            seen.add(r.config)
            unique.append(r)
    return unique[:limit]


def propose_configs(program: Program, kernel_name: str, problem_info: Problem | dict | None = None, gpu: Any = "h200",
                    record: ConfigRecord | None = None, limit: int = 8) -> list[KernelConfig]:
    """The contract form of ``rank_configs``: configurations only, best first."""
    return [r.config for r in rank_configs(program, kernel_name, problem_info, gpu, record, limit)]


def describe(config: KernelConfig) -> str:
    """A short human label: "tile 128x256x32 cooperative 2x1"."""
    tile = "x".join(map(str, config.tile)) if config.tile else "auto"
    parts = [f"tile {tile}", config.schedule if config.schedule != "auto" else "", f"{config.cluster[0]}x{config.cluster[1]}"]
    if config.decomposition == "split_k":
        parts.append(f"split-K {config.split_k}")
    elif config.decomposition == "stream_k":
        parts.append("stream-K")
    if config.raster != "auto" or config.swizzle != 1:
        parts.append(f"raster {config.raster} swizzle {config.swizzle}")
    if config.math:
        parts.append(config.math)
    return " ".join(p for p in parts if p)


def with_row_configs(program: Program, gpu: str = "h200") -> Program:
    """The program with each row kernel's knobs (vector, rows_per_block, passes, split) set to those of the lowest
    estimate (``estimate.best_row_config``; row kernels are memory-bound: the estimate is bytes / bandwidth reached)."""
    from sol_models.estimate import best_row_config
    from sol_models.hardware import get_gpu

    spec = get_gpu(gpu)
    steps = tuple(s.model_copy(update={"config": best_row_config(program, s, spec)}) if isinstance(s, ir.RowKernel) else s
                  for s in program.steps)
    return program.model_copy(update={"steps": steps})
