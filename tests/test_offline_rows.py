"""The offline proposer's row kernels: a softmax or log-softmax, or a row's sum, mean or 2-norm
kept as a dimension of 1, over the last dimension, fused with the pointwise ops before and after
it (agents.offline.rows). Where the proposer makes them (cuda, long rows), which reductions
become one and with what, and built candidates matching their references on other sizes,
strided inputs and the values where they are delicate (+inf, a row of -inf, NaN, a row of
zeros): on cpu and cuda, with the rule opened to every device and width."""

from __future__ import annotations

import importlib.util
import types

import pytest
import torch

from agents.offline import propose_here, rows
from harness.problem.cases import make_inputs
from harness.problem.load import problem_from_target
from harness.static.native import check_native
from harness.static.python import check_python
from tests.conftest import embedded_source, write_module
from tests.test_offline_proposer import build_in_parallel, construct, import_candidate

HEADER = """
import torch
import torch.nn as nn
import torch.nn.functional as F


"""
# Attention-style: a scaled, masked softmax (the mask broadcast over the middle dimension,
# the temperature one value per row) then a scale; beside it a log-softmax of the input.
MASKED = """
class Model(nn.Module):
    def forward(self, x, mask, t):
        a = F.softmax(x / (t.abs() + 0.5) + mask, dim=-1)
        return a * 2.0, torch.log_softmax(x, -1) + 1.0


def get_inputs():
    return [torch.randn(8, 16, 64), torch.randn(8, 1, 64), torch.randn(8, 16, 1)]
"""
OTHER_DIM = """
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x * 2.0 - 1.0, dim=1) * 3.0 + 1.0


def get_inputs():
    return [torch.randn(4, 8, 16)]
"""
MODULES = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Softmax(dim=-1)
        self.second = nn.LogSoftmax(dim=2)

    def forward(self, x):
        return self.second(self.first(x) * 3.0), x.softmax(-1, dtype=torch.float64)


def get_inputs():
    return [torch.randn(4, 8, 16)]
"""
# The bias [4, 1, 8, 1] indexes two separate runs of the rows: not readable a row at a time.
TWO_RUNS = """
class Model(nn.Module):
    def forward(self, x, bias):
        return F.softmax(x + bias, dim=-1)


def get_inputs():
    return [torch.randn(4, 3, 8, 16), torch.randn(4, 1, 8, 1)]
"""
# The weight is read after the softmax only: where x's last dimension broadcasts at run time
# (1 wide), softmax's rows are not the kernel's rows, and a guard sends the call back.
WEIGHTED = """
class Model(nn.Module):
    def forward(self, x, w):
        return F.softmax(x, dim=-1) * w


def get_inputs():
    return [torch.randn(4, 16), torch.randn(4, 16)]
"""


# KernelBench's L1 and L2 norms (level 1, 38 and 39), a row centred on its mean, and the row
# sums the row kernel does not take: kept dimension missing, another dimension, another norm,
# another dtype.
NORMS = """
class Model(nn.Module):
    def forward(self, x, y):
        l1 = x / torch.sum(torch.abs(x), dim=1, keepdim=True)
        l2 = y / y.norm(p=2, dim=-1, keepdim=True)
        centred = (x - x.mean([-1], keepdim=True)) * 2.0
        others = (y.sum(-1) * 2.0, y.sum(0, keepdim=True) + 1.0, y / torch.norm(y, p=1, dim=-1, keepdim=True),
                  (y.sum(-1, keepdim=True, dtype=torch.float64) + 1.0).float())
        return l1, l2, centred, others


def get_inputs():
    return [torch.randn(6, 32), torch.randn(6, 32)]
