"""Change detection on real git repositories: a base commit, a head commit, the changed modules.

Each test builds a small repository in a temporary folder with the git CLI; nothing is imported
from the files (detection reads the AST of the head commit's objects only).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bot.detect.changes import ChangedModule, ChangeReport, detect_changes
from harness.config import TargetConfig
from harness.errors import UserError
from tests.gitrepo import commit, git, init

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

BLOCK = """\
import torch
from torch import nn


def scale_of(x):
    return x.shape[-1] ** -0.5


EPS = 1e-6


class Block(nn.Module):
    def __init__(self, dim, hidden=4):
        super().__init__()
        self.proj = nn.Linear(dim, dim * hidden)

    def forward(self, x):
        return torch.relu(self.proj(x)) * scale_of(x) + EPS


def unrelated(a):
    return a + 1
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init(tmp_path)


def pr(repo: Path, base: dict, head: dict, max_targets: int = 20) -> ChangeReport:
    """Commit ``base``, then ``head`` on top, and detect what head changed."""
    base_sha = commit(repo, base, "base")
    head_sha = commit(repo, head, "head")
    return detect_changes(repo, base_sha, head_sha, max_targets=max_targets)


def only(report: ChangeReport) -> ChangedModule:
    assert len(report.modules) == 1, report.modules
    return report.modules[0]


def edit(source: str, old: str, new: str) -> str:
    assert old in source
    return source.replace(old, new)


# --- what counts as a changed module ------------------------------------------------------------


def test_forward_body_change(repo: Path) -> None:
    head = edit(BLOCK, "torch.relu(self.proj(x))", "torch.nn.functional.gelu(self.proj(x))")
    report = pr(repo, {"model.py": BLOCK}, {"model.py": head})
    module = only(report)
    assert (module.path, module.class_name, module.reason) == (
        "model.py",
        "Block",
        "class body changed",
    )
    assert module.class_line == 12
    assert module.lines == [18]
    assert [(f.path, f.status) for f in report.files] == [("model.py", "modified")]


def test_helper_function_used_by_forward(repo: Path) -> None:
    head = edit(BLOCK, "x.shape[-1] ** -0.5", "x.shape[-1] ** -0.25")
    module = only(pr(repo, {"model.py": BLOCK}, {"model.py": head}))
    assert (module.class_name, module.reason, module.lines) == (
        "Block",
        "helper scale_of changed",
        [6],
    )


def test_constant_used_by_forward(repo: Path) -> None:
    head = edit(BLOCK, "EPS = 1e-6", "EPS = 1e-5")
    module = only(pr(repo, {"model.py": BLOCK}, {"model.py": head}))
    assert (module.class_name, module.reason, module.lines) == ("Block", "helper EPS changed", [9])


def test_helper_reached_through_another_helper(repo: Path) -> None:
    base = edit(BLOCK, "    return x.shape[-1] ** -0.5", "    return x.shape[-1] ** POWER")
    base = "POWER = -0.5\n" + base
    head = edit(base, "POWER = -0.5", "POWER = -0.25")
    module = only(pr(repo, {"model.py": base}, {"model.py": head}))
    assert module.reason == "helper POWER changed"


def test_unrelated_function_change_is_no_module(repo: Path) -> None:
    head = edit(BLOCK, "return a + 1", "return a + 2")
    report = pr(repo, {"model.py": BLOCK}, {"model.py": head})
    assert report.modules == [] and report.skipped_files == []
    assert [f.path for f in report.files] == ["model.py"]


def test_non_module_class_and_non_python_files_are_ignored(repo: Path) -> None:
    base = {"util.py": "class Config:\n    size = 1\n", "README.md": "hi\n"}
    report = pr(repo, base, {"util.py": "class Config:\n    size = 2\n", "README.md": "bye\n"})
    assert report.modules == []
    assert [f.path for f in report.files] == ["util.py"]


