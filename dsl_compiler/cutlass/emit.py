"""μCUTLASS IR -> CUTLASS 3.x C++ for sm_90a, one kernel per translation unit.

Each kernel becomes one `.cu` file with a deterministic namespace (a hash of its source), a
CollectiveBuilder mainloop (GEMM or implicit-GEMM convolution) and an ``Sm90EVT`` epilogue tree
built from the kernel's store expressions, and a small C ABI:

    int mucutlass_workspace_size(void* const* ptrs, const int64_t* ints, const float* scalars,
                                 size_t* bytes, char* msg, int msg_len)
    int mucutlass_run(void* const* ptrs, const int64_t* ints, const float* scalars,
                      void* workspace, size_t workspace_bytes, void* stream, char* msg, int msg_len)

``ptrs`` are device pointers in the order of ``KernelAbi.tensors``; ``ints`` are sizes and strides
in the order of ``KernelAbi.ints``; ``scalars`` are the epilogue's literal constants (kept out of
the source so that a kernel differing only in constants reuses the cached build). A non-zero
return means failure, with CUTLASS's own status text in ``msg``.

Element-wise epilogue math is fused into one ``Sm90Compute`` node per store whose functor is
generated from the expression; its inputs are the EVT leaves (accumulator, row / column / scalar
broadcasts, the source tensor C, extra auxiliary loads).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dsl_compiler import shapes
from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.cutlass.common import (
    AbiTensor,
    CONV_INTS,
    CPP_ELEMENT,
    ELEMENT_BITS,
    EmitError,
    EmittedKernel,
    GEMM_INCLUDES,
    KernelAbi,
    MU_FAIL,
    MU_SM_COUNT,
    PREAMBLE,
    acc_element,
    alignment,
    cute_shape,
    math_for,
    namespace_for,
    require_operands,
    schedules,
    stage_count,
    unsupported,
)
from dsl_compiler.cutlass.epilogue import FUSION, EpilogueBuilder, compute_functor, ptr
from dsl_compiler.ops import CPP_HELPERS
from dsl_compiler.precision import MATH_MODES
from dsl_compiler.ir import (
    ConvOp,
    ConvTransposeOp,
    GemmOp,
    GroupedGemmOp,
    Kernel,
    Program,
    Reduce,
    Store,
)


# ---------------------------------------------------------------------------------------------
# Type helpers


def tensor_dtypes(program: Program) -> dict[str, str]:
    """Storage dtype of every named tensor: declarations, kernel stores, torch-step outputs."""
    try:  # the shape pass knows torch-step outputs exactly
        return {name: t.dtype for name, t in shapes.infer(program).items()}
    except Exception:  # noqa: BLE001 -- a program the shape pass rejects: the emitter still names what it cannot build
        pass
    dtypes = {d.name: d.dtype for d in program.decls}
    for step in program.steps:
        if not hasattr(step, "outputs"):  # a kernel or a row kernel
            for s in step.stores:
                dtypes[s.name] = s.dtype
        else:
            first = next((a.name for a in step.args if getattr(a, "kind", "") == "tensor"), None)
            for o in step.outputs:
                dtypes[o] = dtypes.get(first, "f32")
    return dtypes


def _default_tile(kernel: Kernel, dtype: str, conv: bool) -> tuple[int, int, int]:
    if kernel.config.tile:
        return kernel.config.tile
    k = 32 if dtype == "f32" else 64
    if conv:
        return (128, 128, k)
    return (128, 256, k) if kernel.config.schedule != "pingpong" else (128, 128, k)


# ---------------------------------------------------------------------------------------------
# Epilogue tree


@dataclass
class _Epilogue:
    callbacks_type: str  # the FusionCallbacks (Sm90EVT tree) type
    args_expr: str  # C++ initializer of its Arguments
    functors: str  # generated functor definitions
    tensors: list[AbiTensor]  # ABI tensors of the epilogue (src, aux, broadcasts, extra stores)
    d_dtype: str
    src_dtype: str | None
    src_index: int | None  # the source tensor C's place in ``ptrs``
    scalars: list[float]


def _check_stores(kernel: Kernel, stores: list[Store], conv: bool) -> Store:
    """What the sm_90 GEMM and conv epilogues take; returns the first full store (D)."""
    full = [s for s in stores if not isinstance(s.expr, Reduce)]
    if not full:
        raise unsupported(kernel, "every store is a reduction; the kernel needs one full output",
                           "add a full store, e.g. `store y: f32 = acc`", span=kernel.span)
    for s in stores:
        if isinstance(s.expr, Reduce) and isinstance(s.expr.arg, Reduce):
            raise unsupported(kernel, "nested reductions", "reduce once, at the top of a store", span=s.span)
    if conv and len(stores) > 1:
        raise unsupported(kernel, "several stores in a convolution epilogue",
                           "keep one store per conv kernel; compute the others in a later step", span=stores[1].span)
    if conv and any(isinstance(s.expr, Reduce) for s in stores):
        raise unsupported(kernel, "a reduction in a convolution epilogue",
                           "store the conv output and reduce it in a torch step", span=kernel.span)
    if any(isinstance(s.expr, Reduce) for s in stores) and kernel.config.decomposition != "data_parallel":
        raise unsupported(kernel, "a row/column reduction together with split-K or stream-K",
                           "use decomposition = data_parallel for kernels with reductions", span=kernel.span)
    return full[0]


class _Sm90Leaves:
    """The EVT leaves of the sm_90 GEMM and conv epilogues. ``transposed``: the kernel computes D^T (CUTLASS swaps A
    and B for a tf32 GEMM whose B is N-major), so the tree indexes output rows by N and columns by M. Strides the
    leaves read at run time extend ``ints``, the ABI's."""

    def __init__(self, conv: bool, transposed: bool, ints: list[str]):
        self.conv = conv
        self.transposed = transposed
        self.ints = ints
        self.src: tuple[str, int] | None = None  # (name, pointer index) of the source tensor C
        # A full-size tensor [M, N] with leading dimension ld: element (m, n) at m * ld + n.
        self.full_stride_t = "cute::Stride<cute::_1, int64_t, int64_t>" if transposed else "cute::Stride<int64_t, cute::_1, int64_t>"

    def full_stride(self, ld: int, bs: int) -> str:
        if self.transposed:
            return f"{{cute::_1{{}}, I({ld}), I({bs})}}"
        return f"{{I({ld}), cute::_1{{}}, I({bs})}}"

    def node(self, epi: EpilogueBuilder, name: str, index: str, dt: str, span) -> tuple[str, str]:
        kernel, el, ints = epi.kernel, CPP_ELEMENT[dt], self.ints
        if index == "full" and self.src is None:
            i, node = epi.source(name, dt)
            self.src = (name, i)
            return node
        if index == "full":
            if self.conv:
                raise unsupported(kernel, f"a second full-size input '{name}' in a convolution epilogue",
                                   "a conv epilogue reads at most one full tensor; add the rest in a later step", span=span)
            i = epi.add_tensor(AbiTensor(name, "aux", dt))
            ints.extend([f"p{i}.ld", f"p{i}.bs"])
            return (f"{FUSION}::Sm90AuxLoad<0, TileShape, {el}, {self.full_stride_t}, void, void, {128 // ELEMENT_BITS[dt]}>",
                    f"{{{ptr(i, dt)}, {el}(0), {self.full_stride(len(ints) - 2, len(ints) - 1)}}}")
        if index == "col" and self.conv:  # one value per output channel: CUTLASS's row broadcast
            return epi.channel_vector(name, dt)
        if index in ("col", "row"):
            # b[col]: one value per output column (length N), CUTLASS's row broadcast; b[row]: one per output
            # row (length M), its column broadcast. A transposed tree swaps the two.
            if self.conv:
                raise unsupported(kernel, f"a per-row vector '{name}[row]' in a convolution epilogue",
                                   "conv rows are output pixels; use a per-channel vector `b[col]` or a torch step", span=span)
            i = epi.add_tensor(AbiTensor(name, index, dt))
            ints.append(f"p{i}.bs")
            if (index == "col") != self.transposed:
                return (f"{FUSION}::Sm90RowBroadcast<0, TileShape, {el}, float, cute::Stride<cute::_0, cute::_1, int64_t>, 1>",
                        f"{{{ptr(i, dt)}, {el}(0), {{cute::_0{{}}, cute::_1{{}}, I({len(ints) - 1})}}}}")
            return (f"{FUSION}::Sm90ColBroadcast<0, TileShape, {el}, float, cute::Stride<cute::_1, cute::_0, int64_t>, 1>",
                    f"{{{ptr(i, dt)}, {el}(0), {{cute::_1{{}}, cute::_0{{}}, I({len(ints) - 1})}}}}")
        return epi.scalar(name, dt)


