"""Every template in prompts/ renders strictly with realistic values.

A template added without values here fails ``test_every_template_is_covered``; a variable
renamed in a template or in the code fails its render (missing and unused variables are both
errors).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agents.context import KernelSummary, Reference, coder_window
from agents.contract import candidate_contract
from agents.roles.parse import BEGINS, ENDS
from agents.roles.prompting import example_candidate, kernels_text, system_message
from agents.templates import (
    PROMPTS_DIR,
    TemplateError,
    render,
    render_section,
    render_text,
    sections,
    variables,
)

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = (ROOT / "examples" / "fused_gelu_block.py").read_text()
CANDIDATE = (ROOT / "examples" / "candidates" / "fused_gelu_block_cpu.py").read_text()
GATE_LOG = "line 3: imports os (allowed: __future__, math, torch)\nline 40: try/except: a fallback"
KERNELS = "### Kernel n3: build_error, no time\nerror: expected ';'\n\n```python\n...\n```"
SELECTED = {"id": "n2", "summary": "ok, median 0.61 ms (fastest call 0.6 ms), 1.31x vs eager",
            "detail": "max error 0.3 at seed 7\n\n", "code": CANDIDATE}  # fmt: skip
SETTING = "- Machine: AMD EPYC, 2 logical CPUs"
SEARCH = "- Baseline: eager 0.8 ms per call"

VALUES: dict[str, dict[str, str]] = {
    "system": {
        "device": "cpu", "data_rule": "(the data rule)", "contract": "(the contract)",
        "example_reference": REFERENCE,
        "example_name": "fused_gelu_block_cpu.py", "example_candidate": CANDIDATE,
    },
    "planner": {
        "data_rule": "(the data rule)", "reference_class": "Model", "original": REFERENCE,
        "setting": SETTING, "search": SEARCH,
        **{f"selected_{k}": v for k, v in SELECTED.items()},
        "profile_label": "kernel n2, the selected kernel, as measured in its own run",
        "profile": "aten::linear 61% (0.9 of peak FLOP/s); bias_gelu_residual_clamp 39%",
        "children": KERNELS, "top": KERNELS, "device": "cpu", "begins": BEGINS, "ends": ENDS,
    },
    "coder": {
        "data_rule": "(the data rule)", "reference_class": "Model", "original": REFERENCE,
        "setting": SETTING, "search": SEARCH,
        **{f"selected_{k}": v for k, v in SELECTED.items()},
        "plan": "Summary: fuse\n\nChange 1: ...", "children": KERNELS, "cousins": KERNELS,
    },
    "debugger": {
        "data_rule": "(the data rule)", "reference_class": "Model", "original": REFERENCE,
        "setting": SETTING, "search": SEARCH,
        **{f"failed_{k}": v for k, v in SELECTED.items()},
        "plan": "Summary: fuse", "log": GATE_LOG, "siblings": KERNELS,
    },
    "kernel": {"node_id": "n4", "summary": "incorrect, no time",
               "detail": "max error 0.3 at seed 7\n\n", "code": CANDIDATE},
    "plan": {"summary": "Fuse the elementwise tail", "spans": "Change 1: ..."},
    "plan_ungrounded": {"detail": "no_plan", "text": "Fuse everything into one kernel."},
    "plan_span": {"number": "1", "begins": BEGINS, "ends": ENDS,
                  "code": "        y = self.linear(x)", "instruction": "Keep it a library call."},
    "retry": {"detail": "The reply had no ```python code block."},
    "cut_lines": {"lines": "120", "chars": "5400"},
    "cut_line": {"chars": "99000"},
    "kernels_omitted": {"count": "3"},
    "kernels_none": {},
    "data": {"id": "0f1e2d3c4b5a6978", "kind": "the reference module's source", "fence": "```",
             "language": "python", "text": REFERENCE},
    "data_rule": {},
    "contract_cpu": {
        "cpu_flags": "`-O3`", "source_flags": "`-D`", "openmp_and_ops": "the built kernel starts ...",
    },
    "contract_cuda": {"cuda_utilities": "`getCurrentCUDAStream`", "arch_flags": "✗ `-arch=sm_90a`",
                      "streams": "✓ `k<<<g, b, 0, s>>>(p)`", "cuda_symbols": "✓ `cudaLaunchKernel`"},
    "contract_float32": {"low_precision_python": "`half`", "low_precision_native": "`kHalf`"},
    "contract_reduced_precision": {"dtype": "bfloat16"},
}  # fmt: skip
SECTION_VALUES: dict[str, dict[str, dict[str, str]]] = {
    "view": {
        "setting": {
            "machine": "AMD EPYC, 2 logical CPUs",
            "tolerance": "float32 outputs ...",
            "floor_rule": "at least 5%",
        },
        "floor_rule": {"floor": "5%", "short_floor": "15%", "short_us": "10"},
        "machine_cpu": {
            "name": "AMD EPYC",
            "cpus": "2",
            "per_core": "1",
            "isa": "avx2, avx512f",
            "caches": "L1d 32 KiB per CPU",
        },
        "machine_cuda": {
            "name": "NVIDIA H100",
            "capability": "9.0",
            "sms": "132",
            "shared_block": "48",
            "shared_optin": "227",
            "shared_sm": "228",
            "registers": "65536",
            "threads": "2048",
            "l2": "50.0",
            "memory": "79.1",
        },
        "tolerance": {"dtype": "float32", "atol": "0.0001", "rtol": "0.0002", "rel_norm": "2e-05"},
        "search": {
            "baseline": "eager 0.8 ms",
            "best": "kernel 0.1, median 0.5 ms",
            "failures": "0.2 (improve from 0), build_error: error",
        },
        "baseline": {"eager": "0.8", "count": "3", "eager_min": "0.78", "compiled": "0.6 ms"},
        "baseline_none": {},
        "best": {"node_id": "0.1", "median": "0.5", "speedup": "1.60x"},
        "best_none": {},
        "failures_none": {},
        "failures_more": {"count": "4"},
        "failure": {
            "node_id": "0.2",
            "kind": "improve",
            "parent": "0",
            "stage": "rejected",
            "reason": "line 3: imports os",
        },
        "reference": {"median": "0.8", "fastest": "0.78"},
        "reference_untimed": {},
        "timed": {
            "status": "ok",
            "median": "0.5",
            "fastest": "0.49",
            "speedup": "1.60x",
            "compile": ", 1.20x vs torch.compile",
            "verdicts": "faster than eager",
        },
        "compile_speedup": {"speedup": "1.20x"},
        "untimed": {"status": "incorrect"},
        "faster": {"baseline": "eager", "floor": "5%"},
        "within": {"baseline": "eager", "floor": "5%"},
        "slower": {"baseline": "torch.compile", "floor": "7%"},
        "best_within": {"best": "0.2", "ratio": "0.97x", "floor": "5%"},
        "best_slower": {"best": "0.2", "ratio": "0.62x", "floor": "5%"},
        "listed": {},
        "diff": {"base": "0.1"},
        "same_code": {"base": "0.1"},
        "profile_selected": {"node_id": "0.1"},
        "profile_best": {"node_id": "0.1"},
        "profile_none": {},
    },
    "failures": {
        "llm_call_failed": {"error": "HTTP 503 after 4 attempts"},
        "empty": {"finish_reason": "stop"},
        "too_long": {"chars": "3000000", "limit": "400000"},
        "truncated": {"chars": "32000"},
        "no_code": {"chars": "800"},
        "no_model_new": {"blocks": "2"},
        "syntax_error": {"line": "12", "message": "invalid syntax"},
        "no_plan": {"begins": BEGINS, "ends": ENDS},
        "unbalanced_markers": {"begins": BEGINS, "ends": ENDS},
        "span_not_found": {"number": "2", "first_line": "y = torch.relu(y)"},
        "no_instruction": {"number": "1", "ends": ENDS},
    },
}


def test_every_template_is_covered():
    names = {path.stem for path in PROMPTS_DIR.glob("*.md")} - {"README"}
    assert names == set(VALUES) | set(SECTION_VALUES) | {"contract"}


@pytest.mark.parametrize("name", sorted(VALUES))
def test_template_renders(name):
    text = render(name, VALUES[name])
    assert not re.search(r"\$\{?[A-Za-z_]", text), "a variable left unrendered"
    for value in VALUES[name].values():
        assert value in text


@pytest.mark.parametrize("name", sorted(SECTION_VALUES))
def test_every_section_renders(name):
    found = sections((PROMPTS_DIR / f"{name}.md").read_text())
    assert set(found) == set(SECTION_VALUES[name])
    for section, values in SECTION_VALUES[name].items():
        text = render_section(name, section, values)
        assert text and all(value in text for value in values.values())


@pytest.mark.parametrize(
    ("device", "dtype"),
    [("cpu", "float32"), ("cuda", "float32"), ("cuda", "bfloat16"), ("cpu", "float16")],
)
def test_contract_template_renders_for_every_device_and_dtype(device, dtype):
    text = candidate_contract(device, dtype)
    assert text.startswith(f"# The candidate contract ({device}, {dtype})")
    assert f"## Device: {device}" in text


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_system_prompt_holds_the_example_files_read_at_render_time(device):
    content = system_message(Reference(source=REFERENCE, device=device)).content
    assert example_candidate(device).read_text().strip() in content
    assert REFERENCE.strip() in content
    assert candidate_contract(device, "float32").strip() in content


def test_a_missing_variable_is_an_error():
    with pytest.raises(TemplateError, match=r"not given: \['ends'\]"):
        render("plan_span", {k: v for k, v in VALUES["plan_span"].items() if k != "ends"})


def test_an_unused_variable_is_an_error():
    with pytest.raises(TemplateError, match=r"given but not used: \['extra'\]"):
        render("kernels_omitted", {"count": "3", "extra": "x"})


def test_a_stray_dollar_and_a_missing_template_are_errors(tmp_path):
    with pytest.raises(TemplateError, match="line 2"):
        render_text("fine\ncosts 5$ each", {})
    assert render_text("costs $$5 for $who", {"who": "you"}) == "costs $5 for you"
    assert variables("${a} and $b") == {"a", "b"}
    with pytest.raises(TemplateError, match="not found"):
        render("no_such_template", {}, prompts_dir=tmp_path)
    with pytest.raises(TemplateError, match="no section"):
        render_section("failures", "no_such_kind", {})


def test_values_holding_dollars_are_not_rendered_again():
    assert render("retry", {"detail": "a $detail and $$"}).count("a $detail and $$") == 1


def test_kernel_lists_say_none_and_what_was_left_out():
    reference = Reference(source=REFERENCE, device="cpu")
    selected = KernelSummary(node_id="n1", code=CANDIDATE, status="ok", speedup_vs_eager=1.3)
    # Every line differs from kernel to kernel: no diff is shorter than the code.
    many = [KernelSummary(node_id=f"c{i}", code=CANDIDATE.replace("\n", f"  # {i}\n"),
                          status="ok") for i in range(30)]  # fmt: skip
    window = coder_window(reference, selected, plan="p", children=[], cousins=many,
                          budget_tokens=6_000)  # fmt: skip
    assert kernels_text(window, "children") == render("kernels_none", {}).strip()
    listing = kernels_text(window, "cousins")
    assert window.omitted["cousins"] > 0
    assert render("kernels_omitted", {"count": str(window.omitted["cousins"])}).strip() in listing
