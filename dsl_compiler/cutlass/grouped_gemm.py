"""Grouped GEMM (mixture-of-experts form) -> a CUTLASS 3.x sm_90a grouped GEMM, one kernel per translation unit.

``grouped_gemm(x, w, group_sizes=(m0, m1, ...))``: A [T, K] (T = sum of the group sizes) is cut into row groups;
group g computes D[rows of g] = A[rows of g] @ B[g], B being [G, K, N] (or [G, N, K] written ``w^T``); D is [T, N].

The kernel is CUTLASS's ptr-array grouped GEMM: ``GroupProblemShape<Shape<int, int, int>>`` with
``KernelPtrArrayTmaWarpSpecializedCooperative`` / ``...Pingpong``, the ``PtrArrayTmaWarpSpecialized*`` epilogue
and the persistent group tile scheduler, which rewrites its TMA descriptors on the device as it moves from group
to group. It reads per-group problem shapes, pointers and strides from device arrays. The group sizes are
constants of the program, so they are baked into the source; the arrays depend on the tensors' addresses and
leading dimensions, so ``mucutlass_run`` fills them at the front of the workspace with a one-block kernel on the
given stream before the GEMM (stream-ordered and capturable into a CUDA graph, unlike a copy from host memory).
``mucutlass_workspace_size`` counts them. The C ABI is the other kernels' (see ``cutlass.emit``): ``ptrs`` are
A, B, D, then the epilogue's tensors; ``ints`` are ``M`` (= T), ``N``, ``K``, ``L`` (= G) and leading dimensions
``p<i>.ld`` (and ``p1.bs``, B's stride between groups).

Epilogue: one store, an element-wise expression (one ``Sm90Compute`` node, as for GEMM) over ``acc``, literal
constants, ``b[col]`` (one value per output column, shared by all groups: ``Sm90RowBroadcast``), ``s[row]`` (one
value per row of D: ``Sm90ColBroadcast`` over an array of per-group pointers), ``g[scalar]`` and one full-size
tensor [T, N] (CUTLASS's C, per-group pointers). Further full-size inputs, further stores and reductions are
refused: their EVT nodes (``Sm90AuxLoad``, ``Sm90AuxStore``, the reductions) keep one TMA descriptor or one
workspace for the whole launch and do not follow the groups.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsl_compiler.cutlass.common import (
    CPP_ELEMENT,
    ELEMENT_BITS,
    GEMM_INCLUDES,
    MU_FAIL,
    MU_SM_COUNT,
    PREAMBLE,
    AbiTensor,
    acc_element,
    alignment,
    cute_shape,
    EmittedKernel,
    KernelAbi,
    math_for,
    namespace_for,
    require_operands,
    schedules,
    stage_count,
    unsupported,
)
from dsl_compiler.cutlass.epilogue import FUSION, EpilogueBuilder
from dsl_compiler.ops import CPP_HELPERS
from dsl_compiler.ir import GroupedGemmOp, Kernel, Program, Reduce, Store

def _default_tile(kernel: Kernel, dtype: str) -> tuple[int, int, int]:
    """128x128: experts' row groups are often small, and a 256-wide tile would mostly compute padding."""
    if kernel.config.tile:
        return kernel.config.tile
    return (128, 128, 32 if dtype == "f32" else 64)


def _refuse_knobs(kernel: Kernel) -> None:
    cfg = kernel.config
    if cfg.decomposition != "data_parallel" or cfg.split_k != 1:
        knob = "decomposition" if cfg.decomposition != "data_parallel" else "split_k"
        found = f"decomposition = {cfg.decomposition}" if knob == "decomposition" else f"split_k = {cfg.split_k}"
        raise unsupported(kernel, f"{found} for a grouped GEMM: CUTLASS's group tile scheduler has no split-K or stream-K",
                           "use decomposition = data_parallel (and split_k = 1); for a long K with few groups, "
                           "write one split-K gemm kernel per group", span=cfg.span_of(knob), found=found)


# ---------------------------------------------------------------------------------------------
# Epilogue


