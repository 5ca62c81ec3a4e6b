"""Zero-config targets: changed modules that no ``[tool.kernelpilot]`` entry and no
``get_inputs()`` covers, given a target by running the repository's own code.

The test files that import a changed module (the import graph of detection) and the Python
examples of the repository's Markdown files that name it run, or the command
``[tool.kernelpilot.capture]`` names, in the sandbox, with hooks on those classes
(``harness.capture``). Each class seen built and called becomes a Problem from what was seen;
the others keep their TOML lines in the comment, with what the capture saw said beside them.
Configuration wins where given: configured modules are never captured.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from bot.detect.changes import ChangedModule, ChangeReport
from bot.detect.head import HeadFiles
from bot.detect.imports import ImportGraph
from harness.capture.examples import Example, examples_naming
from harness.capture.records import CapturedTarget
from harness.capture.run import capture, captured_problem, check_command
from harness.config import CaptureConfig, EvalConfig
from harness.errors import UserError
from harness.records import Problem

Progress = Callable[[str], None]
Captured = tuple[CapturedTarget, Problem]  # what the capture saw, and the problem made of it
MAX_MARKDOWN_FILES = 200  # read for examples, the root README first
NAME_A_COMMAND = "name a command in [tool.kernelpilot.capture]"


class RepoCode(Protocol):
    """The repository's code that builds and calls its modules."""

    def tests(self, paths: list[str]) -> list[str]:
        """The test files that import any of ``paths``."""
        ...

    def examples(self, class_names: set[str]) -> list[Example]:
        """The Markdown examples that name any of ``class_names``."""
        ...

    def scripts(self, paths: list[str]) -> list[str]:
        """The files that import any of ``paths`` and that no file imports: what a capture
        command could run."""
        ...


def capture_targets(
    repo: Path,
    changes: ChangeReport,
    settings: CaptureConfig,
    eval_config: EvalConfig,
    code: RepoCode,
    device: str,
    dtype: str,
    progress: Progress,
) -> list[Captured]:
    """For the changed modules without a target that the capture saw built and called, what it
    saw and the Problem made of it; each such module's record in ``changes`` gets its target
    and where it was seen."""
    wanted = [module for module in changes.unconfigured() if module.path.endswith(".py")]
    if not wanted or not (
        settings.command or settings.tests or settings.examples or settings.guess
    ):
        return []
    classes = [(module.path, module.class_name) for module in wanted]
    tests: list[str] = []
    examples: list[Example] = []
    unrun = ""  # where nothing of the repository's runs: what to name, said beside a failed guess
    if settings.command:
        check_command(settings.command, "pyproject.toml: tool.kernelpilot.capture.command")
    else:
        tests, examples = _code_to_run(classes, settings, code)
        if not (tests or examples):
            looked = _nothing_runs(settings)
            hint = _command_hint(code.scripts(sorted({path for path, _ in classes})))
            unrun = f"{looked}: {NAME_A_COMMAND}{hint}" if looked else f"{NAME_A_COMMAND}{hint}"
            if not settings.guess:
                for module in wanted:
                    module.capture_note = unrun
                return []
    source = settings.command or _describe(tests, examples) or "nothing runs it: guessing"
    progress(f"capturing how {len(wanted)} changed module(s) are built and called: {source}")
    try:
        report, saved = capture(
            repo, classes, eval_config, tests=tests, command=settings.command,
            examples=examples, limit_s=settings.timeout_s, gpu=device == "cuda",
            guess=settings.guess,
        )  # fmt: skip
    except UserError as err:
        for module in wanted:
            module.capture_note = f"the capture failed: {err.what}"[:500]
        return []
    found = {(target.path, target.class_name): target for target in report.targets}
    room = max(changes.max_targets - len(changes.targets()), 0)  # the run's cap, still free
    problems: list[Captured] = []
    for module in wanted:
        target = found.get((module.path, module.class_name))
        if target is None or target.problem or not target.calls:
            why = target.problem[:250] if target is not None else "not seen"
            module.capture_note = "; ".join(filter(None, [why, report.outcome, unrun]))[:500]
            continue
        _mark(module, target)
        if len(problems) >= room:  # a target now, over the cap as detection's would be
            changes.modules.remove(module)
            changes.over_cap.append(module)
            continue
        problems.append((target, captured_problem(target, repo, saved, device, dtype)))
    return problems


