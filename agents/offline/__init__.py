"""The offline proposer: fuse each chain of pointwise ops of a module into one generated kernel.

No LLM and no API key: the reference is traced with torch.fx; library ops (matmul, conv, norms,
reductions...) stay PyTorch calls and every maximal group of connected pointwise ops that a
kernel runs in fewer passes over memory than eager becomes one C++ (OpenMP) or CUDA kernel (an
op alone stays PyTorch's one pass: ``grouping.worth_a_kernel``); on cuda a plain convolution's
bias is added by its epilogue's kernel (``agents.offline.conv_bias``), a 2-d convolution whose
epilogue is one such kernel runs channels-last as cuDNN's own kernels do, the epilogue writing
NCHW (``agents.offline.conv_layout``), and on cuda a softmax,
or a sum, mean or 2-norm kept as a dimension of 1, over long rows joins the ops around it in a
row kernel (``agents.offline.rows``). The result is a normal candidate, verified like any
other, and it seeds the LLM search with a strong first child; one that the static checks
(``harness.static.python``) would refuse is not proposed. What the trace fixed (values read,
submodule types, unpacked counts, input ranks and dtypes) is guarded on every call, and the
reference's own forward, copied into the candidate, runs where a guard does not hold.

    proposal = propose(problem)   # in a sandboxed worker: the module is the pull request's code
    if proposal.candidate is not None: ...
"""

from __future__ import annotations

import shutil

from pydantic import BaseModel, Field, ValidationError
from torch.fx import Node

from agents.offline import conv_bias, conv_layout, rows, traffic
from agents.offline.emit import CannotEmit, forward_source
from agents.offline.fusable import lasting_writes
from agents.offline.grouping import fusion_groups, schedule, worth_a_kernel
from agents.offline.guards import CannotGuard, add_broadcast_checks, guards_for
from agents.offline.init_copy import CannotCopy, copy_class
from agents.offline.kernel import FusedKernel, build_kernel
from agents.offline.module import module_source
from agents.offline.trace import NotTraceable, trace
from harness.config import EvalConfig
from harness.errors import UserError
from harness.problem.cases import build_reference, make_inputs
from harness.problem.load import DTYPES
from harness.problem.reference import worker_result
from harness.problem.user_code import reference_class
from harness.records import Candidate, Problem
from harness.sandbox import lifetime
from harness.sandbox.bubblewrap import problem_view
from harness.sandbox.run import run_worker
from harness.static.python import check_python

__all__ = ["Proposal", "propose", "propose_here"]


class Proposal(BaseModel):
    """What the offline proposer made of one problem."""

    candidate: Candidate | None = Field(
        default=None, description="The fused candidate; None when there is nothing to fuse."
    )
    reason: str = Field(description="Why there is no candidate, or a summary of what was fused.")
    fused_chains: int = Field(default=0, description="Kernels in the candidate (fused groups).")


def propose(problem: Problem, config: EvalConfig | None = None) -> Proposal:
    """``propose_here`` in a sandboxed worker (``agents.offline.worker``): tracing imports and
    runs the module, which is the pull request's code, and none of it runs in this process.
    The worker's answer is data, checked as a ``Proposal``; the module's errors are UserErrors."""
    config = config or EvalConfig()
    job_dir = lifetime.scratch("propose-")
    try:
        (job_dir / "job.json").write_text(problem.model_dump_json())
        outcome = run_worker(
            job_dir, config.run_timeout_s, config.memory_limit_gb,
            problem_view(problem, gpu=False), config.sandbox, entry="agents.offline.worker",
        )  # fmt: skip
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)
    body = worker_result(outcome, problem)
    try:
        return Proposal.model_validate(body)
    except ValidationError as err:
        raise UserError(
            f"the offline proposer's worker answered with no proposal: {err.errors()[0]['msg']}",
            where=f"{problem.source_path}:{problem.class_name}",
            fix="this is a kernelpilot bug: report it with the module",
        ) from None


