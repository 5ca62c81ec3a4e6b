"""Zero-config targets: a repository's own tests or command run with hooks on the changed
classes (in the sandbox), and what they saw made into problems the harness verifies."""

from __future__ import annotations

import pytest
import torch

from harness.capture.records import TensorSpec
from harness.capture.run import capture, captured_problem, check_command
from harness.errors import UserError
from harness.evaluate import Evaluator
from harness.problem.cases import make_inputs
from harness.records import Candidate, Status
from tests.conftest import FIXTURES, fast_config

REPO = FIXTURES / "capture_repo"
CLASSES = [("model.py", "MLP"), ("model.py", "Embed"), ("model.py", "Unused")]

HONEST_MLP = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SOURCE = r"""
#include <cmath>
torch::Tensor affine(torch::Tensor x, double scale, torch::Tensor shift) {
  auto xc = x.contiguous();
  auto sc = shift.contiguous();
  auto y = torch::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  const float* add = sc.data_ptr<float>();
  float* out = y.data_ptr<float>();
  const int64_t d = sc.numel(), n = xc.numel();
  #pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) out[i] = std::tanh(in[i]) * static_cast<float>(scale) + add[i % d];
  return y;
}
"""
_ext = load_inline(name="capture_affine", cpp_sources=_SOURCE, functions=["affine"])