def _check_store(kernel: Kernel, stores: list[Store]) -> Store:
    """The one full store the ptr-array epilogue takes."""
    store = stores[0]
    if len(stores) > 1:
        extra = stores[1]
        what = "a reduction store" if isinstance(extra.expr, Reduce) else "a second store"
        raise unsupported(kernel, f"{what} ('{extra.name}') in a grouped GEMM epilogue: CUTLASS's auxiliary stores "
                           "and reductions keep one descriptor for the whole launch and do not follow the groups",
                           "keep one full store in the grouped kernel and compute the others in a later kernel or "
                           f"torch step (e.g. `torch {extra.name} = sum({store.name}, dim=1)` for a row_sum)",
                           span=extra.span, found=f"store {extra.name}")
    if isinstance(store.expr, Reduce):
        raise unsupported(kernel, "a reduction as the only store of a grouped GEMM",
                           "store the full output (`store y: f32 = acc`) and reduce it in a torch step",
                           span=store.span, found=store.expr.fn)
    return store


class _PtrArrayLeaves:
    """The EVT leaves of the ptr-array epilogue. C and each ``s[row]`` follow the groups through per-group pointers
    (``s[row]``'s in the table ``mucutlass_run`` fills); ``b[col]`` and ``g[scalar]`` are shared by all groups."""

    def __init__(self):
        self.src: tuple[int, str] | None = None  # (ptr index, dtype) of the full-size input C
        self.row_vectors: list[tuple[int, str]] = []  # (ptr index, dtype) of each s[row], in table order

    def node(self, epi: EpilogueBuilder, name: str, index: str, dt: str, span) -> tuple[str, str]:
        el = CPP_ELEMENT[dt]
        if index == "full":
            if self.src is not None:
                raise unsupported(epi.kernel, f"a second full-size input '{name}' in a grouped GEMM epilogue: only one "
                                   "(CUTLASS's C) follows the groups",
                                   f"add '{name}' in a later kernel or torch step, or sum the full-size inputs first "
                                   f"with a torch step (`torch r = add({epi.tensors[self.src[0] - epi.first_ptr].name}, {name})`)",
                                   span=span, found=name)
            i, node = epi.source(name, dt)
            self.src = (i, dt)
            return node
        if index == "col":  # one value per output column, the same for every group: batch stride 0
            return epi.channel_vector(name, dt)
        if index == "row":  # one value per row of D: each group reads from its first row on, through a pointer array
            i = epi.add_tensor(AbiTensor(name, "row", dt))
            slot = len(self.row_vectors)
            self.row_vectors.append((i, dt))
            return (f"{FUSION}::Sm90ColBroadcast<0, TileShape, {el}*, float, cute::Stride<cute::_1, cute::_0, cute::_0>, 1>",
                    f"{{reinterpret_cast<const {el}* const*>(table + kOffRows + {slot} * kGroups * sizeof(void*)), {el}(0), {{}}}}")
        return epi.scalar(name, dt)


# ---------------------------------------------------------------------------------------------
# Kernel


def _check_operands(kernel: Kernel, op: GroupedGemmOp, dtypes: dict[str, str]) -> tuple[str, str]:
    """The element types of A and B, once the operands, the groups and the math are ones the kernel takes."""
    require_operands(kernel, (op.a, op.b), dtypes)
    if op.a.transpose:
        raise unsupported(kernel, f"grouped_gemm reads A as stored, not '{op.a.name}^T'",
                           f"transpose A with a torch step first: `torch {op.a.name}t = transpose({op.a.name}, 0, 1)`",
                           span=op.a.span or op.span, found=f"{op.a.name}^T")
    if not op.group_sizes or any(g < 0 for g in op.group_sizes) or not any(op.group_sizes):
        raise unsupported(kernel, f"group_sizes {tuple(op.group_sizes)}: a grouped GEMM needs at least one non-empty group",
                           "give each group's row count (>= 0), at least one of them positive", span=op.span,
                           found=str(tuple(op.group_sizes)))
    a_dt, b_dt = dtypes[op.a.name], dtypes[op.b.name]
    math_for(kernel, a_dt, b_dt)
    if a_dt == "f32" and not op.b.transpose:
        # The ptr-array mainloop reads shared memory through TMA only (no register-sourced path for one element
        # type), and tf32 wgmma needs K-major operands.
        raise unsupported(kernel, f"a tf32 grouped GEMM with B '{op.b.name}' stored [G, K, N] (N-major)",
                           f"tf32 tensor cores read K-major operands: store B as [G, N, K] and write `{op.b.name}^T` "
                           f"(e.g. `torch {op.b.name}t = transpose({op.b.name}, 1, 2)` then `grouped_gemm(x, {op.b.name}t^T, ...)`), "
                           "or use bf16 / f16", span=op.b.span or op.span, found=f"{op.b.name} with math = tf32")
    _refuse_knobs(kernel)
    return a_dt, b_dt