def _reduction_store(epi: EpilogueBuilder, leaves: _Sm90Leaves, functor: str, s: Store) -> tuple[str, str]:
    """A row_* / col_* store: a reduction node over the compute node of its argument."""
    el, ints = CPP_ELEMENT[s.dtype], leaves.ints
    sub_t, sub_a = epi.compute(s.expr.arg, "float", functor, s.span)
    i = epi.add_tensor(AbiTensor(s.name, "reduce", s.dtype, reduce_fn=s.expr.fn))
    ints.append(f"p{i}.bs")
    how = s.expr.fn.split("_")[1]
    op = {"sum": "cutlass::plus", "max": "cutlass::maximum", "min": "cutlass::minimum"}[how]
    ident = {"sum": "0.f", "max": "-INFINITY", "min": "INFINITY"}[how]
    if s.expr.fn.startswith("row_") != leaves.transposed:  # reduce over N -> [M]: CUTLASS's column reduction
        red = (f"{FUSION}::Sm90ColReduction<{op}, {op}, {op}, 0, TileShape, {el}, float, RN, "
               f"cute::Stride<cute::_1, cute::_0, int64_t>, {128 // ELEMENT_BITS[s.dtype]}>")
        stride = f"{{cute::_1{{}}, cute::_0{{}}, I({len(ints) - 1})}}"
    else:  # reduce over M -> [N]: CUTLASS's row reduction
        red = (f"{FUSION}::Sm90RowReduction<{op}, {op}, {op}, 0, TileShape, {el}, float, RN, "
               f"cute::Stride<cute::_0, cute::_1, int64_t>, {128 // ELEMENT_BITS[s.dtype]}>")
        stride = f"{{cute::_0{{}}, cute::_1{{}}, I({len(ints) - 1})}}"
    return f"{FUSION}::Sm90EVT<{red}, {sub_t}>", f"{{{sub_a}, {{ptrs[{i}], {ident}, {stride}}}}}"


