"""The follow-up pull request's files: for each improved module, beside the user's, the
verified kernel and a drop-in module, and a pytest file that checks the drop-in against the
original (pure: text in, text out).

The verified kernel (``<module>_verified_kernelpilot.py``) is the candidate as it was verified
(its kernel sources inline), with a header naming the target, the commit, the device and
versions it was verified on: the file the gates and the nightly check. It has no backward, so
the class to swap in is the drop-in's ``<Class>Kernelpilot`` (``<module>_kernelpilot.py``,
``bot.pr.dropin``): same constructor as the original, loads the same ``state_dict`` with
``strict=True``, runs the kernel where no backward is needed and the original forward where one
is. Importing it builds nothing: the kernel is built on the first forward that runs it, or ahead
of time by ``python -m <package>.<module>_kernelpilot --build``, into a cache per machine that
later processes load with no compiler; the code for that, the same for every drop-in, is one
runtime file per folder (``kernelpilot_runtime_<hash>.py``). The test file goes where the
repository keeps its tests (``tests/`` or ``test/`` at the root, else beside the module) and
needs nothing but torch and pytest: it imports the files by path, builds the module and its
inputs the way the target is configured, and compares outputs (and, over two training steps,
gradients) under the same dtype tolerance the harness used.

Every field of the results that goes into these files was checked by ``bot.pr.results`` (names are
identifiers, paths relative ``.py`` paths, numbers finite) and is written as a Python literal
or a comment on one line; the kernel itself is gated again before publish pushes or shows it
(``bot.pr.trust``). The description goes through ``bot.markdown``. A fork's pull request gets the
files as a patch in its comment (``as_patch``), never a branch.
"""

from __future__ import annotations

from collections import Counter
from pathlib import PurePosixPath

from pydantic import BaseModel, Field

from bot import markdown as md
from bot.pr.dropin import dropin_module, runtime_module
from bot.pr.dropin_test import test_module
from bot.pr.results import PullResults, TargetSource, safe_relative_path
from bot.report import TargetReport

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
    rows = [
        (row, source)
        for row in results.report.improved()
        if (source := results.sources.get(row.target)) is not None and source.constructible
    ]
    per_file = Counter(source.module_path for _, source in rows)
    for row, source in rows:
        module_path = safe_relative_path(source.module_path, f"results: {row.target}")
        # Two classes of one file get a file each: the class's name joins the file's.
        stem = module_path.stem
        if per_file[source.module_path] > 1:
            stem = f"{stem}_{source.class_name.lower()}"
        kernel_path = module_path.with_name(f"{stem}_kernelpilot.py")
        verified_path = module_path.with_name(f"{stem}_verified_kernelpilot.py")
        test_path = _test_path(module_path.with_name(f"{stem}.py"), test_dir)
        files += [
            FollowupFile(
                path=str(verified_path),
                content=kernel_module(row, source, results, verified_path),
                reference_class=source.class_name,
                dtype=source.dtype,
            ),
            FollowupFile(
                path=str(kernel_path),
                content=dropin_module(
                    source, verified_path, _dropin_header(row, source, verified_path, kernel_path)
                ),
            ),
            FollowupFile(path=str(test_path), content=test_module(source, kernel_path, test_path)),
        ]
        improved.append((row, kernel_path))
    if not files:
        return None
    runtime, runtime_text = runtime_module()
    folders = dict.fromkeys(
        PurePosixPath(file.path).parent for file in files if file.reference_class
    )
    files += [
        FollowupFile(path=str(folder / f"{runtime}.py"), content=runtime_text) for folder in folders
    ]
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


