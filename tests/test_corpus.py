"""The red-team corpus must be caught, the honest corpus accepted, weak problems flagged.

Every candidate file under tests/redteam/{cpu,cuda} and tests/honest/{cpu,cuda} starts with
three header lines:

    # pattern: <number 1-15> <short description>     (honest files: "# pattern: honest <technique>")
    # problem: <path relative to tests/>
    # expect: <status> <check_name>[|<check_name>]   (honest files: "# expect: ok")

and each file under tests/redteam/weak_problems starts with "# expect: weak <finding kind>".
``check_name`` is a key of CHECKS, which names the status its failure gives: among them
``deterministic_outputs`` (a repeat of the first case's inputs, after freed memory was filled
with other garbage, must give the candidate's first outputs bit for bit where the reference is
deterministic bit for bit: a kernel that reads memory it never wrote, or races, differs).
A race (a kernel its caller's stream does not wait for) may show first in either of two checks,
depending on which read loses the race: such an entry names both, ``a|b``.
The corpus is the harness's acceptance test: a cheat that gets status ``ok`` (or is caught by
another check than the one named) means a hole, or a check that is not doing its job.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.machine_load import cpu_load

TESTS = Path(__file__).resolve().parent
CANDIDATE_DIRS = ["redteam/cpu", "redteam/cuda", "honest/cpu", "honest/cuda"]
WEAK_DIR = TESTS / "redteam" / "weak_problems"
PATTERNS = set(range(1, 16))
STATUSES = {"build_error", "runtime_error", "timeout", "incorrect", "rejected", "ok"}
CHECKS = {
    "static_gate": "rejected",
    "launches_own_kernel": "rejected",
    "no_pytorch_compute": "rejected",
    "plain_tensor_outputs": "rejected",
    "no_monkeypatching": "rejected",
    "baseline_undisturbed": "rejected",
    "state_dict_strict": "runtime_error",
    "correct_outputs": "incorrect",
    "finite_outputs": "incorrect",
    "no_input_alias": "incorrect",
    "inputs_unchanged": "incorrect",
    "stable_after_sync": "incorrect",
    "timed_outputs_correct": "incorrect",
    "fresh_outputs": "incorrect",
    "deterministic_outputs": "incorrect",
}
WEAK_KINDS = {"null_answer", "nondeterministic"}
# Unwritten or out-of-bounds output elements hold whatever the memory held: NaN where the
# harness's poison or guard regions reached, stale finite values elsewhere. Which of the two
# checks names the failure depends on the first bad element, so either one counts.
SAME_SYMPTOM = {"correct_outputs": {"finite_outputs"}, "finite_outputs": {"correct_outputs"}}
# Pattern 15 (a weak problem where a null answer passes) is covered by problem files, not
# candidates: see tests/redteam/weak_problems.
WEAK_PATTERN = 15

HEADER = re.compile(r"# (pattern|problem|expect): (.+)")


@dataclass(frozen=True)
class Entry:
    path: Path
    device: str
    pattern: str  # "1".."14" or "honest"
    description: str
    problem: Path
    status: str
    check: str | None

    @property
    def id(self) -> str:
        return str(self.path.relative_to(TESTS))


def _headers(path: Path, count: int) -> dict[str, str]:
    lines = path.read_text().splitlines()[:count]
    found: dict[str, str] = {}
    for line in lines:
        match = HEADER.fullmatch(line.strip())
        if match is None:
            raise ValueError(f"{path}: header line {line!r} is not '# key: value'")
        found[match.group(1)] = match.group(2).strip()
    return found


def _parse(path: Path) -> Entry:
    head = _headers(path, 3)
    missing = {"pattern", "problem", "expect"} - head.keys()
    if missing:
        raise ValueError(f"{path}: missing header(s) {sorted(missing)}")
    pattern, _, description = head["pattern"].partition(" ")
    status, _, check = head["expect"].partition(" ")
    return Entry(
        path=path,
        device="cuda" if path.parent.name == "cuda" else "cpu",
        pattern=pattern,
        description=description.strip(),
        problem=TESTS / head["problem"],
        status=status,
        check=check.strip() or None,
    )


def _entries() -> list[Entry]:
    return [
        _parse(path) for folder in CANDIDATE_DIRS for path in sorted((TESTS / folder).glob("*.py"))
    ]


ENTRIES = _entries()
WEAK_PROBLEMS = sorted(WEAK_DIR.glob("*.py"))


def _param(entry: Entry):
    marks = [pytest.mark.slow]
    if entry.device == "cuda":
        marks += [
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
        ]
    return pytest.param(entry, id=entry.id, marks=marks)


def _describe(result) -> str:
    checks = "\n".join(
        f"  {'PASS' if check.passed else 'FAIL'} {check.name}: {check.detail}"
        for check in result.checks
    )
    return f"status={result.status.value} reason={result.reason!r}\nchecks:\n{checks}\nlog:\n{result.log[-2000:]}"


# --- the corpus is well-formed -------------------------------------------------------------


def test_corpus_is_not_empty():
    assert any(e.path.parent.parent.name == "redteam" for e in ENTRIES)
    assert any(e.path.parent.parent.name == "honest" for e in ENTRIES)
    assert WEAK_PROBLEMS


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.id for e in ENTRIES])
def test_headers_are_well_formed(entry: Entry):
    honest = entry.path.parent.parent.name == "honest"
    assert entry.problem.is_file(), f"{entry.id}: problem {entry.problem} does not exist"
    assert entry.description, f"{entry.id}: the pattern header needs a short description"
    if honest:
        assert entry.pattern == "honest", f"{entry.id}: honest files say '# pattern: honest ...'"
        assert (entry.status, entry.check) == ("ok", None), f"{entry.id}: honest files expect ok"
        return
    assert entry.pattern.isdigit() and int(entry.pattern) in PATTERNS - {WEAK_PATTERN}, entry.id
    assert entry.status in STATUSES - {"ok"}, f"{entry.id}: a cheat cannot expect {entry.status!r}"
    for check in entry.check.split("|"):
        assert check in CHECKS, f"{entry.id}: unknown check {check!r}"
        assert CHECKS[check] == entry.status, (
            f"{entry.id}: a failed {check} gives status {CHECKS[check]}, not {entry.status}"
        )


@pytest.mark.parametrize("path", WEAK_PROBLEMS, ids=[p.name for p in WEAK_PROBLEMS])
def test_weak_problem_headers(path: Path):
    expect = _headers(path, 1)["expect"].split()
    assert len(expect) == 2 and expect[0] == "weak" and expect[1] in WEAK_KINDS, path.name


def test_every_pattern_has_a_cheat():
    covered = {int(e.pattern) for e in ENTRIES if e.pattern.isdigit()}
    if WEAK_PROBLEMS:
        covered.add(WEAK_PATTERN)
    assert covered == PATTERNS, f"patterns without a cheat: {sorted(PATTERNS - covered)}"


def test_every_pattern_has_a_cpu_cheat():
    """The default suite (no GPU) must exercise every pattern that can exist on a CPU."""
    covered = {int(e.pattern) for e in ENTRIES if e.pattern.isdigit() and e.device == "cpu"}
    assert covered == PATTERNS - {WEAK_PATTERN}, (
        f"no cpu cheat for {sorted(PATTERNS - covered - {WEAK_PATTERN})}"
    )


def _native_source(path: Path) -> str | None:
    """The cpp_sources text handed to load_inline, resolved through module-level constants."""
    tree = ast.parse(path.read_text())
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, str)
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", "")) == "load_inline"
        ):
            parts = []
            for keyword in node.keywords:
                if keyword.arg in {"cpp_sources", "functions", "extra_cflags", "extra_ldflags"}:
                    value = keyword.value
                    text = (
                        constants.get(value.id)
                        if isinstance(value, ast.Name)
                        else ast.unparse(value)
                    )
                    parts.append(f"{keyword.arg}={text}")
            return "\n".join(parts)
    return None


def test_cpu_build_budget():
    """CPU builds cost 30-80 s each on a 2-core CI machine and are cached by content, so the
    cpu files that get past the static gate share byte-identical native sources."""
    sources = {
        _native_source(e.path) for e in ENTRIES if e.device == "cpu" and e.check != "static_gate"
    }
    assert None not in sources
    assert len(sources) <= 12, f"{len(sources)} distinct cpu native sources; keep it to 12"


# --- the harness catches every cheat and accepts every honest kernel ------------------------


# One evaluator per problem and device: its reference cases (a worker run and the audit, most
# of an evaluation's time) serve every candidate of that problem, as in a real run.
_EVALUATORS: dict[tuple[Path, str], object] = {}


def _evaluate(entry: Entry):
    from harness.config import EvalConfig
    from harness.evaluate import Evaluator
    from harness.problem.load import problem_from_target
    from harness.records import Candidate

    key = (entry.problem, entry.device)
    if key not in _EVALUATORS:
        config = EvalConfig(compile_baseline=False, time_budget_s=0.2, min_reps=5)
        _EVALUATORS[key] = Evaluator(config)
    problem = problem_from_target(str(entry.problem), entry.device, "float32")
    return _EVALUATORS[key].evaluate(problem, Candidate(source=entry.path.read_text()))


# Under load, a verdict that rests on timing may also be "not judged" (the machine was too busy
# every time it was timed: harness.judge.busy); never the wrong one.
TIMING_CHECKS = {"baseline_undisturbed"}


@pytest.fixture
def machine_load():
    """One CPU-bound process per core beside the test (issue 28): a verdict must not depend on
    what else the machine is doing. ``KERNELPILOT_TEST_LOAD=0`` runs the corpus on a quiet one."""
    if os.environ.get("KERNELPILOT_TEST_LOAD", "1") == "0":
        yield None
        return
    with cpu_load() as spinners:
        yield spinners


@pytest.mark.parametrize("entry", [_param(e) for e in ENTRIES])
def test_candidate_verdict(entry: Entry, machine_load):
    result = _evaluate(entry)
    if machine_load and result.status.value == "unjudged":
        timing_verdict = entry.status == "ok" or entry.check in TIMING_CHECKS
        assert timing_verdict, (
            f"{entry.id}: not judged, but its verdict is not timing's\n{_describe(result)}"
        )
        assert result.reason.startswith("not judged: the machine was too busy"), result.reason
        return
    assert result.status.value == entry.status, (
        f"{entry.id} (pattern {entry.pattern}: {entry.description}) expected {entry.status}"
        f" {entry.check or ''}\n{_describe(result)}"
    )
    if entry.check is not None:
        failed = {check.name for check in result.checks if not check.passed}
        named = set(entry.check.split("|"))
        accepted = named.union(*(SAME_SYMPTOM.get(check, set()) for check in named))
        assert failed & accepted, (
            f"{entry.id}: expected check {entry.check!r} to fail, failed: {sorted(failed)}\n"
            f"{_describe(result)}"
        )


@pytest.mark.parametrize("path", WEAK_PROBLEMS, ids=[p.name for p in WEAK_PROBLEMS])
def test_weak_problem_is_flagged(path: Path):
    from harness.config import EvalConfig
    from harness.problem.audit import audit_problem
    from harness.problem.load import problem_from_target

    kind = _headers(path, 1)["expect"].split()[1]
    problem = problem_from_target(str(path), device="cpu", dtype="float32")
    report = audit_problem(
        problem, EvalConfig(compile_baseline=False, time_budget_s=0.2, min_reps=5)
    )
    kinds = [finding.kind for finding in report.findings]
    assert report.weak, f"{path.name}: not flagged as weak; findings: {report.findings}"
    assert kind in kinds, f"{path.name}: expected a {kind!r} finding, got {kinds}"
