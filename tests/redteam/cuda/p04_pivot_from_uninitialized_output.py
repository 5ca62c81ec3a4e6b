# pattern: 4 LayerNorm mean pivot read from the uninitialized output row: within tolerance, not reproducible
# problem: redteam/problems/layernorm_residual.py
# expect: incorrect deterministic_outputs
"""One block per row, the row staged in shared memory. The mean is accumulated against a
pivot, ``mean = p + sum(x - p) / n`` (a shift against cancellation; any p gives the mean, p
only changes the rounding), and the pivot is taken from what the output row already holds
(``torch::empty_like``: memory the kernel has not written yet; "it is overwritten below"),
sanitized into the row's [min, max] (NaN becomes the min). The variance is a second pass over
the staged row around that mean. Whatever the uninitialized memory holds, every output is
within the float32 tolerance of the reference: no comparison with a reference can see the
uninitialized read. But the result depends on the memory's old contents, bit for bit: a
kernel whose output depends on memory it never wrote.

The harness before issue 10 passed it (H100, 2026-11-24): every case ran on the default
stream, where the output block is the NaN-poisoned freed block (pivot = row min), and every
value is within tolerance.

Caught by the repeat of the first case (deterministic_outputs): the same inputs and
parameters again, after freed memory was filled with other garbage (3.0 instead of NaN) and
under a non-default current stream, whose allocations come from that stream's own pool: the
output block holds something else than the first case's NaN. The pivot is no longer the
row's min, the mean rounds differently, and many elements differ in their last bits from the
first case's, while the reference is deterministic bit for bit (H100, 2026-11-24: caught
there in 4 of 4 runs). Robust: any difference in the old contents of the memory read shows,
however small its effect on the values; it does not depend on the problem's size or on a
tolerance, only on the memory holding something else the second time.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor ln_residual(torch::Tensor x, torch::Tensor residual, torch::Tensor weight,
                          torch::Tensor bias, double eps);
"""

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float block_sum(float v, float* smem) {
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < kWarps; ++w) total += smem[w];
    __syncthreads();
    return total;
}

__device__ __forceinline__ void block_min_max(float& lo, float& hi, float* smem) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, offset));
        hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, offset));
    }
    if (threadIdx.x % 32 == 0) {
        smem[threadIdx.x / 32] = lo;
        smem[kWarps + threadIdx.x / 32] = hi;
    }
    __syncthreads();
    for (int w = 0; w < kWarps; ++w) {
        lo = fminf(lo, smem[w]);
        hi = fmaxf(hi, smem[kWarps + w]);
    }
    __syncthreads();
}

__global__ void ln_residual_kernel(const float* __restrict__ x, const float* __restrict__ residual,
                                   const float* __restrict__ weight, const float* __restrict__ bias,
                                   float* __restrict__ out, int64_t cols, float eps) {
    extern __shared__ float row[];
    __shared__ float partial[2 * kWarps];
    const int64_t r = blockIdx.x;
    const float* xr = x + r * cols;
    float* orow = out + r * cols;
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
        const float v = xr[c];
        row[c] = v;
        lo = fminf(lo, v);
        hi = fmaxf(hi, v);
    }
    block_min_max(lo, hi, partial);
    // The pivot: whatever the output row holds (not written yet), kept inside [min, max].
    const float pivot = fminf(fmaxf(orow[0], lo), hi);
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) s += row[c] - pivot;
    const float mean = pivot + block_sum(s, partial) / static_cast<float>(cols);
    float sq = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
        const float d = row[c] - mean;
        sq += d * d;
    }
    const float rstd = rsqrtf(block_sum(sq, partial) / static_cast<float>(cols) + eps);
    const float* rr = residual + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
        orow[c] = (row[c] - mean) * rstd * weight[c] + bias[c] + rr[c];
    }
}

}  // namespace

torch::Tensor ln_residual(torch::Tensor x, torch::Tensor residual, torch::Tensor weight,
                          torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be float32 on cuda");
    TORCH_CHECK(residual.sizes() == x.sizes(), "residual must match x");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(cols > 0 && weight.numel() == cols && bias.numel() == cols, "weight/bias must match the last dim");
    TORCH_CHECK(cols * sizeof(float) <= 48 * 1024, "row too long for the shared-memory stage");
    const at::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xc = x.contiguous();
    const torch::Tensor rc = residual.contiguous();
    const torch::Tensor wc = weight.contiguous();
    const torch::Tensor bc = bias.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const int64_t rows = xc.numel() / cols;
    if (rows == 0) return out;
    ln_residual_kernel<<<static_cast<unsigned>(rows), kThreads, cols * sizeof(float),
                         at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), rc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(),
        out.data_ptr<float>(), cols, static_cast<float>(eps));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_ln_pivot_uninitialized",
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
        return _ext.ln_residual(x, residual, self.norm.weight, self.norm.bias, self.norm.eps)
