# pattern: honest kernel on a pool stream, joined both ways with raw cudaEventRecord/cudaStreamWaitEvent
# problem: redteam/problems/gelu_scale_residual.py
# expect: ok
"""The fused kernel runs on a side stream from PyTorch's pool, ordered both ways against the
caller's current stream through the plain CUDA runtime API: an event recorded on the current
stream (after whatever the caller queued there: the producers of x and r) that the side stream
waits for before the launch, and an event recorded on the side stream after the launch that
the current stream waits for before forward returns (so the caller's next work, the readers of
the output, comes after the kernel). Both events are made without timing
(cudaEventDisableTiming) and destroyed before returning: cudaEventDestroy on an event still
pending is allowed, its resources are released once it completes.

Memory: every tensor here (the output, contiguous copies of strided inputs) is allocated on
the current stream and used on the side stream. The caching allocator hands a block freed
here to later work on the current stream only, and that work is queued after the wait on
``done``: no recordStream is needed.
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
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace {

__device__ __forceinline__ float gelu_erf(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__global__ void gelu_scale_residual_kernel(const float* __restrict__ x, const float* __restrict__ r,
                                           const float* __restrict__ bias,
                                           const float* __restrict__ scale, float* __restrict__ out,
                                           int64_t n, int64_t cols) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t c = i % cols;
        out[i] = gelu_erf(x[i] + bias[c]) * scale[c] + r[i];
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

    const cudaStream_t current = at::cuda::getCurrentCUDAStream().stream();
    const cudaStream_t side = c10::cuda::getStreamFromPool(false, x.get_device()).stream();
    cudaEvent_t inputs_ready;
    cudaEvent_t done;
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&inputs_ready, cudaEventDisableTiming));
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));

    // The side stream starts after everything already queued on the current stream.
    C10_CUDA_CHECK(cudaEventRecord(inputs_ready, current));
    C10_CUDA_CHECK(cudaStreamWaitEvent(side, inputs_ready, 0));

    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
    gelu_scale_residual_kernel<<<blocks, threads, 0, side>>>(
        xc.data_ptr<float>(), rc.data_ptr<float>(), bc.data_ptr<float>(), sc.data_ptr<float>(),
        out.data_ptr<float>(), n, xc.size(-1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    // The current stream goes on only after the kernel: its next work may read out.
    C10_CUDA_CHECK(cudaEventRecord(done, side));
    C10_CUDA_CHECK(cudaStreamWaitEvent(current, done, 0));

    C10_CUDA_CHECK(cudaEventDestroy(inputs_ready));
    C10_CUDA_CHECK(cudaEventDestroy(done));
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_gsr_side_stream_events",
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