def _aux_store(epi: EpilogueBuilder, leaves: _Sm90Leaves, functor: str, s: Store) -> tuple[str, str]:
    """A further full store: an auxiliary store node over the compute node of its expression."""
    el, ints = CPP_ELEMENT[s.dtype], leaves.ints
    sub_t, sub_a = epi.compute(s.expr, "float", functor, s.span)
    i = epi.add_tensor(AbiTensor(s.name, "store", s.dtype))
    ints.extend([f"p{i}.ld", f"p{i}.bs"])
    store = (f"{FUSION}::Sm90AuxStore<0, TileShape, {el}, RN, {leaves.full_stride_t}, "
             f"void, void, {128 // ELEMENT_BITS[s.dtype]}>")
    return (f"{FUSION}::Sm90EVT<{store}, {sub_t}>",
            f"{{{sub_a}, {{{ptr(i, s.dtype, const=False)}, {leaves.full_stride(len(ints) - 2, len(ints) - 1)}}}}}")


def _build_epilogue(kernel: Kernel, dtypes: dict[str, str], conv: bool, first_ptr: int, ints: list[str],
                    transposed: bool = False) -> _Epilogue:
    """The kernel's stores as one Sm90EVT tree: D's compute node, and with further stores a root that returns D's
    value over it and their reduction or auxiliary store nodes."""
    leaves = _Sm90Leaves(conv, transposed, ints)
    epi = EpilogueBuilder(kernel, dtypes, first_ptr, leaves)
    main = _check_stores(kernel, epi.stores, conv)
    d_el = CPP_ELEMENT[main.dtype]
    main_t, main_a = epi.compute(main.expr, d_el if len(epi.stores) == 1 else "float", "Fused0", main.span)
    extras = [(_reduction_store if isinstance(s.expr, Reduce) else _aux_store)(epi, leaves, f"Fused{j + 1}", s)
              for j, s in enumerate(st for st in epi.stores if st is not main)]
    if extras:
        epi.functors.append(compute_functor("TakeFirst", 1 + len(extras), None, 0))
        root = f"{FUSION}::Sm90Compute<TakeFirst, {d_el}, float, RN>"
        cb_t = f"{FUSION}::Sm90EVT<{root}, {main_t}, " + ", ".join(e[0] for e in extras) + ">"
        cb_a = "{" + main_a + ", " + ", ".join(e[1] for e in extras) + ", {}}"
    else:
        cb_t, cb_a = main_t, main_a
    src_dtype, src_index = (dtypes[leaves.src[0]], leaves.src[1]) if leaves.src else (None, None)
    return _Epilogue(cb_t, cb_a, "".join(epi.functors), epi.tensors, main.dtype, src_dtype, src_index, epi.scalars)

_CONV_INCLUDES = r"""#include "cutlass/conv/convolution.h"
#include "cutlass/conv/convnd_problem_shape.hpp"
#include "cutlass/conv/dispatch_policy.hpp"
#include "cutlass/conv/collective/collective_builder.hpp"
#include "cutlass/conv/device/conv_universal_adapter.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"
"""

_ABI = "\n" + MU_FAIL + r"""
static int mu_make_args(void* const* ptrs, const int64_t* ints, const float* scalars, typename Op::Arguments& args) {
  auto I = [&](int i) { return ints[i]; };
  auto S = [&](int i) { return scalars[i]; };
  (void)I; (void)S;
@@ARGS@@
  return 0;
}
}  // namespace @@NS@@

extern "C" int mucutlass_workspace_size(void* const* ptrs, const int64_t* ints, const float* scalars,
                                         size_t* bytes, char* msg, int msg_len) {
  using namespace @@NS@@;
  typename Op::Arguments args;
  mu_make_args(ptrs, ints, scalars, args);
  *bytes = @@WORKSPACE_BYTES@@;
  return 0;
}

extern "C" int mucutlass_run(void* const* ptrs, const int64_t* ints, const float* scalars, void* workspace,
                             size_t workspace_bytes, void* stream, char* msg, int msg_len) {
  using namespace @@NS@@;
  typename Op::Arguments args;
  mu_make_args(ptrs, ints, scalars, args);
  Op op;
@@CHECK_AND_RUN@@  if (st != cutlass::Status::kSuccess) return mu_fail(msg, msg_len, "run", cutlass::cutlassGetStatusString(st));
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return mu_fail(msg, msg_len, "launch", cudaGetErrorString(err));
  return 0;
}
"""


# mucutlass_run's checks, set-up and launch (the kernel's own workspace size, the usual launch).
_ABI_CHECK_AND_INIT = """  cutlass::Status st = op.can_implement(args);
  if (st != cutlass::Status::kSuccess) return mu_fail(msg, msg_len, "can_implement", cutlass::cutlassGetStatusString(st));
  if (Op::get_workspace_size(args) > workspace_bytes) return mu_fail(msg, msg_len, "workspace", "workspace smaller than mucutlass_workspace_size");
  st = op.initialize(args, workspace, static_cast<cudaStream_t>(stream));
  if (st != cutlass::Status::kSuccess) return mu_fail(msg, msg_len, "initialize", cutlass::cutlassGetStatusString(st));
  st = op.run(static_cast<cudaStream_t>(stream));
"""

