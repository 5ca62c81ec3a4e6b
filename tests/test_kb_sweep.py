"""The KernelBench sweep with the offline proposer (issue 27, goal 6): which problems it
touches and why not the others, asked of the proposer alone; and a problem it has no candidate
for runs nothing on the device in a sweep, its row giving the proposer's reason."""

from __future__ import annotations

import json

from click.testing import CliRunner

from bench.kb_sweep import cli

CHAIN = """
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x * 2.0 + 1.0)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
"""

MATMUL = """
import torch


class Model(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(64, 64), torch.randn(64, 64)]


def get_init_inputs():
    return []
"""


def problems(tmp_path):
    tmp_path.mkdir()
    (tmp_path / "1_Chain.py").write_text(CHAIN)
    (tmp_path / "2_Matmul.py").write_text(MATMUL)
    return tmp_path


def rows_of(path):
    return {row["name"].split("/")[-1]: row for row in json.loads(path.read_text())["rows"]}


def test_the_proposer_alone_says_which_problems_it_touches_and_why_not_the_others(tmp_path):
    # for cuda, on a machine without a GPU: the proposer traces on the CPU
    folder, out = problems(tmp_path / "kb"), tmp_path / "proposals.json"
    result = CliRunner().invoke(
        cli, [str(folder), "--propose-only", "--device", "cuda", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    rows = rows_of(out)
    assert list(rows) == ["1_Chain", "2_Matmul"]  # in the order of their leading numbers
    chain, matmul = rows["1_Chain"], rows["2_Matmul"]
    assert (chain["candidate_status"], chain["candidate_kind"]) == ("proposed", "offline")
    assert "mul" in chain["candidate_reason"] and "relu" in chain["candidate_reason"]
    assert (matmul["candidate_status"], matmul["candidate_kind"]) == ("no_candidate", "none")
    assert matmul["candidate_reason"].startswith("nothing to fuse")
    assert {chain["reference_status"], matmul["reference_status"]} == {"not_run"}
    assert "no candidate (1): nothing to fuse 1" in result.output

    table = CliRunner().invoke(cli, ["--table", str(out)])
    assert "| no_candidate: nothing to fuse" in table.output


def test_a_problem_without_an_offline_candidate_runs_nothing_in_the_sweep(tmp_path):
    folder, out = problems(tmp_path / "kb"), tmp_path / "sweep.json"
    result = CliRunner().invoke(
        cli,
        [str(folder / "2_Matmul.py"), "--device", "cpu", "--candidate", "offline",
         "--out", str(out), "--work-dir", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    matmul = rows_of(out)["2_Matmul"]
    assert matmul["candidate_status"] == "no_candidate"  # not the copy candidate, as before
    assert matmul["reference_status"] == "not_run" and matmul["reference_s"] is None
    assert matmul["candidate_s"] is None and matmul["speedup_vs_eager"] is None
