"""Change detection across the repository, on real git repositories: subclasses and users of a
changed module in other files (names resolved through the head commit's imports), the import
graph's importers(), and edits that change no behaviour (comments, docstrings, formatting)
skipped and said so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.detect import head as head_module
from bot.detect.changes import ChangedModule, ChangeReport, detect_changes
from bot.detect.head import HeadFiles
from bot.detect.imports import ImportGraph
from bot.pr.comment import render_comment
from bot.pr.results import PullResults
from tests.gitrepo import commit, init

MLP = """\
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc = nn.Linear(config, 4 * config)

    def forward(self, x):
        return torch.relu(self.fc(x))
"""
MLP_CHANGED = MLP.replace("torch.relu(", "torch.tanh(")

GATED = """\
{imports}


class GatedMLP({base}):
    def forward(self, x):
        return super().forward(x) * torch.sigmoid(x.mean())
"""

USER = """\
import torch
from torch import nn
from model import MLP


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.mlp = MLP(config)

    def forward(self, x):
        return x + self.mlp(x)
"""

PYPROJECT = """\
[tool.kernelpilot]
device = "auto"
{targets}
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init(tmp_path)


def pr(repo: Path, base: dict, head: dict, max_targets: int = 20) -> ChangeReport:
    base_sha = commit(repo, base, "base")
    head_sha = commit(repo, head, "head")
    return detect_changes(repo, base_sha, head_sha, max_targets=max_targets)


def by_key(report: ChangeReport) -> dict[str, ChangedModule]:
    return {f"{m.path}:{m.class_name}": m for m in report.modules}


def configured(*modules: str) -> str:
    entries = "".join(
        f'\n[[tool.kernelpilot.targets]]\nmodule = "{m}"\ninit_args = [8]\ninputs = [[2, 8]]\n'
        for m in modules
    )
    return PYPROJECT.format(targets=entries)


# --- subclasses and users in other files ----------------------------------------------------------


@pytest.mark.parametrize(
    ("model_path", "gated_path", "imports", "base"),
    [
        ("model.py", "gated.py", "import torch\nfrom model import MLP", "MLP"),
        ("model.py", "gated.py", "import torch\nimport model", "model.MLP"),
        ("pkg/model.py", "pkg/gated.py", "import torch\nfrom .model import MLP", "MLP"),
        ("pkg/model.py", "other/gated.py", "import torch\nfrom pkg.model import MLP as M", "M"),
        ("pkg/model.py", "gated.py", "import torch\nfrom pkg import model as m", "m.MLP"),
        ("src/lib/model.py", "app/gated.py", "import torch\nfrom lib.model import *", "MLP"),
    ],
)
def test_subclass_in_another_file(
    repo: Path, model_path: str, gated_path: str, imports: str, base: str
) -> None:
    files = {model_path: MLP, gated_path: GATED.format(imports=imports, base=base)}
    if model_path.startswith("pkg/"):
        files["pkg/__init__.py"] = ""
    report = pr(repo, files, {model_path: MLP_CHANGED})
    modules = by_key(report)
    assert list(modules) == [f"{model_path}:MLP", f"{gated_path}:GatedMLP"]
    gated = modules[f"{gated_path}:GatedMLP"]
    assert gated.reason == f"base class MLP changed ({model_path})"
    assert gated.lines == [] and gated.class_line == 5
    assert gated.missing_config is not None and f"{gated_path}:GatedMLP" in gated.missing_config


def test_a_class_of_the_same_name_elsewhere_is_not_a_subclass(repo: Path) -> None:
    """Only a name that resolves to the changed class counts: another file's own MLP does not."""
    own = MLP.replace("torch.relu(", "torch.sigmoid(")
    files = {
        "model.py": MLP,
        "other/model.py": own,
        "other/gated.py": GATED.format(imports="import torch\nfrom model import MLP", base="MLP"),
        "unrelated.py": GATED.format(
            imports="import torch\nfrom other.model import MLP", base="MLP"
        ),
    }
    report = pr(repo, files, {"model.py": MLP_CHANGED})
    # other/gated.py's "from model import MLP" finds other/model.py first (its own folder).
    assert list(by_key(report)) == ["model.py:MLP"]


def test_subclass_through_a_package_reexport_under_another_name(repo: Path) -> None:
    files = {
        "pkg/__init__.py": "from .model import MLP as FeedForward\n",
        "pkg/model.py": MLP,
        "app.py": GATED.format(
            imports="import torch\nfrom pkg import FeedForward", base="FeedForward"
        ),
    }
    modules = by_key(pr(repo, files, {"pkg/model.py": MLP_CHANGED}))
    assert modules["app.py:GatedMLP"].reason == "base class MLP changed (pkg/model.py)"