def in_repository(root: Path, module: str) -> bool:
    """A dotted module name that is a file (or a package) of the repository."""
    path = root.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


class HeadCode:
    """The head commit's tests and Markdown examples (``RepoCode``)."""

    def __init__(self, repo: Path, head_sha: str) -> None:
        self.files = HeadFiles(repo, head_sha, [])

    def tests(self, paths: list[str]) -> list[str]:
        """The test files (pytest's ``test_*.py`` and ``*_test.py``) that import any of
        ``paths``, directly or through other files: the code that already builds and calls
        them."""
        graph = ImportGraph(self.files)
        found = {
            importer
            for path in paths
            for importer in graph.importers(path)
            if _is_test_file(posixpath.basename(importer))
        }
        return sorted(found)

    def scripts(self, paths: list[str]) -> list[str]:
        """The files (not tests) that import any of ``paths`` and that no file imports: the
        repository's scripts (a training or benchmark script), shallowest first."""
        graph = ImportGraph(self.files)
        found = {
            importer
            for path in paths
            for importer in graph.importers(path)
            if not _is_test_file(posixpath.basename(importer)) and not graph.importers(importer)
        }
        return sorted(found, key=lambda path: (path.count("/"), path))

    def examples(self, class_names: set[str]) -> list[Example]:
        """The Python blocks of the Markdown files that name one of ``class_names``, with the
        blocks before them in each file (``harness.capture.examples``)."""
        found = self.files.paths_ending(".md", ".markdown")
        ordered = sorted(found, key=lambda path: ("/" in path, "readme" not in path.lower(), path))
        return examples_naming(self.files.texts(ordered[:MAX_MARKDOWN_FILES]), class_names)


def _code_to_run(
    classes: list[tuple[str, str]], settings: CaptureConfig, code: RepoCode
) -> tuple[list[str], list[Example]]:
    """The test files and Markdown examples the settings allow, for these classes."""
    tests = code.tests(sorted({path for path, _ in classes})) if settings.tests else []
    names = {name for _, name in classes}
    return tests, code.examples(names) if settings.examples else []


def _nothing_runs(settings: CaptureConfig) -> str:
    looked = [
        what
        for what, on in (
            ("no test file imports it", settings.tests),
            ("no Markdown example names it", settings.examples),
        )
        if on
    ]
    return " and ".join(looked)


def _command_hint(scripts: list[str]) -> str:
    """A command to start from, where the repository has scripts that use the module: they may
    need arguments (no data, no downloads in the sandbox), which only its users know."""
    if not scripts:
        return ""
    named = ", ".join(scripts[:3]) + (f" and {len(scripts) - 3} more" if len(scripts) > 3 else "")
    return (
        f', e.g. command = "python {scripts[0]} ..." with the arguments that make it build and '
        f"call the module in a few seconds without data or downloads ({named} import it)"
    )


def _describe(tests: list[str], examples: list[Example]) -> str:
    files = len(dict.fromkeys(example.path for example in examples))
    parts = [f"{len(tests)} test file(s)"] if tests else []
    if examples:
        parts.append(f"{len(examples)} example block(s) of {files} Markdown file(s)")
    return " and ".join(parts)


def _is_test_file(name: str) -> bool:
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _mark(module: ChangedModule, target: CapturedTarget) -> None:
    module.target = module.key
    module.target_source = "guess" if target.guessed else "capture"
    inputs = target.calls[0].describe()
    called = f"called with {inputs}"
    if target.guessed and target.built_at:  # built by the repository's code, not called by it
        module.capture_note = f"built at {target.built_at}, called with guessed {inputs}"[:500]
    elif target.guessed:
        module.capture_note = f"built with {_built_with(target)[:300]}, {called}"[:500]
    else:
        seen = f"built at {target.built_at}" if target.built_at else "built"
        module.capture_note = f"{seen}, {called} ({target.source})"[:500]


def _built_with(target: CapturedTarget) -> str:
    """The constructor's arguments as the guess made them."""
    if target.init_expression:
        return target.init_expression
    if target.init_file:
        return "arguments that are not plain values (saved by the capture)"
    args = [repr(value) for value in target.init_args or []]
    args += [f"{name}={value!r}" for name, value in (target.init_kwargs or {}).items()]
    return f"({', '.join(args)})"