# CUTLASS's kernel swaps M and N for its mainloop and tile scheduler when it swaps A and B, but builds the
# epilogue's parameters (TMA descriptors, bounds) from the unswapped problem: rebuild them for D^T [N, M].
_ABI_CHECK_AND_INIT_SWAPPED = """  auto swapped = mu_swapped(args.problem_shape);
  if (!CollectiveMainloop::can_implement(args.problem_shape, args.mainloop))
    return mu_fail(msg, msg_len, "can_implement", "the mainloop cannot run this problem (alignment or sizes)");
  if (!CollectiveEpilogue::can_implement(swapped, args.epilogue))
    return mu_fail(msg, msg_len, "can_implement", "the epilogue cannot run this problem (alignment or sizes)");
  if (mu_workspace_bytes(args) > workspace_bytes) return mu_fail(msg, msg_len, "workspace", "workspace smaller than mucutlass_workspace_size");
  cutlass::Status st = op.initialize(args, workspace, static_cast<cudaStream_t>(stream));
  if (st != cutlass::Status::kSuccess) return mu_fail(msg, msg_len, "initialize", cutlass::cutlassGetStatusString(st));
  // The epilogue's workspace comes first (reductions keep partials and tile counters there): set it up for D^T.
  st = CollectiveEpilogue::initialize_workspace(swapped, args.epilogue, workspace, static_cast<cudaStream_t>(stream), nullptr);
  if (st != cutlass::Status::kSuccess) return mu_fail(msg, msg_len, "initialize", cutlass::cutlassGetStatusString(st));
  typename GemmKernel::Params params = op.params();
  params.epilogue = CollectiveEpilogue::to_underlying_arguments(swapped, args.epilogue, workspace);
  st = Op::run(params, static_cast<cudaStream_t>(stream));
"""

# Swapped kernels size the workspace for the epilogue of D^T too (reductions there are data-parallel only,
# so no scheduler workspace follows it).
_SWAPPED_HELPERS = """
template <class Shape> static Shape mu_swapped(Shape shape) {
  Shape out = shape;
  cute::get<0>(out) = cute::get<1>(shape);
  cute::get<1>(out) = cute::get<0>(shape);
  return out;
}
static size_t mu_workspace_bytes(typename Op::Arguments const& args) {
  size_t epilogue = CollectiveEpilogue::get_workspace_size(mu_swapped(args.problem_shape), args.epilogue);
  size_t kernel = Op::get_workspace_size(args);
  return epilogue > kernel ? epilogue : kernel;
}
"""


def emit_kernel(program: Program, kernel: Kernel, dtypes: dict[str, str] | None = None) -> EmittedKernel:
    """C++ for one kernel, or raise EmitError with an `unsupported` Diagnostic."""
    dtypes = dtypes or tensor_dtypes(program)
    op = kernel.op
    sliced = {s.name: s.channels for s in kernel.stores if s.channels is not None}
    if sliced and (isinstance(op, GroupedGemmOp) or isinstance(op, ConvOp) and op.groups != 1):
        s = next(s for s in kernel.stores if s.channels is not None)
        raise unsupported(kernel, f"a slice store ({s.name}[{s.channels[0]}:{s.channels[1]}]) in a "
                          f"{'grouped GEMM' if isinstance(op, GroupedGemmOp) else 'grouped or depthwise conv'}",
                          "store the whole output and concatenate it in a torch step (cat)", span=s.span)
    if isinstance(op, GroupedGemmOp):
        from dsl_compiler.cutlass.grouped_gemm import emit_grouped_gemm  # imports this module's helpers

        return emit_grouped_gemm(program, kernel, op, dtypes)
    emitted = _emit_conv(program, kernel, op, dtypes) if isinstance(op, ConvOp) else _emit_gemm(program, kernel, op, dtypes)
    if sliced:
        totals = shapes.slice_totals(program)
        tensors = tuple(dataclasses.replace(t, channels=(sliced[t.name][0], totals[t.name]))
                        if t.role in ("d", "store") and t.name in sliced else t for t in emitted.abi.tensors)
        emitted.abi = dataclasses.replace(emitted.abi, tensors=tensors)
    return emitted


def _collective_epilogue(epi: _Epilogue, el_acc: str, layout: str, schedule: str) -> str:
    """The epilogue's CollectiveBuilder: C (void without a source tensor) and D in ``layout``, 16-byte accesses."""
    el_c = CPP_ELEMENT[epi.src_dtype] if epi.src_dtype else "void"
    align_c = 128 // ELEMENT_BITS[epi.src_dtype or epi.d_dtype]
    return f"""using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, {el_acc}, float,
    {el_c}, {layout}, {align_c}, {CPP_ELEMENT[epi.d_dtype]}, {layout}, {128 // ELEMENT_BITS[epi.d_dtype]},
    {schedule}, EpilogueCallbacks>::CollectiveOp;"""