@dataclass(frozen=True)
class _GroupedGemm:
    """What the grouped kernel's C++ is written from."""

    kernel: Kernel
    op: GroupedGemmOp
    a_dt: str
    b_dt: str
    d_dt: str
    tile: tuple[int, int, int]
    k_sched: str
    e_sched: str
    cb_t: str  # the epilogue's callbacks type and arguments, and its functors
    cb_a: str
    functors: str
    leaves: _PtrArrayLeaves

    @property
    def groups(self) -> list[tuple[int, int, int]]:
        """(index in B, rows, first row) of each group; empty groups are left out of the launch (their rows of D do
        not exist)."""
        sizes = self.op.group_sizes
        return [(g, m, sum(sizes[:g])) for g, m in enumerate(sizes) if m > 0]


def emit_grouped_gemm(program: Program, kernel: Kernel, op: GroupedGemmOp, dtypes: dict[str, str]) -> EmittedKernel:
    """C++ for one grouped GEMM kernel, or raise EmitError with an `unsupported` Diagnostic."""
    a_dt, b_dt = _check_operands(kernel, op, dtypes)
    cfg = kernel.config
    tile = _default_tile(kernel, a_dt)
    sched, k_sched, e_sched = schedules(kernel, tile, ptr_array=True)
    leaves = _PtrArrayLeaves()
    epi = EpilogueBuilder(kernel, dtypes, first_ptr=3, leaves=leaves)
    store = _check_store(kernel, epi.stores)
    cb_t, cb_a = epi.compute(store.expr, CPP_ELEMENT[store.dtype], "Fused0", store.span)
    tensors = [AbiTensor(op.a.name, "a", a_dt), AbiTensor(op.b.name, "b", b_dt), AbiTensor(store.name, "d", store.dtype),
               *epi.tensors]
    ints = ["M", "N", "K", "L", "p0.ld", "p1.ld", "p1.bs", "p2.ld"]
    if leaves.src:
        ints.append(f"p{leaves.src[0]}.ld")
    g = _GroupedGemm(kernel, op, a_dt, b_dt, store.dtype, tile, k_sched, e_sched, cb_t, cb_a, "".join(epi.functors), leaves)
    body = _types(g) + _group_tables(g) + MU_SM_COUNT + "\n" + _arguments(g) + _abi(g)
    knobs = {
        "tile": f"TileShape = {cute_shape(tile)}",
        "cluster": f"ClusterShape = {cute_shape(cfg.cluster)}",
        "stages": f"StageCount: {cfg.stages}",
        "schedule": f"KernelSchedule = {k_sched}",
        "math": f"ElementA = {CPP_ELEMENT[a_dt]}",
        "alignment": f"AlignmentA = {alignment(kernel, a_dt)}",
    }
    ns = namespace_for(body)
    source = (PREAMBLE + GEMM_INCLUDES + '#include "cutlass/gemm/group_array_problem_shape.hpp"\n'
              + f"\nnamespace {ns} {{\nusing namespace cute;\n" + body.replace("@@NS@@", ns))
    abi = KernelAbi("grouped_gemm", tuple(tensors), tuple(ints), tuple(epi.scalars))
    return EmittedKernel(kernel.name, ns, source, abi, knobs)


def _elements(g: _GroupedGemm) -> tuple[str, str, str, str]:
    """The C++ element types of A, B, C (void without a source tensor) and D."""
    src = g.leaves.src
    return CPP_ELEMENT[g.a_dt], CPP_ELEMENT[g.b_dt], CPP_ELEMENT[src[1]] if src else "void", CPP_ELEMENT[g.d_dt]


