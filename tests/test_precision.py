"""A float32 reference computed in reduced precision (cuDNN's TF32 by default) holds its
candidates to its own error against strict float32, three times over: an honest kernel that
computes more precisely than the reference passes, one that rounds further than it does not
(harness.judge.precision)."""

from __future__ import annotations

import pytest
import torch

from harness.evaluate import Evaluator
from harness.judge import precision
from harness.judge.precision import (
    CAP,
    FACTOR,
    ReferencePrecision,
    float32_settings,
    held_to,
    measure,
    reduced_settings,
    strict_float32,
)
from harness.judge.tolerance import tolerance_for
from harness.problem.load import problem_from_target
from harness.problem.reference import reference_data
from harness.records import Candidate, Status
from harness.workers.guards import _settings
from tests.conftest import fast_config

# The CPU stand-in for a TF32 convolution: a matmul whose operands keep 10 mantissa bits
# wherever PyTorch's float32 setting for it says "tf32" (as cuDNN's TF32 reads them).
ROUNDING = '''
import torch


def keep_bits(x, bits):
    """x rounded to ``bits`` bits of mantissa (integer arithmetic on the float32 bits)."""
    drop = 23 - bits
    if drop == 0:
        return x
    raw = x.contiguous().view(torch.int32)
    return ((raw + (1 << (drop - 1))) & ~((1 << drop) - 1)).view(torch.float32)
'''

REFERENCE = (
    ROUNDING
    + """
import torch.nn as nn

torch.backends.mkldnn.matmul.fp32_precision = "{setting}"


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(384, 256) / 16)

    def forward(self, x):
        x, w = x, self.weight
        if torch.backends.mkldnn.matmul.fp32_precision == "tf32":
            x, w = keep_bits(x, 10), keep_bits(w, 10)
        return x @ w.t()


def get_inputs():
    return [torch.randn(96, 256)]
"""
)

# One native kernel for every candidate (built once): a matmul that reads its operands with
# ``bits`` bits of mantissa, as the reference's reduced-precision setting reads them.
CANDIDATE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = """
#include <cstdint>
#include <cstring>

static float keep_bits(float v, int64_t bits) {
  if (bits >= 23) return v;
  uint32_t raw;
  std::memcpy(&raw, &v, sizeof raw);
  const int64_t drop = 23 - bits;
  raw = (raw + (1u << (drop - 1))) & ~((1u << drop) - 1u);
  std::memcpy(&v, &raw, sizeof v);
  return v;
}

torch::Tensor matmul_bits(torch::Tensor x, torch::Tensor w, int64_t bits) {
  auto a = x.contiguous();
  auto b = w.contiguous();
  const int64_t n = a.size(0), k = a.size(1), m = b.size(0);
  auto y = torch::empty({n, m}, a.options());
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  float* py = y.data_ptr<float>();
  #pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      float sum = 0.0f;
      for (int64_t t = 0; t < k; ++t) {
        sum += keep_bits(pa[i * k + t], bits) * keep_bits(pb[j * k + t], bits);
      }
      py[i * m + j] = sum;
    }
  }
  return y;
}
"""