def test_transitive_subclass_across_three_files(repo: Path) -> None:
    files = {
        "model.py": MLP,
        "gated.py": GATED.format(imports="import torch\nfrom model import MLP", base="MLP"),
        "deep.py": "from gated import GatedMLP\n\n\nclass Deeper(GatedMLP):\n    pass\n",
    }
    modules = by_key(pr(repo, files, {"model.py": MLP_CHANGED}))
    assert modules["gated.py:GatedMLP"].reason == "base class MLP changed (model.py)"
    assert modules["deep.py:Deeper"].reason == "base class GatedMLP changed (gated.py)"


def test_users_in_other_files_one_level_deep(repo: Path) -> None:
    """A module that builds the changed class, or a subclass of it, is changed; the network
    that builds that module is not followed (from one layer to every model of a zoo)."""
    gpt = (
        "from torch import nn\nimport blocks\n\n\nclass GPT(nn.Module):\n"
        "    def __init__(self, config):\n        super().__init__()\n"
        "        self.blocks = nn.ModuleList([blocks.Block(config) for _ in range(2)])\n"
    )
    wrapper = USER.replace("from model import MLP", "from gated import GatedMLP as MLP")
    plain = (
        "from model import MLP\n\n\nclass Factory:\n    def make(self):\n        return MLP(8)\n"
    )
    files = {
        "model.py": MLP,
        "gated.py": GATED.format(imports="import torch\nfrom model import MLP", base="MLP"),
        "blocks.py": USER,
        "gpt.py": gpt,
        "factory.py": plain,
        "wrapper.py": wrapper,
    }
    modules = by_key(pr(repo, files, {"model.py": MLP_CHANGED}))
    assert list(modules) == [
        "model.py:MLP",
        "gated.py:GatedMLP",
        "blocks.py:Block",
        "wrapper.py:Block",
    ]  # not GPT (a user of a user), not Factory (no module)
    assert modules["blocks.py:Block"].reason == "uses MLP (model.py), which changed"
    assert modules["wrapper.py:Block"].reason == "uses GatedMLP (gated.py), which changed"


def test_a_layer_given_as_a_default_is_a_use(repo: Path) -> None:
    """timm's blocks take ``mlp_layer=Mlp`` and build ``mlp_layer(...)``: no call names Mlp."""
    block = USER.replace("def __init__(self, config):", "def __init__(self, config, layer=MLP):")
    block = block.replace("self.mlp = MLP(config)", "self.mlp = layer(config)")
    modules = by_key(pr(repo, {"model.py": MLP, "blocks.py": block}, {"model.py": MLP_CHANGED}))
    assert modules["blocks.py:Block"].reason == "uses MLP (model.py), which changed"


def test_users_are_targets_after_the_changed_classes_and_their_subclasses(repo: Path) -> None:
    """The cap's order: the diff's own classes first, then subclasses, then users."""
    toml = configured("model.py:MLP", "blocks.py:Block", "gated.py:GatedMLP")
    files = {
        "pyproject.toml": toml,
        "model.py": MLP,
        "blocks.py": USER,  # sorts before gated.py: found first, yet queued after the subclass
        "gated.py": GATED.format(imports="import torch\nfrom model import MLP", base="MLP"),
    }
    report = pr(repo, files, {"model.py": MLP_CHANGED}, max_targets=2)
    assert [m.target for m in report.targets()] == ["model.py:MLP", "gated.py:GatedMLP"]
    assert [m.target for m in report.over_cap] == ["blocks.py:Block"]
    assert report.over_cap[0].target_source == "config"


def test_a_user_with_get_inputs_is_a_target(repo: Path) -> None:
    bench = USER.replace("class Block", "class Model") + (
        "\n\ndef get_inputs():\n    return [torch.randn(2, 8)]\n\n\n"
        "def get_init_inputs():\n    return [8]\n"
    )
    report = pr(repo, {"model.py": MLP, "bench/mlp_block.py": bench}, {"model.py": MLP_CHANGED})
    [target] = report.targets()
    assert (target.target, target.target_source) == ("bench/mlp_block.py:Model", "get_inputs")


def test_a_cycle_of_imports_ends(repo: Path) -> None:
    files = {
        "model.py": MLP + "\nimport blocks  # noqa\n",
        "blocks.py": USER + "\nimport model  # noqa\n",
    }
    report = pr(repo, files, {"model.py": MLP_CHANGED + "\nimport blocks  # noqa\n"})
    assert list(by_key(report)) == ["model.py:MLP", "blocks.py:Block"]