def _types(g: _GroupedGemm) -> str:
    """The kernel's types: problem shape, tile, epilogue and mainloop collectives, strides."""
    kernel, tile, cfg, d_dt, a_dt, b_dt = g.kernel, g.tile, g.kernel.config, g.d_dt, g.a_dt, g.b_dt
    functors, cb_t, e_sched, k_sched = g.functors, g.cb_t, g.e_sched, g.k_sched
    el_a, el_b, el_c, el_d = _elements(g)
    el_acc = acc_element(kernel)
    lay_b = "cutlass::layout::ColumnMajor" if g.op.b.transpose else "cutlass::layout::RowMajor"
    align_cd = 128 // ELEMENT_BITS[g.leaves.src[1] if g.leaves.src else d_dt]
    return f"""{CPP_HELPERS}
constexpr cutlass::FloatRoundStyle RN = cutlass::FloatRoundStyle::round_to_nearest;
{functors}using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;  // (M, N, K) per group
using UnderlyingShape = typename ProblemShape::UnderlyingProblemShape;
using TileShape = {cute_shape(tile)};            // knob: tile
using ClusterShape = {cute_shape(cfg.cluster)};  // knob: cluster
using EpilogueCallbacks = {cb_t};
using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, {el_acc}, float,
    {el_c}, cutlass::layout::RowMajor*, {align_cd}, {el_d}, cutlass::layout::RowMajor*, {128 // ELEMENT_BITS[d_dt]},
    {e_sched}, EpilogueCallbacks>::CollectiveOp;
using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    {el_a}, cutlass::layout::RowMajor*, {alignment(kernel, a_dt)}, {el_b}, {lay_b}*, {alignment(kernel, b_dt)}, {el_acc},
    TileShape, ClusterShape, {stage_count(kernel, "cutlass::gemm::collective")},  // knob: stages
    {k_sched}>::CollectiveOp;                                                 // knob: schedule
using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
using Op = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
using StrideA = typename GemmKernel::InternalStrideA;
using StrideB = typename GemmKernel::InternalStrideB;
using StrideC = typename GemmKernel::InternalStrideC;
using StrideD = typename GemmKernel::InternalStrideD;

"""


def _arr(values) -> str:
    return ", ".join(str(v) for v in values)


def _group_tables(g: _GroupedGemm) -> str:
    """The groups as constants, the per-group arrays' places in the workspace and the kernel that fills them."""
    op, groups, arr = g.op, g.groups, _arr
    el_a, el_b, el_c, el_d = _elements(g)
    n_rows = max(1, len(g.leaves.row_vectors))
    # B [K, N] per group (RowMajor) has its stride in mode 1 (K); B^T [N, K] (ColumnMajor) in mode 0 (N).
    b_ld_mode = 0 if op.b.transpose else 1

    fill_c = (f"  reinterpret_cast<const {el_c}**>(t + kOffPtrC)[i] = static_cast<const {el_c}*>(p.c) + r0 * p.ldc;\n"
              "  { StrideC s{}; cute::get<0>(s) = p.ldc; reinterpret_cast<StrideC*>(t + kOffStrideC)[i] = s; }\n"
              if g.leaves.src else "")
    fill_rows = "".join(
        f"  reinterpret_cast<const {CPP_ELEMENT[dt]}**>(t + kOffRows)[{slot} * kGroups + i] = "
        f"static_cast<const {CPP_ELEMENT[dt]}*>(p.rows[{slot}]) + r0;\n"
        for slot, (_, dt) in enumerate(g.leaves.row_vectors))
    return f"""// The program's groups (empty ones left out): rows, index of the group's matrix in B, first row in A and D.
constexpr int kGroups = {len(groups)};
constexpr int64_t kTotalRows = {sum(op.group_sizes)};
__constant__ int mu_group_rows[kGroups] = {{{arr(m for _, m, _ in groups)}}};
__constant__ int mu_group_b[kGroups] = {{{arr(g for g, _, _ in groups)}}};
__constant__ int64_t mu_group_row0[kGroups] = {{{arr(r for _, _, r in groups)}}};
static const int mu_host_rows[kGroups] = {{{arr(m for _, m, _ in groups)}}};
constexpr int kRowVectors = {len(g.leaves.row_vectors)};

// Per-group arrays at the front of the workspace; CUTLASS's own workspace follows.
constexpr size_t mu_round(size_t x) {{ return (x + 127) / 128 * 128; }}
constexpr size_t kOffShapes = 0;
constexpr size_t kOffPtrA = mu_round(kOffShapes + kGroups * sizeof(UnderlyingShape));
constexpr size_t kOffPtrB = mu_round(kOffPtrA + kGroups * sizeof(void*));
constexpr size_t kOffPtrC = mu_round(kOffPtrB + kGroups * sizeof(void*));
constexpr size_t kOffPtrD = mu_round(kOffPtrC + kGroups * sizeof(void*));
constexpr size_t kOffStrideA = mu_round(kOffPtrD + kGroups * sizeof(void*));
constexpr size_t kOffStrideB = mu_round(kOffStrideA + kGroups * sizeof(StrideA));
constexpr size_t kOffStrideC = mu_round(kOffStrideB + kGroups * sizeof(StrideB));
constexpr size_t kOffStrideD = mu_round(kOffStrideC + kGroups * sizeof(StrideC));
constexpr size_t kOffRows = mu_round(kOffStrideD + kGroups * sizeof(StrideD));
constexpr size_t kTableBytes = mu_round(kOffRows + kRowVectors * kGroups * sizeof(void*));

struct MuBases {{
  const void* a; const void* b; const void* c; void* d; const void* rows[{n_rows}];
  int64_t lda, ldb, bsb, ldc, ldd;
  int n, k;
}};

__global__ void mu_fill_tables(MuBases p, char* t) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kGroups) return;
  int64_t r0 = mu_group_row0[i];
  reinterpret_cast<UnderlyingShape*>(t + kOffShapes)[i] = cute::make_shape(mu_group_rows[i], p.n, p.k);
  reinterpret_cast<const {el_a}**>(t + kOffPtrA)[i] = static_cast<const {el_a}*>(p.a) + r0 * p.lda;
  reinterpret_cast<const {el_b}**>(t + kOffPtrB)[i] = static_cast<const {el_b}*>(p.b) + int64_t(mu_group_b[i]) * p.bsb;
  reinterpret_cast<{el_d}**>(t + kOffPtrD)[i] = static_cast<{el_d}*>(p.d) + r0 * p.ldd;
  {{ StrideA s{{}}; cute::get<0>(s) = p.lda; reinterpret_cast<StrideA*>(t + kOffStrideA)[i] = s; }}
  {{ StrideB s{{}}; cute::get<{b_ld_mode}>(s) = p.ldb; reinterpret_cast<StrideB*>(t + kOffStrideB)[i] = s; }}
  {{ StrideD s{{}}; cute::get<0>(s) = p.ldd; reinterpret_cast<StrideD*>(t + kOffStrideD)[i] = s; }}
{fill_c}{fill_rows}}}

"""