def _finish(kernel: Kernel, body: str, args: str, abi: KernelAbi, knobs: dict[str, str], conv: bool,
            swapped: bool = False) -> EmittedKernel:
    if swapped:
        check_and_run, workspace_bytes = _ABI_CHECK_AND_INIT_SWAPPED, "mu_workspace_bytes(args)"
        body += _SWAPPED_HELPERS
    else:
        check_and_run, workspace_bytes = _ABI_CHECK_AND_INIT, "Op::get_workspace_size(args)"
    abi_text = _ABI.replace("@@CHECK_AND_RUN@@", check_and_run).replace("@@WORKSPACE_BYTES@@", workspace_bytes)
    core = body + abi_text.replace("@@ARGS@@", args)
    ns = namespace_for(core)
    source = PREAMBLE + (_CONV_INCLUDES if conv else GEMM_INCLUDES) + f"\nnamespace {ns} {{\nusing namespace cute;\n" + core.replace("@@NS@@", ns)
    return EmittedKernel(kernel.name, ns, source, abi, knobs)


def _gemm_tile(kernel: Kernel, op: GemmOp, a_dt: str) -> tuple[tuple[int, int, int], bool]:
    """The CTA tile, and whether CUTLASS swaps A and B (the kernel then computes D^T and the tile is its)."""
    cfg = kernel.config
    tile = _default_tile(kernel, a_dt, conv=False)
    # tf32 wgmma reads K-major shared memory only. CUTLASS's register-sourced mainloop covers the other
    # layouts: A [K, M] goes through registers; B [K, N] is transposed in shared memory when A is M-major
    # too, and otherwise A and B are swapped: the kernel computes D^T, so the epilogue works transposed.
    a_mn, b_mn = op.a.transpose, not op.b.transpose
    swap = a_dt == "f32" and b_mn and not a_mn
    if a_dt == "f32" and (a_mn or b_mn):
        which = ", ".join(x for x, bad in ((f"{op.a.name}^T", a_mn), (op.b.name, b_mn)) if bad)
        if cfg.stages != "auto":
            raise unsupported(kernel, f"stages = {cfg.stages} with a tf32 operand that is not K-major ({which})",
                               "the register-sourced mainloop sizes its stages itself: use stages = auto",
                               span=cfg.span_of("stages") or op.span, found=f"stages = {cfg.stages}")
        if a_mn and b_mn and tile[2] * 4 != 128:
            raise unsupported(kernel, f"tile K = {tile[2]} with both tf32 operands M/N-major",
                               "B is transposed in shared memory 128 bytes at a time: use tile K = 32",
                               found=f"tile = {'x'.join(map(str, tile))}")
        if swap:
            tile = (tile[1], tile[0], tile[2])
    return tile, swap


def _gemm_arguments(kernel: Kernel, op: GemmOp, epi: _Epilogue, a_dt: str, b_dt: str, ints: list[str],
                    swap: bool) -> tuple[str, list[tuple[str, int]]]:
    """``mu_make_args``' body, and the run-time knobs it reads after the sizes in ``ints`` (which it extends)."""
    cfg = kernel.config
    stride_a = "cute::make_stride(cute::_1{}, I(4), I(5))" if op.a.transpose else "cute::make_stride(I(4), cute::_1{}, I(5))"
    stride_b = "cute::make_stride(I(6), cute::_1{}, I(7))" if op.b.transpose else "cute::make_stride(cute::_1{}, I(6), I(7))"
    # cutlass::gemm::kernel::detail::RasterOrderOptions {Heuristic, AlongM, AlongN}
    raster = {"auto": 0, "along_m": 1, "along_n": 2}[cfg.raster]
    if swap and cfg.raster != "auto":
        raster = 3 - raster
    src_ptr = ptr(epi.src_index, epi.src_dtype) if epi.src_dtype else "nullptr"

    def out_stride(ld: int, bs: int) -> str:  # D and C [M, N], element (m, n) at m * ld + n
        return f"cute::make_stride(cute::_1{{}}, I({ld}), I({bs}))" if swap else f"cute::make_stride(I({ld}), cute::_1{{}}, I({bs}))"

    src_stride = out_stride(len(ints) - 2, len(ints) - 1) if epi.src_dtype else "{}"
    args = f"""  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {{int(I(0)), int(I(1)), int(I(2)), int(I(3))}};
  args.mainloop.ptr_A = {ptr(0, a_dt)};
  args.mainloop.dA = {stride_a};
  args.mainloop.ptr_B = {ptr(1, b_dt)};
  args.mainloop.dB = {stride_b};
  args.epilogue.thread = {epi.args_expr};
  args.epilogue.ptr_C = {src_ptr};
  args.epilogue.dC = {src_stride};
  args.epilogue.ptr_D = {ptr(2, epi.d_dtype, const=False)};
  args.epilogue.dD = {out_stride(8, 9)};
  args.hw_info.device_id = 0;
  cudaGetDevice(&args.hw_info.device_id);
  args.hw_info.sm_count = mu_sm_count();
  using RasterT = decltype(args.scheduler.raster_order);
  args.scheduler.raster_order = static_cast<RasterT>(I({len(ints)}));   // knob: raster
  args.scheduler.max_swizzle_size = int(I({len(ints) + 1}));  // knob: swizzle
"""
    # raster, swizzle and the split count are CUTLASS run-time arguments: values in the ABI, not the source
    knob_values = [("raster", raster), ("swizzle", int(cfg.swizzle))]
    if cfg.decomposition != "data_parallel":
        # cutlass::gemm::kernel::detail::DecompositionMode {Heuristic, DataParallel, SplitK, StreamK}
        knob_values += [("splits", int(cfg.split_k)), ("decomposition", 2 if cfg.decomposition == "split_k" else 3)]
        args += (f"  args.scheduler.splits = int(I({len(ints) + 2}));  // knob: split_k\n"
                 f"  using DecompT = decltype(args.scheduler.decomposition_mode);\n"
                 f"  args.scheduler.decomposition_mode = static_cast<DecompT>(I({len(ints) + 3}));\n")
    ints.extend(name for name, _ in knob_values)
    return args, knob_values


