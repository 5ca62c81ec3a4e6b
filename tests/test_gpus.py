"""Several GPUs: which ones a run uses, one candidate at a time on each, and a search's step
spread over them (``harness.gpus``, ``Evaluator.gpus``, ``agents.loop``). The GPU count is
torch's, set here: the machine these tests run on may have none. That the workers of a leased
GPU see it alone is measured on a two-GPU machine (bench/BENCHMARKS.md, the throughput bench).
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from agents.context import Reference
from agents.llm.scripted import ScriptedClient
from agents.loop import evaluate_children, new_trajectory, search
from agents.search.config import SearchConfig
from agents.search.tree import Tree
from agents.team import Team, TeamConfig
from harness import gpus as gpu_names
from harness.errors import UserError
from harness.evaluate import Evaluator
from harness.gpus import GpuPool, chosen_gpus, device_minors, environment, visible_gpus
from harness.records import Candidate, EvalResult, Problem, Status
from harness.sandbox import bubblewrap
from tests.conftest import fast_config, write_module
from tests.test_untrusted import CANDIDATE, LLM, REFERENCE, code_reply, plan_reply, reply

BROKEN = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        raise ValueError("broken")


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return []
"""


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i: SimpleNamespace(uuid=UUIDS[i])
    )
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


UUIDS = ["8d1e0c4a-0000-4000-8000-000000000000", "8d1e0c4a-0000-4000-8000-000000000001"]


def test_the_visible_gpus_are_named_as_a_child_process_would_see_them(two_gpus, monkeypatch):
    assert visible_gpus() == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3, 1")
    assert visible_gpus() == ["3", "1"]  # physical names, so a child's own list is one of them
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8d1e,2,9")  # CUDA stopped at "9"
    assert visible_gpus() == ["GPU-8d1e", "2"]


def test_asking_for_more_gpus_than_are_visible_says_how_many_there_are(two_gpus):
    assert chosen_gpus(0) == ["0", "1"] and chosen_gpus(1) == ["0"]
    with pytest.raises(UserError, match="3 GPUs asked for, 2 visible") as caught:
        chosen_gpus(3)
    assert "eval.gpus" in caught.value.where