def _arguments(g: _GroupedGemm) -> str:
    """``mu_make_args``: CUTLASS's arguments over the per-group arrays, and the host copy of the shapes."""
    cfg, cb_a, src = g.kernel.config, g.cb_a, g.leaves.src
    el_a, el_b, el_c, el_d = _elements(g)
    raster = {"auto": None, "along_m": "AlongM", "along_n": "AlongN"}[cfg.raster]
    return f"""{MU_FAIL}
// The arguments over the per-group arrays at ``table`` (device) and the host copy of the shapes.
static void mu_make_args(void* const* ptrs, const int64_t* ints, const float* scalars, char* table,
                         const UnderlyingShape* host_shapes, typename Op::Arguments& args) {{
  auto S = [&](int i) {{ return scalars[i]; }};
  (void)S; (void)ints;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = ProblemShape{{kGroups, reinterpret_cast<UnderlyingShape*>(table + kOffShapes), host_shapes}};
  args.mainloop.ptr_A = reinterpret_cast<const {el_a}**>(table + kOffPtrA);
  args.mainloop.dA = reinterpret_cast<StrideA*>(table + kOffStrideA);
  args.mainloop.ptr_B = reinterpret_cast<const {el_b}**>(table + kOffPtrB);
  args.mainloop.dB = reinterpret_cast<StrideB*>(table + kOffStrideB);
  args.epilogue.thread = {cb_a};
  args.epilogue.ptr_C = {f"reinterpret_cast<const {el_c}**>(table + kOffPtrC)" if src else "nullptr"};
  args.epilogue.dC = {"reinterpret_cast<StrideC*>(table + kOffStrideC)" if src else "nullptr"};
  args.epilogue.ptr_D = reinterpret_cast<{el_d}**>(table + kOffPtrD);
  args.epilogue.dD = reinterpret_cast<StrideD*>(table + kOffStrideD);
  args.hw_info.device_id = 0;
  cudaGetDevice(&args.hw_info.device_id);
  args.hw_info.sm_count = mu_sm_count();
  using RasterT = decltype(args.scheduler.raster_order);
  {f"args.scheduler.raster_order = RasterT::{raster};" if raster else "(void)sizeof(RasterT);  // raster = auto: the group scheduler's default"}   // knob: raster
  args.scheduler.max_swizzle_size = {int(cfg.swizzle)};  // knob: swizzle
}}

static void mu_host_shapes(const int64_t* ints, UnderlyingShape* shapes) {{
  for (int i = 0; i < kGroups; ++i) shapes[i] = cute::make_shape(mu_host_rows[i], int(ints[1]), int(ints[2]));
}}
}}  // namespace @@NS@@

"""


