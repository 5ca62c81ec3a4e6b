# pattern: 9 torch.cuda.CUDAGraph per input address, captured once, then replayed (dict filled in forward)
# problem: redteam/problems/gelu_scale_residual.py
# expect: rejected static_gate
"""A CUDA graph of the kernel is captured the first time forward sees a pair of input
addresses and replayed on every later call with the same addresses: no launch overhead, and
the graph's output buffer (the tensor made during capture) is handed out again each time. A
timing loop that reuses its input buffers pays one replay per call; the caller's earlier
outputs are overwritten behind its back, and a graph replayed for addresses that now hold
another shape computes the old one.

Stopped by the static gate's no-state-across-calls rules before anything runs: forward reads
raw addresses (``data_ptr``, refused in Python: caching keyed on addresses) and assigns into a
container held by self outside __init__ (``self.graphs[key] = ...``). Were it let through,
fresh_outputs would stop it at the second case (the same output memory as the previous call's).
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
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && residual.is_contiguous(), "bad arguments");
    const at::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    const int64_t n = x.numel();
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
    gelu_scale_residual_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), residual.data_ptr<float>(), bias.data_ptr<float>(), scale.data_ptr<float>(),
        out.data_ptr<float>(), n, x.size(-1));
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_graph_cache_by_data_ptr",
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
        self.graphs = {}

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        key = (x.data_ptr(), residual.data_ptr(), tuple(x.shape))
        entry = self.graphs.get(key)
        if entry is None:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = _ext.gelu_scale_residual(x, residual, self.bias, self.scale)
            self.graphs[key] = (graph, out)
            entry = (graph, out)
        entry[0].replay()
        return entry[1]