def test_a_crafted_chain_of_reexports_ends_without_a_recursion_error(repo: Path) -> None:
    """600 files, each re-exporting the next one's MLP: followed up to a bound, not to a crash."""
    files = {f"r{i}.py": f"from r{i + 1} import MLP\n" for i in range(600)}
    files["r600.py"] = MLP
    files["gated.py"] = GATED.format(imports="import torch\nfrom r0 import MLP", base="MLP")
    files["near.py"] = GATED.format(imports="import torch\nfrom r598 import MLP", base="MLP")
    report = pr(repo, files, {"r600.py": MLP_CHANGED})
    assert list(by_key(report)) == ["r600.py:MLP", "near.py:GatedMLP"]


def test_an_unparsable_importer_is_skipped_and_the_others_go_on(repo: Path) -> None:
    broken = GATED.format(imports="import torch\nfrom model import MLP", base="MLP")
    files = {
        "model.py": MLP,
        "broken.py": broken.replace("def forward(self, x):", "def forward(self, x)"),
        "blocks.py": USER,
    }
    report = pr(repo, files, {"model.py": MLP_CHANGED})
    assert list(by_key(report)) == ["model.py:MLP", "blocks.py:Block"]
    assert report.skipped_files == []  # broken.py is not the pull request's file


def test_importers_direct_transitive_and_inside_functions(repo: Path) -> None:
    sha = commit(
        repo,
        {
            "pkg/__init__.py": "from .model import MLP\n",
            "pkg/model.py": MLP,
            "pkg/util.py": "x = 1\n",
            "app.py": "from pkg import MLP\n",
            "tests/test_model.py": "def test_it():\n    from pkg.model import MLP\n",
            "tests/test_app.py": "import app\n",
            "tests/test_util.py": "from pkg import util\n",
            "cycle_a.py": "import cycle_b\nimport pkg.model\n",
            "cycle_b.py": "import cycle_a\n",
            "broken.py": "from pkg.model import (\n",
        },
    )
    graph = ImportGraph(HeadFiles(repo, sha, []))
    assert graph.importers("pkg/model.py") == [
        "app.py",
        "cycle_a.py",
        "cycle_b.py",
        "pkg/__init__.py",
        "tests/test_app.py",
        "tests/test_model.py",
        "tests/test_util.py",  # from pkg import util runs pkg/__init__.py, which imports it
    ]
    assert graph.importers("pkg/util.py") == ["tests/test_util.py"]