def _emit_gemm(program: Program, kernel: Kernel, op: GemmOp, dtypes: dict[str, str]) -> EmittedKernel:
    require_operands(kernel, (op.a, op.b), dtypes)
    a_dt, b_dt = dtypes[op.a.name], dtypes[op.b.name]
    if MATH_MODES[math_for(kernel, a_dt, b_dt)].split:  # no sm_90 collective splits its operands: a CUTLASS 2.x kernel
        from dsl_compiler.cutlass.split_gemm import emit_split_gemm

        return emit_split_gemm(program, kernel, op, dtypes)
    cfg = kernel.config
    tile, swap = _gemm_tile(kernel, op, a_dt)
    sched, k_sched, e_sched = schedules(kernel, tile)
    if cfg.decomposition != "data_parallel" and sched != "cooperative":
        raise unsupported(kernel, f"decomposition = {cfg.decomposition} with schedule = pingpong",
                           "split-K and stream-K run on the cooperative schedule: set schedule = cooperative", found=f"schedule = {sched}")
    ints = ["M", "N", "K", "L", "p0.ld", "p0.bs", "p1.ld", "p1.bs", "p2.ld", "p2.bs"]
    tensors = [AbiTensor(op.a.name, "a", a_dt), AbiTensor(op.b.name, "b", b_dt)]
    epi = _build_epilogue(kernel, dtypes, conv=False, first_ptr=3, ints=ints, transposed=swap)
    d_name = next(s.name for s in kernel.stores if not isinstance(s.expr, Reduce))
    tensors.append(AbiTensor(d_name, "d", epi.d_dtype))
    tensors.extend(epi.tensors)
    if epi.src_dtype:
        ints.extend([f"p{epi.src_index}.ld", f"p{epi.src_index}.bs"])
    # C++ layouts: A [M,K] row-major, a^T is A stored [K,M] (column-major); B [K,N] row-major is
    # N-contiguous (CUTLASS RowMajor B), b^T is B stored [N,K] (ColumnMajor, nn.Linear's weight).
    lay_a = "cutlass::layout::ColumnMajor" if op.a.transpose else "cutlass::layout::RowMajor"
    lay_b = "cutlass::layout::ColumnMajor" if op.b.transpose else "cutlass::layout::RowMajor"
    el_a, el_b = CPP_ELEMENT[a_dt], CPP_ELEMENT[b_dt]
    el_acc = acc_element(kernel)
    scheduler = "cutlass::gemm::StreamKScheduler" if cfg.decomposition != "data_parallel" else "void"
    # A swapped kernel runs on D^T [N, M]: its tile, cluster and raster are the program's with M and N exchanged.
    cluster = (cfg.cluster[1], cfg.cluster[0], cfg.cluster[2]) if swap else cfg.cluster
    lay_d = "cutlass::layout::ColumnMajor" if swap else "cutlass::layout::RowMajor"
    knobs = {
        "tile": f"TileShape = {cute_shape(tile)}",
        "cluster": f"ClusterShape = {cute_shape(cluster)}",
        "stages": f"StageCount: {cfg.stages}",
        "schedule": f"KernelSchedule = {k_sched}",
        "decomposition": f"TileScheduler = {scheduler}",
        "math": f"ElementA = {el_a}",
        "alignment": f"AlignmentA = {alignment(kernel, a_dt)}",
    }
    body = f"""{CPP_HELPERS}
constexpr cutlass::FloatRoundStyle RN = cutlass::FloatRoundStyle::round_to_nearest;
{epi.functors}using TileShape = {cute_shape(tile)};            // knob: tile
using ClusterShape = {cute_shape(cluster)};  // knob: cluster
using EpilogueCallbacks = {epi.callbacks_type};
{_collective_epilogue(epi, el_acc, lay_d, e_sched)}
using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    {el_a}, {lay_a}, {alignment(kernel, a_dt)}, {el_b}, {lay_b}, {alignment(kernel, b_dt)}, {el_acc},
    TileShape, ClusterShape, {stage_count(kernel, "cutlass::gemm::collective")},  // knob: stages
    {k_sched}>::CollectiveOp;                                                 // knob: schedule
using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
    CollectiveEpilogue, {scheduler}>;                                          // knob: decomposition
using Op = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

{MU_SM_COUNT}"""
    args, knob_values = _gemm_arguments(kernel, op, epi, a_dt, b_dt, ints, swap)
    abi = KernelAbi("gemm", tuple(tensors), tuple(ints), tuple(epi.scalars), knob_values=tuple(knob_values))
    return _finish(kernel, body, args, abi, knobs, conv=False, swapped=swap)


