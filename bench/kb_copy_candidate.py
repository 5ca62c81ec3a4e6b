"""The KernelBench sweep's generic candidate (bench/kb_sweep.py): a problem's own module,
renamed ``ModelNew``, whose forward passes every output tensor through a copy kernel of its
own (``load_inline``: CUDA on cuda, a C++ loop on cpu). The harness rejects it: it does the
reference's work with PyTorch ops. What it measures is whether a problem gets that far."""

from __future__ import annotations

import ast

COPY_NAME = "KP_SWEEP_COPY"

COPY_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cstdint>

// 16-byte words over the aligned part, bytes over the rest: any dtype, any size.
__global__ void copy_kernel(const uint4* __restrict__ src16, uint4* __restrict__ dst16,
                            int64_t words, const unsigned char* __restrict__ src,
                            unsigned char* __restrict__ dst, int64_t tail_begin, int64_t bytes) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (int64_t i = tid; i < words; i += stride) dst16[i] = src16[i];
    for (int64_t i = tail_begin + tid; i < bytes; i += stride) dst[i] = src[i];
}

torch::Tensor copy_out(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "copy_out: expects a cuda tensor");
    const torch::Tensor src = x.contiguous();
    torch::Tensor out = torch::empty(src.sizes(), src.options());
    const int64_t bytes = src.numel() * static_cast<int64_t>(src.element_size());
    if (bytes == 0) return out;
    const at::cuda::CUDAGuard guard(src.device());
    const auto* from = static_cast<const unsigned char*>(src.data_ptr());
    auto* to = static_cast<unsigned char*>(out.data_ptr());
    const bool aligned = reinterpret_cast<uintptr_t>(from) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(to) % 16 == 0;
    const int64_t words = aligned ? bytes / 16 : 0;
    const int64_t work = std::max<int64_t>(words, bytes - 16 * words);
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((work + threads - 1) / threads, 1 << 20));
    copy_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const uint4*>(from), reinterpret_cast<uint4*>(to), words, from, to,
        16 * words, bytes);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

COPY_CPP = r"""
#include <torch/extension.h>
#include <cstdint>

torch::Tensor copy_out(torch::Tensor x) {
    const torch::Tensor src = x.contiguous();
    torch::Tensor out = torch::empty(src.sizes(), src.options());
    const int64_t bytes = src.numel() * static_cast<int64_t>(src.element_size());
    const auto* from = static_cast<const unsigned char*>(src.data_ptr());
    auto* to = static_cast<unsigned char*>(out.data_ptr());
    for (int64_t i = 0; i < bytes; ++i) to[i] = from[i];
    return out;
}
"""

COPY_TAIL = '''
import torch
from torch.utils.cpp_extension import load_inline

{name}_SOURCE = r"""{source}"""

{name} = load_inline(
    name="kp_sweep_copy_{device}",
    {sources},
    functions=["copy_out"],
    extra_cflags=["-O3"],{cuda_flags}
)


def kp_sweep_copied(value):
    if isinstance(value, torch.Tensor):
        return {name}.copy_out(value)
    if isinstance(value, tuple):
        return tuple(kp_sweep_copied(item) for item in value)
    if isinstance(value, list):
        return [kp_sweep_copied(item) for item in value]
    return value
'''


def copy_candidate(source: str, class_name: str, device: str) -> str:
    """The problem's source with ``class_name`` renamed ``ModelNew`` (so the parameters' names
    match the reference's), its forward renamed ``reference_forward`` and a forward that
    passes that one's outputs through the copy kernel."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == class_name:
            node.id = "ModelNew"
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            node.name = "ModelNew"
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    item.name = "reference_forward"
            node.body.append(
                ast.parse(
                    "def forward(self, *inputs):\n"
                    "    return kp_sweep_copied(self.reference_forward(*inputs))\n"
                ).body[0]
            )
    if device == "cuda":
        sources = (
            f'cpp_sources="torch::Tensor copy_out(torch::Tensor x);",\n'
            f"    cuda_sources={COPY_NAME}_SOURCE"
        )
        cuda_flags = '\n    extra_cuda_cflags=["-O3"],'
    else:
        sources, cuda_flags = f"cpp_sources={COPY_NAME}_SOURCE", ""
    tail = COPY_TAIL.format(
        name=COPY_NAME,
        source=COPY_CUDA if device == "cuda" else COPY_CPP,
        device=device,
        sources=sources,
        cuda_flags=cuda_flags,
    )
    return ast.unparse(tree) + "\n\n" + tail
