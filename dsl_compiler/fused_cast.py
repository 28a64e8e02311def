"""All of a program's input casts and layout copies as one launch.

The frontend converts an fp32 input that 16-bit math reads with one ``to(x, dtype=...)`` step, and an
activation a conv reads NHWC with one ``channels_last(x[, dtype=...])`` step: a launch each, one after
another. Those steps read only program inputs, so they can all run first, together: ``plan_input_casts``
finds them and ``CUDA_SOURCE`` is one kernel that does every one of them in a single grid (a block
belongs to one job; a plain cast moves 8 elements a thread with 16-byte loads and stores, a layout copy
moves a 64x64 tile of [C, positions] through shared memory, converting on the way). The library does
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
    """One step of the plan: ``dst`` is ``src`` (a program input) in ``dtype``, NHWC when ``relayout``."""

    step_index: int
    src: str
    dst: str
    dtype: str
    relayout: bool

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def plan_input_casts(program: ir.Program) -> tuple[CastJob, ...]:
    """The ``to`` and ``channels_last`` steps that copy a program input (type and / or layout): they read
    nothing computed, so all of them can run first, as one launch. Steps that only rename (a ``to`` into
    the input's own type, ``channels_last`` of a rank < 3 tensor without a type) are left alone."""
    inputs = {d.name: d for d in program.inputs}
    jobs = []
    for i, step in enumerate(program.steps):
        if not isinstance(step, ir.TorchStep) or step.fn not in ("to", "channels_last") or len(step.outputs) != 1:
            continue
        if not step.args or not isinstance(step.args[0], ir.TensorArg) or step.args[0].name not in inputs:
            continue
        decl = inputs[step.args[0].name]
        if decl.layout == "channels_last":
            continue
        if len(step.args) != 1 or any(k.key != "dtype" for k in step.kwargs):
            continue
        dtype = next((k.value for k in step.kwargs if k.key == "dtype"), None)
        if dtype is not None and dtype not in ("f32", "f16", "bf16"):
            continue
        relayout = step.fn == "channels_last" and len(decl.shape) >= 3
        target = dtype or decl.dtype
        if step.fn == "to" and dtype is None:
            continue
        if not relayout and target == decl.dtype:
            continue  # the same tensor: no copy to fuse
        jobs.append(CastJob(step_index=i, src=decl.name, dst=step.outputs[0], dtype=target, relayout=relayout))
    return tuple(jobs)


def remaining_steps(program: ir.Program, jobs: tuple[CastJob, ...]) -> tuple:
    """The program's steps without the ones the plan runs."""
    done = {j.step_index for j in jobs}
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
  int64_t outer;        // N of [N, C, P] (1 for a plain cast)
  int64_t channels;     // C (the element count of a plain cast)
  int64_t inner;        // P: positions per channel (1 for a plain cast)
  int64_t first_block;  // the job's first block in the grid
  int32_t src_type;     // 0 f32, 1 f16, 2 bf16
  int32_t dst_type;
  int32_t relayout;     // 0: same order; 1: [N, C, P] -> [N, P, C]
  int32_t vector;       // 1: both pointers 16-byte aligned (plain casts use 16-byte loads and stores)
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
  const int64_t n = j.channels;
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
  for (int64_t i = i0; i < n && i < i0 + MUCUTLASS_CAST_VEC; ++i)
    mucutlass_store(j.dst, i, j.dst_type, mucutlass_load(j.src, i, j.src_type));
}

__device__ void mucutlass_relayout_block(const MucutlassCastJob& j, int64_t block) {
  __shared__ float tile[MUCUTLASS_CAST_TILE][MUCUTLASS_CAST_TILE + 1];
  const int64_t C = j.channels, P = j.inner;
  const int64_t c_tiles = (C + MUCUTLASS_CAST_TILE - 1) / MUCUTLASS_CAST_TILE;
  const int64_t p_tiles = (P + MUCUTLASS_CAST_TILE - 1) / MUCUTLASS_CAST_TILE;
  const int64_t n = block / (c_tiles * p_tiles);
  const int64_t rem = block % (c_tiles * p_tiles);
  const int64_t c0 = (rem / p_tiles) * MUCUTLASS_CAST_TILE, p0 = (rem % p_tiles) * MUCUTLASS_CAST_TILE;
  const int tx = threadIdx.x % MUCUTLASS_CAST_TILE, ty = threadIdx.x / MUCUTLASS_CAST_TILE;
  const int rows = MUCUTLASS_CAST_THREADS / MUCUTLASS_CAST_TILE;
  for (int r = ty; r < MUCUTLASS_CAST_TILE; r += rows) {  // read along positions (NCHW rows)
    const int64_t c = c0 + r, p = p0 + tx;
    if (c < C && p < P) tile[r][tx] = mucutlass_load(j.src, (n * C + c) * P + p, j.src_type);
  }
  __syncthreads();
  for (int r = ty; r < MUCUTLASS_CAST_TILE; r += rows) {  // write along channels (NHWC rows)
    const int64_t p = p0 + r, c = c0 + tx;
    if (p < P && c < C) mucutlass_store(j.dst, (n * P + p) * C + c, j.dst_type, tile[tx][r]);
  }
}

__global__ void __launch_bounds__(MUCUTLASS_CAST_THREADS) mucutlass_cast_kernel(const MucutlassCastJobs jobs) {
  int k = 0;
  while (k + 1 < jobs.count && static_cast<int64_t>(blockIdx.x) >= jobs.job[k + 1].first_block) ++k;
  const MucutlassCastJob& j = jobs.job[k];
  const int64_t block = static_cast<int64_t>(blockIdx.x) - j.first_block;
  if (j.relayout) mucutlass_relayout_block(j, block);
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
