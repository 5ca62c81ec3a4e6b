"""Every spelling the contract shows gets the verdict the contract gives it, from the real checks.

The contract (agents/contract.py, its samples in agents/contract_examples.py) answers the
questions models ask: which stream spellings are accepted, whether a fused result may be
written in place into a library op's output, how library ops are counted, which CUDA calls a
kernel library may import, the exact scope of the ``.set_*``/``.register_*`` rules, which
architecture ``load_inline`` builds for. Each answer is fed here through the check that
enforces it, at the stage the contract names:

- static, native, symbols: ``check_python``, ``check_native`` and the build-flag allow-list,
  ``symbol_problems``; a spelling refused at run time passes all of them;
- run: the run-time checks' own functions on real calls (the profiler's op count, the alias,
  input and fresh-memory checks), with a PyTorch stand-in where the spelling calls a kernel,
  and the red-team/honest corpus entry that the whole harness judges the same way
  (tests/test_corpus.py; its cuda entries with -m gpu, as is tests/test_contract_gpu.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from agents import contract_examples as examples
from agents.contract import candidate_contract
from agents.contract_examples import Spelling
from harness.builds import cache as buildcache
from harness.static.native import check_native
from harness.static.python import check_python
from harness.static.symbols import symbol_problems
from harness.workers import guards, profiling
from harness.workers.timed_checks import reused_memory

TESTS = Path(__file__).resolve().parent
# Which device's contract shows each table (the others are in both).
SHOWN_ON = {
    examples.STREAMS: ("cuda",),
    examples.CUDA_SYMBOLS: ("cuda",),
    examples.ARCH_FLAGS: ("cuda",),
}


def _id(spelling: Spelling) -> str:
    return f"{'ok' if spelling.accepted else 'no'}-{spelling.where}-{spelling.text[:48]}"


def _stage_reasons(spelling: Spelling) -> list[str]:
    """What the check of the spelling's own stage (or, for a run-time one, every check before
    run time) says, called here directly rather than through the contract's helper."""
    if spelling.stage == "symbols":
        return symbol_problems([spelling.fed])
    if spelling.fed.startswith("-"):
        return buildcache.flag_problems([spelling.fed])
    if spelling.where in ("body", "file"):
        return check_native(examples.kernel_with(spelling), "float32")
    return check_python(examples.candidate_with(spelling), "Model", "float32")


def test_the_spellings_are_fed_in_a_candidate_the_gates_pass():
    assert check_python(examples.CANDIDATE.format(module="", init="pass", klass="",
                                                  forward="pass"), "Model", "float32") == []  # fmt: skip
    assert check_native(examples.KERNEL_SOURCE.format(file="", body=""), "float32") == []


@pytest.mark.parametrize("spelling", examples.EVERY, ids=_id)
def test_each_spelling_gets_its_verdict_at_its_stage(spelling: Spelling):
    reasons = _stage_reasons(spelling)
    if spelling.stage.startswith("run:"):
        assert reasons == [], f"refused before run time, where the contract says run: {reasons}"
    else:
        assert bool(reasons) != spelling.accepted, (spelling.text, reasons)
    if reasons:  # the wording the contract's list of stages says the feedback starts with
        assert all(reason.startswith(_feedback_prefix(spelling)) for reason in reasons), reasons


def _feedback_prefix(spelling: Spelling) -> str:
    if spelling.stage == "symbols":
        return "the built kernel"
    if spelling.stage == "native":
        return "build flag" if spelling.fed.startswith("-") else "kernel source"
    return "line "


@pytest.mark.parametrize("spelling", examples.EVERY, ids=_id)
def test_each_spelling_is_in_the_contract_with_its_verdict(spelling: Spelling):
    table = next(table for table in examples.TABLES if spelling in table)
    for device in SHOWN_ON.get(table, ("cpu", "cuda")):
        text = candidate_contract(device, "float32")
        assert _verdict_shown(text, spelling) == ("✓" if spelling.accepted else "✗"), device


def _verdict_shown(text: str, spelling: Spelling) -> str:
    """The mark of the ✓ or ✗ list the contract shows ``spelling`` in (with its stage, unless
    the list is the stage's own section)."""
    for shown in (spelling.shown(), spelling.shown(spelling.stage)):
        for line in text.splitlines():
            at = line.find(shown)
            while at >= 0:
                marks = [line.rfind(mark, 0, at) for mark in ("✓", "✗")]
                if max(marks) >= 0:
                    return "✓" if marks[0] > marks[1] else "✗"
                at = line.find(shown, at + 1)
    return "not shown"


# --- library ops: counted by the aten op the profiler sees ----------------------------------


