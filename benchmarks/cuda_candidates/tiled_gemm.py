"""01_gemm_square: C = A @ B (4096^3, fp32) with a tiled shared-memory CUDA kernel: 128x128 output tiles
per block of 256 threads, K in steps of 8 staged through shared memory, each thread accumulating an 8x8
register block (FP32 CUDA cores, no tensor cores: the numbers match eager fp32's precision)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

gemm_cuda = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;  // 256 threads, 8x8 outputs each

__global__ void __launch_bounds__(256) tiled_gemm_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                                         float* __restrict__ c, int m, int n, int k) {
    __shared__ float as[BK][BM];  // A's tile stored transposed: as[kk][row]
    __shared__ float bs[BK][BN];
    const int tid = threadIdx.x;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int trow = (tid / (BN / TN)) * TM, tcol = (tid % (BN / TN)) * TN;
    float acc[TM][TN] = {};
    float ra[TM], rb[TN];
    for (int k0 = 0; k0 < k; k0 += BK) {
        // 128x8 of A and 8x128 of B: 1024 values each, 4 per thread
        for (int i = tid; i < BM * BK; i += 256) {
            int r = i / BK, kk = i % BK;
            int gr = row0 + r, gk = k0 + kk;
            as[kk][r] = (gr < m && gk < k) ? a[(long)gr * k + gk] : 0.f;
        }
        for (int i = tid; i < BK * BN; i += 256) {
            int kk = i / BN, cc = i % BN;
            int gk = k0 + kk, gc = col0 + cc;
            bs[kk][cc] = (gk < k && gc < n) ? b[(long)gk * n + gc] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
#pragma unroll
            for (int i = 0; i < TM; ++i) ra[i] = as[kk][trow + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) rb[j] = bs[kk][tcol + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        int gr = row0 + trow + i;
        if (gr >= m) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            int gc = col0 + tcol + j;
            if (gc < n) c[(long)gr * n + gc] = acc[i][j];
        }
    }
}

torch::Tensor tiled_gemm(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0));
    TORCH_CHECK(a.scalar_type() == torch::kFloat && b.scalar_type() == torch::kFloat);
    a = a.contiguous();
    b = b.contiguous();
    int m = a.size(0), k = a.size(1), n = b.size(1);
    auto c = torch::empty({m, n}, a.options());
    dim3 grid((n + BN - 1) / BN, (m + BM - 1) / BM);
    tiled_gemm_kernel<<<grid, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), m, n, k);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}
"""

gemm_cpp = "torch::Tensor tiled_gemm(torch::Tensor a, torch::Tensor b);"

gemm = load_inline(name="tiled_gemm", cpp_sources=gemm_cpp, cuda_sources=gemm_cuda, functions=["tiled_gemm"],
                   extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return gemm.tiled_gemm(A, B)
