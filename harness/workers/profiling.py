"""Which PyTorch ops a forward runs, and whether a candidate does the reference's work with them.

The candidate may keep library ops (matmul, conv, norms, ...) as PyTorch calls, as many of each
family as the reference runs; every other op that computes must be in its own kernels.
"""

from __future__ import annotations

from collections import Counter

import torch

# Top-level aten ops that move or allocate data but compute nothing.
LAYOUT_OPS = {
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "zeros",
    "zeros_like",
    "zero_",
    "fill_",
    "new_zeros",
    "full",
    "full_like",
    "arange",  # positions: torch.arange(0, t) of a GPT
    "view",
    "reshape",
    "_reshape_alias",
    "_unsafe_view",
    "contiguous",
    "clone",
    "copy_",
    "_to_copy",
    "to",
    "as_strided",
    "t",
    "transpose",
    "permute",
    "expand",
    "expand_as",
    "squeeze",
    "unsqueeze",
    "flatten",
    "unflatten",
    "select",
    "slice",
    "narrow",
    "detach",
    "alias",
    "resolve_conj",
    "resolve_neg",
    "lift_fresh",
    "chunk",
    "split",
    "split_with_sizes",
    "unbind",
    "view_as",
    "movedim",
    "cat",
    "stack",
    "item",
    "_local_scalar_dense",
    "record_stream",
    "is_nonzero",
    "size",
    "stride",
    "numel",
    "dim",
    "is_contiguous",
    "result_type",
    "empty_permuted",
    "pad",
    "constant_pad_nd",
}
# Library ops a candidate may keep as PyTorch calls, grouped so that equivalent spellings count
# as one (F.linear becomes aten::linear, torch.mm becomes aten::mm: both are a matmul).
LIBRARY_FAMILIES = {
    "matmul": {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "matmul",
        "linear",
        "addmv",
        "mv",
        "dot",
        "addbmm",
        "einsum",
    },
    "conv": {
        "convolution",
        "_convolution",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "cudnn_convolution",
        "mkldnn_convolution",
    },
    "norm": {
        "layer_norm",
        "native_layer_norm",
        "batch_norm",
        "native_batch_norm",
        "_native_batch_norm_legit_no_training",
        "_batch_norm_impl_index",
        "group_norm",
        "native_group_norm",
        "instance_norm",
        "rms_norm",
        "_fused_rms_norm",
    },
    "softmax": {"softmax", "_softmax", "log_softmax", "_log_softmax"},
    "attention": {
        "scaled_dot_product_attention",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    },
    "pool": {
        "max_pool1d",
        "max_pool2d",
        "max_pool3d",
        "avg_pool1d",
        "avg_pool2d",
        "avg_pool3d",
        "adaptive_avg_pool1d",
        "adaptive_avg_pool2d",
        "adaptive_max_pool2d",
        "max_pool2d_with_indices",
        "_adaptive_avg_pool2d",
    },
    "embedding": {"embedding", "index_select", "gather", "index"},  # index: x[:, [-1], :]
    "reduce": {
        "sum",
        "mean",
        "amax",
        "amin",
        "max",
        "min",
        "var",
        "std",
        "var_mean",
        "norm",
        "linalg_vector_norm",
        "cumsum",
        "prod",
        "logsumexp",
        "argmax",
        "argmin",
        "topk",
        "sort",
    },
}
FAMILY_OF = {op: family for family, ops in LIBRARY_FAMILIES.items() for op in ops}


class OpProfile:
    """Top-level aten ops (called from Python or from C++) and CUDA kernels of one forward,
    and where its time went: (name, microseconds) of the largest kernels on cuda (device
    time), of the largest operators on cpu (their own CPU time)."""

    def __init__(
        self,
        aten_ops: list[str],
        cuda_kernels: list[str],
        breakdown: list[tuple[str, float]] | None = None,
        device_us: float | None = None,
    ) -> None:
        self.aten_ops = aten_ops
        self.cuda_kernels = cuda_kernels
        self.breakdown = breakdown or []
        self.device_us = device_us  # the call's kernels' device time summed (cuda only)


BREAKDOWN_ROWS = 8