@pytest.mark.parametrize(
    ("imports", "base_expression"),
    [
        ("import torch.nn as tnn", "tnn.Module"),
        ("from torch import nn as N", "N.Module"),
        ("from torch.nn import Module as M", "M"),
        ("import torch as T", "T.nn.Module"),
        ("import torch.nn", "torch.nn.Module"),
        ("from torch.nn import Linear", "Linear"),
    ],
)
def test_aliased_imports(repo: Path, imports: str, base_expression: str) -> None:
    base = f"{imports}\n\n\nclass Layer({base_expression}):\n    def forward(self, x):\n        return x\n"
    head = edit(base, "return x", "return x * 2")
    module = only(pr(repo, {"layer.py": base}, {"layer.py": head}))
    assert module.class_name == "Layer"


def test_lookalikes_are_not_modules(repo: Path) -> None:
    base = (
        "import torch\nfrom torch.nn import Parameter\n\n\n"
        "class Weight(Parameter):\n    pass\n\n\n"
        "class Plain(torch.Tensor):\n    pass\n"
    )
    report = pr(repo, {"w.py": base}, {"w.py": base.replace("pass", "x = 1")})
    assert report.modules == []


def test_subclass_of_repository_base_class_in_another_file(repo: Path) -> None:
    blocks = "from torch import nn\n\n\nclass Base(nn.Module):\n    pass\n"
    model = (
        "from .blocks import Base\nfrom pkg import blocks\n\n\n"
        "class Child(Base):\n    def forward(self, x):\n        return x\n\n\n"
        "class Other(blocks.Base):\n    def forward(self, x):\n        return x\n"
    )
    files = {"pkg/__init__.py": "", "pkg/blocks.py": blocks, "pkg/model.py": model}
    head = {"pkg/model.py": model.replace("return x", "return x + 1")}
    report = pr(repo, files, head)
    assert [m.class_name for m in report.modules] == ["Child", "Other"]


def test_base_class_two_packages_up(repo: Path) -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/base.py": "import torch.nn as nn\n\n\nclass B(nn.Module):\n    pass\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/deep.py": "from ..base import B\n\n\nclass D(B):\n    def forward(self, x):\n        return x\n",
    }
    head = {"pkg/sub/deep.py": files["pkg/sub/deep.py"].replace("return x", "return x + 1")}
    assert only(pr(repo, files, head)).class_name == "D"


def test_base_class_through_a_package_reexport_and_two_levels(repo: Path) -> None:
    files = {
        "src/lib/__init__.py": "from .core import Core\n",
        "src/lib/core.py": "import torch\n\n\nclass Core(torch.nn.Module):\n    pass\n",
        "src/lib/mid.py": "from lib import Core\n\n\nclass Mid(Core):\n    pass\n",
        "app.py": "from lib.mid import Mid\n\n\nclass Top(Mid):\n    def forward(self, x):\n        return x\n",
    }
    module = only(pr(repo, files, {"app.py": files["app.py"].replace("return x", "return -x")}))
    assert module.class_name == "Top"


def test_a_cycle_of_bases_is_not_a_module(repo: Path) -> None:
    files = {
        "a.py": "from b import B\n\n\nclass A(B):\n    pass\n",
        "b.py": "from a import A\n\n\nclass B(A):\n    pass\n",
    }
    report = pr(repo, files, {"a.py": files["a.py"].replace("pass", "x = 1")})
    assert report.modules == []


def test_changed_base_class_in_same_file_changes_its_subclasses(repo: Path) -> None:
    base = (
        "from torch import nn\n\n\nclass Base(nn.Module):\n    def forward(self, x):\n        return x\n\n\n"
        "class Child(Base):\n    pass\n"
    )
    report = pr(repo, {"m.py": base}, {"m.py": base.replace("return x", "return x * 3")})
    reasons = {m.class_name: m.reason for m in report.modules}
    assert reasons == {"Base": "class body changed", "Child": "base class Base changed"}


def test_new_file_modules_are_added(repo: Path) -> None:
    report = pr(repo, {"other.py": "x = 1\n"}, {"model.py": BLOCK})
    module = only(report)
    assert (module.class_name, module.reason) == ("Block", "class added")
    assert [(f.path, f.status) for f in report.files] == [("model.py", "added")]


