"""Zero-config targets from the repository's usage examples: the Python blocks of its Markdown
files run, in the sandbox, as a reader runs them, and the modules they build and call become
targets (a library without tests for a module usually shows it in its README)."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from bot.cli import main
from bot.detect.captured import HeadCode
from harness.capture.examples import examples_naming, python_blocks
from harness.capture.run import capture
from tests.conftest import FIXTURES, fast_config
from tests.gitrepo import commit, git, init

README = """# nets

Install it first:

```bash
pip install nets
```

```python
import torch
from nets.act import Act
```

Some prose between the blocks.

```python
raise RuntimeError("this example needs a download")
```

~~~py
act = Act()
y = act(torch.randn(3, 5))
~~~

```python
print("after the last block that names the class: not run")
```
"""


def test_the_python_blocks_of_markdown_are_read_with_their_lines():
    blocks = python_blocks("README.md", README)
    assert [block.line for block in blocks] == [10, 17, 21, 26]
    assert blocks[0].code == "import torch\nfrom nets.act import Act"
    assert "pip install" not in "".join(block.code for block in blocks)  # a bash block
    unclosed = python_blocks("a.md", "```python\nx = 1\n")
    assert [block.code for block in unclosed] == ["x = 1"]


def test_doctest_blocks_run_their_statements_at_their_lines():
    [block] = python_blocks("a.md", "text\n\n```pycon\n>>> x = 2\n>>> x + 1\n3\n```\n")
    assert block.runnable().split("\n") == ["", "", "", "x = 2", "x + 1", ""]


def test_examples_are_the_blocks_up_to_the_last_that_names_a_class():
    chosen = examples_naming([("README.md", README)], {"Act"})
    assert [block.line for block in chosen] == [10, 17, 21]  # the set-up block comes along
    assert examples_naming([("README.md", README)], {"Ac"}) == []  # a whole word only
    assert examples_naming([("README.md", README)], {"Mlp"}) == []


def _repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "capture_repo", repo)
    shutil.rmtree(repo / "tests")  # no test imports nets.act: only the README shows it
    (repo / "README.md").write_text(README)
    return repo


def test_a_module_only_the_readme_uses_is_captured_from_it(tmp_path):
    repo = _repository(tmp_path)
    examples = examples_naming([("README.md", README)], {"Act"})
    report, _ = capture(
        repo, [("nets/act.py", "Act")], fast_config(), examples=examples, limit_s=60
    )
    [act] = report.targets
    assert act.problem == ""
    assert act.built_at == "README.md:21"  # the block's own line in the file
    assert [call.describe() for call in act.calls] == ["float32[3, 5]"]
    assert report.ran == "examples" and act.source == "README.md"
    # the failing block is said, and the blocks after it still ran
    assert "2 of 3 example blocks ran" in report.outcome
    assert "README.md:17 raised RuntimeError: this example needs a download" in report.outcome


def test_a_pull_request_to_a_repository_with_only_a_readme_gets_a_target(tmp_path):
    repo = _repository(tmp_path)
    (repo / "docs").mkdir()
    (repo / "docs" / "other.md").write_text("```python\nfrom nets.act import Act\n```\n")
    init(repo)
    commit(repo, {}, "base")
    git(repo, "checkout", "--quiet", "-b", "change")
    act = (repo / "nets" / "act.py").read_text().replace("* SCALE", "* SCALE * 0.5")
    commit(repo, {"nets/act.py": act}, "halve the activation")
    head = git(repo, "rev-parse", "HEAD").strip()
    found = HeadCode(repo, head).examples({"Act"})
    assert [(block.path, block.line) for block in found] == [
        ("README.md", 10), ("README.md", 17), ("README.md", 21), ("docs/other.md", 2),
    ]  # fmt: skip
    listed = CliRunner().invoke(
        main, ["targets", "--base", "main", "--repo", str(repo), "--device", "cpu"]
    )
    assert listed.exit_code == 0, listed.output
    assert "nets/act.py:Act  captured: built at README.md:21, called with float32[3, 5]" in (
        listed.output
    )
    off = repo / "pyproject.toml"
    off.write_text("[tool.kernelpilot.capture]\nexamples = false\nguess = false\n")
    commit(repo, {}, "examples off")
    listed = CliRunner().invoke(
        main, ["targets", "--base", "main", "--repo", str(repo), "--device", "cpu"]
    )
    assert "no test file imports it: name a command" in listed.output
    assert "e.g. command" not in listed.output  # nothing in the repository runs it
    # A training script that uses it (through a helper module: that one is no script) is
    # named as where a command could start.
    commit(repo, {"nets/helpers.py": "from nets.act import Act\n",
                  "train.py": "from nets.helpers import Act\nAct()\n"}, "a script")  # fmt: skip
    listed = CliRunner().invoke(
        main, ["targets", "--base", "main", "--repo", str(repo), "--device", "cpu"]
    )
    assert 'e.g. command = "python train.py ..."' in listed.output
    assert "(train.py import it)" in listed.output and "helpers.py import" not in listed.output


HOSTILE_README = """```python
import os
from nets.act import Act
raise RuntimeError("key=" + os.environ.get("OPENAI_API_KEY", "absent"))
```

```python
open("pwned.txt", "w").write("x")
```
"""


def test_a_hostile_example_gets_no_secret_and_cannot_write_the_checkout(tmp_path, monkeypatch):
    """A pull request can add Markdown examples: they run as its tests do, in the sandbox,
    without kernelpilot's secrets and with the checkout read-only."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-capture-secret")
    repo = _repository(tmp_path)
    examples = examples_naming([("README.md", HOSTILE_README)], {"Act"})
    assert len(examples) == 1  # the write comes after the last block naming Act: not run
    examples.append(python_blocks("README.md", HOSTILE_README)[1])
    report, _ = capture(repo, [("nets/act.py", "Act")], fast_config(), examples=examples)
    assert "key=absent" in report.outcome and "sk-capture-secret" not in report.outcome
    assert "README.md:8 raised OSError" in report.outcome
    assert not (repo / "pwned.txt").exists()
