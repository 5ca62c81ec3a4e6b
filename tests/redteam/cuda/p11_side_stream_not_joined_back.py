# pattern: 11 side stream waits for the current stream (inputs ready) but the current stream never waits for it
# problem: redteam/problems/gelu_scale_residual.py
# expect: incorrect stable_after_sync
"""Half of a correct side-stream join: an event recorded on the current stream makes the pool
stream wait for the inputs' producers before the kernel, but nothing makes the current stream
wait for the kernel before forward returns. The inputs are always right; the caller's next
work on its stream (the readers of the output, the allocator's reuse of the blocks freed
here) can run before the kernel has written the output.

Under the legacy default stream the kernel (about ten microseconds here) is done before the
harness looks at the output, and the values are right: the old harness passed it (H100,
2026-11-24). What shows it: the cases under a busy non-default current stream. There the
kernel and the harness's read of the output, queued on the current stream right after return
with no host synchronization in between, both wait for the same thing (the end of the input
copies) and are released at the same moment. The read is a gather of a few thousand elements
spread over the output, on a high-priority stream, so the block scheduler dispatches it ahead
of this low-priority pool stream's blocks: it reads elements the kernel has not written yet,
which change after the synchronize (stable_after_sync). That does not depend on the kernel
being long (the read starts when the kernel does, not some time after return), but it is a
race, not a certainty: on an H100 this entry was caught at the first such case in every run;
the same kernel on a high-priority pool stream (getStreamFromPool(true), the same priority as
the harness's stream) was caught in every run too, but in two of three only at a later case.
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

torch::Tensor gelu_scale_residual(torch::Tensor x, torch::Tensor residual, torch::Tensor bias,
                                  torch::Tensor scale) {
    TORCH_CHECK(x.is_cuda() && residual.sizes() == x.sizes(), "bad arguments");
    TORCH_CHECK(bias.numel() == x.size(-1) && scale.numel() == x.size(-1), "bad parameters");
    const at::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xc = x.contiguous();
    const torch::Tensor rc = residual.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const int64_t n = xc.numel();
    if (n == 0) return out;
    const cudaStream_t current = at::cuda::getCurrentCUDAStream().stream();
    const cudaStream_t side = c10::cuda::getStreamFromPool(false, x.get_device()).stream();
    cudaEvent_t inputs_ready;
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&inputs_ready, cudaEventDisableTiming));
    C10_CUDA_CHECK(cudaEventRecord(inputs_ready, current));
    C10_CUDA_CHECK(cudaStreamWaitEvent(side, inputs_ready, 0));
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
    gelu_scale_residual_kernel<<<blocks, threads, 0, side>>>(
        xc.data_ptr<float>(), rc.data_ptr<float>(), bias.data_ptr<float>(), scale.data_ptr<float>(),
        out.data_ptr<float>(), n, xc.size(-1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    C10_CUDA_CHECK(cudaEventDestroy(inputs_ready));
    // Missing: an event recorded on `side` here, waited for on `current`.
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_side_stream_not_joined_back",
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
