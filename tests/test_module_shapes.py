"""Every module shape real code has, end to end: configured in a pyproject.toml as a repository
would (tests/fixtures/shapes), verified against a hand-written kernel with the real workers.

Config-object constructors (the ``init`` factory), keyword and non-tensor forward arguments,
outputs that are tuples with None, dicts, named tuples and dataclasses, buffers, dropout in a
module left in train mode. A candidate must return the reference's form: the same nest, the same
values beside its tensors."""

from __future__ import annotations

import textwrap
from collections import namedtuple
from dataclasses import dataclass

import pytest
import torch

from harness.config import TargetConfig
from harness.errors import UserError
from harness.evaluate import Evaluator
from harness.problem.load import problem_from_config, problem_from_target
from harness.records import Candidate, Status
from harness.workers.calls import NotAnOutput, bound, leaves
from tests.conftest import FIXTURES, fast_config

SHAPES = FIXTURES / "shapes"

KERNEL = r'''
import dataclasses
import typing

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SOURCE = r"""
#include <cmath>
torch::Tensor affine(torch::Tensor x, double scale, torch::Tensor shift, bool residual) {
  auto xc = x.contiguous();
  auto sc = shift.contiguous();
  auto y = torch::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  const float* add = sc.data_ptr<float>();
  float* out = y.data_ptr<float>();
  const int64_t d = sc.numel(), n = xc.numel();
  #pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    float v = std::tanh(in[i]) * static_cast<float>(scale) + add[i % d];
    out[i] = residual ? v + in[i] : v;
  }
  return y;
}
torch::Tensor scaled(torch::Tensor x, torch::Tensor scale) {
  auto xc = x.contiguous();
  auto sc = scale.contiguous();
  auto y = torch::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  const float* mul = sc.data_ptr<float>();
  float* out = y.data_ptr<float>();
  const int64_t d = sc.numel(), n = xc.numel();
  #pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) out[i] = std::tanh(in[i]) * mul[i % d];
  return y;
}
"""
_ext = load_inline(name="shapes_affine", cpp_sources=_SOURCE, functions=["affine", "scaled"])
'''

CANDIDATES = {
    "ConfigBlock": """
class ModelNew(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.scale = config.scale
        self.shift = nn.Parameter(torch.zeros(config.dim))

    def forward(self, x):
        return _ext.affine(x, self.scale, self.shift, False)
""",
    "MaskedBlock": """
class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.shift = nn.Parameter(torch.zeros(dim))

    def forward(self, x, mask=None, *, residual=False):
        if mask is not None:
            raise NotImplementedError("masks")
        return _ext.affine(x, 2.0, self.shift, RESIDUAL)
""",
    "PairBlock": """
class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.shift = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return _ext.affine(x, 2.0, self.shift, False), None
""",
    "DictBlock": """
class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.shift = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return {"hidden": _ext.affine(x, 2.0, self.shift, False), "layers": 1}
""",
    "NamedBlock": """
Pair = typing.NamedTuple("Pair", [("hidden", torch.Tensor), ("aux", typing.Any)])

class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.shift = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return Pair(_ext.affine(x, 2.0, self.shift, False), None)
""",
    "DataclassBlock": """
BlockOutput = dataclasses.make_dataclass(
    "BlockOutput", [("hidden", torch.Tensor), ("loss", typing.Any, dataclasses.field(default=None))]
)

class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.shift = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return BlockOutput(_ext.affine(x, 2.0, self.shift, False))
""",
    "BufferBlock": """
class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.register_buffer("scale", torch.full((dim,), 2.0))

    def forward(self, x):
        return _ext.scaled(x, self.scale)
""",
    "DropoutBlock": """
class ModelNew(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.shift = nn.Parameter(torch.zeros(config.dim))
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x):
        return _ext.affine(x, 2.0, self.shift, False)
""",
}


def candidate(class_name: str, residual: str = "residual", **edits: str) -> Candidate:
    body = CANDIDATES[class_name].replace("RESIDUAL", residual)
    for old, new in edits.items():
        body = body.replace(old, new)
    return Candidate(source=KERNEL + textwrap.dedent(body), origin="user")


def problem(class_name: str):
    return problem_from_target(f"{SHAPES / 'blocks.py'}:{class_name}", "cpu", None)


@pytest.fixture(scope="module")
def evaluator() -> Evaluator:
    return Evaluator(fast_config(shape_variants=1), seed=3)


@pytest.mark.parametrize("class_name", sorted(CANDIDATES))
def test_an_honest_kernel_for_each_module_shape_is_verified(evaluator, class_name):
    result = evaluator.evaluate(problem(class_name), candidate(class_name))
    assert result.status is Status.ok, (result.status, result.reason, result.log[-2000:])