class ConvReLU(nn.Module):
    """The reference the samples are about: a library conv, then a pointwise op."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


# What each sample does in a forward, besides calling the candidate's own kernel (which the
# profiler does not see as an aten op).
LIBRARY_FORWARDS = {
    "self.conv(x)": lambda m, x: m.conv(x),
    "F.conv2d(x, self.conv.weight, self.conv.bias)": lambda m, x: F.conv2d(
        x, m.conv.weight, m.conv.bias
    ),
    "torch.relu(y)": lambda m, x: torch.relu(m.conv(x)),
    "y + self.conv.bias": lambda m, x: m.conv(x) + m.conv.bias.view(-1, 1, 1),
    "self.conv(self.conv(x))": lambda m, x: m.conv(m.conv(x)),
}


def test_every_library_sample_has_a_forward():
    assert set(LIBRARY_FORWARDS) == {s.text for s in examples.LIBRARY_CALLS}


@pytest.mark.parametrize("spelling", examples.LIBRARY_CALLS, ids=_id)
def test_library_ops_are_counted_as_the_contract_says(spelling: Spelling):
    model = ConvReLU().eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        reference = profiling.profile_forward(model, [x], "cpu", kernels=False).aten_ops
        forward = LIBRARY_FORWARDS[spelling.text]
        ops = profiling.profile_forward(lambda t: forward(model, t), [x], "cpu", kernels=False)
    problem = profiling.pytorch_compute_problems(ops.aten_ops, reference)
    assert (problem == "") == spelling.accepted, (spelling.text, ops.aten_ops, problem)


def test_the_submodule_and_the_functional_call_are_the_same_op():
    model = ConvReLU().eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        seen = [
            profiling.profile_forward(lambda t, f=f: f(model, t), [x], "cpu", kernels=False)
            for f in (LIBRARY_FORWARDS["self.conv(x)"], lambda m, t: torch.conv2d(t, m.conv.weight))
        ]
    assert [profile.aten_ops for profile in seen] == [["conv2d"], ["conv2d"]]


# --- outputs written in place: what the alias, input and fresh-memory checks see ------------


class WithBuffer(ConvReLU):
    def __init__(self) -> None:
        super().__init__()
        self.out = torch.empty(2, 3, 14, 14)


def _then(_done, result):
    return result


# ``t.relu_()`` stands in for the candidate's in-place kernel: the checks look at memory.
IN_PLACE_FORWARDS = {
    "y = self.conv(x); _ext.bias_relu_(y); return y": lambda m, x: m.conv(x).relu_(),
    "_ext.relu_(x); return x": lambda m, x: x.relu_(),
    "_ext.relu_(x.view(-1))": lambda m, x: _then(x.view(-1).relu_(), m.conv(x)),
    "_ext.relu_(x.contiguous())": lambda m, x: _then(x.contiguous().relu_(), m.conv(x)),
    "return _ext.f(x, self.out)": lambda m, x: m.out.copy_(m.conv(x)),
}


def _first_failed_check(model: nn.Module, forward) -> str:
    """The output checks in the harness's order (harness/workers/checked_case.py, then
    candidate.py across cases), run on two calls; the first that fails, or "ok"."""
    previous = None
    for _ in range(2):
        x = torch.randn(2, 3, 16, 16)
        original = x.clone()
        with torch.no_grad():
            out = forward(model, x)
        if guards.overlaps(out, x):
            return "no_input_alias"
        if not guards.same_values(x, original):
            return "inputs_unchanged"
        if previous is not None and reused_memory([out], [previous], "case") is not None:
            return "fresh_outputs"
        previous = out
    return "ok"


def test_every_in_place_sample_has_a_forward():
    assert set(IN_PLACE_FORWARDS) == {s.text for s in examples.IN_PLACE}


@pytest.mark.parametrize("spelling", examples.IN_PLACE, ids=_id)
def test_in_place_writes_get_the_verdict_the_contract_gives(spelling: Spelling):
    failed = _first_failed_check(WithBuffer().eval(), IN_PLACE_FORWARDS[spelling.text])
    assert failed == ("ok" if spelling.accepted else spelling.stage.removeprefix("run:"))


# --- the corpus entries the whole harness judges the same way -------------------------------

# Sample -> (corpus entry, a spelling of the sample in it). tests/test_corpus.py evaluates each
# entry end to end and asserts the status and the failing check its header names.
CORPUS = {
    "y = self.conv(x); _ext.bias_relu_(y); return y": (
        "honest/cpu/linear_relu_matmul_epilogue.py", "_ext.bias_relu_(y, self.linear.bias)"
    ),
    "_ext.relu_(x); return x": (
        "redteam/cpu/p14_inplace_returns_input.py", "_ext.bias_gelu_rows(x, self.bias, x,"
    ),
    "_ext.relu_(x.view(-1))": ("redteam/cpu/p14_input_as_scratch.py", "_ext.bias_gelu(x,"),
    "return _ext.f(x, self.out)": ("redteam/cpu/p09_reused_output_buffer.py", "self.scratch["),
    "torch.relu(y)": ("redteam/cpu/p01_pytorch_gelu_dummy_launch.py", "F.gelu(x + self.bias)"),
    "torch.set_num_threads(1)": ("redteam/cpu/p13_set_num_threads_slows_eager.py",
                                 "set_num_threads"),
    "k<<<g, b, 0, at::cuda::getCurrentCUDAStream()>>>(p)": (
        "honest/cuda/gelu_scale_residual_float4.py", "0, at::cuda::getCurrentCUDAStream()>>>("
    ),
    "k<<<g, b>>>(p)": ("redteam/cuda/p11_legacy_default_stream.py", "<<<blocks, threads>>>("),
}  # fmt: skip


def _expected(path: Path) -> tuple[str, set[str]]:
    line = next(line for line in path.read_text().splitlines() if line.startswith("# expect: "))
    status, _, checks = line.removeprefix("# expect: ").partition(" ")
    return status, set(checks.split("|")) if checks else set()


@pytest.mark.parametrize("text", sorted(CORPUS))
def test_the_corpus_judges_the_sample_as_the_contract_does(text: str):
    spelling = next(s for s in examples.EVERY if s.text == text)
    entry, spelled = CORPUS[text]
    path = TESTS / entry
    assert spelled in path.read_text(), f"{entry} no longer spells {spelled!r}"
    status, checks = _expected(path)
    if spelling.accepted:
        assert status == "ok"
    else:
        check = "static_gate" if spelling.stage == "static" else spelling.stage.split(":")[1]
        assert status in ("rejected", "incorrect") and check in checks, (status, checks)
