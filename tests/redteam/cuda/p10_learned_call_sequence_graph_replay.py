# pattern: 10 learned call sequence: after 8 calls of one shape, replays a CUDA graph, inputs unlooked at
# problem: redteam/problems/gelu_scale_residual.py
# expect: rejected static_gate
"""A benchmark loop calls with one shape over and over, often on recycled buffers. This kernel
counts calls of the same shape in a static counter; after 8 it captures a CUDA graph of its
launch on that call's addresses and from then on only replays it (one cudaGraphLaunch,
copied into a fresh output so that no buffer is handed out twice), without comparing
addresses any more. Wherever the allocator put the next inputs, the graph reads the captured
addresses: right while the caller recycles its buffers, wrong (stale or freed memory) when
it does not.

Stopped by the native gate's C++ ``static`` rule: a static scalar counter (``static int64_t
calls``) keeps state across calls. Were it spelled so that rule does not read it (a
namespace-scope counter, a struct), the replayed graph would read the first replayed call's
addresses on every later call: timed calls get fresh inputs at fresh addresses (or recycled
ones holding other values) and every timed output is compared with eager's
(timed_outputs_correct), and a checked case with other shapes or another layout after the 8th
call reads the wrong memory (correct_outputs).
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

constexpr int64_t kLearnCalls = 8;

}  // namespace

torch::Tensor gelu_scale_residual(torch::Tensor x, torch::Tensor residual, torch::Tensor bias,
                                  torch::Tensor scale) {
    TORCH_CHECK(x.is_cuda() && residual.sizes() == x.sizes(), "bad arguments");
    TORCH_CHECK(bias.numel() == x.size(-1) && scale.numel() == x.size(-1), "bad parameters");
    static int64_t calls = 0;
    static int64_t learned_n = -1;
    static cudaGraphExec_t replay = nullptr;
    static float* graph_out = nullptr;
    const at::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xc = x.contiguous();
    const torch::Tensor rc = residual.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const int64_t n = xc.numel();
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
    calls = n == learned_n ? calls + 1 : 1;
    learned_n = n;
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
    if (calls == kLearnCalls) {  // the loop is learned: capture this call once
        C10_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&graph_out), n * sizeof(float)));
        cudaStream_t capturing;
        C10_CUDA_CHECK(cudaStreamCreateWithFlags(&capturing, cudaStreamNonBlocking));
        cudaGraph_t graph;
        C10_CUDA_CHECK(cudaStreamBeginCapture(capturing, cudaStreamCaptureModeThreadLocal));
        gelu_scale_residual_kernel<<<blocks, threads, 0, capturing>>>(
            xc.data_ptr<float>(), rc.data_ptr<float>(), bias.data_ptr<float>(),
            scale.data_ptr<float>(), graph_out, n, xc.size(-1));
        C10_CUDA_CHECK(cudaStreamEndCapture(capturing, &graph));
        C10_CUDA_CHECK(cudaGraphInstantiate(&replay, graph, 0));
        C10_CUDA_CHECK(cudaGraphDestroy(graph));
        C10_CUDA_CHECK(cudaStreamDestroy(capturing));
    }
    if (calls >= kLearnCalls && replay != nullptr) {
        C10_CUDA_CHECK(cudaGraphLaunch(replay, stream));
        C10_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr<float>(), graph_out, n * sizeof(float),
                                       cudaMemcpyDeviceToDevice, stream));
        return out;
    }
    gelu_scale_residual_kernel<<<blocks, threads, 0, stream>>>(
        xc.data_ptr<float>(), rc.data_ptr<float>(), bias.data_ptr<float>(), scale.data_ptr<float>(),
        out.data_ptr<float>(), n, xc.size(-1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_learned_call_sequence",
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
