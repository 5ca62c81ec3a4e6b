"""Reference worker: runs only the user's module, never candidate code.

It draws the verification cases (fresh inputs per seed, perturbed parameters, other shapes),
computes the reference outputs, audits the spec, and profiles the reference's ops. The outputs
stay with the parent; candidate workers get inputs and parameters only.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from harness.audit import nondeterminism_finding, null_answer_findings
from harness.cases import (
    build_reference,
    copy_with_layout,
    make_inputs,
    perturb_parameters,
    resized_inputs,
    strided_inputs,
)
from harness.errors import UserError
from harness.jobs import INPUTS_FILE, OUTPUTS_FILE, ReferenceReport, WorkerJob
from harness.profiling import profile_forward
from harness.records import AuditReport
from harness.tolerance import tolerance_for


def as_outputs(value, where: str) -> list[torch.Tensor]:
    """A forward's result as a list of tensors."""
    if isinstance(value, torch.Tensor):
        return [value]
    if (
        isinstance(value, list | tuple)
        and value
        and all(isinstance(v, torch.Tensor) for v in value)
    ):
        return list(value)
    raise UserError(
        f"forward returned {type(value).__name__}, not a tensor or a tuple of tensors",
        where=where,
        fix="return tensors from forward",
    )


def run_reference(job: WorkerJob, job_dir: Path) -> ReferenceReport:
    problem = job.problem
    tol = tolerance_for(problem.dtype, problem.atol, problem.rtol)
    base = build_reference(problem, job.seeds[0])
    where = f"{problem.source_path}:{problem.class_name}.forward"
    modules = [base] + [_perturbed(base, seed) for seed in job.seeds[1:]]

    cases = _draw_cases(job, modules, strengthened=job.strengthened)
    _require_finite(job, cases)
    findings = null_answer_findings([(c["inputs"], c["outputs"]) for c in cases], tol)
    again = as_outputs(_run(base, cases[0]["inputs"], where), where)
    nondeterministic = nondeterminism_finding(cases[0]["outputs"], again, tol)
    if nondeterministic:
        findings.append(nondeterministic)
    audit = AuditReport(problem=problem.name, weak=bool(findings), findings=findings)
    strengthened = job.strengthened
    if findings and not nondeterministic and not job.strengthened:
        stronger = _draw_cases(job, modules, strengthened=True)
        # Signed, rescaled inputs may leave the module's domain (log, sqrt): no help then.
        still_weak = _nonfinite_case(stronger) is not None or null_answer_findings(
            [(c["inputs"], c["outputs"]) for c in stronger], tol
        )
        audit.strengthened_ok = not still_weak
        if not still_weak:
            cases, strengthened = stronger, True
    cases += _shape_variants(job, base, cases[0], where)
    if job.config.wide_range:
        cases += _wide_range(base, cases[0], job.seeds[0], where)
    if job.config.strided_inputs and (strided := strided_inputs(cases[0]["inputs"])):
        cases += _extra_case(base, "inputs in other memory layouts", strided, where)

    ops = profile_forward(lambda *xs: base(*xs), cases[0]["inputs"], problem.device)
    cpu_cases = [_to_cpu(case) for case in cases]
    # Two files: what every candidate worker gets (inputs, parameters, the outputs' shapes),
    # written once and linked into each candidate's job, and the outputs, for the parent only.
    torch.save({"cases": [_for_candidates(case) for case in cpu_cases]}, job_dir / INPUTS_FILE)
    outputs = [{"name": case["name"], "outputs": case["outputs"]} for case in cpu_cases]
    torch.save({"cases": outputs}, job_dir / OUTPUTS_FILE)
    return ReferenceReport(
        audit=audit,
        strengthened=strengthened,
        case_names=[case["name"] for case in cases],
        aten_ops=ops.aten_ops,
        cuda_kernels=ops.cuda_kernels,
    )


def _perturbed(base: torch.nn.Module, seed: int) -> torch.nn.Module:
    module = copy.deepcopy(base)
    perturb_parameters(module, seed)
    return module