def test_pure_deletion_inside_a_method_changes_the_class(repo: Path) -> None:
    base = edit(
        BLOCK,
        "        super().__init__()\n",
        "        super().__init__()\n        self.unused = 1\n",
    )
    module = only(pr(repo, {"model.py": base}, {"model.py": BLOCK}))
    assert (module.class_name, module.reason) == ("Block", "class body changed")


def test_changes_on_the_base_branch_are_not_the_prs(repo: Path) -> None:
    """base...head: the base branch moved on after the PR branched (base is not an ancestor)."""
    other = BLOCK.replace("class Block", "class Other")
    fork = commit(repo, {"model.py": BLOCK, "other.py": other}, "fork point")
    git(repo, "checkout", "--quiet", "-b", "feature")
    head = commit(repo, {"model.py": edit(BLOCK, "EPS = 1e-6", "EPS = 1e-5")})
    git(repo, "checkout", "--quiet", "main")
    base = commit(repo, {"other.py": edit(other, "EPS = 1e-6", "EPS = 1e-3")})
    report = detect_changes(repo, "main", "feature")
    assert report.merge_base == fork and (report.base_sha, report.head_sha) == (base, head)
    assert [m.class_name for m in report.modules] == ["Block"]


# --- renamed, deleted and unreadable files ----------------------------------------------------


def test_renamed_file_with_a_change(repo: Path) -> None:
    head = edit(BLOCK, "EPS = 1e-6", "EPS = 1e-5")
    report = pr(repo, {"old/model.py": BLOCK}, {"old/model.py": None, "new/model.py": head})
    module = only(report)
    assert (module.path, module.reason) == ("new/model.py", "helper EPS changed")
    assert [(f.path, f.old_path, f.status) for f in report.files] == [
        ("new/model.py", "old/model.py", "renamed")
    ]


def test_deleted_file(repo: Path) -> None:
    report = pr(repo, {"model.py": BLOCK, "keep.py": "x = 1\n"}, {"model.py": None})
    assert report.modules == []
    [skipped] = report.skipped_files
    assert (skipped.path, skipped.kind) == ("model.py", "deleted")
    assert "nothing to optimize" in skipped.reason


def test_syntax_error_in_head_is_reported_and_other_files_go_on(repo: Path) -> None:
    broken = edit(BLOCK, "def forward(self, x):", "def forward(self, x)")
    fixed = edit(BLOCK, "EPS = 1e-6", "EPS = 1e-5")
    report = pr(repo, {"a.py": BLOCK, "b.py": BLOCK}, {"a.py": broken, "b.py": fixed})
    [skipped] = report.skipped_files
    assert (skipped.path, skipped.kind) == ("a.py", "syntax_error")
    assert "line 17" in skipped.reason
    assert [m.path for m in report.modules] == ["b.py"]


def test_renamed_away_from_python_and_links(repo: Path) -> None:
    report = pr(repo, {"model.py": BLOCK}, {"model.py": None, "model.txt": BLOCK})
    [skipped] = report.skipped_files
    assert (skipped.path, skipped.kind) == ("model.py", "deleted")
    assert "renamed to model.txt" in skipped.reason
    (repo / "alias.py").symlink_to("model.txt")
    head = commit(repo, {})
    [link] = detect_changes(repo, "HEAD~1", head).skipped_files
    assert (link.path, link.kind) == ("alias.py", "not_a_file")


def test_binary_and_huge_files_are_skipped(repo: Path) -> None:
    huge = "x = 1\n" * 200_000
    report = pr(repo, {"keep.py": "x = 1\n"}, {"blob.py": b"\x00\x01\x02binary", "gen.py": huge})
    kinds = {s.path: s.kind for s in report.skipped_files}
    assert kinds == {"blob.py": "binary", "gen.py": "too_large"}


def test_the_work_tree_is_not_read(repo: Path) -> None:
    base = commit(repo, {"model.py": BLOCK})
    head = commit(repo, {"model.py": edit(BLOCK, "EPS = 1e-6", "EPS = 1e-5")})
    (repo / "model.py").write_text("this is not python (")
    assert only(detect_changes(repo, base, head)).reason == "helper EPS changed"


