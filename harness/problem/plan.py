"""Which cases a problem is verified on, as specs every worker can draw again from their seeds.

The seeds (fresh inputs; parameters perturbed on all but the first), a repeat of the first
case (second in order: the same inputs and parameters, so a failure there alone is the stream
order or memory never written), other shapes, a wide range and other memory layouts. On cuda
every case but the first runs under a busy non-default current stream (``harness.workers.streams``).
"""

from __future__ import annotations

from pathlib import Path

from harness.config import EvalConfig
from harness.sandbox.jobs import CaseSpec, reference_file


def seed_specs(seeds: list[int], on_cuda: bool) -> list[CaseSpec]:
    return [
        CaseSpec(
            name=f"seed {seed} ({'initial' if number == 0 else 'perturbed'} parameters)",
            kind="seed",
            seed=seed,
            params_seed=None if number == 0 else seed,
            reference_case=number,
            async_stream=on_cuda and number > 0,
        )
        for number, seed in enumerate(seeds)
    ]


def repeat_spec(first: CaseSpec, on_cuda: bool) -> CaseSpec:
    """The first case again: its reference outputs, and the candidate's own, must match."""
    how = "inputs produced asynchronously on a busy stream" if on_cuda else "other garbage freed"
    return CaseSpec(
        name=f"seed {first.seed} again, {how}",
        kind="repeat",
        seed=first.seed,
        reference_case=first.reference_case,
        async_stream=on_cuda,
        input_digest=first.input_digest,
        output_meta=first.output_meta,
        output_form=first.output_form,
    )


def extra_specs(
    seeds: list[int], config: EvalConfig, on_cuda: bool, captured_calls: int = 0
) -> list[CaseSpec]:
    """Other shapes, the other calls a capture saw, a wide range, other layouts (numbered after
    the seeds' files)."""
    seed = seeds[0]
    extra = [
        CaseSpec(name="other shapes", kind="variant", seed=seed, variant=v, reference_case=0)
        for v in range(1, config.shape_variants + 1)
    ]
    extra += [
        CaseSpec(name="captured call", kind="captured", seed=seed, variant=c, reference_case=0)
        for c in range(captured_calls)
    ]
    if config.wide_range:
        extra.append(CaseSpec(name="inputs scaled", kind="wide", seed=seed, reference_case=0))
    if config.strided_inputs:
        name = "inputs in other memory layouts"
        extra.append(CaseSpec(name=name, kind="strided", seed=seed, reference_case=0))
    for number, spec in enumerate(extra, start=len(seeds)):
        spec.reference_case = number
        spec.async_stream = on_cuda
    return extra


def renumber(extra: list[CaseSpec], first: int, job_dir: Path | None) -> None:
    """Extra cases that were dropped leave gaps in the numbers: close them (in the names of
    the reference's files too, where it stored them in ``job_dir``)."""
    for number, spec in enumerate(extra, start=first):
        if spec.reference_case != number:
            if job_dir is not None:
                old, new = reference_file(spec.reference_case), reference_file(number)
                (job_dir / old).rename(job_dir / new)
            spec.reference_case = number
