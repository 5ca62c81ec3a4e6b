"""The output comparison: verdicts, errors and details on tables of tensors."""

from __future__ import annotations

import pytest
import torch

from harness.judge import tolerance
from harness.judge.tolerance import compare, compare_cases, tolerance_for
from harness.problem.audit import NullAnswerAudit, null_answer_findings
from harness.records import Problem

TOL = tolerance_for("float32")


def whole_tensor(out: torch.Tensor, ref: torch.Tensor) -> tuple[bool, float, float]:
    """The rule written the plain way: whole-tensor float64 (the chunked pass must agree)."""
    out, ref = out.double(), ref.double()
    diff = (out - ref).abs()
    rel = float(diff.norm() / ref.norm())
    scale = float(ref.pow(2).mean().sqrt())
    within = bool((diff <= TOL.atol * scale + TOL.rtol * ref.abs()).all())
    return rel <= TOL.rel_norm and within, float(diff.max()), rel


def shifted(ref: torch.Tensor, at: int, by: float) -> torch.Tensor:
    out = ref.clone()
    out.view(-1)[at] += by
    return out


REF = torch.randn(7, 300, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(
    ("out", "passed"),
    [
        (REF.clone(), True),
        (REF * (1 + 1e-6), True),  # float32 rounding: inside
        (REF * (1 + 1e-3), False),  # relative error 1e-3: outside the norm limit
        (shifted(REF, 2000, 5e-4), False),  # one wrong element: the norm holds, elementwise not
        (torch.zeros_like(REF), False),
    ],
)
@pytest.mark.parametrize("chunk", [1 << 17, 64, 97])  # one step, many steps, a ragged last step
def test_chunked_comparison_agrees_with_the_whole_tensor_rule(monkeypatch, out, passed, chunk):
    monkeypatch.setitem(tolerance.CHUNK, "cpu", chunk)
    result = compare(out, REF, TOL)
    expected_pass, max_abs, rel = whole_tensor(out, REF)
    assert result.passed is passed is expected_pass
    assert result.max_abs_error == pytest.approx(max_abs, rel=1e-9, abs=1e-12)
    assert result.rel_error == pytest.approx(rel, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("chunk", [1 << 17, 64])
def test_an_outlier_is_counted_and_located(monkeypatch, chunk):
    monkeypatch.setitem(tolerance.CHUNK, "cpu", chunk)
    out = shifted(shifted(REF, 1000, 5e-4), 2000, 5e-4)
    result = compare(out, REF, TOL)
    assert "2 of 2100 elements outside tolerance, first at index (3, 100)" in result.detail


@pytest.mark.parametrize(
    ("out", "detail"),
    [
        (shifted(REF, 5, float("nan")), "1 of 2100 elements are NaN/Inf"),
        (shifted(REF, 5, float("inf")), "1 of 2100 elements are NaN/Inf"),
        (REF[:, :299], "shape (7, 299) != reference (7, 300)"),
        (REF.double(), "dtype torch.float64 != reference torch.float32"),
    ],
)
def test_what_is_wrong_is_said(out, detail):
    result = compare(out, REF, TOL)
    assert not result.passed and detail in result.detail


def test_empty_and_scalar_outputs():
    assert compare(torch.empty(0, 3), torch.empty(0, 3), TOL).passed
    assert compare(torch.tensor(2.0), torch.tensor(2.0), TOL).passed
    assert not compare(torch.tensor(2.5), torch.tensor(2.0), TOL).passed


def outputs(seed: int, rows: int = 64) -> list[torch.Tensor]:
    return [torch.randn(rows, 16, generator=torch.Generator().manual_seed(seed))]


def test_the_audit_names_each_null_answer_that_passes_every_case():
    constant = torch.full((8, 8), 3.0)
    cases = [([torch.randn(8, 8)], [constant.clone()]) for _ in range(3)]
    names = {f.detail.split(" passes")[0] for f in null_answer_findings(cases, TOL)}
    # every seed gives the same output: a constant, and any other seed's output, pass
    assert names == {"a constant (its mean) for output 0", "another seed's output 0"}
    honest = [([x := torch.randn(64, 16)], [x.sin()]) for _ in range(3)]
    assert null_answer_findings(honest, TOL) == []


def test_a_loss_is_not_its_own_null_answer():
    """A one-element output (a loss) equals its own mean: offering "a constant (its mean)" as
    a null answer for it called every loss problem weak (KernelBench's level1/94-100 on an
    H100). A loss that changes with the inputs is verifiable; one that comes out the same on
    every seed is still weak, by another seed's output."""
    losses = []
    for seed in range(4):
        generator = torch.Generator().manual_seed(seed)
        scale = float(torch.rand((), generator=generator))
        x = torch.rand(64, 64, generator=generator) * scale
        losses.append(([x], [(x - 0.5).pow(2).mean()]))
    assert null_answer_findings(losses, TOL) == []
    same = [([torch.randn(64)], [torch.tensor(0.25)]) for _ in range(4)]
    names = {f.detail.split(" passes")[0] for f in null_answer_findings(same, TOL)}
    assert names == {"another seed's output 0"}


def test_the_audit_lets_a_case_go_once_no_null_answer_needs_it():
    """A case's outputs (GBs at KernelBench's sizes) stay beside the next case only while
    "another seed's output" is still open: refuted on the second case, none are kept."""
    import gc
    import weakref

    audit = NullAnswerAudit(TOL)
    alive = []
    for seed in range(4):
        x = torch.randn(64, 16, generator=torch.Generator().manual_seed(seed))
        out = x.sin()
        held = weakref.ref(out)
        audit.add([x], [out])
        del x, out
        gc.collect()
        alive.append(held() is not None)
    assert audit.findings() == []
    assert alive == [True, False, False, False]  # the first, for the second case only


def test_the_audit_reads_each_output_whole_once_per_case_for_its_scale(monkeypatch):
    """Zeros, a constant, a passed-through input: each is refuted by a sample scaled by the
    output's RMS, a pass over the whole output (GBs at KernelBench's sizes). The audit takes
    it once per output and case, however many answers it tries, and finds the same."""
    from harness.judge import tolerance
    from harness.problem import audit as audit_module

    passes = []
    real = tolerance.reference_scale
    for module in (audit_module, tolerance):
        monkeypatch.setattr(
            module, "reference_scale", lambda ref: passes.append(ref.shape) or real(ref)
        )
    cases = []
    for seed in range(3):
        x = torch.randn(32, 32, generator=torch.Generator().manual_seed(seed))
        cases.append(([x, x.clone()], [x.sin(), x.cos()]))  # two inputs passed through, each
    assert null_answer_findings(cases, TOL) == []
    # Case 1: zeros, a constant and two inputs for each of the two outputs; case 2 adds
    # another seed's output. Every answer is refuted on one of them; case 3 costs nothing.
    assert passes == [(32, 32)] * 4


def test_a_passed_through_input_is_found():
    cases = [([x := torch.randn(8, 8)], [x.clone()]) for _ in range(3)]
    names = [f.detail for f in null_answer_findings(cases, TOL)]
    assert any("input 0 passed through as output 0" in name for name in names)


def test_cases_are_compared_in_order_up_to_the_outputs_there_are():
    problem = Problem(
        name="p", source_path="p.py", class_name="Model", device="cpu", dtype="float32"
    )
    cases = [{"name": f"case {n}", "outputs": [REF * n]} for n in (1, 2, 3)]
    right = [[REF * 1], [REF * 2]]
    partial = compare_cases(problem, cases, right)  # the third case raised in the worker
    assert partial.failed is None and partial.compared == 2
    wrong = compare_cases(problem, cases, [[REF * 1], [REF * 5]])
    assert wrong.failed.startswith("case 2, output 0") and wrong.checks[0].name == "correct_outputs"
    extra = compare_cases(problem, cases, [*right, [REF * 3], [REF]])
    assert extra.failed == "outputs for more than the 3 cases there are"


def test_a_repeated_case_must_reproduce_the_candidates_own_outputs_bit_for_bit():
    from harness.judge.tolerance import CaseComparer

    problem = Problem(
        name="p", source_path="p.py", class_name="Model", device="cpu", dtype="float32"
    )
    ulp = torch.nextafter(REF, torch.full_like(REF, float("inf")))  # within tolerance
    strict = CaseComparer(problem, total=2, reference_deterministic=True)
    assert strict.add("first", [REF.clone()], [REF])
    assert not strict.add("first again", [ulp], [REF], repeats_first=True)
    assert strict.result().checks[0].name == "deterministic_outputs"
    assert "differ from the candidate's own outputs" in strict.failed
    # Where the reference itself is not bitwise deterministic, tolerance is all there is.
    loose = CaseComparer(problem, total=2, reference_deterministic=False)
    assert loose.add("first", [REF.clone()], [REF])
    assert loose.add("first again", [ulp], [REF], repeats_first=True)
    same = CaseComparer(problem, total=2, reference_deterministic=True)
    assert same.add("first", [REF.clone()], [REF])
    assert same.add("first again", [REF.clone()], [REF], repeats_first=True)
    assert "deterministic_outputs" in [check.name for check in same.result().checks]


def test_an_error_spread_over_every_element_fails_the_relative_norm_alone():
    """5e-5 relative everywhere: each element is inside atol + rtol * |ref| (1e-4), but the
    error as a whole is over float32's norm limit (2e-5): a kernel in lower precision."""
    out = REF * (1 + 5e-5)
    result = compare(out, REF, TOL)
    assert not result.passed and result.detail.startswith("relative error")
    assert (out - REF).abs().le(TOL.atol * REF.pow(2).mean().sqrt() + TOL.rtol * REF.abs()).all()


def test_a_sample_proves_only_failures_that_the_full_comparison_finds():
    from harness.judge.tolerance import fails_on_sample

    tol = tolerance_for("float32")
    generator = torch.Generator().manual_seed(0)
    reference = torch.randn(1 << 20, generator=generator)
    right = reference + 1e-7 * torch.randn(1 << 20, generator=generator)
    one_off = right.clone()
    one_off[12345] += 1.0  # not a sampled element (every 16th is)
    answers = {
        "zeros": torch.zeros_like(reference),
        "constant": torch.full_like(reference, float(reference.mean())),
        "scaled": reference * 1.01,
        "nan": torch.full_like(reference, float("nan")),
        "right": right,
        "one element off": one_off,
    }
    for name, answer in answers.items():
        full = compare(answer, reference, tol, explain=False).passed
        sampled = fails_on_sample(answer, reference, tol)
        assert not (sampled and full), name  # a sampled failure is always a real one
    assert fails_on_sample(answers["zeros"], reference, tol)
    assert fails_on_sample(answers["constant"], reference, tol)
    assert not fails_on_sample(right, reference, tol)
    assert not fails_on_sample(one_off, reference, tol)  # the full comparison decides it
    assert not compare(one_off, reference, tol).passed
