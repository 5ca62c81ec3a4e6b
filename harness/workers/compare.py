"""Comparator worker: makes a case's reference outputs again and compares a candidate's with them.

It runs only the user's module, never candidate code, and stays up for one problem: the parent
starts it beside the reference worker and sends it, on its stdin, one JSON line per request:

- ``{"setup": {...}}``: the cases the reference worker planned (specs, as candidates get
  them); the answer is ``ready``;
- ``{"kernels": true}``: the answer is the CUDA kernels one reference forward launches;
- ``{"begin": true}``: a new candidate's comparisons start;
- ``{"case": N, "body": {...}, "dir": PATH}``: a candidate worker announced case N's outputs
  (the untrusted ``body``, see ``harness.workers.handover``); the answer is a ``verdict`` message;
- ``{"end": true}``: the answer is the candidate's ``comparison`` (a ``CaseComparison``).

On the device the reference's outputs of a case cost milliseconds to make again, against
seconds to tens of seconds to move off the device and keep (64 GB for KernelBench's
26_GELU_): so no reference output ever leaves the device. The reference's CUDA kernels (a
candidate must launch one of its own) are profiled here too, once, when the first candidate's
worker is done: that starts CUPTI, seconds that would otherwise come before any candidate.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from harness.errors import UserError
from harness.judge.precision import ReferencePrecision, comparer
from harness.judge.receive import judge_case
from harness.judge.tolerance import CaseComparer
from harness.problem.cases import (
    build_reference,
    case_inputs,
    case_module,
    check_params,
    input_digest,
    make_inputs,
)
from harness.sandbox.jobs import CaseSpec, WorkerJob
from harness.workers import handover
from harness.workers.calls import bound
from harness.workers.profiling import profile_forward
from harness.workers.reference_forward import as_outputs


class Comparator:
    """The reference of one problem, on the device, answering the parent's requests."""

    def __init__(self, job: WorkerJob) -> None:
        self.job, self.problem = job, job.problem
        self.where = f"{self.problem.source_path}:{self.problem.class_name}.forward"
        self.base = build_reference(self.problem, job.seeds[0])
        self.cases: list[CaseSpec] = []
        self.strengthened = False
        self.deterministic = False
        self.precision: ReferencePrecision | None = None
        self.comparer: CaseComparer | None = None
        self.out_of_memory = False

    def kernels(self) -> list[str]:
        """The CUDA kernels one reference forward launches (on the first seed's inputs)."""
        inputs = make_inputs(self.problem, self.job.seeds[0], self.strengthened)
        with torch.no_grad():
            profile = profile_forward(
                bound(self.base, self.problem.input_keywords), inputs, self.problem.device
            )
        return sorted(set(profile.cuda_kernels))

    def handle(self, request: dict) -> tuple[str, dict] | None:
        if "setup" in request:
            setup = request["setup"]
            self.cases = [CaseSpec.model_validate(spec) for spec in setup["cases"]]
            self.strengthened = bool(setup["strengthened"])
            self.deterministic = bool(setup["deterministic"])
            check_params(self.base, str(setup["params_digest"]), self.problem)
            precision = setup.get("precision")
            self.precision = ReferencePrecision.model_validate(precision) if precision else None
            return "ready", {}
        if "kernels" in request:
            return "kernels", {"kernels": self.kernels()}
        if "begin" in request:
            self.comparer = comparer(
                self.problem, len(self.cases), self.deterministic, self.precision
            )
            self.out_of_memory = False
            return None
        assert self.comparer is not None, "a case before 'begin'"
        if "end" in request:
            comparison = self.comparer.result()
            comparison.stopped = self.out_of_memory  # the harness's failure, not the kernel's
            return "comparison", comparison.model_dump()
        number = int(request["case"])
        return "verdict", {"case": number, "go": self.judge(number, request)}

    def judge(self, number: int, request: dict) -> bool:
        """One case: the reference's outputs first (its inputs dropped before the candidate's
        outputs are copied in: one case's inputs, not also the outputs, at the peak), then the
        candidate's, compared."""
        comparer, spec = self.comparer, self.cases[number]
        assert comparer is not None
        expected: list[torch.Tensor] | None = None
        produced: list[torch.Tensor] | None = None
        try:
            expected = self.reference_outputs(spec)
            transport = handover.transport_for(self.problem.device, True, self.job.config.sandbox)
            produced = handover.receive(request["body"], Path(request["dir"]), number, transport)
            if transport == "file":  # on the host: compared where the reference's are
                produced = [out.to(self.problem.device) for out in produced]
            go = judge_case(comparer, spec, produced, expected)
        except handover.HandoverError as err:
            comparer.failed = f"{spec.name}: {err}"
            return False
        except torch.OutOfMemoryError:
            comparer.failed, self.out_of_memory = self._out_of_memory(spec), True
            return False
        finally:
            expected = produced = None
            if self.problem.device == "cuda":
                torch.cuda.empty_cache()  # the candidate's worker runs beside: leave it memory
        return go

    def _out_of_memory(self, spec: CaseSpec) -> str:
        free, total = torch.cuda.mem_get_info()
        return (
            f"{spec.name}: the harness's comparator ran out of device memory comparing this "
            f"case ({free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB, beside the "
            "candidate's worker): not a fault of the kernel or the module; "
            'eval.reference_outputs = "stored" compares on the host instead, and '
            "eval.strided_inputs = false or eval.shape_variants = 0 drop the largest cases"
        )

    def reference_outputs(self, spec: CaseSpec) -> list[torch.Tensor]:
        inputs = case_inputs(self.problem, spec, self.strengthened)
        if inputs is None or input_digest(inputs) != spec.input_digest:
            raise UserError(
                f"{spec.name}: the input factory gave other inputs for the same seed in the "
                "comparator than in the reference worker",
                where=f"{self.problem.inputs_path or self.problem.source_path}",
                fix="draw every random value with torch (torch.randn, torch.rand, ...)",
            )
        module = case_module(self.base, spec)
        with torch.no_grad():
            try:
                return as_outputs(bound(module, self.problem.input_keywords)(*inputs), self.where)[
                    0
                ]
            except Exception as err:  # ran in the reference worker: memory, most likely
                raise UserError(
                    f"the reference forward raised {type(err).__name__} in the comparator on "
                    f"'{spec.name}': {err}",
                    where=self.where,
                    fix="if the device ran out of memory, use smaller inputs: the comparator "
                    "and the candidate's worker each hold one case",
                ) from err


def run_compare(job: WorkerJob, answer: Callable[[str, dict], None]) -> None:
    """Answer the parent's requests until its end of stdin closes."""
    comparator = Comparator(job)
    for line in sys.stdin:
        reply = comparator.handle(json.loads(line))
        if reply is not None:
            answer(*reply)
