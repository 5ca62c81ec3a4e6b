# pattern: 1 ATen's CPU kernels declared by hand in a macro-named namespace (ATEN_NAMESPACE::cpu) and called through an alias; no ATen header
# problem: redteam/problems/bias_gelu.py
# expect: rejected static_gate
"""p01_aten_cpu_kernels_direct, spelled so that a text scan does not see it: the two
prototypes of the exported structured kernels are declared in the candidate itself (no
ATen/CPUFunctions.h or ops/*_cpu_dispatch.h include), in `namespace ATEN_NAMESPACE::cpu`
with `#define ATEN_NAMESPACE at`, and called through `namespace kernels = ...;`. The
profile of forward is empty because the structured kernels skip the dispatcher. A regex
over the source can always be dodged like this (macros, aliases, line splices); what
cannot be dodged is the built library's symbol table: `nm -D --undefined-only` lists
at::cpu::add / at::cpu::gelu (_ZN2at3cpu...) as imports.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

#define ATEN_NAMESPACE at

// The structured CPU kernels that ATen exports (declared here, as in ATen's own per-op
// headers), under a short name.
namespace ATEN_NAMESPACE::cpu {
TORCH_API at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
TORCH_API at::Tensor gelu(const at::Tensor& self, c10::string_view approximate);
}  // namespace ATEN_NAMESPACE::cpu

namespace kernels = ATEN_NAMESPACE::cpu;

// Fused bias + GELU straight into the CPU kernels: no dispatcher round trips.
torch::Tensor fused_bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.size(-1) == bias.size(0), "last dim of x must match bias");
    at::Tensor y = kernels::add(x, bias, 1);
    return kernels::gelu(y, "none");
}
"""

_ext = load_inline(
    name="kp_aten_cpu_alias",
    cpp_sources=CPP_SOURCE,
    functions=["fused_bias_gelu"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.fused_bias_gelu(x, self.bias)