def _abi(g: _GroupedGemm) -> str:
    """The C ABI: the workspace size, and the run (fill the per-group arrays on the stream, then CUTLASS)."""
    src, rows = g.leaves.src, g.leaves.row_vectors
    bases = ((f"  bases.c = ptrs[{src[0]}]; bases.ldc = ints[8];\n" if src else "")
             + "".join(f"  bases.rows[{slot}] = ptrs[{i}];\n" for slot, (i, _) in enumerate(rows)))
    return _ABI.replace("@@GROUP_COUNT@@", str(len(g.op.group_sizes))).replace("@@BASES@@", bases)


_ABI = r"""extern "C" int mucutlass_workspace_size(void* const* ptrs, const int64_t* ints, const float* scalars,
                                         size_t* bytes, char* msg, int msg_len) {
  using namespace @@NS@@;
  UnderlyingShape shapes[kGroups];
  mu_host_shapes(ints, shapes);
  typename Op::Arguments args;
  mu_make_args(ptrs, ints, scalars, nullptr, shapes, args);
  *bytes = kTableBytes + Op::get_workspace_size(args);
  return 0;
}

extern "C" int mucutlass_run(void* const* ptrs, const int64_t* ints, const float* scalars, void* workspace,
                             size_t workspace_bytes, void* stream, char* msg, int msg_len) {
  using namespace @@NS@@;
  if (ints[0] != kTotalRows) return mu_fail(msg, msg_len, "shape", "A's rows differ from the sum of the group sizes the kernel was built for");
  if (ints[3] != @@GROUP_COUNT@@) return mu_fail(msg, msg_len, "shape", "B's group count differs from the kernel's");
  if (workspace == nullptr || workspace_bytes < kTableBytes) return mu_fail(msg, msg_len, "workspace", "workspace smaller than mucutlass_workspace_size");
  char* table = static_cast<char*>(workspace);
  UnderlyingShape shapes[kGroups];
  mu_host_shapes(ints, shapes);
  typename Op::Arguments args;
  mu_make_args(ptrs, ints, scalars, table, shapes, args);
  Op op;
  cutlass::Status st = op.can_implement(args);
  if (st != cutlass::Status::kSuccess) return mu_fail(msg, msg_len, "can_implement", cutlass::cutlassGetStatusString(st));
  if (kTableBytes + Op::get_workspace_size(args) > workspace_bytes) return mu_fail(msg, msg_len, "workspace", "workspace smaller than mucutlass_workspace_size");
  MuBases bases{};
  bases.a = ptrs[0]; bases.b = ptrs[1]; bases.d = ptrs[2];
  bases.n = int(ints[1]); bases.k = int(ints[2]);
  bases.lda = ints[4]; bases.ldb = ints[5]; bases.bsb = ints[6]; bases.ldd = ints[7];
@@BASES@@  mu_fill_tables<<<(kGroups + 127) / 128, 128, 0, static_cast<cudaStream_t>(stream)>>>(bases, table);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return mu_fail(msg, msg_len, "launch", cudaGetErrorString(err));
  st = op.initialize(args, table + kTableBytes, static_cast<cudaStream_t>(stream));
  if (st != cutlass::Status::kSuccess) return mu_fail(msg, msg_len, "initialize", cutlass::cutlassGetStatusString(st));
  st = op.run(static_cast<cudaStream_t>(stream));
  if (st != cutlass::Status::kSuccess) return mu_fail(msg, msg_len, "run", cutlass::cutlassGetStatusString(st));
  err = cudaGetLastError();
  if (err != cudaSuccess) return mu_fail(msg, msg_len, "launch", cudaGetErrorString(err));
  return 0;
}
"""