def test_no_visible_gpu_is_an_error_naming_the_variable(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(UserError, match="no CUDA GPU") as caught:
        chosen_gpus(0)
    assert "CUDA_VISIBLE_DEVICES=" in caught.value.where


@pytest.mark.parametrize("gpus", [["0"], ["0", "1"]])
def test_a_gpu_is_lent_to_one_evaluation_at_a_time(gpus):
    pool, lock = GpuPool(gpus), threading.Lock()
    holding: list[str] = []
    most, errors = [0], []

    def evaluation() -> None:
        with pool.lease() as gpu:
            with lock:
                if gpu in holding:
                    errors.append(f"GPU {gpu} lent twice")
                holding.append(gpu)
                most[0] = max(most[0], len(holding))
            time.sleep(0.05)
            with lock:
                holding.remove(gpu)

    assert _all_ended(evaluation, 6, timeout_s=30), "a lease was never given back"
    assert errors == []
    assert most[0] == len(gpus)  # as many at once as there are GPUs, and no more


def test_the_evaluator_checks_and_times_one_candidate_per_gpu(two_gpus, tmp_path):
    evaluator = Evaluator(fast_config(), work_dir=tmp_path)
    cuda = _problem(tmp_path, "cuda")
    assert evaluator.parallel(cuda) == 2 and evaluator.parallel(_problem(tmp_path, "cpu")) == 1
    with evaluator._device(cuda) as first, evaluator._device(cuda) as second:
        assert {first, second} == {"0", "1"}
    narrowed = Evaluator(fast_config(gpus=1), work_dir=tmp_path)
    assert narrowed.parallel(cuda) == 1 and narrowed.gpus().gpus == ["0"]


def test_every_worker_of_a_candidate_sees_only_the_gpu_it_was_lent(
    two_gpus, driver, tmp_path, monkeypatch
):
    """The checks and timing workers, the comparator beside them and the worker compiling the
    shared torch.compile baseline: each is started with the leased GPU as its only one; the
    reference worker with the first."""
    import harness.candidate_workers as candidate_workers
    import harness.judge.baseline as baseline
    import harness.judge.comparators as comparators
    import harness.problem.reference as reference

    seen: dict[str, str | None] = {}

    class Started(Exception):
        pass

    def worker(job_dir, *args, **kwargs):
        env = kwargs.get("extra_env", args[5] if len(args) > 5 else None) or {}
        seen[job_dir.name.split("-")[0]] = env.get("CUDA_VISIBLE_DEVICES")
        raise Started

    def seeded(problem, config, folder, environment=None):
        seen["baseline"] = (environment or {}).get("CUDA_VISIBLE_DEVICES")
        return {}

    def comparator(problem, config, seeds, work_dir, cache_dir, extra_env=None):
        seen["comparator"] = (extra_env or {}).get("CUDA_VISIBLE_DEVICES")

    monkeypatch.setattr(candidate_workers, "run_worker", worker)
    monkeypatch.setattr(reference, "run_worker", worker)
    monkeypatch.setattr(baseline, "seed_compiled_baseline", seeded)
    monkeypatch.setattr(comparators, "Comparator", comparator)
    evaluator = Evaluator(fast_config(stream_gate=False), work_dir=tmp_path)
    problem, candidate = _problem(tmp_path, "cuda"), Candidate(source="x", origin="user")
    with pytest.raises(Started):  # the reference worker, and its comparator, on the first
        evaluator.reference(problem)
    assert seen == {"comparator": f"GPU-{UUIDS[0]}", "reference": f"GPU-{UUIDS[0]}"}
    for mode in ("evaluate", "time", "time"):  # the second timing worker seeds the baseline
        with pytest.raises(Started):
            evaluator.workers.run(problem, candidate, mode, None, gpu="1")
    evaluator.comparators.start(problem, [1], "1")
    pinned = f"GPU-{UUIDS[1]}"  # by UUID: it names that GPU whatever else the worker sees
    assert seen == {"evaluate": pinned, "time": pinned, "baseline": pinned, "comparator": pinned,
                    "reference": f"GPU-{UUIDS[0]}"}  # fmt: skip
    with pytest.raises(Started):  # on cpu, nothing is added
        evaluator.workers.run(_problem(tmp_path, "cpu"), candidate, "build", None)
    assert seen["build"] is None


def test_a_reference_that_fails_runs_once_for_every_candidate_asking(tmp_path):
    """A step's candidates on several GPUs all ask for the reference: where the user's module
    fails, each gets the error, and the reference worker ran once."""
    source = write_module(tmp_path, "broken", BROKEN)
    problem = Problem(name="broken", source_path=source, class_name="Model", device="cpu",
                      dtype="float32")  # fmt: skip
    said: list[str] = []
    evaluator = Evaluator(fast_config(), work_dir=tmp_path, progress=said.append)
    errors: list[Exception] = []

    def ask() -> None:
        try:
            evaluator.reference(problem)
        except UserError as err:
            errors.append(err)

    assert _all_ended(ask, 3, timeout_s=120)
    assert len(errors) == 3 and all("broken" in str(err) for err in errors)
    assert sum("computing reference outputs" in line for line in said) == 1


def test_the_machines_gpu_count_overrides_the_projects(tmp_path):
    """``--gpus`` (or KERNELPILOT_GPUS) is the runner's to say; without it, eval.gpus holds."""
    from bot.cli.options import run_options
    from bot.run import project_eval_config

    (tmp_path / "pyproject.toml").write_text("[tool.kernelpilot.eval]\ngpus = 1\n")
    for given, used in ((None, 1), (2, 2), (0, 0)):
        options = run_options("cpu", None, tmp_path / "out", None, False, None, start=tmp_path,
                              gpus=given)  # fmt: skip
        assert project_eval_config(options).gpus == used


class LeasingEvaluator:
    """The loop's evaluator interface over a real pool: ``evaluate`` holds a GPU while it
    runs, and records which and when."""

    def __init__(self, gpus: list[str], hold_s: float = 0.3) -> None:
        self.pool, self.hold_s, self.deadline = GpuPool(gpus), hold_s, None
        self.runs: list[tuple[str, str, float, float]] = []

    def prebuild(self, problem: Problem, candidates) -> None:
        raise AssertionError("on cuda the builds are not all awaited first")

    def parallel(self, problem: Problem) -> int:
        return len(self.pool)

    def build(self, problem: Problem, candidate) -> None:
        pass

    def evaluate(self, problem: Problem, candidate) -> EvalResult:
        with self.pool.lease() as gpu:
            started = time.monotonic()
            time.sleep(self.hold_s)
            self.runs.append((candidate.source, gpu, started, time.monotonic()))
        return EvalResult(status=Status.incorrect, reason="wrong")


@pytest.mark.parametrize("gpus", [["0"], ["0", "1"]])
def test_a_steps_candidates_are_checked_and_timed_on_every_gpu_at_once(tmp_path, gpus):
    evaluator = LeasingEvaluator(gpus)
    tree = Tree.rooted()
    children = [tree.add(tree.root, "improve", source=source) for source in ("A", "B")]
    evaluate_children(_problem(tmp_path, "cuda"), evaluator, tree, children)
    assert all(child.result is not None for child in children)
    (a, a_gpu, a_start, a_end), (b, b_gpu, b_start, b_end) = sorted(evaluator.runs)
    overlapped = a_start < b_end and b_start < a_end
    assert overlapped == (len(gpus) == 2)
    assert (a_gpu != b_gpu) == (len(gpus) == 2)


def test_a_search_grows_one_candidate_per_gpu_each_step_unless_told(tmp_path):
    def run(width: int | None, attempts: int = 2) -> tuple[int, int]:
        client = ScriptedClient([
            reply(plan_reply("        return torch.tanh(x) * self.scale + x")),
            reply(code_reply(CANDIDATE)),
            reply(plan_reply("        return torch.tanh(x) * self.scale + x")),
            reply(code_reply(CANDIDATE + "\n# another candidate\n")),
        ] * 2)  # fmt: skip
        problem = _problem(tmp_path, "cuda")
        # the prompts describe a cpu: this machine may have no GPU to describe
        team = Team(client, LLM, Reference(source=REFERENCE, device="cpu"), TeamConfig())
        config = SearchConfig(epsilon=1.0, seed_offline=False, root_first=4, attempts=attempts,
                              width=width)  # fmt: skip
        trajectory = new_trajectory(problem, "m", config, seed=1)
        evaluator = LeasingEvaluator(["0", "1"], hold_s=0.0)
        search(problem, evaluator, team, trajectory, tmp_path / "t.json", config, lambda _: None)
        assert trajectory.width == (width or 2)  # recorded: a resumed search grows as many
        return trajectory.steps, trajectory.budget.spent_attempts

    assert run(None) == (1, 2)  # one step of two candidates, one for each GPU
    assert run(1) == (2, 2)  # the same two attempts, a step each
    assert run(None, attempts=3) == (2, 3)  # the last step stops at the attempts cap


def _all_ended(target, count: int, timeout_s: float) -> bool:
    """``target`` run in ``count`` threads at once: whether every one ended in time."""
    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s)
    return not any(thread.is_alive() for thread in threads)