def test_files_over_the_search_limit_are_said(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(head_module, "MAX_SEARCHED_FILES", 1)
    files = {"a_model.py": MLP, "blocks.py": USER.replace("from model", "from a_model")}
    report = pr(repo, files, {"a_model.py": MLP_CHANGED})
    assert list(by_key(report)) == ["a_model.py:MLP"]
    [note] = report.notes
    assert note.startswith("1 of the head commit's 2 Python files were not searched")


# --- edits that change no behaviour -------------------------------------------------------------

COMMENTED = MLP.replace(
    "    def forward(self, x):\n",
    "    def forward(self, x):\n        # relu keeps the fused kernel simple\n",
)
DOCUMENTED = MLP.replace(
    "class MLP(nn.Module):\n", 'class MLP(nn.Module):\n    """Two layers, one activation."""\n\n'
).replace("import torch\n", '"""The feed-forward block."""\n\nimport torch\n', 1)
REFORMATTED = MLP.replace(
    "self.fc = nn.Linear(config, 4 * config)",
    "self.fc = nn.Linear(\n            config,\n            4*config,\n        )",
).replace("torch.relu(self.fc(x))", "(torch.relu( self.fc(x) ))")


@pytest.mark.parametrize(
    "edited", [COMMENTED, DOCUMENTED, REFORMATTED], ids=["comment", "docstring", "format"]
)
def test_an_edit_that_changes_no_behaviour_is_skipped_and_said(repo: Path, edited: str) -> None:
    files = {"model.py": MLP, "gated.py": GATED.format(imports="from model import MLP", base="MLP")}
    report = pr(repo, files, {"model.py": edited})
    assert report.modules == [] and report.targets() == []
    [skipped] = report.skipped_files
    assert (skipped.path, skipped.kind) == ("model.py", "cosmetic")
    assert skipped.reason.startswith("only comments, docstrings or formatting changed")
    assert [(f.path, f.status) for f in report.files] == [("model.py", "modified")]


def test_a_real_edit_next_to_a_comment_is_still_detected(repo: Path) -> None:
    two = MLP + "\n\n" + MLP.split("\n\n\n", 1)[1].replace("class MLP", "class Other")
    head = two.replace("    def forward(self, x):\n", "    def forward(self, x):\n        # note\n")
    head = head.replace("torch.relu(self.fc(x))", "torch.tanh(self.fc(x))", 1)
    report = pr(repo, {"model.py": two}, {"model.py": head})
    [module] = report.modules
    assert (module.class_name, module.reason) == ("MLP", "class body changed")
    [cosmetic] = report.cosmetic
    assert (cosmetic.class_name, cosmetic.reason) == (
        "Other",
        "only comments, docstrings or formatting changed",
    )
    assert cosmetic.target is None and cosmetic.missing_config is None
    assert report.skipped_files == []


def test_a_class_is_blamed_on_the_helper_that_really_changed(repo: Path) -> None:
    """Both helpers' lines changed; only scale's change is one of behaviour (act's is a
    comment), so the reason names scale, although act is the nearer by name."""
    helpers = "import torch\n\nscale = 2\n\n\ndef act(x):\n    return x\n"
    base = MLP.replace("import torch\n", helpers)
    base = base.replace("torch.relu(self.fc(x))", "act(self.fc(x)) * scale")
    head = base.replace("    return x\n", "    # identity for now\n    return x\n")
    head = head.replace("scale = 2", "scale = 3")
    [module] = pr(repo, {"model.py": base}, {"model.py": head}).modules
    assert (module.reason, module.lines) == ("helper scale changed", [3])


def test_a_changed_import_keeps_a_commented_class_changed(repo: Path) -> None:
    """The comment in the class is cosmetic, the import it uses is not."""
    base = MLP.replace(
        "from torch import nn\n",
        "from torch import nn\nfrom torch.nn.functional import gelu as act\n",
    )
    base = base.replace("torch.relu(self.fc(x))", "act(self.fc(x))")
    head = base.replace("gelu as act", "silu as act")
    head = head.replace("    def forward(self, x):\n", "    def forward(self, x):\n        # act\n")
    [module] = pr(repo, {"model.py": base}, {"model.py": head}).modules
    assert (module.class_name, module.reason) == ("MLP", "class body changed")


def test_a_changed_constant_type_is_a_change(repo: Path) -> None:
    base = MLP.replace("4 * config", "4 * config * 1")
    [module] = pr(repo, {"model.py": base}, {"model.py": base.replace("* 1)", "* 1.0)")}).modules
    assert module.class_name == "MLP"


def test_the_comment_shows_cosmetic_edits(repo: Path) -> None:
    two = MLP + "\n\n" + MLP.split("\n\n\n", 1)[1].replace("class MLP", "class Other")
    head = two.replace("return torch.relu(self.fc(x))", "return torch.relu(self.fc(x))  # why", 2)
    mixed = two.replace("torch.relu(self.fc(x))", "torch.tanh(self.fc(x))", 1)  # MLP's edit
    mixed = mixed.replace("torch.relu(self.fc(x))", "torch.relu(self.fc(x))  # why")  # Other's
    files = {"model.py": two, "doc.py": MLP, "two.py": two, "user.py": USER.replace("model", "two")}
    report = pr(repo, files, {"model.py": head, "doc.py": COMMENTED, "two.py": mixed})
    assert [s.path for s in report.skipped_files] == ["doc.py", "model.py"]
    assert [(m.path, m.relation) for m in report.modules] == [
        ("two.py", "diff"),
        ("user.py", "user"),
    ]
    results = PullResults(mode="pull_request", repository="o/r", pull_number=3,
                          commit=report.head_sha, changes=report)  # fmt: skip
    body = render_comment(results)
    assert (
        "**Changed only in comments, docstrings or formatting**, so not optimized: "
        "` doc.py `, ` model.py `, ` two.py:Other `." in body
    )
    assert "Files not looked at" not in body
    # The diff's module gets its TOML lines; the module that uses it, one name on one line.
    assert 'module = "two.py:MLP"' in body and 'module = "user.py:Block"' not in body
    assert "**Modules that use a changed module**, without inputs" in body
    assert "optimizes it too): ` user.py:Block `." in body


def test_a_comment_in_a_file_without_modules_is_not_reported(repo: Path) -> None:
    util = "def double(x):\n    return x * 2\n"
    report = pr(
        repo, {"util.py": util}, {"util.py": util.replace("    return", "    # why\n    return")}
    )
    assert report.modules == [] and report.cosmetic == [] and report.skipped_files == []


def test_a_pull_request_with_only_cosmetic_edits_says_so_in_the_headline(repo: Path) -> None:
    report = pr(repo, {"model.py": MLP}, {"model.py": COMMENTED})
    results = PullResults(mode="pull_request", repository="o/r", pull_number=3,
                          commit=report.head_sha, changes=report)  # fmt: skip
    body = render_comment(results)
    assert "Only comments, docstrings or formatting of `nn.Module`s changed" in body
    assert "No `nn.Module` changed" not in body