def propose_here(problem: Problem) -> Proposal:
    """Trace the problem's reference and fuse its pointwise chains, for ``problem.device``, in
    this process: for trusted modules only (tests, benchmarks); ``propose`` is the sandboxed one.

    Tracing and shape propagation run on the CPU with fake tensors, so CUDA candidates can be
    written on machines without a GPU. Errors in the user's module setup (``UserError``) raise.
    """
    local = problem.model_copy(update={"device": "cpu"})
    reference = build_reference(local, seed=0)
    dtype = DTYPES[problem.dtype]
    inputs = make_inputs(local, seed=0)
    try:
        traced = trace(
            reference,
            inputs,
            dtype,
            split_bias=problem.device in conv_bias.SPLIT_DEVICES,
            row_min_widths=rows.row_min_widths(problem.device),
            keywords=problem.input_keywords,
        )
    except NotTraceable as err:
        return Proposal(reason=str(err))
    nodes = list(traced.graph_module.graph.nodes)
    groups = fusion_groups(nodes, traced.ops)
    left = _listed("other dtypes, or memory written in place", traced.left_in_pytorch)
    if not groups:
        return Proposal(reason="nothing to fuse: the module has no pointwise operations" + left)
    kept: list[list[Node]] = []
    unfused: list[str] = []
    for group in groups:
        if worth_a_kernel(group, traced.ops):
            kept.append(group)
        else:
            unfused += [traced.ops[node].kind for node in group]
    groups = kept
    left += _listed("no fewer passes fused", unfused)
    if not groups:
        return Proposal(
            reason="nothing to gain: a kernel would pass over memory as often as eager" + left
        )
    layouts = conv_layout.plan_channels_last(groups, traced.ops, problem.device, dtype)
    share = traffic.saved_share(
        traced.graph_module, groups, traced.ops, problem.device, layouts.convs
    )
    if share < traffic.MIN_SAVED_SHARE:
        return Proposal(
            reason=f"nothing to gain: the kernels would save {share:.1%} of eager's time (its "
            f"memory traffic, and its matmuls' and convolutions' compute), less than the "
            f"{traffic.MIN_SAVED_SHARE:.0%} one evaluation's timing can tell apart" + left
        )
    kernels = {
        tuple(group): build_kernel(
            f"fused_{index}", group, traced.ops, dtype, layouts.epilogues.get(tuple(group))
        )
        for index, group in enumerate(groups)
    }
    summary = _summary(list(kernels.values())) + _layouts_note(layouts) + left
    try:
        guards = guards_for(traced, reference, problem.device)
        add_broadcast_checks(guards, kernels)
        copied = copy_class(
            problem.source_path, problem.class_name, reference_class(problem), guards.names
        )
        lasting = set(lasting_writes(traced.graph_module, traced.ops))
        steps = schedule(nodes, groups)
        forward = forward_source(
            steps, kernels, reference, guards, copied.original_call, lasting, layouts.convs
        )
    except (CannotCopy, CannotEmit, CannotGuard) as err:
        return Proposal(reason=f"cannot write the candidate module: {err}")
    source = module_source(summary, list(kernels.values()), problem.device, copied, forward)
    if refused := check_python(source, problem.class_name, problem.dtype):
        # The names it writes come from the module (attributes, arguments): one the static
        # checks refuse would only make a candidate rejected before it runs.
        return Proposal(reason=f"the candidate written fails the static checks: {refused[0]}")
    candidate = Candidate(source=source, origin="offline", note=summary)
    return Proposal(candidate=candidate, reason=summary, fused_chains=len(kernels))


def _layouts_note(layouts: conv_layout.ChannelsLast) -> str:
    count = len(layouts.convs)
    if not count:
        return ""
    convolutions = "a convolution runs" if count == 1 else f"{count} convolutions run"
    return f"; {convolutions} channels-last, its epilogue writing NCHW"


def _listed(why: str, names: list[str]) -> str:
    """What the proposal leaves to PyTorch and why, for its reason (the first 8 named)."""
    if not names:
        return ""
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    return f"; left to PyTorch ({why}): {shown}"


def _summary(kernels: list[FusedKernel]) -> str:
    count = len(kernels)
    chains = "; ".join(f"[{', '.join(kernel.kinds)}]" for kernel in kernels)
    if len(chains) > 300:
        chains = chains[:297] + "..."
    plural = "s" if count != 1 else ""
    return f"fused {count} pointwise chain{plural} into {count} kernel{plural}: {chains}"
