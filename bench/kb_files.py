"""KernelBench problem files and the provenance of a run over them, for bench/bench_reference.py
and bench/kb_sweep.py: which files (the sample in .kb/problems), their names, copies shrunk for
CPU trials, where the files came from and which harness commit measured them; and the end of
such a run: the workers it left running ended."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / ".kb" / "problems"  # bench/fetch_kernelbench.sh


def sample_files(given: list[Path], only: list[str]) -> list[Path]:
    """The files given, else the sample's in its sample.txt order (all of its level*/*.py
    where there is no sample.txt); only those whose path contains one of ``only``'s texts."""
    if given:
        files = given
    else:
        listed = SAMPLE / "sample.txt"
        names = listed.read_text().split() if listed.is_file() else []
        files = [SAMPLE / name for name in names] or sorted(SAMPLE.glob("level*/*.py"))
    return [f for f in files if not only or any(text in str(f) for text in only)]


def problem_name(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def scaled_copy(path: Path, factor: int, folder: Path) -> Path:
    """A copy whose module-level integer constants of at least 256 are divided by ``factor``
    (shapes small enough for a CPU trial: NOT the published sizes)."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        value = node.value
        if isinstance(value, ast.Constant) and type(value.value) is int and value.value >= 256:
            node.value = ast.Constant(max(1, value.value // factor))
    copy = folder / path.parent.name / path.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(ast.unparse(tree) + "\n")
    return copy


def sample_source(files: list[Path]) -> str | None:
    """Where the problem files came from: the commit bench/fetch_kernelbench.sh records (None
    unless every file is in the sample)."""
    folder = SAMPLE.resolve()
    source = folder / "SOURCE"
    if not source.is_file() or not all(f.resolve().is_relative_to(folder) for f in files):
        return None
    return source.read_text().strip()


def harness_version(harness_root: Path) -> str:
    """The commit of the harness in ``harness_root``: its COMMIT file (a checkout made by
    bench/fetch_kernelbench.sh --before), else git's HEAD, marked where harness/ has changes."""
    recorded = harness_root / "COMMIT"
    if recorded.is_file():
        return recorded.read_text().strip()
    head = _git(harness_root, "rev-parse", "HEAD")
    if not head:  # a copy without .git (the device machine's)
        return "unknown commit (no git history here)"
    dirty = _git(harness_root, "status", "--porcelain", "--", "harness")
    return head + (" + uncommitted harness changes" if dirty else "")


def _git(repo: Path, *command: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), *command], capture_output=True, text=True)
    except OSError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def kill_children() -> None:
    """End the processes this one started and left running (a worker when interrupted): by
    their ids, each with its process group where it leads one (a worker's own session)."""
    for children in Path("/proc/self/task").glob("*/children"):
        for pid in map(int, children.read_text().split()):
            try:
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