def _problem(tmp_path, device: str) -> Problem:
    source = tmp_path / "problem.py"
    source.write_text(REFERENCE)
    return Problem(name="problem", source_path=source, class_name="Model", device=device,
                   dtype="float32")  # fmt: skip


@pytest.fixture
def driver(tmp_path, monkeypatch):
    """The driver's record of two GPUs (minors 0 and 3) and their device nodes, as files."""
    proc, dev = tmp_path / "proc", tmp_path / "dev"
    for minor, uuid in ((0, UUIDS[0]), (3, UUIDS[1])):
        folder = proc / f"0000:00:0{minor}.0"
        folder.mkdir(parents=True)
        (folder / "information").write_text(
            f"Model: \t\t NVIDIA H200\nGPU UUID: \t GPU-{uuid}\nDevice Minor: \t {minor}\n"
        )
    (dev / "nvidia-caps").mkdir(parents=True)  # MIG capabilities, every GPU's
    for node in ("nvidia0", "nvidia3", "nvidiactl", "nvidia-uvm", "nvidia-modeset"):
        (dev / node).write_text(node)
    monkeypatch.setattr(gpu_names, "PROC_GPUS", proc)
    monkeypatch.setattr(bubblewrap, "DEV", dev)
    return dev


def test_a_gpu_is_known_by_its_device_node_only_where_the_driver_names_it(
    two_gpus, driver, monkeypatch, caplog
):
    assert device_minors(environment("1")["CUDA_VISIBLE_DEVICES"]) == {3}
    assert device_minors(f"GPU-{UUIDS[0]},GPU-{UUIDS[1]}") == {0, 3}
    # every GPU's node: nothing pinned, indices (CUDA's order is not the driver's), MIG
    # instances, a UUID the driver does not list
    for visible in (None, "", "0", "1,0", "MIG-5c2f", f"GPU-{UUIDS[0]},GPU-feed"):
        assert device_minors(visible) is None, visible
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")  # this process's own numbering: "1" is
    assert environment("1") == {"CUDA_VISIBLE_DEVICES": f"GPU-{UUIDS[1]}"}  # its second GPU
    assert environment("3") == {"CUDA_VISIBLE_DEVICES": f"GPU-{UUIDS[0]}"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-5c2f")  # a MIG instance: named as it is
    assert environment("MIG-5c2f") == {"CUDA_VISIBLE_DEVICES": "MIG-5c2f"}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(gpu_names, "PROC_GPUS", driver / "absent")  # no driver records
    gpu_names._unpinned.cache_clear()  # said once a process: whatever an earlier test said
    assert environment("1") == {"CUDA_VISIBLE_DEVICES": "1"}
    assert "do not say which device node is its" in caplog.text


def test_a_pinned_worker_cannot_open_another_gpus_device_node(two_gpus, driver, tmp_path):
    """The sandbox of a worker lent GPU 1 shows that GPU's node and those CUDA needs beside it,
    not the node of GPU 0, where another candidate may be being timed, nor the MIG and display
    nodes; an unpinned one sees all."""

    def nodes(env: dict[str, str]) -> list[str]:
        command = bubblewrap.wrap(
            ["/bin/sh", "-c", "ls /dev | grep nvidia; cat /dev/nvidia0 || true"],
            bubblewrap.WorkerView(gpu=True), {"PATH": "/usr/bin:/bin", **env}, Path("/"),
        )  # fmt: skip
        ran = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0, ran.stderr
        return ran.stdout.split()

    assert nodes(environment("1")) == ["nvidia-uvm", "nvidia3", "nvidiactl"]
    everything = ["nvidia-caps", "nvidia-modeset", "nvidia-uvm", "nvidia0", "nvidia3", "nvidiactl"]
    assert nodes({}) == [*everything, "nvidia0"]