"""


@pytest.fixture
def rows_everywhere(monkeypatch):
    """Row kernels on every device and row width: what they compute is the same everywhere."""
    monkeypatch.setattr(rows, "ROW_DEVICES", {"cpu", "cuda"})
    monkeypatch.setattr(rows, "ROW_MIN_WIDTH", 1)
    monkeypatch.setattr(rows, "SUM_MIN_WIDTH", 1)


# Shapes other than the traced ones: a whole-row input called broadcast (w [4, 1], x [4, 1]), a
# one-value-a-row input called whole (c [4, 16]: the guard sends the call back), and a softmax
# whose rank changes with its input (z.squeeze() of [4, 3, 16] or [1, 1, 16]).
RESHAPED = """
class Model(nn.Module):
    def forward(self, x, w, b, c, z):
        y = x * 2.0 + w
        s = F.softmax(y, dim=-1)
        t = F.softmax(x + b, dim=-1) * c
        return y, s * 3.0, s + 1.0, t, torch.softmax(z.squeeze() * 2.0, dim=-1)


def get_inputs():
    return [torch.randn(4, 16), torch.randn(4, 16), torch.randn(16), torch.randn(4, 1),
            torch.randn(4, 1, 16)]
"""


def proposal_of(tmp_path, source: str, device: str = "cpu", name: str = "model"):
    path = write_module(tmp_path, name, HEADER + source)
    problem = problem_from_target(f"{path}:Model", device, None)
    proposal = propose_here(problem)
    assert proposal.candidate is not None, proposal.reason
    text = proposal.candidate.source
    return problem, proposal, text, text[text.index("    def forward(") :]


def test_row_kernels_are_made_on_cuda_for_long_rows_only(tmp_path) -> None:
    wide = OTHER_DIM.replace("dim=1", "dim=-1").replace("(4, 8, 16)", f"(2, {rows.ROW_MIN_WIDTH})")
    _, proposal, _, _ = proposal_of(tmp_path, wide, "cuda", name="wide")
    assert "[mul, sub, softmax, mul, add]" in proposal.reason
    narrow = wide.replace(f"(2, {rows.ROW_MIN_WIDTH})", f"(2, {rows.ROW_MIN_WIDTH - 1})")
    for device, source in (("cuda", narrow), ("cpu", wide)):
        _, proposal, _, forward = proposal_of(tmp_path, source, device, name=f"not_{device}")
        assert "torch.softmax(sub, dim=-1)" in forward.replace(" = ", "="), device
        assert "left to PyTorch" not in proposal.reason  # not recognised, not refused


@pytest.mark.usefixtures("rows_everywhere")
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_softmax_joins_the_ops_before_and_after_it_in_one_row_kernel(tmp_path, device) -> None:
    _, proposal, source, forward = proposal_of(tmp_path, MASKED, device)
    assert "[abs, add, div, add, softmax, mul]; [log_softmax, add]" in proposal.reason
    assert "F.softmax" not in forward and "log_softmax" not in forward
    assert proposal.fused_chains == 2
    native = embedded_source(source, "_CPP_SOURCE")
    if device == "cuda":
        native += embedded_source(source, "_CUDA_SOURCE")
    for dtype in ("float32", "bfloat16"):
        assert check_native(native, dtype) == []
    assert check_python(source, "Model", "float32") == []


@pytest.mark.usefixtures("rows_everywhere")
def test_softmaxes_the_row_kernel_cannot_compute_stay_pytorch_calls(tmp_path) -> None:
    _, proposal, _, forward = proposal_of(tmp_path, OTHER_DIM)
    assert "torch.softmax(sub, dim = 1)" in forward.replace("=", " = ").replace("  ", " ")
    assert proposal.fused_chains == 2  # the chains before and after it
    _, proposal, _, forward = proposal_of(tmp_path, MODULES, name="modules")
    # nn.Softmax and nn.LogSoftmax (dim=2 of a 3-d input: the last) are rows, one per kernel;
    # a softmax into float64 is another dtype and stays
    assert "[softmax, mul]; [log_softmax]" in proposal.reason
    assert "x.softmax(-1, dtype = torch.float64)" in forward.replace("=", " = ")
    _, proposal, _, forward = proposal_of(tmp_path, TWO_RUNS, name="two_runs")
    # the add cannot join the softmax, and alone it is eager's one pass
    assert "[softmax]; left to PyTorch (no fewer passes fused): add" in proposal.reason


@pytest.mark.usefixtures("rows_everywhere")
def test_a_row_sum_joins_the_ops_it_reduces_and_those_after_it(tmp_path) -> None:
    _, proposal, source, forward = proposal_of(tmp_path, NORMS, name="norms")
    # the abs before the sum joins it, though the sum is one value a row; the 2-norm and its
    # division are two reads and a write fused or not, and stay PyTorch's
    assert "[abs, sum, div]; [mean, sub, mul]; left to" in proposal.reason
    assert "left to PyTorch (no fewer passes fused): norm, div" in proposal.reason
    assert "torch.sum(" not in forward and ".mean(" not in forward
    kept = (".norm(p=2", ".sum(-1)", ".sum(0, keepdim=True)", "p=1", "dtype=torch.float64")
    for call in kept:
        assert call in forward.replace(" = ", "="), call
    for dtype in ("float32", "bfloat16"):
        assert check_native(embedded_source(source, "_CPP_SOURCE"), dtype) == []
    assert check_python(source, "Model", "float32") == []


def test_row_sums_are_fused_on_cuda_from_their_width_on(tmp_path) -> None:
    l1 = NORMS.replace("(6, 32)", f"(6, {rows.SUM_MIN_WIDTH})")
    _, proposal, _, _ = proposal_of(tmp_path, l1, "cuda", name="wide_sums")
    assert "[abs, sum, div]; [mean, sub, mul]" in proposal.reason
    narrow = NORMS.replace("(6, 32)", f"(6, {rows.SUM_MIN_WIDTH - 1})")
    for device, source in (("cuda", narrow), ("cpu", l1)):
        path = write_module(tmp_path, f"narrow_{device}", HEADER + source)
        proposal = propose_here(problem_from_target(f"{path}:Model", device, None))
        assert "sum, div" not in proposal.reason and "mean, sub" not in proposal.reason, device


# Groups that, each convex alone, would wait on each other through a third. Two sums: the first
# sum's group reads h2 (from the second sum's group), which reads cumsum, which reads the abs
# that the first sum's source would join after the groups have grown. A softmax's group, while
# they grow: the where would join the softmax's group though it waits on the abs's cumsum.
CROSSED = {
    "sums": """
