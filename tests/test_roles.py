"""The planner, coder and debugger against a scripted fake client, and their context windows.

The fake records every call (messages, temperature, max_tokens) so the tests can check which
temperature each role sampled at and what its prompt held. No network, no builds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agents.context import (
    ContextWindow,
    KernelSummary,
    Reference,
    coder_window,
    debugger_window,
    estimate_tokens,
    planner_window,
    trim_code,
    trim_log,
)
from agents.llm.client import (
    Deadline,
    LLMCallFailed,
    LLMConfig,
    LLMFatalError,
    Message,
    Reply,
    Role,
    RoleTemperatures,
)
from agents.roles.coder import code
from agents.roles.debugger import debug
from agents.roles.parse import BEGINS, ENDS, MAX_REPLY_CHARS, code_blocks, parse_candidate
from agents.roles.planner import plan
from agents.roles.records import Draft, Plan, RoleFailure
from agents.templates import render
from harness.static.python import check_python

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = (ROOT / "examples" / "fused_gelu_block.py").read_text()
CANDIDATE = (ROOT / "examples" / "candidates" / "fused_gelu_block_cpu.py").read_text()
CONFIG = LLMConfig(
    base_url="http://127.0.0.1:9/v1",
    temperatures=RoleTemperatures(planner=0.7, coder=0.2, debugger=0.3),
    max_output_tokens=4096,
)


class FakeClient:
    """An LLMClient that answers from a list (a Reply, or an exception to raise)."""

    def __init__(self, *answers: Reply | Exception) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[list[Message], float | None, int | None]] = []

    def complete(
        self, messages: list[Message], *, temperature: float | None = None,
        max_tokens: int | None = None, deadline: Deadline | None = None, role: Role | None = None,
    ) -> Reply:  # fmt: skip
        self.calls.append((messages, temperature, max_tokens))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    @property
    def temperatures(self) -> list[float | None]:
        return [temperature for _, temperature, _ in self.calls]

    def prompt(self, call: int = -1) -> str:
        return self.calls[call][0][-1].content


def reply(text: str, finish_reason: str = "stop") -> Reply:
    return Reply(text=text, model="fake", prompt_tokens=10, completion_tokens=20, cost_usd=None,
                 finish_reason=finish_reason, seconds=0.1, attempts=1)  # fmt: skip


def fenced(source: str, language: str = "python") -> str:
    return f"```{language}\n{source}```\n"


REF = Reference(source=REFERENCE, device="cpu")
ROOT_NODE = KernelSummary(node_id="root", code=REFERENCE, status="ok", speedup_vs_eager=1.0)
GELU_LINE = '        y = F.gelu(y + self.bias, approximate="tanh")'
PLAN_REPLY = (
    "Fuse the four elementwise ops after the matmul into one OpenMP pass.\n\n"
    f"{BEGINS}\n```python\n{GELU_LINE}\n        y = (y + residual) * self.scale\n```\n{ENDS}\n"
    "Replace these lines with one call to a C++ kernel doing bias, GELU, residual and scale.\n\n"
    f"{BEGINS}\n        return torch.clamp(y, -2.0, 2.0)\n{ENDS}\n"
    "Fold the clamp into the same kernel and return its output.\n"
)


def planner_view(**overrides) -> object:
    fields = {"profile": "aten::linear 60%", "children": [], "top": [ROOT_NODE]} | overrides
    return planner_window(REF, ROOT_NODE, **fields)


def run_planner(text: str, finish_reason: str = "stop") -> Plan | RoleFailure:
    return plan(FakeClient(reply(text, finish_reason)), planner_view(), CONFIG)


def run_coder(text: str, finish_reason: str = "stop") -> Draft | RoleFailure:
    window = coder_window(REF, ROOT_NODE, plan="Summary: fuse", children=[], cousins=[])
    return code(FakeClient(reply(text, finish_reason)), window, CONFIG)


# --- happy paths -------------------------------------------------------------------------


def test_planner_returns_grounded_spans_at_its_temperature():
    client = FakeClient(reply(PLAN_REPLY))
    result = plan(client, planner_view(), CONFIG)
    assert isinstance(result, Plan), result
    assert client.temperatures == [0.7] and client.calls[0][2] == 4096
    assert [span.code for span in result.spans] == [
        f"{GELU_LINE}\n        y = (y + residual) * self.scale",
        "        return torch.clamp(y, -2.0, 2.0)",
    ]
    assert result.spans[1].instruction.startswith("Fold the clamp")
    assert result.summary.startswith("Fuse the four")
    assert result.reply.text == PLAN_REPLY
    system, user = client.calls[0][0]
    assert system.role == "system" and "# The candidate contract (cpu, float32)" in system.content
    assert "aten::linear 60%" in user.content and BEGINS in user.content
    # The plan as the coder reads it keeps the markers and the kernel's own lines.
    assert f"{BEGINS}\n{GELU_LINE}" in result.text()


def test_coder_returns_the_candidate_at_its_temperature():
    text = "The elementwise tail is one kernel now.\n\n" + fenced(CANDIDATE)
    client = FakeClient(reply(text))
    window = coder_window(REF, ROOT_NODE, plan="Summary: fuse\nChange 1: ...", children=[],
                          cousins=[])  # fmt: skip
    result = code(client, window, CONFIG)
    assert isinstance(result, Draft), result
    assert result.source == CANDIDATE
    assert result.note == "The elementwise tail is one kernel now."
    assert client.temperatures == [0.2]
    assert "Change 1: ..." in client.prompt()


def test_debugger_sees_the_gate_reasons_verbatim_and_repairs():
    broken = "import os\n" + CANDIDATE.replace(
        "        y = F.linear", "        try:\n            pass\n        except Exception:\n"
        "            pass\n        y = F.linear"
    )  # fmt: skip
    reasons = check_python(broken, "Model", "float32")
    assert len(reasons) >= 2
    log = "\n".join(reasons)
    failed = KernelSummary(node_id="n5", code=broken, status="rejected", detail=reasons[0])
    window = debugger_window(REF, failed, plan="Summary: fuse", log=log, siblings=[ROOT_NODE])
    client = FakeClient(reply(fenced(CANDIDATE)))
    result = debug(client, window, CONFIG)
    assert isinstance(result, Draft) and result.source == CANDIDATE
    assert client.temperatures == [0.3]
    prompt = client.prompt()
    for reason in reasons:
        assert reason in prompt
    assert log in prompt and broken.strip() in prompt


def test_three_roles_use_three_temperatures_in_one_run():
    client = FakeClient(reply(PLAN_REPLY), reply(fenced(CANDIDATE)), reply(fenced(CANDIDATE)))
    made = plan(client, planner_view(), CONFIG)
    assert isinstance(made, Plan)
    code(client, coder_window(REF, ROOT_NODE, plan=made.text(), children=[], cousins=[]), CONFIG)
    failed = KernelSummary(node_id="n1", code=CANDIDATE, status="incorrect", detail="max err 1")
    debug(client, debugger_window(REF, failed, plan=made.text(), log="x", siblings=[]), CONFIG)
    assert client.temperatures == [0.7, 0.2, 0.3]


# --- planner failures --------------------------------------------------------------------


def test_a_span_not_in_the_selected_code_is_a_recorded_failure():
    text = PLAN_REPLY.replace("torch.clamp(y, -2.0, 2.0)", "torch.clamp(y, -3.0, 3.0)")
    result = run_planner(text)
    assert isinstance(result, RoleFailure)
    assert (result.role, result.kind) == ("planner", "span_not_found")
    assert "Span 2" in result.detail and "torch.clamp(y, -3.0, 3.0)" in result.detail
    assert result.reply is not None and result.reply.text == text


def test_trailing_whitespace_in_a_span_is_forgiven_and_the_kernel_text_kept():
    text = f"{BEGINS}\n{GELU_LINE}   \n{ENDS}\nFuse it."
    result = run_planner(text)
    assert isinstance(result, Plan) and result.spans[0].code == GELU_LINE


@pytest.mark.parametrize(
    ("text", "finish_reason", "kind"),
    [
        ("Fuse everything into one kernel.", "stop", "no_plan"),
        (f"{BEGINS}\n{GELU_LINE}\n{BEGINS}\n{GELU_LINE}\n{ENDS}\nx", "stop", "unbalanced_markers"),
        (f"{ENDS}\n{GELU_LINE}\n{BEGINS}\nx", "stop", "unbalanced_markers"),
        (f"{BEGINS}\n{GELU_LINE}\n", "length", "truncated"),
        (f"{BEGINS}\n{GELU_LINE}\n{ENDS}\n   \n", "stop", "no_instruction"),
        (f"{BEGINS}\n\n{ENDS}\nDo it.", "stop", "span_not_found"),
        ("", "stop", "empty"),
        ("x" * (MAX_REPLY_CHARS + 1), "stop", "too_long"),
    ],
)
def test_planner_reply_failures(text, finish_reason, kind):
    result = run_planner(text, finish_reason)
    assert isinstance(result, RoleFailure)
    assert result.kind == kind and result.role == "planner" and result.detail


# --- candidate parsing -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "finish_reason", "kind"),
    [
        ("", "stop", "empty"),
        ("   \n\n", "length", "empty"),
        ("I would fuse the ops with OpenMP and keep the matmul.", "stop", "no_code"),
        ("```python\nimport torch\n\nclass ModelNew(nn.Module):\n    def __init__(self", "length",
         "truncated"),
        ("import torch\nclass ModelNew(nn.Module):\n    def forward(self, x", "length", "truncated"),
        (fenced("import torch\n\nx = 1\n") + fenced("int main() {}\n", "cpp"), "stop",
         "no_model_new"),
        (fenced("import torch\nclass ModelNew(nn.Module):\n    def forward(self x):\n"), "stop",
         "syntax_error"),
        (fenced('import torch\nS = """\nclass ModelNew: pass\n"""\n'), "stop", "no_model_new"),
        (fenced(CANDIDATE) * (MAX_REPLY_CHARS // len(CANDIDATE) + 1), "stop", "too_long"),
    ],
)  # fmt: skip
def test_candidate_reply_failures(text, finish_reason, kind):
    result = run_coder(text, finish_reason)
    assert isinstance(result, RoleFailure), result
    assert result.kind == kind and result.role == "coder"
    assert result.detail and result.reply is not None


def test_megabytes_of_output_are_refused_before_parsing():
    result = run_coder("```python\n" + "x = 1\n" * 1_000_000 + "```\n")
    assert isinstance(result, RoleFailure) and result.kind == "too_long"
    assert "limit" in result.detail


def test_of_several_blocks_the_one_defining_model_new_is_taken():
    sketch = fenced("def fused(x):\n    return x\n")
    kernel = fenced("// the C++ part\nfloat f(float v) { return v; }\n", "cpp")
    result = run_coder("First a sketch:\n" + sketch + "and the kernel:\n" + kernel
                       + "The full file:\n" + fenced(CANDIDATE) + "Done.")  # fmt: skip
    assert isinstance(result, Draft) and result.source == CANDIDATE
    assert "First a sketch:" in result.note and "Done." in result.note


def test_the_last_of_two_full_candidates_is_taken():
    second = CANDIDATE.replace("kp_example_fused_gelu_block_cpu", "kp_second")
    result = run_coder(fenced(CANDIDATE) + "Better:\n" + fenced(second))
    assert isinstance(result, Draft) and "kp_second" in result.source


def test_a_bare_module_and_an_unclosed_fence_that_was_not_cut_are_accepted():
    bare = run_coder(CANDIDATE)
    assert isinstance(bare, Draft) and bare.source == CANDIDATE
    unclosed = run_coder("Here it is:\n```python\n" + CANDIDATE)
    assert isinstance(unclosed, Draft) and unclosed.source == CANDIDATE


def test_fences_of_tildes_and_longer_backticks_are_blocks():
    blocks = code_blocks("~~~py\na = 1\n~~~\n````python\nb = '```'\n````\n")
    assert [(b.language, b.text, b.closed) for b in blocks] == [
        ("py", "a = 1", True), ("python", "b = '```'", True)
    ]  # fmt: skip


def test_parsing_never_raises_on_odd_text():
    odd = ["```", "```\n```", "~~~\n", "\x00\x01", "```python\n\n```", "class ModelNew", "😀" * 100]
    for text in odd:
        assert isinstance(parse_candidate(reply(text), "coder"), RoleFailure), text


# --- client failures and feedback ---------------------------------------------------------


def test_a_failed_call_is_a_recorded_failure_and_a_fatal_error_stops_the_run():
    client = FakeClient(LLMCallFailed("HTTP 503", "http://127.0.0.1:9/v1", attempts=4))
    result = plan(client, planner_view(), CONFIG)
    assert isinstance(result, RoleFailure)
    assert (result.kind, result.reply) == ("llm_call_failed", None) and "HTTP 503" in result.detail
    fatal = FakeClient(LLMFatalError("invalid API key", "OPENAI_API_KEY", "set a valid key"))
    window = coder_window(REF, ROOT_NODE, plan="p", children=[], cousins=[])
    with pytest.raises(LLMFatalError):
        code(fatal, window, CONFIG)


def test_a_failure_is_fed_back_in_the_next_prompt():
    first = run_coder("No code today.")
    assert isinstance(first, RoleFailure)
    client = FakeClient(reply(fenced(CANDIDATE)))
    window = coder_window(REF, ROOT_NODE, plan="p", children=[], cousins=[])
    assert isinstance(code(client, window, CONFIG, feedback=first), Draft)
    assert render("retry", {"detail": first.detail}).strip() in client.prompt()


def test_a_window_built_for_another_role_is_our_bug():
    with pytest.raises(ValueError, match="coder was given a context window built for the planner"):
        code(FakeClient(), planner_view(), CONFIG)


def every_role() -> list[tuple[Callable[..., Plan | Draft | RoleFailure], ContextWindow, Role]]:
    """Each role with a window of its own, for the path the three share."""
    failed = KernelSummary(node_id="n1", code=CANDIDATE, status="incorrect", detail="max err 1")
    return [
        (plan, planner_view(), "planner"),
        (code, coder_window(REF, ROOT_NODE, plan="p", children=[], cousins=[]), "coder"),
        (debug, debugger_window(REF, failed, plan="p", log="x", siblings=[]), "debugger"),
    ]


@pytest.mark.parametrize("index", range(3), ids=["planner", "coder", "debugger"])
def test_every_role_shares_the_one_path(index: int):
    """The shared path (agents.roles.answer): its own window only, the reference and the
    feedback in the prompt, a failed call recorded as the role's with what it cost."""
    roles = every_role()
    role, window, name = roles[index]
    other = roles[(index + 1) % 3][1]
    with pytest.raises(ValueError, match=f"{name} was given a context window built for the"):
        role(FakeClient(), other, CONFIG)
    feedback = RoleFailure(role=name, kind="empty", detail="Your reply was empty.")
    call = LLMCallFailed("HTTP 503", "http://127.0.0.1:9/v1", attempts=4, seconds=2.5)
    client = FakeClient(call)
    result = role(client, window, CONFIG, feedback=feedback)
    assert isinstance(result, RoleFailure)
    assert (result.role, result.kind, result.reply) == (name, "llm_call_failed", None)
    assert result.call is not None and (result.call.attempts, result.call.seconds) == (4, 2.5)
    prompt = client.prompt()
    assert "class Model(nn.Module)" in prompt and "Your reply was empty." in prompt


