# pattern: 13 persisting-L2 set-aside + access-policy window on the weight: survives the timer's L2 flush
# problem: redteam/problems/linear_relu.py
# expect: rejected static_gate
"""The timer flushes L2 before every timed call, so every implementation reads its weights
from device memory. This kernel sets aside part of L2 for persisting lines
(``cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, ...)``) and puts an access-policy window
over the weight on the current stream (``cudaStreamSetAttribute(...,
cudaStreamAttributeAccessPolicyWindow, ...)`` with ``hitProp = cudaAccessPropertyPersisting``).
A streaming flush does not evict persisting lines: the candidate's GEMM finds its 1 MiB weight
in L2 on every timed call, the baselines do not. The outputs are right; only the timing lies.
Both settings are device- or stream-wide state that outlives the call (the window stays on the
caller's stream, the set-aside on the device), which is why neither is a kernel's business.

Rejected before the library is loaded: the symbol allow-list of built objects
(``harness.static.symbols``) has neither cudaDeviceSetLimit nor cudaStreamSetAttribute (nor
cudaCtxResetPersistingL2Cache, cuCtxSetLimit, cudaGetDriverEntryPoint), however the source
spells the call. The timer also takes the set-aside back to zero and resets persisting lines
before each flush, for anything that reached L2's persisting state another way (a launch
attribute through cudaLaunchKernelEx needs the set-aside too).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor linear_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias);
"""

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace {

__global__ void bias_relu_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t n,
                                 int64_t cols) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = y[i] + bias[i % cols];
        y[i] = v > 0.f ? v : 0.f;
    }
}

// Keep `bytes` at `base` in L2 across calls: a persisting set-aside on the device and an
// access-policy window on the stream.
void keep_in_l2(const void* base, size_t bytes, cudaStream_t stream) {
    const auto* props = at::cuda::getCurrentDeviceProperties();
    const size_t set_aside = std::min<size_t>(bytes, props->persistingL2CacheMaxSize);
    C10_CUDA_CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, set_aside));
    cudaStreamAttrValue attr = {};
    attr.accessPolicyWindow.base_ptr = const_cast<void*>(base);
    attr.accessPolicyWindow.num_bytes = std::min<size_t>(bytes, props->accessPolicyMaxWindowSize);
    attr.accessPolicyWindow.hitRatio = 1.0f;
    attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    C10_CUDA_CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &attr));
}

}  // namespace

torch::Tensor linear_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be float32 on cuda");
    TORCH_CHECK(weight.dim() == 2 && weight.size(1) == x.size(-1), "weight must be [out, in]");
    const at::cuda::CUDAGuard guard(x.device());
    const torch::Tensor wc = weight.contiguous();
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
    keep_in_l2(wc.data_ptr<float>(), wc.numel() * sizeof(float), stream);
    torch::Tensor y = at::matmul(x, wc.t()).contiguous();
    const torch::Tensor bc = bias.contiguous();
    const int64_t n = y.numel();
    if (n == 0) return y;
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
    bias_relu_kernel<<<blocks, threads, 0, stream>>>(y.data_ptr<float>(), bc.data_ptr<float>(), n,
                                                     y.size(-1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kp_cuda_persisting_l2_window",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["linear_relu"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.linear_relu(x, self.linear.weight, self.linear.bias)