class Model(nn.Module):
    def forward(self, x, y):
        a = x.abs()
        s = torch.cumsum(a, dim=-1)
        q = y / y.sum(-1, keepdim=True)
        h1 = s * q
        h2 = q + 1.0
        m = x / a.sum(-1, keepdim=True) * h2
        return h1, m


def get_inputs():
    return [torch.randn(4, 16), torch.randn(4, 16)]
""",
    "softmax": """
class Model(nn.Module):
    def forward(self, x, y, c):
        a = x.abs()
        s = torch.cumsum(a, dim=-1)
        p = torch.softmax(y, -1)
        h1 = s * p
        n = torch.where(c, a, p + 1.0)
        return h1, n * 2.0


def get_inputs():
    return [torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8), torch.randn(2, 1, 4, 8) > 0]
""",
}


@pytest.mark.usefixtures("rows_everywhere")
@pytest.mark.parametrize("name", sorted(CROSSED))
def test_groups_never_wait_on_each_other(tmp_path, name) -> None:
    _, proposal, source, _ = proposal_of(tmp_path, CROSSED[name], "cuda", name=f"crossed_{name}")
    assert proposal.fused_chains >= 2, proposal.reason
    assert check_python(source, "Model", "float32") == []


@pytest.mark.usefixtures("rows_everywhere")
@pytest.mark.slow
def test_built_row_sums_match_the_reference(tmp_path) -> None:
    problem, _, source, _ = proposal_of(tmp_path, NORMS, name="norms")
    path = write_module(tmp_path, "norms_candidate", source)
    build_in_parallel([path])
    reference, fused = construct(problem, import_candidate(path), 3)
    for name, inputs in sum_cases(make_inputs(problem, seed=3), "cpu").items():
        with torch.no_grad():
            assert_matches(flat(fused(*inputs)), flat(reference(*inputs)), name)


@pytest.mark.usefixtures("rows_everywhere")
@pytest.mark.slow
def test_built_row_kernels_match_the_reference_where_softmax_is_delicate(tmp_path) -> None:
    problem, _, source, _ = proposal_of(tmp_path, MASKED)
    weighted, _, weighted_source, forward = proposal_of(tmp_path, WEIGHTED, name="weighted")
    assert "torch.broadcast_shapes(x.shape) == torch.broadcast_shapes(x.shape, w.shape)" in forward
    paths = [write_module(tmp_path, name, text) for name, text in
             (("candidate", source), ("weighted_candidate", weighted_source))]  # fmt: skip
    build_in_parallel(paths)
    reference, fused = construct(problem, import_candidate(paths[0]), 3)
    for name, inputs in delicate_cases(make_inputs(problem, seed=3), "cpu").items():
        with torch.no_grad():
            assert_matches(fused(*inputs), reference(*inputs), name)
    reference, fused = construct(weighted, import_candidate(paths[1]), 3)
    for x in (torch.randn(4, 16), torch.randn(4, 1), torch.randn(4, 16)[:, ::2]):
        w = torch.randn(4, 16) if x.shape[1] != 8 else torch.randn(4, 8)
        with torch.no_grad():
            assert_matches([fused(x, w)], [reference(x, w)], f"weighted {tuple(x.shape)}")


@pytest.mark.usefixtures("rows_everywhere")
@pytest.mark.slow
def test_built_row_kernels_follow_the_shapes_they_are_called_with(tmp_path) -> None:
    problem, proposal, source, _ = proposal_of(tmp_path, RESHAPED, name="reshaped")
    assert proposal.fused_chains == 3, proposal.reason
    path = write_module(tmp_path, "reshaped_candidate", source)
    build_in_parallel([path])
    reference, fused = construct(problem, import_candidate(path), 3)
    x, w, b, c, z = make_inputs(problem, seed=3)
    cases = {
        "traced": (x, w, b, c, z),
        "w one a row": (x, w[:, :1], b, c, z),
        "w one value": (x, w[:1, :1], b, c, z),
        "x one a row": (x[:, :1], w, b, c, z),
        "c whole rows": (x, w, b, c.expand(4, 16).clone(), z),
        "z of rank 3": (x, w, b, c, torch.randn(4, 3, 16)),
        "z of rank 1": (x, w, b, c, torch.randn(1, 1, 16)),
    }
    for name, inputs in cases.items():
        with torch.no_grad():
            assert_matches(fused(*inputs), reference(*inputs), name)


@pytest.mark.usefixtures("rows_everywhere")
@pytest.mark.gpu
def test_row_kernels_match_the_reference_on_cuda(tmp_path) -> None:
    """On cuda: rows kept in shared memory (64 and 13 wide, vectorized and not) and read
    twice (20000 wide), float32 and bfloat16, strided and special-valued inputs."""
    problem, _, source, _ = proposal_of(tmp_path, MASKED, "cuda")
    path = write_module(tmp_path, "cuda_candidate", source)
    reference, fused = construct(problem, built_here(path), 3)
    reference, fused = reference.cuda(), fused.cuda()
    for width in (64, 13, 20000):
        for dtype in (torch.float32, torch.bfloat16):
            inputs = [
                torch.randn(6, 5, width, dtype=dtype, device="cuda"),
                torch.randn(6, 1, width, dtype=dtype, device="cuda"),
                torch.randn(6, 5, 1, dtype=dtype, device="cuda"),
            ]
            for name, case in delicate_cases(inputs, "cuda").items():
                with torch.no_grad():
                    assert_matches(fused(*case), reference(*case), f"{width} {dtype} {name}")


@pytest.mark.usefixtures("rows_everywhere")
@pytest.mark.gpu
def test_row_sums_match_the_reference_on_cuda(tmp_path) -> None:
    """On cuda: rows of 32, 13 (not vectorized) and 20000, float32 and bfloat16."""
    problem, _, source, _ = proposal_of(tmp_path, NORMS, "cuda", name="norms")
    path = write_module(tmp_path, "cuda_norms", source)
    reference, fused = construct(problem, built_here(path), 3)
    reference, fused = reference.cuda(), fused.cuda()
    for width in (32, 13, 20000):
        for dtype in (torch.float32, torch.bfloat16):
            inputs = [torch.randn(6, width, dtype=dtype, device="cuda") for _ in range(2)]
            for name, case in sum_cases(inputs, "cuda").items():
                with torch.no_grad():
                    assert_matches(
                        flat(fused(*case)), flat(reference(*case)), f"{width} {dtype} {name}"
                    )


def built_here(path) -> types.ModuleType:
    """A CUDA candidate imported, and so built, in this process (trusted: the proposer's own
    source); ``import_candidate`` looks up the CPU build cache."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    candidate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(candidate)
    return candidate