def _dgrad_limits(kernel: Kernel, op: ConvTransposeOp, x_dt: str) -> None:
    """What CUTLASS 4.2's sm_90 dgrad (a transposed conv as implicit GEMM) takes: its TMA im2col walks the
    input at unit stride, one group, and it reads the filter channel-major (the GEMM's N), which GMMA allows
    for 16-bit operands only."""
    if op.groups != 1:
        raise unsupported(kernel, f"a grouped transposed convolution (groups = {op.groups})",
                          "CUTLASS's sm_90 dgrad takes groups = 1: run it as a torch step "
                          f"(`torch y = {op.fn}(x, w, b, stride=..., groups={op.groups})`)", found=f"groups = {op.groups}")
    if any(st != 1 for st in op.stride) or any(op.output_padding):
        raise unsupported(kernel, f"a transposed convolution with stride {op.stride}, output_padding {op.output_padding}",
                          "sm_90 dgrad walks its input at unit stride: zero-insert first, "
                          f"`torch xu = zero_insert({op.x.name}, stride={op.stride}, output_padding={op.output_padding})`, "
                          f"then {op.fn}(xu, ...) with stride 1 and output_padding 0 (the same values)",
                          found=f"stride = {op.stride}")
    if x_dt == "f32":
        raise unsupported(kernel, "tf32 math for a transposed convolution",
                          "sm_90 dgrad reads the filter N-major, which GMMA's tf32 does not take: convert x and w "
                          "to bf16 or f16 (`channels_last(x, dtype=\"bf16\")`, a bf16 param) and set math = bf16",
                          found="f32 operands")


def _conv_shape_ints(nd: int) -> tuple[str, str, str, str, str]:
    """The ConvProblemShape's activation, filter, padding, stride and dilation as C++ initializers over the ABI's
    conv ints (CONV_INTS order, (d, h, w) with the unused leading dims left out)."""
    if nd == 1:
        act, flt, pad, strd, dil = "{int(I(0)), int(I(3)), int(I(4))}", "{int(I(5)), int(I(8)), int(I(4))}", "{int(I(11))}", "{int(I(14))}", "{int(I(17))}"
    elif nd == 2:
        act, flt = "{int(I(0)), int(I(2)), int(I(3)), int(I(4))}", "{int(I(5)), int(I(7)), int(I(8)), int(I(4))}"
        pad, strd, dil = "{int(I(10)), int(I(11))}", "{int(I(13)), int(I(14))}", "{int(I(16)), int(I(17))}"
    else:
        act, flt = "{int(I(0)), int(I(1)), int(I(2)), int(I(3)), int(I(4))}", "{int(I(5)), int(I(6)), int(I(7)), int(I(8)), int(I(4))}"
        pad, strd, dil = "{int(I(9)), int(I(10)), int(I(11))}", "{int(I(12)), int(I(13)), int(I(14))}", "{int(I(15)), int(I(16)), int(I(17))}"
    return act, flt, pad, strd, dil


