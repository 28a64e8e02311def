"""All of a program's input casts and layout copies as one launch.

The frontend converts an fp32 input that 16-bit math reads with one ``to(x, dtype=...)`` step, and an
activation a conv reads NHWC with one ``channels_last(x[, dtype=...])`` step: a launch each, one after
another. Those steps read only program inputs, so they can all run first, together: ``plan_input_casts``
finds them and ``CUDA_SOURCE`` is one kernel that does every one of them in a single grid (a block
belongs to one job; a plain cast moves 8 elements a thread with 16-byte loads and stores, a layout copy
moves a 64x64 tile of [C, positions] through shared memory, or, for 16 channels or fewer, a thread writes one
position's channels; zero padding at the end of a GEMM operand's last two dims or of a conv input's channels
is written in the same pass). The library does
not depend on the program (a job list is its argument), so it is built once per toolchain
and kept in the kernel cache like a kernel. ``cutlass_runtime.run_fused_casts`` calls
it; ``dsl_compiler.build.build_fused_cast_library`` builds it; the exported ``ModelNew`` carries the plan and a copy of the library.

Nothing here changes a program or the C++ emitted for its kernels: the runtime runs the same steps,
in one launch instead of several, when ``RuntimeOptions.fused_casts`` is on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

from dsl_compiler import ir

MAX_JOBS = 16  # jobs per launch (the job list is a kernel parameter); more run as further launches
ARTIFACT = "<fused_cast>"  # the library's key among a build's artifacts (no kernel can be named so)


@dataclasses.dataclass(frozen=True)
class CastJob:
    """``dst`` is program input ``src`` in ``dtype`` (NHWC when ``relayout``), grown by ``pad`` zeros at the end of
    its dims (one amount per dim of ``src``; empty: none); ``steps`` are the program steps it stands for."""

    steps: tuple[int, ...]
    src: str
    dst: str
    dtype: str
    relayout: bool
    pad: tuple[int, ...] = ()

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _names(step) -> set[str]:
    """Every name a step mentions (an over-approximation of what it reads: safe for "read nowhere else")."""
    found: set[str] = set()

    def walk(v):
        if isinstance(v, dict):
            for k, x in v.items():
                if k == "name" and isinstance(x, str):
                    found.add(x)
                else:
                    walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    walk(step.model_dump(mode="json"))
    return found


def _right_pad(step: ir.TorchStep, rank: int) -> tuple[int, ...] | None:
    """Zeros a ``pad`` step adds at the end of each dim; None for anything else (left pads, cuts, a value, a mode)."""
    if len(step.args) != 2 or not isinstance(step.args[1], ir.LiteralArg) or len(step.outputs) != 1:
        return None
    if any(k.key != "value" or k.value not in (0, 0.0) for k in step.kwargs):
        return None
    spec = step.args[1].value
    if not isinstance(spec, (tuple, list)) or len(spec) % 2 or len(spec) // 2 > rank:
        return None
    extra = [0] * rank
    for i in range(len(spec) // 2):
        left, right = spec[2 * i], spec[2 * i + 1]
        if not isinstance(left, int) or not isinstance(right, int) or left != 0 or right < 0:
            return None
        extra[rank - 1 - i] = right
    return tuple(extra) if any(extra) else None


def _pad_fits(extra: tuple[int, ...], relayout: bool) -> bool:
    """What the kernel pads: a plain copy its last two dims, a layout copy its channels (dim 1)."""
    if relayout:
        return all(e == 0 for i, e in enumerate(extra) if i != 1)
    return all(e == 0 for e in extra[:-2])


def plan_input_casts(program: ir.Program) -> tuple[CastJob, ...]:
    """The steps that copy a program input: ``to`` (a type), ``channels_last`` (a layout, and a type), and a
    ``pad`` with zeros at the end of a GEMM operand's last two dims or a conv input's channels, alone or
    together with the cast it feeds or follows. They read nothing computed, so all of them can run first,
    as one launch. Steps that only rename (a ``to`` into the input's own type, ``channels_last`` of a rank < 3
    tensor without a type) are left alone; a step's result that another step also reads is not folded away."""
    inputs = {d.name: d for d in program.inputs if d.layout != "channels_last"}
    steps = list(program.steps)
    readers: dict[str, list[int]] = {}
    for i, step in enumerate(steps):
        for name in _names(step) - (set(step.outputs) if isinstance(step, ir.TorchStep) else set()):
            readers.setdefault(name, []).append(i)
    outputs = set(program.outputs)

    def only_reader(name: str) -> int | None:
        r = readers.get(name, [])
        return r[0] if len(r) == 1 and name not in outputs else None

    def whole(step) -> bool:  # reads and writes whole tensors (not the channels of one that slices fill)
        return isinstance(step, ir.TorchStep) and step.channels is None and not any(
            isinstance(a, ir.TensorArg) and a.channels is not None for a in step.args)

    def cast_of(step) -> tuple[str, bool] | None:  # (element type, relayout) of a to / channels_last step
        if not whole(step) or step.fn not in ("to", "channels_last") or len(step.outputs) != 1:
            return None
        if len(step.args) != 1 or not isinstance(step.args[0], ir.TensorArg) or any(k.key != "dtype" for k in step.kwargs):
            return None
        dtype = next((k.value for k in step.kwargs if k.key == "dtype"), None)
        if (dtype is None and step.fn == "to") or (dtype is not None and dtype not in ("f32", "f16", "bf16")):
            return None
        return dtype or "", step.fn == "channels_last"

    jobs, used = [], set()
    for i, step in enumerate(steps):
        if i in used or not whole(step) or not step.args or not isinstance(step.args[0], ir.TensorArg):
            continue
        decl = inputs.get(step.args[0].name)
        if decl is None:
            continue
        rank = len(decl.shape)
        cast, pad, members, dst = cast_of(step), None, [i], step.outputs[0] if step.outputs else None
        if cast is None and step.fn == "pad":
            pad = _right_pad(step, rank)
            if pad is None:
                continue
            nxt = only_reader(dst)  # pad, then the conv input's channels-last copy
            follow = cast_of(steps[nxt]) if nxt is not None else None
            if follow is not None and follow[1] and rank >= 3 and nxt not in used:
                cast, members, dst = follow, [i, nxt], steps[nxt].outputs[0]
            else:
                cast = ("", False)
        elif cast is not None:
            nxt = only_reader(dst)  # the cast, then a pad of the narrower copy
            if nxt is not None and nxt not in used and whole(steps[nxt]) and steps[nxt].fn == "pad" \
                    and steps[nxt].args and isinstance(steps[nxt].args[0], ir.TensorArg) and steps[nxt].args[0].name == dst:
                pad = _right_pad(steps[nxt], rank)
                if pad is not None and _pad_fits(pad, cast[1] and rank >= 3):
                    members, dst = [i, nxt], steps[nxt].outputs[0]
                else:
                    pad = None
        if cast is None:
            continue
        dtype, relayout = cast[0] or decl.dtype, cast[1] and rank >= 3
        if pad is not None and not _pad_fits(pad, relayout):
            continue
        if not relayout and dtype == decl.dtype and pad is None:
            continue  # the same tensor: no copy to fuse
        used.update(members)
        jobs.append(CastJob(steps=tuple(members), src=decl.name, dst=dst, dtype=dtype, relayout=relayout,
                            pad=pad or ()))
    return tuple(jobs)