def sum_cases(inputs: list[torch.Tensor], device: str) -> dict[str, list[torch.Tensor]]:
    x, y = inputs
    special = x.clone()
    special[0, 3] = float("inf")  # the L1 row is NaN and 0, as eager's
    special[1, :] = 0.0  # a row of zeros: 0 / 0
    special[2, 5] = float("nan")
    width = x.shape[-1]
    return {
        "traced": inputs,
        "other sizes": [torch.randn(3, width, device=device, dtype=x.dtype)] * 2,
        "strided": [x.t().contiguous().t(), y[:, :].clone()],
        "rows of a transposed tensor": [
            torch.randn(width, x.shape[0], device=device, dtype=x.dtype).t(),
            y,
        ],
        "special values": [special, special.clone()],
    }


def flat(outputs) -> list[torch.Tensor]:
    """A model's outputs as a flat list (NORMS returns a tuple holding a tuple)."""
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    return [tensor for item in outputs for tensor in flat(item)]


def delicate_cases(inputs: list[torch.Tensor], device: str) -> dict[str, list[torch.Tensor]]:
    x, mask, t = inputs
    special = x.clone()
    special[0, 0, 3] = float("inf")  # the row is NaN
    special[0, 1, :] = float("-inf")  # the row is NaN
    special[0, 2, 5] = float("nan")  # the row is NaN
    special[0, 3, 7] = float("-inf")  # 0, and -inf for the log-softmax
    width = x.shape[-1]
    return {
        "traced": inputs,
        "other sizes": [
            torch.randn(3, 7, width, device=device, dtype=x.dtype),
            mask[:3],
            t[:3, :1],
        ],
        "strided": [x.transpose(0, 1).contiguous().transpose(0, 1), mask, t],
        "transposed rows": [
            torch.randn(x.shape[0], width, x.shape[1], device=device, dtype=x.dtype).transpose(
                1, 2
            ),
            mask,
            t,
        ],
        "special values": [special, mask, t],
    }


def assert_matches(ours, theirs, name: str) -> None:
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine.shape == reference.shape and mine.dtype == reference.dtype, name
        tolerance = 1e-5 if reference.dtype == torch.float32 else 2e-2
        torch.testing.assert_close(
            mine,
            reference,
            rtol=tolerance,
            atol=tolerance,
            equal_nan=True,
            msg=lambda m: f"{name}: {m}",
        )