def _emit_conv(program: Program, kernel: Kernel, op: ConvOp, dtypes: dict[str, str]) -> EmittedKernel:
    require_operands(kernel, (op.x, op.w), dtypes)
    transposed = isinstance(op, ConvTransposeOp)
    if transposed:
        _dgrad_limits(kernel, op, dtypes[op.x.name])
    if op.groups != 1:  # CUTLASS 4.2's sm_90 conv collectives take groups = 1: CUTLASS 2.x kernels instead
        from dsl_compiler.cutlass.grouped_conv import emit_grouped_conv

        return emit_grouped_conv(program, kernel, op, dtypes)
    for o, what in ((op.x, "input"), (op.w, "filter")):
        decl = program.decl(o.name)
        if decl is not None and decl.layout != "channels_last":
            raise unsupported(kernel, f"conv {what} '{o.name}' is contiguous (NCHW); CUTLASS's sm_90 conv reads channels-last (NHWC / KRSC)",
                               f"declare '{o.name}' channels_last, or add `torch {o.name}_cl = channels_last({o.name})` and convolve that",
                               span=o.span or kernel.span, found="layout = contiguous")
    x_dt, w_dt = dtypes[op.x.name], dtypes[op.w.name]
    math_for(kernel, x_dt, w_dt)
    cfg = kernel.config
    if cfg.schedule != "auto":
        raise unsupported(kernel, f"schedule = {cfg.schedule} for a convolution",
                           "CUTLASS 4.2's sm_90 conv has one (non-persistent) schedule: set schedule = auto", found=f"schedule = {cfg.schedule}")
    if cfg.decomposition != "data_parallel":
        raise unsupported(kernel, f"decomposition = {cfg.decomposition} for a convolution",
                           "use decomposition = data_parallel for conv kernels", found=f"decomposition = {cfg.decomposition}")
    tile = _default_tile(kernel, x_dt, conv=True)
    nd = op.spatial_dims
    lay = {1: "cutlass::layout::TensorNWC", 2: "cutlass::layout::TensorNHWC", 3: "cutlass::layout::TensorNDHWC"}[nd]
    ints = list(CONV_INTS)
    tensors = [AbiTensor(op.x.name, "x", x_dt), AbiTensor(op.w.name, "w", w_dt)]
    epi = _build_epilogue(kernel, dtypes, conv=True, first_ptr=3, ints=ints)
    tensors.append(AbiTensor(kernel.stores[0].name, "d", epi.d_dtype))
    # a slice store: D's pixels are ld elements apart (the filled tensor's channels), not K
    ld_d = len(ints) if kernel.stores[0].channels is not None else None
    if ld_d is not None:
        ints.append("p2.ld")
    tensors.extend(epi.tensors)
    el_x, el_w = CPP_ELEMENT[x_dt], CPP_ELEMENT[w_dt]
    el_acc = acc_element(kernel)
    knobs = {"tile": f"TileShape", "cluster": "ClusterShape", "stages": "StageCount", "math": f"ElementAct = {el_x}"}
    # dgrad's problem shape is stated from its output (CUTLASS's dx): the ABI's activation ints are the output's
    # extents and channels (runtime.conv_call_args), so the index expressions below serve both operators
    conv_operator = "cutlass::conv::Operator::" + ("kDgrad" if transposed else "kFprop")
    out_channels_int = 4 if transposed else 5
    conv_tile = f"cute::Shape<cute::_{tile[0]}, cute::_{tile[1]}, cute::Shape<cute::_{tile[2]}>>"
    body = f"""{CPP_HELPERS}
constexpr cutlass::FloatRoundStyle RN = cutlass::FloatRoundStyle::round_to_nearest;
{epi.functors}using TileShape = {conv_tile};                    // knob: tile
using ClusterShape = {cute_shape(cfg.cluster)};  // knob: cluster
using EpilogueCallbacks = {epi.callbacks_type};
{_collective_epilogue(epi, el_acc, lay, "cutlass::epilogue::TmaWarpSpecialized")}
using CollectiveMainloop = typename cutlass::conv::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, {conv_operator},
    {el_x}, {lay}, {alignment(kernel, x_dt)}, {el_w}, {lay}, {alignment(kernel, w_dt)}, {el_acc},
    TileShape, ClusterShape, {stage_count(kernel, "cutlass::conv::collective")},  // knob: stages
    cutlass::conv::KernelImplicitTmaWarpSpecializedSm90>::CollectiveOp;
using ProblemShape = cutlass::conv::ConvProblemShape<{conv_operator}, {nd}>;
using ConvKernel = cutlass::conv::kernel::ConvUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
using Op = cutlass::conv::device::ConvUniversalAdapter<ConvKernel>;
"""
    act, flt, pad, strd, dil = _conv_shape_ints(nd)
    src_ptr = ptr(epi.src_index, epi.src_dtype) if epi.src_dtype else "nullptr"
    args = f"""  ProblemShape shape(cutlass::conv::Mode::kCrossCorrelation, {act}, {flt}, {pad}, {pad}, {strd}, {dil}, 1);
  typename CollectiveEpilogue::StrideC stride_c{{}};
  typename CollectiveEpilogue::StrideD stride_d{{}};
  cute::for_each(cute::make_seq<cute::rank<0>(typename CollectiveEpilogue::StrideD{{}})>{{}}, [&](auto i) {{
    cute::get<0, i>(stride_c) = shape.stride_C[ProblemShape::RankT - 2 - i];
    cute::get<0, i>(stride_d) = shape.stride_C[ProblemShape::RankT - 2 - i]{"" if ld_d is None else f" / I({out_channels_int}) * I({ld_d})"};
  }});
  args.problem_shape = shape;
  args.mainloop.ptr_A = {ptr(0, x_dt)};
  args.mainloop.ptr_B = {ptr(1, w_dt)};
  args.epilogue.thread = {epi.args_expr};
  args.epilogue.ptr_C = {src_ptr};
  args.epilogue.dC = stride_c;
  args.epilogue.ptr_D = {ptr(2, epi.d_dtype, const=False)};
  args.epilogue.dD = stride_d;
"""
    abi = KernelAbi("conv", tuple(tensors), tuple(ints), tuple(epi.scalars), spatial_dims=nd)
    return _finish(kernel, body, args, abi, knobs, conv=True)


def _emit_row_kernels(program: Program, dtypes: dict[str, str]) -> tuple[list[EmittedKernel], list[Diagnostic]]:
    from dsl_compiler.cutlass.row_kernels import emit_row_kernel

    emitted, diags = [], []
    try:
        types = shapes.infer(program)
    except shapes.ShapeError as exc:
        return [], [Diagnostic(code=exc.code, message=exc.message, span=exc.span, hint=exc.hint)]
    for kernel in program.row_kernels:
        try:
            e = emit_row_kernel(kernel, dtypes, tuple(types[kernel.op.x.name].shape))
            e.abi = dataclasses.replace(e.abi, symbol=e.namespace)
            emitted.append(e)
        except EmitError as exc:
            diags.append(exc.diagnostic)
    return emitted, diags


def emit_program(program: Program) -> tuple[list[EmittedKernel], list[Diagnostic]]:
    """Every kernel of the program; diagnostics for those the backend cannot build."""
    dtypes = tensor_dtypes(program)
    emitted, diags = [], []
    if program.row_kernels:
        emitted, diags = _emit_row_kernels(program, dtypes)
    for kernel in program.kernels:
        try:
            e = emit_kernel(program, kernel, dtypes)
            e.abi = dataclasses.replace(e.abi, symbol=e.namespace)
            emitted.append(e)
        except EmitError as exc:
            diags.append(exc.diagnostic)
        except Exception as exc:  # noqa: BLE001 -- a malformed program must come back as a value
            diags.append(Diagnostic(code="unsupported", span=kernel.span,
                                    message=f"kernel '{kernel.name}': the CUTLASS emitter cannot translate it ({type(exc).__name__}: {exc})",
                                    hint="run `mucutlass check` on the program and fix what it reports"))
    return emitted, diags