def kernel_module(
    row: TargetReport, source: TargetSource, results: PullResults, verified: PurePosixPath
) -> str:
    """The verified kernel as it was verified, under a header: the file the gates and the
    nightly check (``bot.nightly.shipped`` finds it by the header's first line)."""
    env = results.environment
    cls = source.class_name
    # The row's own torch: a matrix's shards may have run on other versions (bot.pr.shards)
    torch = row.torch_version or env.torch
    versions = f"torch {_line(torch)}" + (f", CUDA {_line(env.cuda)}" if env.cuda else "")
    dropin = (
        str(verified.with_suffix(""))
        .replace("/", ".")
        .replace("_verified_kernelpilot", "_kernelpilot")
    )
    header = [
        f"# {HEADER_TAG}: {source.module_path}:{cls}",
        f"# The verified kernel for {cls}, forward only (it has no backward): use "
        f"{cls}Kernelpilot from {dropin}, which runs it in inference.",
        f"# Verified at commit {results.commit} on {_line(row.device_name or row.device)} "
        f"({_line(row.device)}), {versions}, python {_line(env.python)}, "
        f"kernelpilot {_line(env.kernelpilot)}.",
        _measured(row, source),
        f"# Re-verify after changing either class: kernelpilot evaluate {source.module_path} "
        f"{verified} checks it on fresh inputs.",
        "",
    ]
    return "\n".join(header) + row.kernel_source.rstrip("\n") + "\n"


def _dropin_header(
    row: TargetReport, source: TargetSource, verified: PurePosixPath, kernel: PurePosixPath
) -> list[str]:
    cls = source.class_name
    dotted = str(kernel.with_suffix("")).replace("/", ".")
    arch_note = (
        " (no GPU visible there: set TORCH_CUDA_ARCH_LIST to the GPUs' compute capability)"
        if source.device == "cuda"
        else ""
    )
    return [
        f"# kernelpilot drop-in for {source.module_path}:{cls}: a subclass of {cls}, with the "
        "same constructor and state_dict.",
        f"# In inference (torch.no_grad() or torch.inference_mode(), or no input and no "
        f"parameter requiring grad), on {source.device} in {source.dtype} with autocast off, it "
        f"runs the verified kernel of {verified}.",
        f"# Elsewhere, and where a backward is needed (grad mode on and an input or a parameter "
        f"requires grad), it runs the original {cls}.forward: autograd works as before, at "
        "eager speed.",
        _measured(row, source) + " Parameters require grad by default: run inference under "
        "torch.no_grad() or torch.inference_mode() to get the kernel.",
        "# Importing this file builds nothing. The kernel is built on the first forward that "
        "runs it and cached by content hash in $TORCH_EXTENSIONS_DIR/kernelpilot (default "
        "~/.cache/torch_extensions/kernelpilot): later processes on this machine load it with "
        "no compiler and no ninja.",
        f"# Build it ahead, once per machine or in your image (a C++ compiler and ninja needed "
        f"then{', and nvcc' if source.device == 'cuda' else ''}): python -m {dotted} --build"
        f"{arch_note}",
        "# Where it cannot be built or loaded, one KernelUnavailableWarning says why and the "
        f"original {cls}.forward runs instead: the import and the model never fail for it.",
        f"# Swap it in: from {dotted} import {cls}Kernelpilot as {cls}",
        "",
    ]


def _measured(row: TargetReport, source: TargetSource) -> str:
    compile_note = (
        f", {row.speedup_vs_compile:.2f}x vs torch.compile"
        if row.speedup_vs_compile is not None
        else ""
    )
    return (
        f"# Measured {row.speedup_vs_eager or 0:.2f}x vs eager{compile_note}, "
        f"inputs {_line(row.inputs) or 'as configured'}, {source.dtype}."
    )


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
    guessed = [
        module.target
        for module in (results.changes.modules if results.changes else [])
        if module.target_source == "guess" and module.target in {row.target for row, _ in improved}
    ]
    if guessed:
        named = ", ".join(md.code(target or "") for target in guessed)
        lines += [
            "",
            f"Measured at guessed sizes: nothing in the repository calls {named}, so kernelpilot "
            "called it with inputs of its own (the test file uses the same). Check the speedup at "
            "your sizes before you swap it in.",
        ]
    lines += [
        "",
        "Each kernel file is the drop-in to import; beside it, `*_verified_kernelpilot.py` is "
        "the kernel as verified, its header naming the commit, device and versions. The drop-in "
        "runs the kernel in inference and the original forward where a backward is needed; its "
        "header has the one-line change that swaps it in, and the test file checks it against "
        "the original module, in inference and over two training steps. The kernel is built "
        "once per machine and cached (on the first forward that runs it, or ahead of time with "
        "the drop-in's `--build`: its header says how); where it cannot be built, the drop-in "
        "warns and runs the original forward. "
        "Nothing is swapped in by this pull request: review the kernels, then "
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