# --- targets: configured, KernelBench-style, missing --------------------------------------------

KERNELBENCH = """\
import torch
import torch.nn as nn


class Inner(nn.Module):
    def forward(self, x):
        return x * 2


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return torch.relu(self.inner(x))


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return [64]
"""


def test_kernelbench_style_file_is_a_target_through_get_inputs(repo: Path) -> None:
    head = edit(KERNELBENCH, "torch.relu(", "torch.sigmoid(")
    module = only(pr(repo, {"level1/relu.py": KERNELBENCH}, {"level1/relu.py": head}))
    assert (module.class_name, module.target, module.target_source) == (
        "Model",
        "level1/relu.py:Model",
        "get_inputs",
    )
    assert module.missing_config is None


def test_kernelbench_building_block_change_reaches_model(repo: Path) -> None:
    """get_inputs() is Model's: a changed Inner makes Model a target; Inner itself needs config."""
    head = edit(KERNELBENCH, "return x * 2", "return x * 3")
    report = pr(repo, {"k.py": KERNELBENCH}, {"k.py": head})
    by_name = {m.class_name: m for m in report.modules}
    assert by_name["Model"].reason == "helper Inner changed"
    assert by_name["Model"].target == "k.py:Model"
    assert by_name["Inner"].target is None and by_name["Inner"].missing_config


def test_kernelbench_new_input_shapes_change_the_problem(repo: Path) -> None:
    head = edit(KERNELBENCH, "torch.randn(8, 64)", "torch.randn(16, 64)")
    module = only(pr(repo, {"k.py": KERNELBENCH}, {"k.py": head}))
    assert (module.class_name, module.reason) == ("Model", "helper get_inputs changed")


PYPROJECT = """\
[project]
name = "demo"

[tool.kernelpilot]
device = "auto"

[[tool.kernelpilot.targets]]
module = "pkg/model.py:Block"
init_args = [64]
inputs = [[8, 64]]
"""


def test_configured_target_via_pyproject(repo: Path) -> None:
    files = {"pyproject.toml": PYPROJECT, "pkg/model.py": BLOCK}
    module = only(pr(repo, files, {"pkg/model.py": edit(BLOCK, "EPS = 1e-6", "EPS = 0.0")}))
    assert (module.target, module.target_source) == ("pkg/model.py:Block", "config")


def test_configured_target_in_a_nested_pyproject(repo: Path) -> None:
    nested = PYPROJECT.replace("pkg/model.py", "model.py")
    files = {
        "pyproject.toml": "[project]\nname = 'root'\n",
        "sub/pyproject.toml": nested,
        "sub/model.py": BLOCK,
    }
    module = only(pr(repo, files, {"sub/model.py": edit(BLOCK, "EPS = 1e-6", "EPS = 0.0")}))
    assert (module.target, module.target_source) == ("sub/model.py:Block", "config")


def test_configured_class_counts_even_when_its_base_is_not_resolvable(repo: Path) -> None:
    source = "from timm.layers import Mlp\n\n\nclass Block(Mlp):\n    def forward(self, x):\n        return x\n"
    config = PYPROJECT.replace("pkg/model.py", "m.py")
    report = pr(
        repo, {"pyproject.toml": config, "m.py": source}, {"m.py": source.replace("x\n", "-x\n")}
    )
    assert only(report).target == "m.py:Block"


def test_module_with_no_inputs_gets_the_toml_lines_to_add(repo: Path) -> None:
    files = {"pyproject.toml": "[project]\nname = 'demo'\n", "pkg/model.py": BLOCK}
    module = only(pr(repo, files, {"pkg/model.py": edit(BLOCK, "EPS = 1e-6", "EPS = 0.0")}))
    assert module.target is None and module.config_path == "pyproject.toml"
    assert module.missing_config is not None
    assert module.missing_config.splitlines() == [
        "[[tool.kernelpilot.targets]]",
        'module = "pkg/model.py:Block"',
        'init_args = []   # Block.__init__(dim, hidden=...); or init = "file.py:function" '
        "returning them",
        'inputs = "pkg/model.py:make_inputs"   # write make_inputs() returning forward\'s '
        "inputs, or give shapes: [[8, 1024]]",
    ]
    # The lines are valid TOML and configure exactly this module.
    table = tomllib.loads(module.missing_config)["tool"]["kernelpilot"]["targets"][0]
    assert TargetConfig.model_validate(table).module == "pkg/model.py:Block"
    assert report_unconfigured(module)


