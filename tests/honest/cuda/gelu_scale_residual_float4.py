# pattern: honest fused bias/GELU/scale/residual, float4 with scalar head and tail, on the current stream
# problem: redteam/problems/gelu_scale_residual.py
# expect: ok
"""y = gelu(x + b) * s + r in one pass: float4 loads and stores over 16-byte-aligned groups
of four (a group may straddle two rows: the column is taken per lane), a scalar head and tail
for the elements outside them (any row length, any storage offset), a grid-stride loop (any
number of rows). Inputs in other memory layouts are made contiguous first. The launch is on
at::cuda::getCurrentCUDAStream(): ordered after whatever the caller queued there (the inputs'
producers) and before what it queues next (the outputs' readers), whichever stream is current.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor gelu_scale_residual(torch::Tensor x, torch::Tensor residual, torch::Tensor bias, torch::Tensor scale);
"""

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

namespace {

__device__ __forceinline__ float gelu_erf(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__device__ __forceinline__ float fused(float x, float r, const float* __restrict__ bias,
                                       const float* __restrict__ scale, int64_t c) {
    return gelu_erf(x + bias[c]) * scale[c] + r;
}

// Elements [0, n) of the flattened [rows, cols] tensors. head: elements before the first
// 16-byte-aligned group (0 when the pointers are aligned, all of them when they cannot be).
__global__ void gelu_scale_residual_kernel(const float* __restrict__ x, const float* __restrict__ r,
                                           const float* __restrict__ bias,
                                           const float* __restrict__ scale, float* __restrict__ out,
                                           int64_t n, int64_t cols, int64_t head) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t groups = (n - head) / 4;
    for (int64_t i = tid; i < head; i += stride) out[i] = fused(x[i], r[i], bias, scale, i % cols);
    for (int64_t g = tid; g < groups; g += stride) {
        const int64_t i = head + 4 * g;
        const float4 xv = *reinterpret_cast<const float4*>(x + i);
        const float4 rv = *reinterpret_cast<const float4*>(r + i);
        float4 o;
        o.x = fused(xv.x, rv.x, bias, scale, i % cols);
        o.y = fused(xv.y, rv.y, bias, scale, (i + 1) % cols);
        o.z = fused(xv.z, rv.z, bias, scale, (i + 2) % cols);
        o.w = fused(xv.w, rv.w, bias, scale, (i + 3) % cols);
        *reinterpret_cast<float4*>(out + i) = o;
    }
    for (int64_t i = head + 4 * groups + tid; i < n; i += stride) {
        out[i] = fused(x[i], r[i], bias, scale, i % cols);
    }
}

}  // namespace

torch::Tensor gelu_scale_residual(torch::Tensor x, torch::Tensor residual, torch::Tensor bias,
                                  torch::Tensor scale) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be float32 on cuda");
    TORCH_CHECK(residual.sizes() == x.sizes() && residual.scalar_type() == torch::kFloat32,
                "residual must match x");
    TORCH_CHECK(x.dim() >= 1 && bias.numel() == x.size(-1) && scale.numel() == x.size(-1),
                "bias and scale must match the last dim");
    const at::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xc = x.contiguous();
    const torch::Tensor rc = residual.contiguous();
    const torch::Tensor bc = bias.contiguous();
    const torch::Tensor sc = scale.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const int64_t n = xc.numel();
    if (n == 0) return out;
    const float* xp = xc.data_ptr<float>();
    const float* rp = rc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    // float4 only where x, r and out sit at the same offset modulo 16 bytes.
    const uintptr_t mis = reinterpret_cast<uintptr_t>(xp) % 16;
    const bool same = reinterpret_cast<uintptr_t>(rp) % 16 == mis &&
                      reinterpret_cast<uintptr_t>(op) % 16 == mis;
    const int64_t head = same ? std::min<int64_t>(n, static_cast<int64_t>((16 - mis) % 16 / 4)) : n;
    const int threads = 256;
    const int64_t work = head + (n - head + 3) / 4;
    const int blocks = static_cast<int>(std::min<int64_t>((work + threads - 1) / threads, 65535));
    gelu_scale_residual_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xp, rp, bc.data_ptr<float>(), sc.data_ptr<float>(), op, n, xc.size(-1), head);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_gelu_scale_residual",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["gelu_scale_residual"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.5)
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(features))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return _ext.gelu_scale_residual(x, residual, self.bias, self.scale)
