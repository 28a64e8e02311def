"""01_gemm_square: C = A @ B (4096^3, fp32) with a naive CUDA kernel: one thread per output element,
the K loop reading A's row and B's column straight from global memory (B's reads coalesce across a warp).
The low-level baseline a model writes first."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

gemm_cuda = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void naive_gemm_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                  int m, int n, int k) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= m || col >= n) return;
    float acc = 0.f;
    for (int i = 0; i < k; ++i) acc += a[(long)row * k + i] * b[(long)i * n + col];
    c[(long)row * n + col] = acc;
}

torch::Tensor naive_gemm(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0));
    TORCH_CHECK(a.scalar_type() == torch::kFloat && b.scalar_type() == torch::kFloat);
    a = a.contiguous();
    b = b.contiguous();
    int m = a.size(0), k = a.size(1), n = b.size(1);
    auto c = torch::empty({m, n}, a.options());
    dim3 block(32, 8);
    dim3 grid((n + block.x - 1) / block.x, (m + block.y - 1) / block.y);
    naive_gemm_kernel<<<grid, block, 0, c10::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), m, n, k);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}
"""

gemm_cpp = "torch::Tensor naive_gemm(torch::Tensor a, torch::Tensor b);"

gemm = load_inline(name="naive_gemm", cpp_sources=gemm_cpp, cuda_sources=gemm_cuda, functions=["naive_gemm"],
                   extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return gemm.naive_gemm(A, B)