def report_unconfigured(module: ChangedModule) -> bool:
    report = ChangeReport(
        base="b",
        head="h",
        base_sha="1",
        head_sha="2",
        merge_base="1",
        max_targets=20,
        modules=[module],
    )
    return report.unconfigured() == [module] and report.targets() == []


def test_toml_lines_go_into_the_nearest_kernelpilot_pyproject(repo: Path) -> None:
    nested = PYPROJECT.replace("pkg/model.py", "other.py")
    files = {"sub/pyproject.toml": nested, "sub/deep/model.py": BLOCK}
    module = only(pr(repo, files, {"sub/deep/model.py": edit(BLOCK, "EPS = 1e-6", "EPS = 0.0")}))
    assert module.config_path == "sub/pyproject.toml"
    assert (
        module.missing_config is not None
        and 'module = "deep/model.py:Block"' in module.missing_config
    )


def test_invalid_kernelpilot_config_is_a_user_error(repo: Path) -> None:
    files = {"pyproject.toml": "[tool.kernelpilot]\ndevise = 'cuda'\n", "m.py": BLOCK}
    with pytest.raises(UserError, match="invalid \\[tool.kernelpilot\\] setting") as caught:
        pr(repo, files, {"m.py": edit(BLOCK, "EPS = 1e-6", "EPS = 0.0")})
    assert "tool.kernelpilot.devise" in caught.value.where


def test_broken_pyproject_is_a_user_error(repo: Path) -> None:
    files = {"pyproject.toml": "[tool.kernelpilot\n", "m.py": BLOCK}
    with pytest.raises(UserError, match="not valid TOML") as caught:
        pr(repo, files, {"m.py": edit(BLOCK, "EPS = 1e-6", "EPS = 0.0")})
    assert caught.value.where.startswith("pyproject.toml at commit ")


# --- the cap and bad refs -----------------------------------------------------------------------


def test_cap_on_targets_per_run(repo: Path) -> None:
    base = {f"k{index:02d}.py": KERNELBENCH for index in range(25)}
    head = {name: edit(KERNELBENCH, "torch.relu(", "torch.tanh(") for name in base}
    head["plain.py"] = BLOCK  # no inputs: listed, but takes no place under the cap
    report = pr(repo, base, head, max_targets=20)
    assert len(report.targets()) == 20 and len(report.over_cap) == 5
    assert [m.path for m in report.over_cap] == [f"k{index:02d}.py" for index in range(20, 25)]
    assert [m.class_name for m in report.unconfigured()] == ["Block"]
    assert report.max_targets == 20


def test_unknown_ref_is_a_user_error(repo: Path) -> None:
    commit(repo, {"model.py": BLOCK})
    with pytest.raises(UserError, match="unknown base ref 'no-such-branch'") as caught:
        detect_changes(repo, "no-such-branch", "HEAD")
    assert "fetch" in caught.value.fix


@pytest.mark.parametrize("ref", ["--output=/tmp/x", "-p", ""])
def test_refs_that_read_as_options_are_refused(repo: Path, ref: str) -> None:
    commit(repo, {"model.py": BLOCK})
    with pytest.raises(UserError, match="is not a ref"):
        detect_changes(repo, ref, "HEAD")


def test_unrelated_histories_are_a_user_error(repo: Path) -> None:
    commit(repo, {"model.py": BLOCK})
    git(repo, "checkout", "--quiet", "--orphan", "other")
    commit(repo, {"model.py": edit(BLOCK, "EPS = 1e-6", "EPS = 0.0")})
    with pytest.raises(UserError, match="no commit in common") as caught:
        detect_changes(repo, "main", "other")
    assert "fetch-depth: 0" in caught.value.fix


def test_not_a_repository_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a git repository"):
        detect_changes(tmp_path, "main", "HEAD")