# --- context windows ---------------------------------------------------------------------


def build_log(lines: int, error_at: int) -> str:
    out = [f"[{i}/{lines}] c++ -O3 -c part_{i}.cpp -o part_{i}.o" for i in range(lines)]
    out[error_at] = "main.cpp:42:7: error: 'float8' was not declared in this scope"
    out[-1] = "ninja: build stopped: subcommand failed."
    return "\n".join(out)


def test_trim_log_keeps_the_first_error_and_the_tail_in_whole_lines():
    log = build_log(5000, error_at=1200)
    trimmed = trim_log(log, 1000)
    assert estimate_tokens(trimmed) <= 1000
    assert "error: 'float8' was not declared" in trimmed
    assert trimmed.endswith("ninja: build stopped: subcommand failed.")
    original = set(log.splitlines())
    cut = [line for line in trimmed.splitlines() if line not in original]
    assert cut and all(line.startswith("[... ") and "cut here" in line for line in cut)
    counted = sum(int(line.split()[1]) for line in cut)
    assert counted + len(trimmed.splitlines()) - len(cut) == 5000


def test_trim_code_keeps_head_and_tail_and_short_texts_whole():
    source = "\n".join(f"line_{i} = {i}" for i in range(3000))
    trimmed = trim_code(source, 500)
    assert estimate_tokens(trimmed) <= 500
    assert trimmed.startswith("line_0 = 0") and trimmed.endswith("line_2999 = 2999")
    assert trim_code("short", 500) == "short" and trim_log("short", 500) == "short"


