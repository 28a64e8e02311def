"""The epilogue of the CUTLASS 2.x kernels (grouped and depthwise conv, tf32x3 GEMM): the kernel's one store
expression as an output operator with ``LinearCombination``'s interface (the 2.x epilogues call it on fragments),
reading the accumulator and at most one tensor through CUTLASS's source operand C: a per-column vector ``b[col]``
(C with zero row and batch strides) or a full tensor of the output's shape (a residual). Literal constants are
run-time scalars (``Params::c``)."""

from __future__ import annotations

from dataclasses import dataclass

from dsl_compiler.cutlass.common import CPP_ELEMENT, ELEMENT_BITS, AbiTensor, unsupported
from dsl_compiler.cutlass.epilogue import EpilogueBuilder, evt_leaves
from dsl_compiler.ir import Kernel, Reduce, Store


@dataclass(frozen=True)
class Sm80Epilogue:
    """A CUTLASS 2.x kernel's epilogue: its output operator and the one tensor it reads through C."""

    functor: str  # C++ of the output-op functor ``MuOutputOp``
    tensors: list[AbiTensor]  # epilogue tensors after x, w, d (at most one: src or col)
    d_dtype: str
    source: str | None  # "bias" | "residual" | None
    scalars: tuple[float, ...]  # the expression's literal constants, in the order of ``Params::c``
    count: int  # elements per access of the epilogue


def pow2_vector(extent: int, dtype: str) -> int:
    """The widest access (<= 16 bytes, a power of two in elements) that divides ``extent``."""
    v = 128 // ELEMENT_BITS[dtype]
    while v > 1 and extent % v:
        v //= 2
    return v


def output_operator(kernel: Kernel, dtypes: dict[str, str], n_out: int, what: str, later: str) -> Sm80Epilogue:
    """The kernel's one store as ``MuOutputOp`` over ``n_out`` output columns; ``what`` names the kernel kind and
    ``later`` says where the rest goes, in the messages of what it refuses."""
    epi = EpilogueBuilder(kernel, dtypes, first_ptr=3)
    stores = epi.stores
    if len(stores) != 1:
        raise unsupported(kernel, f"{len(stores)} stores in a {what} epilogue",
                           f"keep one store per kernel; {later}", span=stores[1].span if len(stores) > 1 else kernel.span)
    store = stores[0]
    if isinstance(store.expr, Reduce):
        raise unsupported(kernel, f"a reduction in a {what} epilogue",
                           "store the output and reduce it in a torch step (e.g. torch s = sum(y, dim=1))", span=store.span)
    source = _source_operand(epi, store, what, later)
    keys, body, const_slots = epi.expression(store.expr)
    count = pow2_vector(n_out, store.dtype)
    functor = _output_op(keys, body, len(const_slots), CPP_ELEMENT[store.dtype], count, source is not None)
    return Sm80Epilogue(functor, epi.tensors, store.dtype, source, tuple(epi.scalars), count)


def _source_operand(epi: EpilogueBuilder, store: Store, what: str, later: str) -> str | None:
    """The one tensor the epilogue may read, through CUTLASS's source operand C: "bias" (``b[col]``, C with every
    stride 0), "residual" (a full tensor of the output's shape) or None."""
    kernel = epi.kernel
    refs = [k for k in evt_leaves(store.expr, []) if k[0] == "ref"]
    for _, name, index in refs:
        epi.dtype_of(name, store.span)
        if index in ("row", "scalar"):
            kind = "a per-row vector" if index == "row" else "a one-element tensor"
            raise unsupported(kernel, f"{kind} '{name}[{index}]' in a {what} epilogue",
                               "write a literal constant, or a per-column vector `b[col]`; " + later, span=store.span,
                               found=f"{name}[{index}]")
    if len(refs) > 1:
        raise unsupported(kernel, f"the epilogue reads {len(refs)} tensors ({', '.join(r[1] for r in refs)})",
                           f"a {what} epilogue reads one tensor (a bias `b[col]` or a residual); " + later,
                           span=store.span, found=", ".join(f"{r[1]}[{r[2]}]" if r[2] != "full" else r[1] for r in refs))
    if not refs:
        return None
    _, name, index = refs[0]
    dtype = epi.dtypes[name]
    if dtype != store.dtype:
        raise unsupported(kernel, f"'{name}' is {dtype} but the store is {store.dtype}",
                           f"CUTLASS 2.x reads its source operand in the output's type: store {store.dtype} needs "
                           f"'{name}' as {store.dtype} (convert it with a torch step), or store {dtype}",
                           span=store.span, found=f"{name}: {dtype}, store {store.name}: {store.dtype}")
    epi.add_tensor(AbiTensor(name, "col" if index == "col" else "src", dtype))
    return "bias" if index == "col" else "residual"


def _output_op(keys: list, body: str, n_consts: int, el_d: str, count: int, reads_source: bool) -> str:
    """The store expression as a CUTLASS 2.x epilogue output operator ``MuOutputOp``, its leaves the accumulator
    and the source operand C (0 in the call without C)."""
    loads_src = " ".join(f"float v{i} = {'float(accum[i])' if key == ('acc',) else 'float(source[i])'};" for i, key in enumerate(keys))
    loads_nosrc = " ".join(f"float v{i} = {'float(accum[i])' if key == ('acc',) else '0.f'};" for i, key in enumerate(keys))
    return f"""// The store expression as a CUTLASS 2.x epilogue output operator (the interface of LinearCombination).
template <typename ElementAccumulator_>
struct MuOutputOp {{
  using ElementOutput = {el_d};
  using ElementSource = {el_d};
  using ElementAccumulator = ElementAccumulator_;
  using ElementCompute = float;
  using ElementScalar = float;
  using ElementC = ElementSource;
  using ElementD = ElementOutput;
  static int const kCount = {count};
  static cutlass::epilogue::thread::ScaleType::Kind const kScale = cutlass::epilogue::thread::ScaleType::Default;
  static cutlass::FloatRoundStyle const kRound = cutlass::FloatRoundStyle::round_to_nearest;
  using FragmentOutput = cutlass::Array<ElementOutput, kCount>;
  using FragmentSource = cutlass::Array<ElementSource, kCount>;
  using FragmentAccumulator = cutlass::Array<ElementAccumulator, kCount>;
  using FragmentCompute = cutlass::Array<float, kCount>;
  struct Params {{ float c[{max(1, n_consts)}]; }};
  Params p;
  CUTLASS_HOST_DEVICE explicit MuOutputOp(Params const& params) : p(params) {{}}
  CUTLASS_HOST_DEVICE MuOutputOp(Params const& params, int) : p(params) {{}}
  CUTLASS_HOST_DEVICE bool is_source_needed() const {{ return {'true' if reads_source else 'false'}; }}
  CUTLASS_HOST_DEVICE void set_k_partition(int, int) {{}}
  CUTLASS_HOST_DEVICE FragmentOutput operator()(FragmentAccumulator const& accum, FragmentSource const& source) const {{
    FragmentOutput r;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kCount; ++i) {{ {loads_src} r[i] = ElementOutput({body}); }}
    return r;
  }}
  CUTLASS_HOST_DEVICE FragmentOutput operator()(FragmentAccumulator const& accum) const {{
    FragmentOutput r;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kCount; ++i) {{ {loads_nosrc} r[i] = ElementOutput({body}); }}
    return r;
  }}
}};
"""