ext = load_inline(
    name="kp_test_matmul_bits",
    cpp_sources=SOURCE,
    functions=["matmul_bits"],
    extra_cflags=["-O2", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(384, 256) / 16)

    def forward(self, x):
        return ext.matmul_bits(x, self.weight, {bits})
'''


def problem(tmp_path, setting: str):
    path = tmp_path / f"tf32_{setting}.py"
    path.write_text(REFERENCE.format(setting=setting))
    return problem_from_target(str(path), "cpu", "float32")


def verdict(tmp_path, setting: str, bits: int, outputs: str = "stored"):
    evaluator = Evaluator(fast_config(reference_outputs=outputs), seed=3)
    try:
        return evaluator.evaluate(
            problem(tmp_path, setting), Candidate(source=CANDIDATE.replace("{bits}", str(bits)))
        )
    finally:
        evaluator.close()


@pytest.mark.parametrize("outputs", ["stored", "recomputed"])  # compared here, or by a comparator
def test_a_more_precise_kernel_passes_against_a_reference_in_reduced_precision(tmp_path, outputs):
    # strict float32: nearer the truth than the reference
    result = verdict(tmp_path, "tf32", 23, outputs)
    assert result.status is Status.ok, result.reason
    detail = next(c.detail for c in result.checks if c.name == "correct_outputs")
    assert detail.startswith("held to 3x the reference's own error")  # first: never cut off
    assert "mkldnn.matmul.fp32_precision=tf32" in detail


def test_a_kernel_rounding_further_than_the_reference_fails_against_it(tmp_path):
    # 8 bits of mantissa against TF32's 10: about 4x the reference's own error, inside the
    # float16 tolerance that bounds any widening
    result = verdict(tmp_path, "tf32", 8)
    assert result.status is Status.incorrect, result.reason


def test_against_a_strict_reference_a_kernel_in_reduced_precision_fails(tmp_path):
    result = verdict(tmp_path, "ieee", 10)  # TF32 by hand against strict float32
    assert result.status is Status.incorrect, result.reason
    assert "held to" not in result.reason


def test_strict_float32_sets_every_setting_strict_and_puts_them_back():
    before = float32_settings()
    assert "torch.backends.cudnn.conv.fp32_precision=tf32" in reduced_settings("cuda")
    with strict_float32("cuda"), strict_float32("cpu"):
        assert reduced_settings("cuda") == reduced_settings("cpu") == []
    assert float32_settings() == before


def test_the_guards_read_the_settings_however_they_were_set():
    """PyTorch refuses to read ``allow_tf32`` once the per-backend API set other values; the
    candidate's guards read every setting, whichever API changed it."""
    before = _settings()
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    try:
        changed = _settings()
    finally:
        torch.backends.cudnn.conv.fp32_precision = "tf32"
    assert changed != before and _settings() == before


def test_the_widened_tolerance_is_bounded_and_only_for_float32(tmp_path):
    f32 = problem(tmp_path, "tf32")
    setting = "torch.backends.cudnn.conv.fp32_precision=tf32"
    small = ReferencePrecision(settings=[setting], rel_norm=1e-4, max_abs=2e-4)
    held = held_to(f32, small)
    assert held.rel_norm == pytest.approx(FACTOR * 1e-4)
    assert held.atol == pytest.approx(FACTOR * 2e-4)
    assert held.rtol == tolerance_for("float32").rtol
    huge = ReferencePrecision(settings=[setting], rel_norm=0.5, max_abs=9.0)  # a forged report
    assert held_to(f32, huge).rel_norm == CAP.rel_norm and held_to(f32, huge).atol == CAP.atol
    assert held_to(f32, None) == tolerance_for("float32")
    chosen = f32.model_copy(update={"atol": 1e-5})  # a target's own tolerance stays its own
    assert held_to(chosen, small) == tolerance_for("float32", atol=1e-5)
    with pytest.raises(ValueError):  # what the reference worker reports is bounded
        ReferencePrecision(settings=["s"], rel_norm=float("nan"), max_abs=0.0)
    with pytest.raises(ValueError):
        ReferencePrecision(settings=["<script>"], rel_norm=0.0, max_abs=0.0)
    half = f32.model_copy(update={"dtype": "float16"})
    assert held_to(half, small) == tolerance_for("float16")
    assert precision.describe(f32, None) == ""


def test_measure_says_nothing_where_the_outputs_agree_bit_for_bit():
    x = torch.randn(1000)
    setting = ["torch.backends.cudnn.conv.fp32_precision=tf32"]
    assert measure([x], [x.clone()], setting) is None
    found = measure([x + 1e-3], [x], setting)
    assert found is not None and found.rel_norm == pytest.approx(
        1e-3 / float(x.norm()) * 1000**0.5, 1e-3
    )


NOISY = (
    ROUNDING
    + """
import torch.nn as nn

torch.backends.mkldnn.matmul.fp32_precision = "tf32"


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(384, 256) / 16)

    def forward(self, x):
        legacy = torch.backends.cudnn.allow_tf32  # a forward may read the older flags
        y = x @ self.weight.t()  # its values do not depend on the setting
        return y + torch.randn(y.shape) * 1e-3 * float(legacy or 1)  # draws numbers


def get_inputs():
    return [torch.randn(96, 256)]
"""
)


def test_a_forward_that_draws_numbers_is_not_mistaken_for_reduced_precision(tmp_path):
    """The strict run starts from the first run's random state: the same draws, no distance
    from precision. Its noise is the nondeterminism finding's, judged at the dtype's tolerance
    (both runs had the same settings), and the forward reads ``allow_tf32`` in strict mode."""
    path = tmp_path / "noisy.py"
    path.write_text(NOISY)
    data = reference_data(problem_from_target(str(path), "cpu", "float32"), fast_config(), seed=3)
    report = data.report
    assert report.precision is None and report.precision_skipped == ""
    assert [finding.kind for finding in report.audit.findings] == ["nondeterministic"]
