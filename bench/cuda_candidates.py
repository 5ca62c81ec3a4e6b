"""Every CUDA candidate the GPU tests and benchmarks build: corpora, fixtures, offline proposals
for the examples and for bench_offline's pointwise chains."""

from __future__ import annotations

import tempfile
from collections import defaultdict
from pathlib import Path

from agents.offline import propose
from harness.problem.load import problem_from_target
from harness.records import Candidate

ROOT = Path(__file__).resolve().parent.parent


def cuda_candidates(dtype: str = "float32") -> dict[str, list[tuple[str, Candidate]]]:
    """Problem target -> [(label, candidate)] for every CUDA candidate of the test suite."""
    work: dict[str, list[tuple[str, Candidate]]] = defaultdict(list)
    for folder in ("tests/redteam/cuda", "tests/honest/cuda"):
        for path in sorted((ROOT / folder).glob("*.py")):
            text = path.read_text()
            problem = next(
                line.split(":", 1)[1].strip()
                for line in text.splitlines()
                if line.startswith("# problem:")
            )
            label = str(path.relative_to(ROOT))
            work[str(ROOT / "tests" / problem)].append((label, Candidate(source=text)))
    fixtures = ROOT / "tests" / "fixtures"
    for name in ("gpu_illegal_address.py", "gpu_honest.py"):
        candidate = Candidate(source=(fixtures / name).read_text())
        work[str(fixtures / "scale_problem.py")].append((f"tests/fixtures/{name}", candidate))
    # bench_offline writes its chains to a temporary folder too: a build's key is its source
    # and flags, not where the problem lives, so these builds serve the bench.
    from bench.bench_offline import chain_problems, example_targets

    chains = Path(tempfile.mkdtemp(prefix="kp-chains-"))
    targets = example_targets()
    targets += [(name, path) for name, path, _ in chain_problems("cuda", chains)]
    for name, target in targets:
        proposal = propose(problem_from_target(target, "cuda", dtype))
        if proposal.candidate is not None:
            work[target].append((f"offline proposal for {name}", proposal.candidate))
    return work