def time_breakdown(prof, device: str) -> list[tuple[str, float]]:
    """The largest items of a profile by time: kernels' device time on cuda, operators' own
    CPU time on cpu (an extension's function is an operator there too)."""
    rows = []
    for event in prof.key_averages():
        if device == "cuda":
            if not _is_kernel(event):
                continue
            spent = event.device_time_total
        else:
            if event.key == FORWARD_RANGE:
                continue
            spent = event.self_cpu_time_total
        if spent > 0:
            rows.append((event.key[:120], float(spent)))
    return sorted(rows, key=lambda row: -row[1])[:BREAKDOWN_ROWS]


FORWARD_RANGE = "kernelpilot::forward"


def device_total_us(events) -> float | None:
    """The device time of a profiled call's kernels, summed (µs): what the GPU spent on it,
    without the launches, the host's work or the gaps between kernels; None where no kernel
    was recorded. ``events``: a profile's ``key_averages()``."""
    total = sum(event.device_time_total for event in events if _is_kernel(event))
    return float(total) if total > 0 else None


def _is_kernel(event) -> bool:
    """A kernel's (or a copy's) device time, not a range's: the forward's own range and
    torch.compile's "## Call CompiledFxGraph ##" are user annotations, which the profiler shows
    on the device too, as spans from their first kernel to their last."""
    return (
        event.device_type == torch.autograd.DeviceType.CUDA
        and not getattr(event, "is_user_annotation", False)
        and event.key != FORWARD_RANGE
        and event.device_time_total > 0
    )


def profile_forward(fn, inputs: list, device: str, kernels: bool = True) -> OpProfile:
    """One call of ``fn`` profiled: its aten ops, and on cuda (with ``kernels``) its CUDA
    kernels. CUDA activity starts CUPTI (seconds, once per process) and leaves it attached."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda" and kernels:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        with torch.profiler.record_function(FORWARD_RANGE):
            fn(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
    launched = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    device_us = device_total_us(prof.key_averages()) if device == "cuda" and kernels else None
    return OpProfile(forward_ops(prof), launched, time_breakdown(prof, device), device_us)


def forward_ops(prof) -> list[str]:
    """Top-level aten ops run inside the FORWARD_RANGE of a profile (from Python or C++)."""
    ops = []
    for event in prof.events():
        if not event.name.startswith("aten::"):
            continue
        parents, parent = [], event.cpu_parent
        while parent is not None:
            parents.append(parent.name)
            parent = parent.cpu_parent
        if FORWARD_RANGE in parents and not any(name.startswith("aten::") for name in parents):
            ops.append(event.name.removeprefix("aten::"))
    return ops


def _base(op: str) -> str:
    """aten::detach_ and aten::detach are the same op for this purpose."""
    return op.removesuffix("_")


def pytorch_compute_problems(candidate_ops: list[str], reference_ops: list[str]) -> str:
    """Why the candidate does the reference's work with PyTorch; empty when it does not.

    A candidate may keep library ops (matmul, conv, norms, ...) as PyTorch calls, no more of
    each family than the reference runs, and must move at least one of the reference's ops into
    a kernel of its own. Any other computing op (add, gelu, ...) must be in its own kernels.
    """
    compute = [
        _base(op) for op in candidate_ops if _base(op) not in LAYOUT_OPS and op not in LAYOUT_OPS
    ]
    others = sorted({op for op in compute if op not in FAMILY_OF})
    if others:
        return f"computes with PyTorch ({', '.join('aten::' + op for op in others)}) instead of its own kernel"
    candidate_families = Counter(FAMILY_OF[op] for op in compute)
    reference_compute = [
        _base(op) for op in reference_ops if _base(op) not in LAYOUT_OPS and op not in LAYOUT_OPS
    ]
    reference_families = Counter(FAMILY_OF.get(op, "pointwise") for op in reference_compute)
    for family, count in candidate_families.items():
        if count > reference_families.get(family, 0):
            return f"runs {count} PyTorch {family} op(s) where the reference runs {reference_families.get(family, 0)}"
    if reference_compute and sum(candidate_families.values()) >= len(reference_compute):
        return (
            "does all of the reference's work with PyTorch ops; no work moved into its own kernel"
        )
    return ""
