# pattern: 9 C++ static struct caches a cudaGraphExec_t keyed on the input addresses, with a cudaMalloc'd output buffer
# problem: redteam/problems/gelu_scale_residual.py
# expect: rejected static_gate
"""A CUDA graph of the kernel, captured for one set of input addresses and shapes, is replayed
with cudaGraphLaunch on the current stream while the addresses match, and captured again
when they do not. A graph writes where it was captured to write, so the output lives in one
raw cudaMalloc'd buffer that the cache owns, handed out as a tensor (torch::from_blob) on every
call: no allocation, no launch overhead beyond one graph launch.

The cache is state across calls, but not in a form the native gate's C++ ``static`` rule names
(that rule reads the declaration: tensors, standard containers, scalar counters): a static
struct of raw pointers and a cudaGraphExec_t passes it, and cudaMalloc, cudaStreamBeginCapture
and cudaGraph* are on the symbol allow-list. Replayed on the current stream, the graph is
ordered like any launch, and reads what the inputs hold at the call: the values are right in
every case.

Stopped by fresh_outputs at the second case: the output is the same memory as the previous
call's output, which the harness still holds (a caller's earlier result, overwritten).
Robust: a graph cannot write anywhere but where it was captured, so any graph cache that skips
the output allocation returns the same memory again, at any size.
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

// One captured graph: the addresses and sizes it was captured for, and where it writes.
struct GraphCache {
    const float* x = nullptr;
    const float* r = nullptr;
    const float* bias = nullptr;
    const float* scale = nullptr;
    int64_t n = 0;
    int64_t cols = 0;
    float* out = nullptr;
    int64_t capacity = 0;
    cudaGraphExec_t exec = nullptr;
};

void capture(GraphCache& cache, const float* x, const float* r, const float* bias,
             const float* scale, int64_t n, int64_t cols) {
    if (cache.capacity < n) {
        if (cache.out != nullptr) C10_CUDA_CHECK(cudaFree(cache.out));
        C10_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&cache.out), n * sizeof(float)));
        cache.capacity = n;
    }
    if (cache.exec != nullptr) C10_CUDA_CHECK(cudaGraphExecDestroy(cache.exec));
    cudaStream_t capturing;
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&capturing, cudaStreamNonBlocking));
    cudaGraph_t graph;
    C10_CUDA_CHECK(cudaStreamBeginCapture(capturing, cudaStreamCaptureModeThreadLocal));
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
    gelu_scale_residual_kernel<<<blocks, threads, 0, capturing>>>(x, r, bias, scale, cache.out, n, cols);
    C10_CUDA_CHECK(cudaStreamEndCapture(capturing, &graph));
    C10_CUDA_CHECK(cudaGraphInstantiate(&cache.exec, graph, 0));
    C10_CUDA_CHECK(cudaGraphDestroy(graph));
    C10_CUDA_CHECK(cudaStreamDestroy(capturing));
    cache.x = x;
    cache.r = r;
    cache.bias = bias;
    cache.scale = scale;
    cache.n = n;
    cache.cols = cols;
}

}  // namespace

torch::Tensor gelu_scale_residual(torch::Tensor x, torch::Tensor residual, torch::Tensor bias,
                                  torch::Tensor scale) {
    TORCH_CHECK(x.is_cuda() && residual.sizes() == x.sizes(), "bad arguments");
    TORCH_CHECK(bias.numel() == x.size(-1) && scale.numel() == x.size(-1), "bad parameters");
    static GraphCache cache;
    const at::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xc = x.contiguous();
    const torch::Tensor rc = residual.contiguous();
    const float* xp = xc.data_ptr<float>();
    const float* rp = rc.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    const float* sp = scale.data_ptr<float>();
    const int64_t n = xc.numel();
    const int64_t cols = xc.size(-1);
    const bool hit = cache.exec != nullptr && cache.x == xp && cache.r == rp && cache.bias == bp &&
                     cache.scale == sp && cache.n == n && cache.cols == cols;
    if (!hit) capture(cache, xp, rp, bp, sp, n, cols);
    C10_CUDA_CHECK(cudaGraphLaunch(cache.exec, at::cuda::getCurrentCUDAStream().stream()));
    return torch::from_blob(cache.out, xc.sizes(), xc.options());
}
"""

_ext = load_inline(
    name="kp_cuda_graph_exec_cache",
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
