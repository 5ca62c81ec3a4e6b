"""The candidate contract is generated from the gate's own tables, and it tells the truth.

Generated: changing a gate table changes the contract. True: every import and decorator the
contract allows passes ``harness.static.python.check_python``, and a sample of every kind of thing it
names as refused is rejected by the gate. The example candidates the prompts show pass the
static gates they are shown for (the cpu one also passes the whole harness: see
examples/candidates/fused_gelu_block_cpu.py).
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from agents import contract
from agents.contract import allowed_decorators, allowed_import_lines, candidate_contract
from harness.static import native as native_gate
from harness.static import python_rules
from harness.static.native import check_native
from harness.static.python import check_python
from harness.workers import profiling

ROOT = Path(__file__).resolve().parent.parent
CANDIDATE = textwrap.dedent(
    """
    import torch
    import torch.nn as nn
    from torch.utils.cpp_extension import load_inline

    _ext = load_inline(name="kp_contract_test", cpp_sources="", functions=["f"])


    class ModelNew(nn.Module):
        def __init__(self, features: int):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(features))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x
            {line}
            return _ext.f(y, self.weight)
    """
)


def candidate(line: str = "pass", header: str = "") -> str:
    return header + CANDIDATE.replace("{line}", line)


def test_the_plain_candidate_passes_the_gate():
    assert check_python(candidate(), "Model", "float32") == []


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_contract_states_the_dynamic_rules(device):
    text = candidate_contract(device, "float32")
    for phrase in ("class ModelNew(nn.Module)", "strict=True", "eval()", "load_inline",
                   "at module level or in `__init__`", "try`/`except", "non-contiguous",
                   "state across calls", "plain `torch.Tensor`", "untouched"):  # fmt: skip
        assert phrase in text, phrase
    assert ("getCurrentCUDAStream" in text) == (device == "cuda")
    assert f"## Device: {device}" in text


def test_contract_changes_with_the_gate_tables(monkeypatch):
    before = candidate_contract("cpu", "float32")
    monkeypatch.setattr(python_rules, "ALLOWED_IMPORTS", python_rules.ALLOWED_IMPORTS | {"cmath"})
    attributes = {**python_rules.FORBIDDEN_ATTRIBUTES, "kp_probe": "a reason only this test gives"}
    monkeypatch.setattr(python_rules, "FORBIDDEN_ATTRIBUTES", attributes)
    monkeypatch.setattr(python_rules, "FORBIDDEN_CALLS", python_rules.FORBIDDEN_CALLS | {"kp_call"})
    families = {**profiling.LIBRARY_FAMILIES, "kp_family": {"kp_op"}}
    monkeypatch.setattr(profiling, "LIBRARY_FAMILIES", families)
    # A native rule the gate drops: its sample spellings drop out of the contract too.
    native = {k: v for k, v in native_gate.FORBIDDEN_NATIVE.items() if "starts threads" not in v}
    monkeypatch.setattr(native_gate, "FORBIDDEN_NATIVE", native)
    after = candidate_contract("cpu", "float32")
    assert after != before
    assert "import cmath" in after and "import cmath" not in before
    assert "`.kp_probe`: a reason only this test gives" in after
    assert "`kp_call()`" in after
    assert "kp_family: kp_op" in after
    assert "`std::thread`" in before and "`std::thread`" not in after


def test_precision_rules_follow_the_dtype_and_the_native_table(monkeypatch):
    float32 = candidate_contract("cuda", "float32")
    assert "`__float2half*`" in float32 and "`half`" in float32
    assert "Precision: bfloat16" in candidate_contract("cuda", "bfloat16")
    assert "`__float2half*`" not in candidate_contract("cuda", "bfloat16")
    monkeypatch.setattr(native_gate, "LOW_PRECISION_NATIVE", r"\b(kHalf|kp_lowp\w*)\b")
    assert "`kp_lowp*`" in candidate_contract("cuda", "float32")


def test_every_import_the_contract_allows_passes_the_gate():
    text = candidate_contract("cpu", "float32")
    lines = allowed_import_lines()
    assert len(lines) == len(python_rules.ALLOWED_IMPORTS)
    for line in lines:
        assert line in text
        assert check_python(candidate(header=line + "\n"), "Model", "float32") == [], line


def test_every_decorator_the_contract_allows_passes_the_gate():
    text = candidate_contract("cpu", "float32")
    for decorator in allowed_decorators():
        assert f"`{decorator}`" in text
        source = with_method(f"{decorator}\n    def helper(x):\n        return x")
        assert check_python(source, "Model", "float32") == [], decorator


def with_method(definition: str) -> str:
    """The plain candidate with ``definition`` (class-body lines) placed before forward."""
    return candidate().replace("    def forward", f"    {definition}\n\n    def forward")


def rejected(source: str) -> bool:
    return bool(check_python(source, "Model", "float32"))


def test_refused_modules_named_in_the_contract_are_rejected():
    text = candidate_contract("cpu", "float32")
    for module in contract.stdlib_examples():
        assert f"`{module}`" in text
        assert rejected(candidate(header=f"import {module}\n")), module
    for name in ("autograd", "fx", "jit", "package", "testing"):
        assert f"`{name}`" in text
        assert rejected(candidate(f"z = torch.{name}")), name


def test_refused_calls_and_attributes_named_in_the_contract_are_rejected():
    text = candidate_contract("cpu", "float32")
    for name in sorted(python_rules.FORBIDDEN_CALLS - {"__import__"}):
        assert f"`{name}()`" in text
        assert rejected(candidate(f"z = {name}(y)")), name
    for name in sorted(python_rules.FORBIDDEN_ATTRIBUTES):
        assert f"`.{name}`" in text
        assert rejected(candidate(f"z = y.{name}")), name
    for name in sorted(python_rules.GLOBAL_STATE_ATTRIBUTES):
        assert f"`.{name}`" in text
        assert rejected(candidate(f"z = torch.{name}")), name
    assert rejected(candidate("torch.set_num_threads(1)"))
    assert rejected(candidate("y.register_forward_hook(print)"))
    assert not rejected(
        candidate().replace(
            "self.weight = nn.Parameter(torch.ones(features))",
            'self.register_buffer("scale", torch.ones(features))',
        )
    )


def test_refused_constructs_named_in_the_contract_are_rejected():
    assert rejected(
        candidate(
            "try:\n                y = y + 1\n            except Exception:\n                pass"
        )
    )
    assert rejected(candidate("z = y.half()"))  # float32 problem
    assert rejected(candidate("self.cache = y"))  # state across calls
    assert rejected(candidate("", header="import functools\n"))
    for method in ("eval", "to", "load_state_dict", "state_dict"):
        assert f"`{method}`" in candidate_contract("cpu", "float32")
        assert rejected(with_method(f"def {method}(self):\n        return self")), method
    assert rejected(with_method("@torch.jit.script\n    def helper(x):\n        return x"))


def test_native_samples_in_the_contract_are_rejected_and_the_example_is_not():
    text = candidate_contract("cuda", "float32")
    section = text.split("## Kernel sources")[1].split("Build flags")[0]
    shown = re.findall(r"^- (`.+`): ", section, flags=re.MULTILINE)
    samples = [s.strip("`") for line in shown for s in line.split("`, `")]
    assert "std::thread" in samples and "TORCH_LIBRARY" in samples and len(samples) >= 15
    for sample in samples:
        assert check_native(sample, "float32"), sample
    for spelling in ("__float2half_rn(v)", "wmma::fragment", "kBFloat16"):
        assert check_native(spelling, "float32"), spelling


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_example_candidates_pass_the_static_gates(device):
    source = (ROOT / "examples" / "candidates" / f"fused_gelu_block_{device}.py").read_text()
    assert check_python(source, "Model", "float32") == []
    # The native gate reads what load_inline is handed: the C++ and CUDA sources, as one text.
    native = [
        node.value.value
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and any(getattr(t, "id", "").endswith("_SOURCE") for t in node.targets)
    ]
    assert native and check_native("\n".join(native), "float32") == []


def test_an_unknown_device_is_an_error():
    with pytest.raises(ValueError, match="'tpu'"):
        candidate_contract("tpu", "float32")
