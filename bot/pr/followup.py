"""The follow-up pull request's files: for each improved module, a drop-in module beside the
user's and a pytest file that checks it against the original (pure: text in, text out).

The drop-in module is the verified candidate as it was verified (its kernel sources inline),
with a header naming the target, the commit, the device and versions it was verified on and the
one-line change that swaps it in, and the class under the name ``<Class>Kernelpilot``: same
constructor as the original, loads the same ``state_dict`` with ``strict=True``. The test file
goes where the repository keeps its tests (``tests/`` or ``test/`` at the root, else beside the
module) and needs nothing but torch and pytest: it imports both files by path, builds the
module and its inputs the way the target is configured, and compares outputs under the same
dtype tolerance the harness used.

Every field of the results that goes into these files was checked by ``bot.pr.results`` (names are
identifiers, paths relative ``.py`` paths, numbers finite) and is written as a Python literal
or a comment on one line; the kernel itself is gated again before publish pushes or shows it
(``bot.pr.trust``). The description goes through ``bot.markdown``. A fork's pull request gets the
files as a patch in its comment (``as_patch``), never a branch.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from pydantic import BaseModel, Field

from bot import markdown as md
from bot.pr.results import PullResults, TargetSource, safe_relative_path
from bot.report import TargetReport
from harness.judge.tolerance import tolerance_for

BRANCH_PREFIX = "kernelpilot/"
HEADER_TAG = (
    "kernelpilot-verified"  # the header's first line: how the nightly finds shipped kernels
)


class FollowupFile(BaseModel):
    path: str
    content: str
    reference_class: str | None = Field(
        default=None, description="A kernel file's: the class it replaces (the gate's reference)."
    )
    dtype: str = "float32"


class Followup(BaseModel):
    branch: str
    title: str
    body: str
    files: list[FollowupFile]


def followup_branch(results: PullResults) -> str:
    if results.pull_number is not None:
        return f"{BRANCH_PREFIX}pr-{results.pull_number}"
    return f"{BRANCH_PREFIX}run-{results.commit[:12]}"


def build_followup(results: PullResults, test_dir: str | None) -> Followup | None:
    """The follow-up's branch, files and description; None when no module improved."""
    files: list[FollowupFile] = []
    improved = []
    for row in results.report.improved():
        source = results.sources.get(row.target)
        if source is None:
            continue
        module_path = safe_relative_path(source.module_path, f"results: {row.target}")
        kernel_path = module_path.with_name(f"{module_path.stem}_kernelpilot.py")
        files.append(
            FollowupFile(
                path=str(kernel_path),
                content=kernel_module(row, source, results),
                reference_class=source.class_name,
                dtype=source.dtype,
            )
        )
        test_path = _test_path(module_path, test_dir)
        files.append(
            FollowupFile(path=str(test_path), content=test_module(source, kernel_path, test_path))
        )
        improved.append((row, kernel_path))
    if not files:
        return None
    title = (
        f"kernelpilot: faster kernels for #{results.pull_number}"
        if results.pull_number is not None
        else f"kernelpilot: faster kernels at {results.commit[:12]}"
    )
    return Followup(
        branch=followup_branch(results),
        title=md.one_line(title, md.TITLE_LIMIT),
        body=md.capped(_body(results, improved)),
        files=files,
    )


def kernel_module(row: TargetReport, source: TargetSource, results: PullResults) -> str:
    env = results.environment
    cls = source.class_name
    dotted = source.module_path.removesuffix(".py").replace("/", ".")
    versions = f"torch {_line(env.torch)}" + (f", CUDA {_line(env.cuda)}" if env.cuda else "")
    compile_note = (
        f", {row.speedup_vs_compile:.2f}x vs torch.compile"
        if row.speedup_vs_compile is not None
        else ""
    )
    header = [
        f"# {HEADER_TAG}: {source.module_path}:{cls}",
        f"# A drop-in for {cls}: the same constructor, and it loads the same state_dict (strict).",
        f"# Verified at commit {results.commit} on {_line(row.device_name or row.device)} "
        f"({_line(row.device)}), {versions}, python {_line(env.python)}, "
        f"kernelpilot {_line(env.kernelpilot)}.",
        f"# Measured {row.speedup_vs_eager or 0:.2f}x vs eager{compile_note}, "
        f"inputs {_line(row.inputs) or 'as configured'}, {source.dtype}.",
        f"# Swap it in: from {dotted}_kernelpilot import {cls}Kernelpilot as {cls}",
        "# Re-verify after changing either class: kernelpilot evaluate checks it on fresh inputs.",
        "",
    ]
    return (
        "\n".join(header) + row.kernel_source.rstrip("\n") + f"\n\n\n{cls}Kernelpilot = ModelNew\n"
    )


