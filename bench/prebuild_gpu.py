"""Fill the build cache for every CUDA candidate the GPU tests use, many builds at a time.

On a GPU machine the tests then find their kernels built; run before `pytest -m gpu`.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.offline import propose  # noqa: E402
from harness.config import EvalConfig  # noqa: E402
from harness.evaluate import Evaluator  # noqa: E402
from harness.problem import problem_from_target  # noqa: E402
from harness.records import Candidate  # noqa: E402


def corpus_candidates() -> dict[Path, list[Candidate]]:
    by_problem: dict[Path, list[Candidate]] = defaultdict(list)
    for folder in ("tests/redteam/cuda", "tests/honest/cuda"):
        for path in sorted((ROOT / folder).glob("*.py")):
            text = path.read_text()
            problem = next(
                line.split(":", 1)[1].strip()
                for line in text.splitlines()
                if line.startswith("# problem:")
            )
            by_problem[ROOT / "tests" / problem].append(Candidate(source=text))
    fixtures = ROOT / "tests" / "fixtures"
    for name in ("gpu_illegal_address.py", "gpu_honest.py"):
        by_problem[fixtures / "scale_problem.py"].append(
            Candidate(source=(fixtures / name).read_text())
        )
    return by_problem


def main() -> None:
    evaluator = Evaluator(EvalConfig(build_jobs=12), progress=lambda m: print(m, flush=True))
    work = corpus_candidates()
    for example in sorted((ROOT / "examples").glob("*.py")):
        problem = problem_from_target(str(example), "cuda", "float32")
        proposal = propose(problem)
        if proposal.candidate:
            work[example].append(proposal.candidate)
    for problem_path, candidates in work.items():
        evaluator.prebuild(problem_from_target(str(problem_path), "cuda", "float32"), candidates)


if __name__ == "__main__":
    main()