@pytest.mark.parametrize(
    ("class_name", "old", "new"),
    [
        ("PairBlock", "False), None", "False)"),  # the tensor alone, where (T, None) is due
        ("DictBlock", '"layers": 1', '"layers": 2'),  # a plain value beside the tensors differs
        ("DictBlock", '"hidden"', '"hiddens"'),  # another key
        ("NamedBlock", '("aux", typing.Any)', '("extra", typing.Any)'),  # another field
    ],
)
def test_a_kernel_returning_another_form_is_incorrect(evaluator, class_name, old, new):
    result = evaluator.evaluate(problem(class_name), candidate(class_name, **{old: new}))
    assert result.status is Status.incorrect, result.reason
    assert "output_form" in {check.name for check in result.checks if not check.passed}
    assert "where the reference returns" in result.reason


def test_keyword_arguments_reach_the_forward_by_name(evaluator):
    """factories.masked_rows passes residual=True by keyword: a kernel that leaves the residual
    out matches a forward called without it, and only that."""
    result = evaluator.evaluate(problem("MaskedBlock"), candidate("MaskedBlock", residual="False"))
    assert result.status is Status.incorrect, result.reason


def test_a_factory_error_quotes_the_exception_and_the_line(tmp_path):
    entry = TargetConfig(
        module="blocks.py:BufferBlock", init_args=[256], inputs="factories.py:broken_rows"
    )
    broken = problem_from_config(entry, SHAPES, "cpu", "float32")
    with pytest.raises(UserError) as raised:
        Evaluator(fast_config(), seed=1).evaluate(broken, candidate("BufferBlock"))
    message = str(raised.value)
    assert "KeyError: 'cols'" in message
    assert "factories.py:" in message and 'sizes["cols"]' in message
    assert "without arguments" not in message


def test_init_and_init_args_together_are_refused():
    entry = TargetConfig(
        module="blocks.py:ConfigBlock",
        init="factories.py:config_init",
        init_args=[1],
        inputs="factories.py:rows",
    )
    with pytest.raises(UserError, match="both init and init_args"):
        problem_from_config(entry, SHAPES, "cpu", "float32")


def test_a_missing_init_factory_is_named():
    entry = TargetConfig(
        module="blocks.py:ConfigBlock", init="factories.py:nope", inputs="factories.py:rows"
    )
    with pytest.raises(UserError, match="init factory 'factories.py:nope' not found"):
        problem_from_config(entry, SHAPES, "cpu", "float32")


# --- forms, without workers -------------------------------------------------------------------

Named = namedtuple("Named", ["a", "b"])


@dataclass
class Data:
    a: torch.Tensor
    b: object = None


@pytest.mark.parametrize(
    ("value", "form", "count"),
    [
        (torch.ones(1), "T", 1),
        ((torch.ones(1), None), "(T, None)", 1),
        ([torch.ones(1), 2.5, "x"], "[T, 2.5, 'x']", 1),
        ({"a": torch.ones(1), "b": (torch.ones(1), True)}, "dict{'a': T, 'b': (T, True)}", 2),
        (Named(torch.ones(1), None), "Named(a=T, b=None)", 1),
        (Data(torch.ones(1), torch.ones(1)), "Data(a=T, b=T)", 2),
    ],
)
def test_an_output_is_taken_apart_into_its_tensors_and_its_form(value, form, count):
    tensors, found = leaves(value)
    assert found == form and len(tensors) == count


@pytest.mark.parametrize("value", [object(), {(1, 2): torch.ones(1)}, [torch.ones(1), {1, 2}]])
def test_an_output_holding_anything_else_is_refused(value):
    with pytest.raises(NotAnOutput):
        leaves(value)


def test_bound_passes_the_last_inputs_by_keyword():
    def forward(x, mask=None, *, residual=False):
        return (x, mask, residual)

    assert bound(forward, ["residual"])(1, None, True) == (1, None, True)
    assert bound(forward, [])(1, 2) == (1, 2, False)


def test_a_timed_call_in_another_form_is_incorrect(tmp_path):
    """Every timed call is checked against eager's, form included: a kernel that returns the
    reference's form on the checked calls only is caught there."""
    from harness.sandbox.jobs import CheckFailed, WorkerJob
    from harness.workers.timed_checks import TimedChecks

    job = WorkerJob(
        mode="time", problem=problem("PairBlock"), config=fast_config(), cache_dir=tmp_path
    )
    checks = TimedChecks(job, "beside")
    out = torch.ones(4)
    checks.against_eager(0, {"candidate": (out, None), "eager": (out.clone(), None)})
    with pytest.raises(CheckFailed) as failed:
        checks.against_eager(1, {"candidate": out, "eager": (out.clone(), None)})
    assert failed.value.check == "output_form"