def test_a_line_of_megabytes_keeps_its_start_and_says_so():
    trimmed = trim_log("error: " + "x" * 2_000_000 + "\nlast line", 2000)
    assert estimate_tokens(trimmed) <= 2000 and trimmed.endswith("last line")
    assert "more characters of this line cut" in trimmed


def test_windows_fit_their_budget_and_never_trim_the_code_being_edited():
    many = [KernelSummary(node_id=f"n{i}", code=CANDIDATE * 3, status="incorrect",
                          detail=build_log(300, 100)) for i in range(40)]  # fmt: skip
    huge_reference = Reference(source=REFERENCE * 40, device="cpu")
    failed = KernelSummary(node_id="f", code=CANDIDATE, status="build_error", detail="error: x")
    windows = [
        planner_window(huge_reference, ROOT_NODE, profile=build_log(2000, 5), children=many,
                       top=many, budget_tokens=8000),
        coder_window(huge_reference, ROOT_NODE, plan="p" * 800, children=many, cousins=many,
                     budget_tokens=8000),
        debugger_window(huge_reference, failed, plan="p", log=build_log(9000, 4000),
                        siblings=many, budget_tokens=8000),
    ]  # fmt: skip
    for window in windows:
        assert window.tokens() <= 8000, window.role
        assert window.selected.code in (REFERENCE, CANDIDATE)  # pinned, whole
        assert window.cuts and window.reference.source != huge_reference.source
    assert windows[1].plan == "p" * 800
    assert "error: 'float8' was not declared" in windows[2].log
    assert windows[2].omitted["siblings"] > 0 and len(windows[2].siblings) >= 1


def test_a_small_window_is_left_whole():
    window = debugger_window(REF, ROOT_NODE, plan="p", log="line 3: imports os", siblings=[])
    assert window.cuts == [] and window.log == "line 3: imports os"
    assert window.reference == REF and window.tokens() < window.budget_tokens
