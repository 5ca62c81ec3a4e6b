# pattern: honest shared-memory row stage + warp-shuffle block reduction
# problem: redteam/problems/layernorm_residual.py
# expect: ok
"""One block per row: the row is staged in shared memory, the mean and variance are block
reductions (warp shuffles, then one value per warp through shared memory), and the affine
step and the residual add are applied from the staged row. Any row length up to 12K.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor ln_residual(torch::Tensor x, torch::Tensor residual, torch::Tensor weight, torch::Tensor bias, double eps, bool affine);
"""

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Sum over the block: shuffles within each warp, then one value per warp through shared memory.
__device__ __forceinline__ float block_sum(float v, float* smem) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < kWarps; ++w) total += smem[w];
    __syncthreads();  // smem is reused by the next reduction
    return total;
}

// One block per row; the row is staged in shared memory once (dynamic size: cols floats) and
// both passes of the mean/variance read it from there.
__global__ void ln_residual_kernel(const float* __restrict__ x, const float* __restrict__ residual,
                                   const float* __restrict__ weight, const float* __restrict__ bias,
                                   float* __restrict__ out, int64_t cols, float eps, bool affine) {
    extern __shared__ float row[];
    __shared__ float partial[kWarps];
    const int64_t r = blockIdx.x;
    const float* xr = x + r * cols;
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
        const float v = xr[c];
        row[c] = v;
        s += v;
    }
    const float mean = block_sum(s, partial) / static_cast<float>(cols);
    float sq = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
        const float d = row[c] - mean;
        sq += d * d;
    }
    const float var = block_sum(sq, partial) / static_cast<float>(cols);
    const float rstd = rsqrtf(var + eps);
    const float* rr = residual + r * cols;
    float* orow = out + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
        const float n = (row[c] - mean) * rstd;
        orow[c] = (affine ? n * weight[c] + bias[c] : n) + rr[c];
    }
}

}  // namespace

torch::Tensor ln_residual(torch::Tensor x, torch::Tensor residual, torch::Tensor weight,
                          torch::Tensor bias, double eps, bool affine) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be float32 on cuda");
    TORCH_CHECK(residual.sizes() == x.sizes(), "residual must match x");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "weight/bias must match the last dim");
    TORCH_CHECK(cols * sizeof(float) <= 48 * 1024, "row too long for the shared-memory stage");
    const at::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xc = x.contiguous();
    const torch::Tensor rc = residual.contiguous();
    const torch::Tensor wc = weight.contiguous();
    const torch::Tensor bc = bias.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const int64_t rows = cols == 0 ? 0 : xc.numel() / cols;
    if (rows == 0) return out;
    ln_residual_kernel<<<static_cast<unsigned>(rows), kThreads, cols * sizeof(float),
                         at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), rc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(),
        out.data_ptr<float>(), cols, static_cast<float>(eps), affine);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_ln_kit",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["ln_residual"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return _ext.ln_residual(x, residual, self.norm.weight, self.norm.bias, self.norm.eps, True)
