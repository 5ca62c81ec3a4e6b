"""One changed file examined: its changed module classes, those changed only cosmetically, and
(over the whole head commit) the classes of other files that depend on them, each as a
``ChangedModule`` record with its target or the TOML lines to add."""

from __future__ import annotations

import ast
import posixpath
from dataclasses import replace
from pathlib import Path

from bot.detect.cosmetic import COSMETIC, behaviour_lines, same_behaviour, same_file
from bot.detect.head import HeadFiles, SkippedFile, project_for
from bot.detect.modules import ModuleIndex, init_signature, kernelbench_class
from bot.detect.records import ChangedModule
from bot.detect.related import related_changes
from bot.detect.uses import ClassChange, changed_classes
from bot.git import REGULAR_MODES, DiffEntry, changed_lines
from harness.problem.load import defines_function, target_toml

KERNELBENCH_INPUTS = {"get_inputs", "get_init_inputs"}


def has_base(entry: DiffEntry) -> bool:
    """A changed file compared with its base version: modified, or renamed within its folder
    (moved elsewhere, its relative imports may name other files: judged by its lines)."""
    same_folder = posixpath.dirname(entry.old_path or entry.path) == posixpath.dirname(entry.path)
    return entry.status in ("M", "R") and entry.readable() and same_folder


class Examiner:
    """The changed modules of each file, and of the files that depend on them, over one head
    commit's files (parsed once) and the base versions of the changed files."""

    def __init__(self, repo: Path, files: HeadFiles, bases: dict[str, ast.Module]) -> None:
        self._repo = repo
        self._files = files
        self._bases = bases
        self._index = ModuleIndex(files)

    def examine(
        self, entry: DiffEntry
    ) -> tuple[list[ChangedModule], list[ChangedModule]] | SkippedFile:
        """The changed modules of one file and those changed only cosmetically, or why the file
        was skipped."""
        if entry.status == "D" or not entry.path.endswith(".py"):
            renamed = f"renamed to {entry.path}, not a Python file; " if entry.status != "D" else ""
            reason = f"{renamed}deleted: its modules are gone, nothing to optimize"
            return SkippedFile(path=entry.old_path or entry.path, kind="deleted", reason=reason)
        if entry.new_mode not in REGULAR_MODES:
            reason = "not a regular file (a link)"
            return SkippedFile(path=entry.path, kind="not_a_file", reason=reason)
        loaded = self._files.load(entry.path)
        if isinstance(loaded, SkippedFile):
            return loaded
        tree, text = loaded
        base = self._bases.get(entry.old_blob) if has_base(entry) else None
        if entry.status == "A":
            changed = set(range(1, len(text.splitlines()) + 1))
        else:
            changed = changed_lines(self._repo, entry.old_blob, entry.new_blob)
        context = FileContext(self._files, self._index, entry.path, tree)
        raw = changed_classes(tree, context.classes, changed, context.extra_uses)
        if base is None or not raw:  # nothing to compare, or no module to skip
            return [context.record(change) for change in raw], []
        if same_file(base, tree):
            reason = f"{COSMETIC}: its modules behave as before, nothing to optimize"
            return SkippedFile(path=entry.path, kind="cosmetic", reason=reason)
        return _judged(context, base, tree, changed, raw)

    def related(self, changed: list[ChangedModule]) -> list[ChangedModule]:
        """The subclasses, then the users, of the changed modules in other files."""
        seeds = [(module.path, module.class_name) for module in changed]
        contexts: dict[str, FileContext] = {}
        records = []
        for change in related_changes(self._files, self._index, seeds, self._accepts):
            if change.path not in contexts:
                tree = self._files.parsed(change.path)
                assert tree is not None  # related_changes found the class in it
                contexts[change.path] = FileContext(self._files, self._index, change.path, tree)
            record = ClassChange(change.class_name, change.class_line, [], change.reason)
            records.append(
                contexts[change.path]
                .record(record)
                .model_copy(update={"relation": change.relation})
            )
        return records

    def _accepts(self, path: str, class_name: str) -> bool:
        configured = (path, class_name) in project_for(self._files, path).targets
        return configured or self._index.is_module(path, class_name)


def _judged(
    context: FileContext,
    base: ast.Module,
    tree: ast.Module,
    changed: set[int],
    raw: list[ClassChange],
) -> tuple[list[ChangedModule], list[ChangedModule]]:
    """The classes the changed lines touch (``raw``), split: changed in behaviour, each blamed on
    what changed in behaviour (its body, or the helper that did), and changed only cosmetically
    (queued by no one)."""
    lines = behaviour_lines(base, tree, changed)
    semantic = {
        change.class_name: change
        for change in changed_classes(tree, context.classes, lines, context.extra_uses)
    }
    kept, cosmetic = [], []
    for change in raw:
        uses = context.extra_uses.get(change.class_name, set())
        if change.class_name in semantic:
            kept.append(context.record(semantic[change.class_name]))
        elif same_behaviour(context.path, base, tree, change.class_name, uses):
            cosmetic.append(context.record(replace(change, reason=COSMETIC), queued=False))
        else:
            kept.append(context.record(change))
    return kept, cosmetic


class FileContext:
    """What one head file says about its module classes: which are modules (or configured),
    which one its ``get_inputs()`` is for, and the project that configures them."""

    def __init__(self, files: HeadFiles, index: ModuleIndex, path: str, tree: ast.Module) -> None:
        self.path = path
        self.project = project_for(files, path)
        configured = {cls for file, cls in self.project.targets if file == path}
        self.classes = index.module_classes(path, tree, also=configured)
        has_inputs = defines_function(tree, "get_inputs")
        self.inputs_class = kernelbench_class(self.classes) if has_inputs else None
        self.extra_uses = {self.inputs_class: KERNELBENCH_INPUTS} if self.inputs_class else {}
        self._nodes = {node.name: node for node in self.classes}

    def record(self, change: ClassChange, queued: bool = True) -> ChangedModule:
        """The module's record: its target where it has one, else the TOML lines to add (none
        for a module that is not queued)."""
        path, name = self.path, change.class_name
        record = ChangedModule(
            path=path,
            class_name=name,
            class_line=change.class_line,
            lines=change.lines,
            reason=change.reason,
        )
        if not queued:
            return record
        if (path, name) in self.project.targets:
            return record.model_copy(update={"target": f"{path}:{name}", "target_source": "config"})
        if name == self.inputs_class:
            update = {"target": f"{path}:{name}", "target_source": "get_inputs"}
            return record.model_copy(update=update)
        relative = posixpath.relpath(path, self.project.folder or ".")
        signature = init_signature(self._nodes[name]) or "constructor arguments"
        toml = target_toml(relative, name, signature)
        return record.model_copy(
            update={"missing_config": toml, "config_path": self.project.pyproject}
        )