class ModelNew(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.scale = config.scale
        self.shift = nn.Parameter(torch.zeros(config.n_embd))

    def forward(self, x):
        return _ext.affine(x, self.scale, self.shift)
'''


@pytest.fixture(scope="module")
def from_tests():
    report, saved = capture(
        REPO, CLASSES, fast_config(), tests=["tests/test_model.py"], limit_s=120
    )
    return report, saved


def by_class(report):
    return {target.class_name: target for target in report.targets}


def test_the_tests_show_how_each_class_is_built_and_called(from_tests):
    report, saved = from_tests
    found = by_class(report)
    mlp = found["MLP"]
    assert mlp.problem == ""
    assert mlp.init_file is not None and (saved / mlp.init_file).is_file()  # a config object
    assert mlp.init_expression == "[GPTConfig(n_embd=64, scale=2.0, vocab_size=100)]"
    assert mlp.init_imports == ["from model import GPTConfig"]
    assert mlp.built_at == "tests/test_model.py:7"
    assert [call.args[0].tensor.shape for call in mlp.calls] == [[32, 64], [4, 64]]  # largest first
    embed = found["Embed"]
    assert embed.init_args == [100, 64] and embed.init_file is None  # plain: no file
    ids, mask = embed.calls[0].args[0], embed.calls[0].keywords["mask"]
    assert ids.tensor.dtype == "int64" and 0 <= ids.tensor.low and ids.tensor.high < 100
    assert mask.tensor is None and mask.value is None
    assert "never built" in found["Unused"].problem


def test_a_captured_target_is_verified_with_its_captured_constructor(from_tests):
    report, saved = from_tests
    problem = captured_problem(by_class(report)["MLP"], REPO, saved, "cpu", "float32")
    result = Evaluator(fast_config(shape_variants=1), seed=2).evaluate(
        problem, Candidate(source=HONEST_MLP, origin="user")
    )
    assert result.status is Status.ok, (result.reason, result.log[-1500:])
    assert result.input_summary.startswith("float32[32, 64]")


def test_captured_inputs_are_drawn_fresh_in_the_range_seen(from_tests):
    report, saved = from_tests
    problem = captured_problem(by_class(report)["Embed"], REPO, saved, "cpu", "float32")
    first, second = make_inputs(problem, 1), make_inputs(problem, 2)
    assert problem.input_keywords == ["mask"]
    assert first[0].dtype == torch.int64 and first[0].shape == (8, 16) and first[1] is None
    assert int(first[0].min()) >= 0 and int(first[0].max()) < 100
    assert not torch.equal(first[0], second[0])


def test_a_command_is_captured_and_a_long_one_reported_at_its_limit():
    report, _ = capture(
        REPO, CLASSES[:1], fast_config(), command="python train.py --forever", limit_s=20
    )
    mlp = by_class(report)["MLP"]
    assert mlp.problem == "" and mlp.calls[0].args[0].tensor.shape == [16, 64]
    assert mlp.built_at == "train.py:12"
    assert "stopped after 20 s" in report.outcome


@pytest.mark.parametrize("command", ["bash run.sh", "make train", "python", "python -c 'print(1)'"])
def test_a_command_that_is_not_python_is_refused_before_it_runs(command):
    with pytest.raises(UserError, match="not a Python command"):
        check_command(command, "pyproject.toml: tool.kernelpilot.capture")


def test_captured_targets_freeze_into_toml_and_factories_that_rebuild_them(from_tests, tmp_path):
    """The frozen entry, read back as configuration, builds the same module and inputs like the
    ones seen: `kernelpilot targets --write` then needs no capture."""
    import shutil

    from harness.capture.freeze import frozen
    from harness.config import project_targets
    from harness.problem.cases import build_reference
    from harness.problem.load import problem_from_config

    report, _ = from_tests
    repo = tmp_path / "repo"
    shutil.copytree(REPO, repo)
    entries, factories = frozen(
        report.targets, "kernelpilot_targets.py", lambda name: name == "model"
    )
    assert "Unused" not in entries  # never built: nothing to freeze
    (repo / "kernelpilot_targets.py").write_text(factories)
    (repo / "pyproject.toml").write_text("[tool.kernelpilot]\n\n" + entries)
    project = project_targets(repo)
    assert project is not None
    configured = {entry.module: entry for entry in project.targets}
    mlp = problem_from_config(configured["model.py:MLP"], repo, "cpu", "float32")
    assert build_reference(mlp, 0).scale == 2.0  # GPTConfig(scale=2.0), rebuilt from source
    assert make_inputs(mlp, 0)[0].shape == (32, 64)
    embed = problem_from_config(configured["model.py:Embed"], repo, "cpu", "float32")
    assert embed.input_keywords == ["mask"]
    ids, mask = make_inputs(embed, 0)
    assert (
        ids.dtype == torch.int64 and 0 <= int(ids.min()) and int(ids.max()) < 100 and mask is None
    )


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('x')",
        "[GPTConfig(n_embd=open('/etc/passwd').read())]",
        "[os.system('x')]",
        "[x for x in ()]",
        "(lambda: 1)()",
        "[GPTConfig.__init__.__globals__]",
        "[Other(n_embd=8)]",
        "[GPTConfig(n_embd=8)(1)]",
    ],
)
def test_a_hostile_constructor_expression_is_not_written(expression):
    """The expression comes from the worker that ran the repository's code: only literals and
    calls of the names it imports are written into the factory file."""
    from harness.capture.freeze import safe_expression

    names = {"GPTConfig"}
    assert safe_expression("[GPTConfig(n_embd=8, scale=-1.0)]", names) is not None
    assert safe_expression(expression, names) is None


def test_only_the_repositorys_own_modules_are_imported_by_the_factories(from_tests):
    """A capture worker reporting `from os import system` gets no import and no init written."""
    from harness.capture.freeze import frozen

    report, _ = from_tests
    mlp = next(target for target in report.targets if target.class_name == "MLP")
    hostile = mlp.model_copy(
        update={"init_imports": ["from os import system"], "init_expression": "[system('x')]"}
    )
    entries, factories = frozen([hostile], "kernelpilot_targets.py", lambda name: name == "model")
    assert "system" not in factories and "from os" not in factories
    assert "# init = 'file.py:function'" in entries


def test_a_workers_line_breaks_cannot_write_toml_of_their_own(from_tests):
    """Where the capture ran and where it built the module come from the worker: on --write
    they are one comment line, whatever line breaks (\\n, \\r, U+2028) they carry."""
    import tomllib

    from harness.capture.freeze import frozen

    report, _ = from_tests
    mlp = next(target for target in report.targets if target.class_name == "MLP")
    planted = '\n[tool.kernelpilot.eval]\nsandbox = "off"\r\n\u2028x = 1'
    hostile = mlp.model_copy(update={"source": "tests" + planted, "built_at": "t.py:1" + planted})
    entries, _ = frozen([hostile], "kernelpilot_targets.py", lambda name: name == "model")
    assert tomllib.loads(entries).keys() == {"tool"}
    assert tomllib.loads(entries)["tool"]["kernelpilot"].keys() == {"targets"}


def test_a_module_in_a_package_is_built_with_its_relative_imports():
    """whisper/model.py does `from .decoding import ...`: a file of a package is imported by
    its dotted name in every worker, not by path (where a relative import fails)."""
    from harness.problem.cases import build_reference

    report, saved = capture(
        REPO, [("nets/act.py", "Act")], fast_config(), tests=["tests/test_nets.py"], limit_s=60
    )
    [act] = report.targets
    assert act.problem == "" and act.init_args == []
    problem = captured_problem(act, REPO, saved, "cpu", "float32")
    module = build_reference(problem, 0)
    x = make_inputs(problem, 0)[0]
    assert torch.allclose(module(x), torch.tanh(x) * 3.0)


def test_captured_targets_keep_to_the_runs_cap():
    """Captured modules become targets after detection applied max_targets: those past it are
    listed over the cap, not run (a change used by 50 blocks must not run 50 targets)."""
    from bot.detect.captured import capture_targets
    from bot.detect.changes import ChangedModule, ChangeReport
    from harness.config import CaptureConfig

    modules = [
        ChangedModule(path="model.py", class_name=name, class_line=1, lines=[1], reason="r")
        for name in ("MLP", "Embed")
    ]
    changes = ChangeReport(base="m", head="h", base_sha="a" * 40, head_sha="b" * 40,
                           merge_base="a" * 40, max_targets=1, modules=modules)  # fmt: skip

    class Tests:
        def tests(self, paths):
            return ["tests/test_model.py"]

        def examples(self, class_names):
            return []

    found = capture_targets(
        REPO, changes, CaptureConfig(timeout_s=60), fast_config(), Tests(), "cpu", "float32",
        lambda _: None,
    )  # fmt: skip
    assert [target.class_name for target, _ in found] == ["MLP"]
    assert [m.class_name for m in changes.over_cap] == ["Embed"]
    assert changes.over_cap[0].target == "model.py:Embed"
    assert [m.class_name for m in changes.modules] == ["MLP"]


@pytest.mark.parametrize(
    "spec",
    [
        TensorSpec(shape=[4, 3], dtype="int64", low=2, high=9),
        TensorSpec(shape=[5], dtype="bool", low=0, high=1),
        TensorSpec(shape=[2, 8], dtype="float32", low=-3, high=3, mean=0.5, std=2),
        TensorSpec(shape=[2, 8], dtype="bfloat16", low=0.1, high=4.0),
    ],
    ids=["ids", "mask", "signed", "positive"],
)
def test_frozen_factories_draw_as_the_cases_do(spec):
    """`targets --write` writes the drawing the checks use: the same dtype, shape and range."""
    from harness.capture.freeze import tensor_source
    from harness.capture.records import ArgSpec
    from harness.problem.cases import drawn_like

    frozen = eval(tensor_source(spec), {"torch": torch})  # our own generated source
    drawn = drawn_like(ArgSpec(tensor=spec))
    assert frozen.dtype == drawn.dtype and frozen.shape == drawn.shape
    for values in (frozen, drawn):
        if spec.low >= 0:
            assert spec.low - 1e-3 <= float(values.float().min())
            assert float(values.float().max()) <= spec.high + 1e-2
        else:
            assert float(values.float().min()) < 0  # signed where the seen values were


def test_the_other_captured_calls_are_checked_cases(from_tests):
    """The tests also call MLP with 4 rows: a kernel right only at the largest captured call
    (32 rows) is caught there, with no generated shape variant to catch it."""
    report, saved = from_tests
    problem = captured_problem(by_class(report)["MLP"], REPO, saved, "cpu", "float32")
    assert [[arg.tensor.shape for arg in call] for call in problem.captured_calls] == [[[4, 64]]]
    only_at_32_rows = HONEST_MLP.replace(
        "static_cast<float>(scale)", "static_cast<float>(n == 32 * d ? scale : 1.0)"
    )
    assert only_at_32_rows != HONEST_MLP
    config = fast_config(shape_variants=0, strided_inputs=False, wide_range=False)
    result = Evaluator(config, seed=2).evaluate(
        problem, Candidate(source=only_at_32_rows, origin="user")
    )
    assert result.status is Status.incorrect, result.reason
    assert "captured call 2 [(4, 64)]" in result.reason