def remaining_steps(program: ir.Program, jobs: tuple[CastJob, ...]) -> tuple:
    """The program's steps without the ones the plan runs."""
    done = {i for j in jobs for i in j.steps}
    return tuple(s for i, s in enumerate(program.steps) if i not in done)


CUDA_SOURCE = r"""// mucutlass fused casts: every input cast / NCHW -> NHWC copy of a program in one launch.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>

#define MUCUTLASS_CAST_MAX_JOBS 16
#define MUCUTLASS_CAST_THREADS 256
#define MUCUTLASS_CAST_VEC 8
#define MUCUTLASS_CAST_TILE 64

struct MucutlassCastJob {
  const void* src;
  void* dst;
  int64_t outer;         // src viewed [outer, channels, inner]
  int64_t channels;
  int64_t inner;
  int64_t channels_out;  // zeros past `channels` (a padded GEMM operand's rows, a conv input's channels)
  int64_t inner_out;     // plain copies: zeros past `inner` (a padded K); layout copies: = inner
  int64_t first_block;   // the job's first block in the grid
  int32_t src_type;      // 0 f32, 1 f16, 2 bf16
  int32_t dst_type;
  int32_t mode;          // 0: [outer, channels_out, inner_out]; 1: [outer, inner, channels_out] by 64x64 tiles;
                         // 2: the same, a thread per position (channels_out <= 16)
  int32_t vector;        // 1: both pointers 16-byte aligned and no padding (16-byte loads and stores)
};

struct MucutlassCastJobs {
  MucutlassCastJob job[MUCUTLASS_CAST_MAX_JOBS];
  int32_t count;
};

__device__ __forceinline__ float mucutlass_load(const void* p, int64_t i, int t) {
  if (t == 0) return static_cast<const float*>(p)[i];
  if (t == 1) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

__device__ __forceinline__ void mucutlass_store(void* p, int64_t i, int t, float v) {
  if (t == 0) static_cast<float*>(p)[i] = v;
  else if (t == 1) static_cast<__half*>(p)[i] = __float2half_rn(v);
  else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

__device__ __forceinline__ uint16_t mucutlass_bits16(float v, int t) {
  return t == 1 ? __half_as_ushort(__float2half_rn(v)) : __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

__device__ __forceinline__ float mucutlass_from16(uint16_t bits, int t) {
  return t == 1 ? __half2float(__ushort_as_half(bits)) : __bfloat162float(__ushort_as_bfloat16(bits));
}

__device__ void mucutlass_cast_block(const MucutlassCastJob& j, int64_t block) {
  const int64_t n = j.outer * j.channels_out * j.inner_out;
  const int64_t i0 = (block * MUCUTLASS_CAST_THREADS + threadIdx.x) * MUCUTLASS_CAST_VEC;
  if (i0 >= n) return;
  float v[MUCUTLASS_CAST_VEC];
  if (j.vector && i0 + MUCUTLASS_CAST_VEC <= n) {
    if (j.src_type == 0) {
      const float4* s = reinterpret_cast<const float4*>(static_cast<const float*>(j.src) + i0);
      float4 a = s[0], b = s[1];
      v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
      uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(j.src) + i0);
      const uint16_t* h = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
      for (int k = 0; k < MUCUTLASS_CAST_VEC; ++k) v[k] = mucutlass_from16(h[k], j.src_type);
    }
    if (j.dst_type == 0) {
      float4* d = reinterpret_cast<float4*>(static_cast<float*>(j.dst) + i0);
      d[0] = make_float4(v[0], v[1], v[2], v[3]);
      d[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
      uint4 raw;
      uint16_t* h = reinterpret_cast<uint16_t*>(&raw);
#pragma unroll
      for (int k = 0; k < MUCUTLASS_CAST_VEC; ++k) h[k] = mucutlass_bits16(v[k], j.dst_type);
      *reinterpret_cast<uint4*>(static_cast<uint16_t*>(j.dst) + i0) = raw;
    }
    return;
  }
  for (int64_t i = i0; i < n && i < i0 + MUCUTLASS_CAST_VEC; ++i) {
    const int64_t w = i % j.inner_out, rest = i / j.inner_out;
    const int64_t c = rest % j.channels_out, a = rest / j.channels_out;
    const float x = (c < j.channels && w < j.inner) ? mucutlass_load(j.src, (a * j.channels + c) * j.inner + w, j.src_type)
                                                     : 0.0f;
    mucutlass_store(j.dst, i, j.dst_type, x);
  }
}

__device__ void mucutlass_relayout_narrow_block(const MucutlassCastJob& j, int64_t block) {
  const int64_t C = j.channels, P = j.inner, Cout = j.channels_out;
  const int64_t q = block * MUCUTLASS_CAST_THREADS + threadIdx.x;  // (n, position)
  if (q >= j.outer * P) return;
  const int64_t n = q / P, p = q % P;
  for (int64_t c = 0; c < Cout; ++c)  // reads along positions across the warp, writes one position's channels
    mucutlass_store(j.dst, q * Cout + c, j.dst_type, c < C ? mucutlass_load(j.src, (n * C + c) * P + p, j.src_type) : 0.0f);
}

__device__ void mucutlass_relayout_block(const MucutlassCastJob& j, int64_t block) {
  __shared__ float tile[MUCUTLASS_CAST_TILE][MUCUTLASS_CAST_TILE + 1];
  const int64_t C = j.channels, P = j.inner, Cout = j.channels_out;
  const int64_t c_tiles = (Cout + MUCUTLASS_CAST_TILE - 1) / MUCUTLASS_CAST_TILE;
  const int64_t p_tiles = (P + MUCUTLASS_CAST_TILE - 1) / MUCUTLASS_CAST_TILE;
  const int64_t n = block / (c_tiles * p_tiles);
  const int64_t rem = block % (c_tiles * p_tiles);
  const int64_t c0 = (rem / p_tiles) * MUCUTLASS_CAST_TILE, p0 = (rem % p_tiles) * MUCUTLASS_CAST_TILE;
  const int tx = threadIdx.x % MUCUTLASS_CAST_TILE, ty = threadIdx.x / MUCUTLASS_CAST_TILE;
  const int rows = MUCUTLASS_CAST_THREADS / MUCUTLASS_CAST_TILE;
  for (int r = ty; r < MUCUTLASS_CAST_TILE; r += rows) {  // read along positions (NCHW rows)
    const int64_t c = c0 + r, p = p0 + tx;
    if (c < Cout && p < P) tile[r][tx] = c < C ? mucutlass_load(j.src, (n * C + c) * P + p, j.src_type) : 0.0f;
  }
  __syncthreads();
  for (int r = ty; r < MUCUTLASS_CAST_TILE; r += rows) {  // write along channels (NHWC rows)
    const int64_t p = p0 + r, c = c0 + tx;
    if (p < P && c < Cout) mucutlass_store(j.dst, (n * P + p) * Cout + c, j.dst_type, tile[tx][r]);
  }
}

__global__ void __launch_bounds__(MUCUTLASS_CAST_THREADS) mucutlass_cast_kernel(const MucutlassCastJobs jobs) {
  int k = 0;
  while (k + 1 < jobs.count && static_cast<int64_t>(blockIdx.x) >= jobs.job[k + 1].first_block) ++k;
  const MucutlassCastJob& j = jobs.job[k];
  const int64_t block = static_cast<int64_t>(blockIdx.x) - j.first_block;
  if (j.mode == 1) mucutlass_relayout_block(j, block);
  else if (j.mode == 2) mucutlass_relayout_narrow_block(j, block);
  else mucutlass_cast_block(j, block);
}

extern "C" int mucutlass_fused_cast_job_bytes() { return static_cast<int>(sizeof(MucutlassCastJob)); }

extern "C" int mucutlass_fused_cast(const MucutlassCastJobs* jobs, int64_t blocks, void* stream, char* msg, int msg_len) {
  if (jobs->count < 1 || jobs->count > MUCUTLASS_CAST_MAX_JOBS || blocks < 1 || blocks > 0x7fffffffLL) {
    snprintf(msg, msg_len, "fused cast: %d jobs over %lld blocks is out of range", jobs->count, (long long)blocks);
    return 1;
  }
  mucutlass_cast_kernel<<<static_cast<unsigned>(blocks), MUCUTLASS_CAST_THREADS, 0,
                          static_cast<cudaStream_t>(stream)>>>(*jobs);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    snprintf(msg, msg_len, "fused cast: %s", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}
"""

# no CUTLASS headers: the whole library builds in a few seconds (dsl_compiler.build.build_fused_cast_library)
FLAGS = ("-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-O3", "-Xcompiler=-fPIC", "-shared", "-DNDEBUG")


class FusedCastBuildError(RuntimeError):
    """nvcc could not build the fused-cast library (the message ends with nvcc's first error line)."""


def library_key(nvcc_version: str) -> str:
    """The library's kernel-cache entry name: its source, flags and nvcc."""
    blob = json.dumps({"source": CUDA_SOURCE, "flags": list(FLAGS), "nvcc": nvcc_version, "what": "fused_cast"})
    return hashlib.sha256(blob.encode()).hexdigest()[:32]