def test_module(source: TargetSource, kernel_path: PurePosixPath, test_path: PurePosixPath) -> str:
    cls = source.class_name
    tolerance = tolerance_for(source.dtype, source.atol, source.rtol)
    depth = len(test_path.parts) - 1
    if source.init_fn:
        init = f"    init_args, init_kwargs = list(original.{source.init_fn}()), {{}}"
    else:
        init = f"    init_args, init_kwargs = {source.init_args!r}, {source.init_kwargs!r}"
    if source.inputs_fn:
        factory_file = source.inputs_path or source.module_path
        inputs = (
            f"        inputs = list(_load({factory_file!r}).{source.inputs_fn}())"
            if factory_file != source.module_path
            else f"        inputs = list(original.{source.inputs_fn}())"
        )
    else:
        inputs = f"        inputs = [torch.randn(shape) for shape in {source.input_shapes!r}]"
    name = _identifier(f"{cls}_kernelpilot").lower()
    return f'''"""kernelpilot: {cls}Kernelpilot against the original {cls}."""

import importlib.util
import pathlib
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[{depth}]
DEVICE = {source.device!r}
DTYPE = torch.{source.dtype}
RTOL, ATOL = {tolerance.rtol!r}, {tolerance.atol!r}  # atol is relative to the output's RMS


def _load(relative):
    path = ROOT / relative
    for folder in (str(ROOT), str(path.parent)):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location("kp_" + path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _place(value):
    if isinstance(value, torch.Tensor):
        return value.to(DEVICE, DTYPE) if value.is_floating_point() else value.to(DEVICE)
    return value


def _outputs(value):
    return list(value) if isinstance(value, (tuple, list)) else [value]


@pytest.mark.skipif(
    DEVICE == "cuda" and not torch.cuda.is_available(), reason="verified on a CUDA GPU"
)
def test_{name}_matches_the_original():
    original = _load({source.module_path!r})
    kernel = _load({str(kernel_path)!r})
{init}
    reference = original.{cls}(*init_args, **init_kwargs).to(DEVICE, DTYPE).eval()
    candidate = kernel.{cls}Kernelpilot(*init_args, **init_kwargs).to(DEVICE, DTYPE).eval()
    candidate.load_state_dict(reference.state_dict(), strict=True)
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
{inputs}
        inputs = [_place(value) for value in inputs]
        with torch.no_grad():
            expected = _outputs(reference(*inputs))
            actual = _outputs(candidate(*inputs))
        assert len(actual) == len(expected)
        for got, want in zip(actual, expected):
            scale = want.double().pow(2).mean().sqrt().item() if want.numel() else 1.0
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL * max(scale, 1e-30))
'''


def _test_path(module_path: PurePosixPath, test_dir: str | None) -> PurePosixPath:
    name = f"test_{module_path.stem}_kernelpilot.py"
    if test_dir:
        return safe_relative_path(test_dir, "results: test_dir") / name
    return module_path.with_name(name)


def _body(results: PullResults, improved: list[tuple[TargetReport, PurePosixPath]]) -> str:
    source_pr = (
        f"#{results.pull_number}" if results.pull_number is not None else results.commit[:12]
    )
    lines = [
        "<!-- kernelpilot:followup -->",
        f"Verified kernels for the modules changed in {source_pr}, found by kernelpilot.",
        "",
        "| module | kernel file | vs eager | vs torch.compile |",
        "|---|---|---|---|",
    ]
    for row, kernel_path in improved:
        lines.append(
            f"| {md.code(row.target, in_table=True)} | {md.code(str(kernel_path), in_table=True)} "
            f"| {md.number(row.speedup_vs_eager, '.2f', 'x')} "
            f"| {md.number(row.speedup_vs_compile, '.2f', 'x')} |"
        )
    lines += [
        "",
        "Each file's header names the commit, device and versions it was verified on and the "
        "one-line change that swaps it in; the test file beside it checks it against the "
        "original module. Nothing is swapped in by this pull request: review the kernels, then "
        "change the import where you want them.",
    ]
    if results.pull_number is None:
        lines += ["", f"It is based on {source_pr}: merge that first."]
    return "\n".join(lines) + "\n"


def as_patch(followup: Followup) -> str:
    """The follow-up's files as one patch of new files (what ``git apply`` takes)."""
    parts = []
    for file in followup.files:
        lines = file.content.splitlines()
        parts += [
            f"diff --git a/{file.path} b/{file.path}",
            "new file mode 100644",
            "--- /dev/null",
            f"+++ b/{file.path}",
            f"@@ -0,0 +1,{len(lines)} @@",
            *(f"+{line}" for line in lines),
        ]
    return "\n".join(parts) + "\n"


def _line(text: str) -> str:
    """Untrusted text in a comment line of generated Python: one line, no line break of any
    kind Python or an editor knows."""
    return md.one_line(text, 200).replace("`", "'")


def _identifier(text: str) -> str:
    return re.sub(r"\W", "_", text)