def _draw_cases(job: WorkerJob, modules: list[torch.nn.Module], strengthened: bool) -> list[dict]:
    where = f"{job.problem.source_path}:{job.problem.class_name}.forward"
    cases = []
    for number, (seed, module) in enumerate(zip(job.seeds, modules, strict=True)):
        inputs = make_inputs(job.problem, seed, strengthened=strengthened)
        outputs = as_outputs(_run(module, inputs, where), where)
        kind = "initial parameters" if number == 0 else "perturbed parameters"
        cases.append(
            {
                "name": f"seed {seed} ({kind})",
                "inputs": inputs,
                "outputs": outputs,
                "state": module.state_dict(),
            }
        )
    return cases


def _finite(outputs: list[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(out).all()) for out in outputs if out.is_floating_point())


def _nonfinite_case(cases: list[dict]) -> str | None:
    """The name of the first case whose reference output holds NaN or Inf, if any."""
    return next((case["name"] for case in cases if not _finite(case["outputs"])), None)


def _require_finite(job: WorkerJob, cases: list[dict]) -> None:
    """A reference output with NaN or Inf makes every candidate fail (a candidate's output
    must be finite): the inputs are outside what the module computes, which is the spec's
    problem to fix, said once, not a failure of each candidate."""
    name = _nonfinite_case(cases)
    if name is None:
        return
    problem = job.problem
    raise UserError(
        f"the reference's output holds NaN or Inf on the verification case '{name}': its "
        "inputs are outside what the module computes (log or sqrt of negatives, overflow)",
        where=f"{problem.inputs_path or problem.source_path}: {problem.inputs_fn or 'inputs'}()",
        fix="make the input factory produce inputs the module is meant for (e.g. "
        "torch.rand(...) + 0.1 for a log), so that its outputs are finite",
    )


def _shape_variants(job: WorkerJob, base: torch.nn.Module, first: dict, where: str) -> list[dict]:
    variants = []
    for variant in range(1, job.config.shape_variants + 1):
        inputs = resized_inputs(first["inputs"], variant, job.seeds[0] + variant)
        if inputs is None:
            continue
        shapes = [tuple(x.shape) for x in inputs if isinstance(x, torch.Tensor)]
        variants += _extra_case(base, f"other shapes {shapes}", inputs, where)
    return variants


def _wide_range(base: torch.nn.Module, first: dict, seed: int, where: str) -> list[dict]:
    """The first case's inputs with float tensors scaled 4-16x (the factor drawn from ``seed``).

    randn's values lie within about +-4: a kernel whose approximation (a truncated series, a
    clamped table, a fast exp that overflows) holds only there passes every other case.
    """
    generator = torch.Generator().manual_seed(seed)
    scale = 4.0 + 12.0 * float(torch.rand((), generator=generator))
    inputs = [
        x * scale if isinstance(x, torch.Tensor) and x.is_floating_point() else x
        for x in first["inputs"]
    ]
    return _extra_case(base, f"inputs scaled x{scale:.1f}", inputs, where)


def _extra_case(base: torch.nn.Module, name: str, inputs: list, where: str) -> list[dict]:
    """A case on ``inputs`` with the base parameters; none where the module refuses the
    inputs or its outputs are not finite (not a case the module is meant for)."""
    try:
        outputs = as_outputs(_run(base, inputs, where), where)
    except UserError:
        return []
    if not _finite(outputs):
        return []
    return [{"name": name, "inputs": inputs, "outputs": outputs, "state": base.state_dict()}]


def _run(module: torch.nn.Module, inputs: list, where: str):
    with torch.no_grad():
        try:
            return module(*inputs)
        except Exception as err:  # the user's forward: any failure is theirs to fix
            raise UserError(
                f"the reference forward raised {type(err).__name__}: {err}",
                where=where,
                fix="make the module run on the inputs its input factory returns",
            ) from err


def _for_candidates(case: dict) -> dict:
    return {
        "name": case["name"],
        "inputs": case["inputs"],
        "state": case["state"],
        "output_meta": [
            [list(out.shape), str(out.dtype).removeprefix("torch.")] for out in case["outputs"]
        ],
    }


def _to_cpu(case: dict) -> dict:
    def cpu(value):  # a gapped input layout stays gapped
        return copy_with_layout(value.detach(), "cpu") if isinstance(value, torch.Tensor) else value

    return {
        "name": case["name"],
        "inputs": [cpu(x) for x in case["inputs"]],
        "outputs": [cpu(x) for x in case["outputs"]],
        "state": {key: cpu(value) for key, value in case["state"].items()},
    }
