"""Dynamic defences used inside the candidate worker.

Guard regions around inputs, poisoned memory, output fingerprints, snapshots of the functions a
cheat would patch, and the profile of which PyTorch ops a forward runs.
"""

from __future__ import annotations

import builtins
import inspect
import time
from collections import Counter

import torch

GUARD_ELEMENTS = 1024

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
        "_addmm_activation",
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
    "embedding": {"embedding", "index_select", "gather"},
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


def guarded(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``tensor`` with poison before and after it in the same storage.

    A kernel that reads past either end of its input reads NaN (floats) or huge values.
    """
    fill = guard_fill(tensor)
    numel = tensor.numel()
    storage = torch.full(
        (numel + 2 * GUARD_ELEMENTS,), fill, dtype=tensor.dtype, device=tensor.device
    )
    storage[GUARD_ELEMENTS : GUARD_ELEMENTS + numel] = tensor.reshape(-1)
    return storage[GUARD_ELEMENTS : GUARD_ELEMENTS + numel].view(tensor.shape)


def guard_fill(tensor: torch.Tensor) -> float | int | bool:
    if tensor.is_floating_point():
        return float("nan")
    if tensor.dtype == torch.bool:
        return True
    return int(torch.iinfo(tensor.dtype).max)


def poison_memory(shapes: list[tuple[list[int], str]], device: str) -> None:
    """Leave NaN in freed memory of the outputs' sizes: unwritten output elements show up."""
    for shape, dtype_name in shapes:
        dtype = getattr(torch, dtype_name)
        if dtype.is_floating_point:
            block = torch.full(shape, float("nan"), dtype=dtype, device=device)
            del block


def fingerprint(
    outputs: list[torch.Tensor] | tuple[torch.Tensor, ...],
) -> list[tuple[float, float]]:
    """Cheap summary of outputs; taken at return and again after synchronization."""
    prints = []
    for out in outputs:
        values = out.detach().double()
        prints.append((float(values.nansum()), float(values.abs().nansum())))
    return prints


def settle(device: str) -> None:
    """Wait for every stream and give stray host threads a moment to show themselves."""
    if device == "cuda":
        torch.cuda.synchronize()
    time.sleep(0.02)


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Do the two tensors share any storage bytes?"""
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    a_store, b_store = a.untyped_storage(), b.untyped_storage()
    a_start, b_start = a_store.data_ptr(), b_store.data_ptr()
    return a_start < b_start + b_store.nbytes() and b_start < a_start + a_store.nbytes()


# --- snapshots of what a cheat would patch ------------------------------------------------------


_DESCRIPTORS = (staticmethod, classmethod, property)


def snapshot() -> dict[str, int]:
    """Identity of every function a timing or comparison could be fooled through."""
    import torch._dynamo  # noqa: F401  (importing it rewraps torch.manual_seed: do it first)
    import torch.nn.functional as functional

    owners: dict[str, object] = {
        "torch": torch,
        "torch.nn.functional": functional,
        "torch.Tensor": torch.Tensor,
        "torch.nn.Module": torch.nn.Module,
        "time": time,
        "builtins": builtins,
        "torch.profiler": torch.profiler,
        "torch.testing": torch.testing,
    }
    if torch.cuda.is_available():
        torch.cuda.init()  # lazy initialization rewrites torch.cuda state: do it before looking
        owners.update({"torch.cuda": torch.cuda, "torch.cuda.Event": torch.cuda.Event})
    marks = {}
    for owner_name, owner in owners.items():
        for name in dir(owner):
            if name in ("__dict__", "__doc__", "__weakref__", "__module__", "__annotations__"):
                continue
            # Static lookup: inherited entries count (Tensor.__eq__ lives on TensorBase, and a
            # cheat would shadow it on Tensor), no descriptor or lazy module import runs.
            value = inspect.getattr_static(owner, name, None)
            # Private flags (torch.cuda._initialized, ...) are state that changes on its own;
            # public flags and every function are what a cheat would flip or swap.
            if isinstance(value, bool):
                if not name.startswith("_"):
                    marks[f"{owner_name}.{name}"] = int(value)
            elif value is not None and (callable(value) or isinstance(value, _DESCRIPTORS)):
                marks[f"{owner_name}.{name}"] = id(value)
    marks.update(_settings())
    marks.update(_harness_marks())
    return marks


def _harness_marks() -> dict[str, int]:
    """The harness's own functions and tables, which run in the candidate's process too."""
    import sys

    marks = {}
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith("harness.") or module is None:
            continue
        for name, value in list(vars(module).items()):
            if name.startswith("__"):
                continue
            if callable(value):
                marks[f"{module_name}.{name}"] = id(value)
            elif isinstance(value, dict | list | set | tuple | str | int | float):
                marks[f"{module_name}.{name}"] = hash(repr(value))
    return marks


def _settings() -> dict[str, int]:
    """Global settings that change how fast the baselines run or how precise they are."""
    settings = {
        "torch.get_num_threads()": torch.get_num_threads(),
        "torch.get_num_interop_threads()": torch.get_num_interop_threads(),
        "torch.get_float32_matmul_precision()": hash(torch.get_float32_matmul_precision()),
        "torch.backends.cuda.matmul.allow_tf32": int(torch.backends.cuda.matmul.allow_tf32),
        "torch.backends.cudnn.allow_tf32": int(torch.backends.cudnn.allow_tf32),
        "torch.backends.cudnn.benchmark": int(torch.backends.cudnn.benchmark),
        "torch.backends.mkldnn.enabled": int(bool(torch.backends.mkldnn.enabled)),
        "torch.are_deterministic_algorithms_enabled()": int(
            torch.are_deterministic_algorithms_enabled()
        ),
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": int(
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
        ),
    }
    return settings


def changed(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """Names whose function or setting differs, and names that appeared or disappeared."""
    return sorted(
        name for name in before.keys() | after.keys() if before.get(name) != after.get(name)
    )


# --- which PyTorch ops a forward runs ------------------------------------------------------------


class OpProfile:
    """Top-level aten ops (called from Python or from C++) and CUDA kernels of one forward."""

    def __init__(self, aten_ops: list[str], cuda_kernels: list[str]) -> None:
        self.aten_ops = aten_ops
        self.cuda_kernels = cuda_kernels


FORWARD_RANGE = "kernelpilot::forward"


def profile_forward(fn, inputs: list, device: str) -> OpProfile:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        with torch.profiler.record_function(FORWARD_RANGE):
            fn(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return OpProfile(forward_ops(prof), kernels)


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
