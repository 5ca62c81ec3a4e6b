"""What the three roles' prompts share: the system message, the request, kernel listings.

The system message carries the candidate contract (generated from the gate's tables) and a
complete example candidate for the device, read from ``examples/`` when the prompt is made, so
the example the model sees is the file that is compiled and tested.

Every text in a role's prompt that is not kernelpilot's own (sources, verdicts, logs, plans,
profiles) goes in as a data block (``agents.untrusted``), and every prompt says what those are.
"""

from __future__ import annotations

from pathlib import Path

from agents.context import ContextWindow, KernelSummary, Reference
from agents.contract import candidate_contract
from agents.data import data_dir
from agents.llm.client import Message
from agents.roles.records import RoleFailure
from agents.roles.view_text import code_text, detail_text, search_text, setting_text, summary_text
from agents.templates import render
from agents.untrusted import data_block, data_rule

EXAMPLES_DIR = data_dir("examples")
EXAMPLE_REFERENCE = EXAMPLES_DIR / "fused_gelu_block.py"


def example_candidate(device: str) -> Path:
    """The example candidate shown for ``device`` (it passes the harness there)."""
    return EXAMPLES_DIR / "candidates" / f"fused_gelu_block_{device}.py"


def system_message(reference: Reference) -> Message:
    """The contract and the example: the same for every role of a run."""
    example = example_candidate(reference.device)
    values = {
        "device": reference.device,
        "data_rule": data_rule(),
        "contract": candidate_contract(reference.device, reference.dtype).strip(),
        "example_reference": EXAMPLE_REFERENCE.read_text().strip(),
        "example_name": example.name,
        "example_candidate": example.read_text().strip(),
    }
    return Message(role="system", content=render("system", values).strip())


def user_message(template: str, values: dict[str, str], feedback: RoleFailure | None) -> Message:
    """The role's request; a failure of its previous reply is appended for it to act on."""
    content = render(template, {**values, "data_rule": data_rule()}).strip()
    if feedback is not None:
        content += "\n\n" + render("retry", {"detail": feedback.detail}).strip()
    return Message(role="user", content=content)


def kernel_values(prefix: str, kernel: KernelSummary) -> dict[str, str]:
    """Template values ``<prefix>_id``, ``_summary``, ``_detail``, ``_code``."""
    return {
        f"{prefix}_id": kernel.node_id,
        f"{prefix}_summary": summary_text(kernel),
        f"{prefix}_detail": detail_text(kernel),
        f"{prefix}_code": code_text(kernel),
    }


def shared_values(window: ContextWindow) -> dict[str, str]:
    """What every role's prompt holds: the reference, the setting, the search so far."""
    return {
        "reference_class": window.reference.class_name,
        "original": reference_block(window.reference),
        "setting": setting_text(window.reference),
        "search": search_text(window.search),
    }


def reference_block(reference: Reference) -> str:
    """The reference module's source as data (its docstrings are the pull request's text)."""
    return data_block(reference.source, "the reference module's source", "python")


def kernels_text(window: ContextWindow, group: str) -> str:
    """One of the window's kernel groups, listed; says how many did not fit the budget."""
    kernels: list[KernelSummary] = getattr(window, group)
    parts = [
        render(
            "kernel",
            {
                "node_id": kernel.node_id,
                "summary": summary_text(kernel),
                "detail": detail_text(kernel),
                "code": code_text(kernel),
            },
        ).strip()
        for kernel in kernels
    ]
    if window.omitted.get(group):
        parts.append(render("kernels_omitted", {"count": str(window.omitted[group])}).strip())
    return "\n\n".join(parts) or render("kernels_none", {}).strip()
