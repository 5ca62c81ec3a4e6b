"""Reading the models' replies: candidate code and grounded plans, never crashing.

Models answer in many shapes: prose around a fenced block, several blocks (a sketch, then the
file), a bare module with no fence, a reply cut off by the output limit, nothing, or megabytes.
Every shape that cannot be used becomes a ``RoleFailure`` with a kind and a detail the model
can act on (the wording is in ``prompts/failures.md``); only our own bugs raise.

Plans: each ``<<<IMPROVE BEGINS>>>`` ... ``<<<IMPROVE ENDS>>>`` span is *followed* by its
instruction (the text up to the next span or the end). The span's code must occur verbatim in
the selected kernel; trailing whitespace on a line is forgiven (models drop it), and the span
keeps the kernel's own text.
"""

from __future__ import annotations

import ast
import re

from pydantic import BaseModel

from agents.llm.client import Reply, Role
from agents.roles.records import BEGINS, ENDS, FailureKind, GroundedSpan, RoleFailure
from agents.templates import render_section
from agents.untrusted import data_block

MAX_REPLY_CHARS = (
    400_000  # ~100k tokens: no candidate or plan is that long; a longer reply ran away
)
PYTHON_LANGUAGES = {"python", "py", "python3", ""}
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)")
MODEL_NEW = re.compile(r"^class\s+ModelNew\b", re.MULTILINE)
MARKER = re.compile(re.escape(BEGINS) + "|" + re.escape(ENDS))


class CodeBlock(BaseModel):
    """A fenced block of a reply."""

    language: str
    text: str
    closed: bool


def failure(role: Role, kind: FailureKind, reply: Reply | None, **values: str) -> RoleFailure:
    """A ``RoleFailure`` whose detail is the ``kind`` section of ``prompts/failures.md``."""
    detail = render_section("failures", kind, values).strip()
    return RoleFailure(role=role, kind=kind, detail=detail, reply=reply)


def code_blocks(text: str) -> list[CodeBlock]:
    """The fenced blocks of ``text`` in order; a block left open runs to the end."""
    blocks: list[CodeBlock] = []
    fence, language = "", ""
    lines: list[str] = []
    for line in text.splitlines():
        if not fence:
            match = FENCE.match(line)
            if match:
                fence, language, lines = match.group(1), match.group(2).lower(), []
            continue
        stripped = line.strip()
        if stripped.startswith(fence) and set(stripped) == {fence[0]}:
            blocks.append(CodeBlock(language=language, text="\n".join(lines), closed=True))
            fence = ""
        else:
            lines.append(line)
    if fence:
        blocks.append(CodeBlock(language=language, text="\n".join(lines), closed=False))
    return blocks


def parse_candidate(reply: Reply, role: Role) -> tuple[str, str] | RoleFailure:
    """``(source, note)`` from a coder's or debugger's reply, or why there is none.

    Block choice: the last block that defines ``class ModelNew`` (python-tagged ones first),
    else the last python block; with no fence at all, the whole reply if it is a module.
    """
    text = reply.text
    if failed := _size_failure(reply, role):
        return failed
    blocks = code_blocks(text)
    if not blocks:
        if _is_module(text):
            return text.strip() + "\n", ""
        kind: FailureKind = "truncated" if reply.finish_reason == "length" else "no_code"
        return failure(role, kind, reply, chars=str(len(text)))
    if not blocks[-1].closed and reply.finish_reason == "length":
        return failure(role, "truncated", reply, chars=str(len(text)))
    python = [block for block in blocks if block.language in PYTHON_LANGUAGES]
    defining = [block for block in python or blocks if MODEL_NEW.search(block.text)]
    defining = defining or [block for block in blocks if MODEL_NEW.search(block.text)]
    if not defining:
        return failure(role, "no_model_new", reply, blocks=str(len(blocks)))
    source = defining[-1].text.strip("\n") + "\n"
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        return failure(
            role, "syntax_error", reply, line=str(err.lineno or "?"), message=err.msg or "invalid"
        )
    if not any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body):
        return failure(role, "no_model_new", reply, blocks=str(len(blocks)))
    return source, _outside_blocks(text)


def parse_plan(reply: Reply, selected_code: str) -> tuple[list[GroundedSpan], str] | RoleFailure:
    """``(spans, summary)`` from a planner's reply, each span grounded in ``selected_code``."""
    if failed := _size_failure(reply, "planner"):
        return failed
    text = reply.text
    markers = list(MARKER.finditer(text))
    order = [match.group(0) for match in markers]
    balanced = order == [BEGINS, ENDS] * (len(order) // 2) and len(order) % 2 == 0
    if not markers or not balanced:
        if reply.finish_reason == "length":
            return failure("planner", "truncated", reply, chars=str(len(text)))
        kind: FailureKind = "no_plan" if not markers else "unbalanced_markers"
        return failure("planner", kind, reply, begins=BEGINS, ends=ENDS)
    spans: list[GroundedSpan] = []
    for number, index in enumerate(range(0, len(markers), 2), 1):
        begin, end = markers[index], markers[index + 1]
        after = markers[index + 2].start() if index + 2 < len(markers) else len(text)
        code = _unfenced(text[begin.end() : end.start()])
        instruction = _unfenced(text[end.end() : after]).strip()
        grounded = _grounded(code, selected_code) if code.strip() else None
        if grounded is None:
            first = code.strip().splitlines()[0] if code.strip() else ""
            line = data_block(first[:200], "the first line of your span")
            return failure("planner", "span_not_found", reply, number=str(number), first_line=line)
        if not instruction:
            return failure("planner", "no_instruction", reply, number=str(number), ends=ENDS)
        spans.append(GroundedSpan(code=grounded, instruction=instruction))
    return spans, _unfenced(text[: markers[0].start()]).strip()


def _size_failure(reply: Reply, role: Role) -> RoleFailure | None:
    if not reply.text.strip():
        return failure(role, "empty", reply, finish_reason=str(reply.finish_reason))
    if len(reply.text) > MAX_REPLY_CHARS:
        return failure(
            role, "too_long", reply, chars=str(len(reply.text)), limit=str(MAX_REPLY_CHARS)
        )
    return None


def _is_module(text: str) -> bool:
    """A reply that is itself a Python module defining ModelNew (no fence around it)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    return any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body)


def _outside_blocks(text: str) -> str:
    """The reply's prose: its lines outside fenced blocks, for the record."""
    kept, inside = [], ""
    for line in text.splitlines():
        match = FENCE.match(line)
        if not inside and match:
            inside = match.group(1)
        elif inside and line.strip().startswith(inside) and set(line.strip()) == {inside[0]}:
            inside = ""
        elif not inside:
            kept.append(line)
    return "\n".join(kept).strip()[:2000]


def _unfenced(text: str) -> str:
    """``text`` without blank edge lines and without fence lines around or inside it."""
    lines = [line for line in text.splitlines() if not FENCE.match(line)]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)


def _grounded(code: str, selected: str) -> str | None:
    """``code`` as it stands in ``selected`` (exact, or up to trailing whitespace), or None."""
    if code in selected:
        return code
    wanted = [line.rstrip() for line in code.splitlines()]
    have = selected.splitlines()
    stripped = [line.rstrip() for line in have]
    for start in range(len(have) - len(wanted) + 1):
        if stripped[start : start + len(wanted)] == wanted:
            return "\n".join(have[start : start + len(wanted)])
    return None
