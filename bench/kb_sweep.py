"""Every KernelBench level-1 and level-2 problem through the harness, one at a time (issue 10).

For each problem file, in this process and with one ``Evaluator`` for the whole sweep:

- ``evaluator.reference(problem)``, timed: the reference worker's cases and the audit (and on
  cuda the comparator worker's start). A ``UserError`` (a weak spec, the device's memory) is
  the problem's result, recorded with the first lines of its message;
- then ``evaluator.evaluate(problem, candidate)`` on one generic candidate made from the
  problem file itself: its ``Model`` renamed ``ModelNew``, whose ``forward`` runs the
  reference's forward and passes every output tensor through a copy kernel of its own
  (``load_inline``: CUDA on cuda, a C++ loop on cpu). The harness rejects that candidate
  (``no_pytorch_compute``: it computes with the reference's PyTorch ops); what is measured is
  whether it gets that far at the published size without running out of memory or into a
  harness error. The rejection comes in the candidate's worker after its first case's forward,
  before that case's outputs go to the comparator: the comparator's own case is not exercised.
  ``--candidate offline`` takes the offline proposer's candidate instead where it has one
  (pointwise chains fused into generated kernels, library ops kept): an honest one that goes
  through the comparator and the timing, as a search's first candidate does (slower);
- peak device memory (nvidia-smi, sampled every 0.2 s) for each of the two steps, of all
  processes and of this sweep's own; then ``evaluator.release(problem)``.

Two sweeps may share one device (``--beside 1`` on each, disjoint problem lists, own
``--out``): a problem's own peak is then still its own, and one that runs out of memory beside
the other is run again alone by ``--resume``.

The JSON (a list of rows) is rewritten after every problem, and a row marked ``interrupted``
is written before each one starts, so a call cut short keeps what it did and names the
problem it stopped in. ``--resume`` skips the problems already in ``--out`` (one left
``interrupted`` is tried once more); ``--limit-s`` starts no new problem after that many
seconds, so a device call ends on its own.

    python bench/kb_sweep.py [PROBLEM.py ...] [--device cuda|cpu] [--out FILE] [--resume]
        [--limit-s S] [--scale-down N] [--candidate copy|offline] [--prebuild] [--verbose]
        [--beside N] [--work-dir DIR]
    python bench/kb_sweep.py --table OUT.json ...   # a markdown table of what ran

Problems are files or folders (a folder's .py files in the order of their leading numbers);
by default .kb/all/level1 then .kb/all/level2 (``bash bench/fetch_kernelbench.sh --all``).
``--scale-down N`` (CPU trials) divides the files' module-level integer constants >= 256 by N;
its rows say ``published_size: false``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_reference import kill_children, problem_name, scaled_copy
from pydantic import BaseModel, Field

from harness.records import Candidate

ROOT = Path(__file__).resolve().parent.parent
OOM_TEXT = re.compile(r"[^\n]*(out of (device )?memory|OutOfMemoryError)[^\n]*", re.IGNORECASE)
COPY_NAME = "KP_SWEEP_COPY"


class SweepRow(BaseModel):
    """One problem's outcome."""

    name: str = Field(description="level/stem of the problem file.")
    device: str
    published_size: bool = Field(description="False when the file was shrunk by --scale-down.")
    reference_status: str = Field(
        description="ok, weak_spec, out_of_memory, user_error, harness_error, or interrupted "
        "(the sweep stopped inside this problem)."
    )
    reference_message: str = Field(default="", description="The error's first lines.")
    reference_s: float | None = None
    candidate_status: str | None = Field(
        default=None,
        description="The verdict's status, or user_error / harness_error; None when the "
        "reference failed.",
    )
    candidate_kind: str | None = Field(
        default=None, description="copy (the generic candidate) or offline (the proposer's)."
    )
    candidate_reason: str = Field(default="", description="First 300 characters of the reason.")
    candidate_s: float | None = None
    peak_reference_mib: int | None = Field(
        default=None, description="Most device memory in use (all processes) during reference()."
    )
    peak_candidate_mib: int | None = Field(
        default=None, description="Most device memory in use (all processes) during evaluate()."
    )
    own_peak_reference_mib: int | None = Field(
        default=None,
        description="Most device memory of this sweep's own processes during reference() "
        "(None where nvidia-smi does not name them).",
    )
    own_peak_candidate_mib: int | None = Field(
        default=None, description="The same during evaluate()."
    )
    idle_mib: int | None = Field(default=None, description="Device memory in use before it.")
    beside: int = Field(
        default=0,
        description="Other sweeps sharing the device as this one ran (--beside): its times and "
        "all-process peaks include theirs.",
    )
    memory_error: str = Field(
        default="", description="Lines of the reference's or the verdict's text about memory."
    )
    attempt: int = Field(
        default=1, description="2: run again by --resume after the first try was interrupted."
    )


# --- the generic candidate ---------------------------------------------------------------

COPY_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cstdint>

// 16-byte words over the aligned part, bytes over the rest: any dtype, any size.
__global__ void copy_kernel(const uint4* __restrict__ src16, uint4* __restrict__ dst16,
                            int64_t words, const unsigned char* __restrict__ src,
                            unsigned char* __restrict__ dst, int64_t tail_begin, int64_t bytes) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (int64_t i = tid; i < words; i += stride) dst16[i] = src16[i];
    for (int64_t i = tail_begin + tid; i < bytes; i += stride) dst[i] = src[i];
}

torch::Tensor copy_out(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "copy_out: expects a cuda tensor");
    const torch::Tensor src = x.contiguous();
    torch::Tensor out = torch::empty(src.sizes(), src.options());
    const int64_t bytes = src.numel() * static_cast<int64_t>(src.element_size());
    if (bytes == 0) return out;
    const at::cuda::CUDAGuard guard(src.device());
    const auto* from = static_cast<const unsigned char*>(src.data_ptr());
    auto* to = static_cast<unsigned char*>(out.data_ptr());
    const bool aligned = reinterpret_cast<uintptr_t>(from) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(to) % 16 == 0;
    const int64_t words = aligned ? bytes / 16 : 0;
    const int64_t work = std::max<int64_t>(words, bytes - 16 * words);
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((work + threads - 1) / threads, 1 << 20));
    copy_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const uint4*>(from), reinterpret_cast<uint4*>(to), words, from, to,
        16 * words, bytes);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

COPY_CPP = r"""
#include <torch/extension.h>
#include <cstdint>

torch::Tensor copy_out(torch::Tensor x) {
    const torch::Tensor src = x.contiguous();
    torch::Tensor out = torch::empty(src.sizes(), src.options());
    const int64_t bytes = src.numel() * static_cast<int64_t>(src.element_size());
    const auto* from = static_cast<const unsigned char*>(src.data_ptr());
    auto* to = static_cast<unsigned char*>(out.data_ptr());
    for (int64_t i = 0; i < bytes; ++i) to[i] = from[i];
    return out;
}
"""

COPY_TAIL = '''
import torch
from torch.utils.cpp_extension import load_inline

{name}_SOURCE = r"""{source}"""

{name} = load_inline(
    name="kp_sweep_copy_{device}",
    {sources},
    functions=["copy_out"],
    extra_cflags=["-O3"],{cuda_flags}
)


def kp_sweep_copied(value):
    if isinstance(value, torch.Tensor):
        return {name}.copy_out(value)
    if isinstance(value, tuple):
        return tuple(kp_sweep_copied(item) for item in value)
    if isinstance(value, list):
        return [kp_sweep_copied(item) for item in value]
    return value
'''


def copy_candidate(source: str, class_name: str, device: str) -> str:
    """The problem's source with ``class_name`` renamed ``ModelNew`` (so the parameters' names
    match the reference's), its forward renamed ``reference_forward`` and a forward that
    passes that one's outputs through the copy kernel."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == class_name:
            node.id = "ModelNew"
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            node.name = "ModelNew"
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    item.name = "reference_forward"
            node.body.append(
                ast.parse(
                    "def forward(self, *inputs):\n"
                    "    return kp_sweep_copied(self.reference_forward(*inputs))\n"
                ).body[0]
            )
    if device == "cuda":
        sources = (
            f'cpp_sources="torch::Tensor copy_out(torch::Tensor x);",\n'
            f"    cuda_sources={COPY_NAME}_SOURCE"
        )
        cuda_flags = '\n    extra_cuda_cflags=["-O3"],'
    else:
        sources, cuda_flags = f"cpp_sources={COPY_NAME}_SOURCE", ""
    tail = COPY_TAIL.format(
        name=COPY_NAME,
        source=COPY_CUDA if device == "cuda" else COPY_CPP,
        device=device,
        sources=sources,
        cuda_flags=cuda_flags,
    )
    return ast.unparse(tree) + "\n\n" + tail


# --- device memory -------------------------------------------------------------------------


class MemoryPeak:
    """Device memory (MiB) sampled every 0.2 s in a thread; ``take()`` gives the most seen
    since the last take, as (all processes, this sweep's own). All processes is nvidia-smi's
    memory.used; this sweep's own is the sum of its ``--query-compute-apps`` rows whose pid is
    this process or one it started (None where nvidia-smi names none of them: a container's
    pid namespace). With two sweeps on one device (``--beside``), only the second is this
    sweep's. Does nothing off cuda."""

    def __init__(self, device: str) -> None:
        self.on = device == "cuda" and shutil.which("nvidia-smi") is not None
        gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
        self.query = ["nvidia-smi", "-i", gpu, "--format=csv,noheader,nounits"]
        self.peak: tuple[int | None, int | None] = (None, None)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> MemoryPeak:
        if self.on:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.on:
            self.thread.join(timeout=5)

    def _smi(self, query: str) -> list[list[str]]:
        try:
            done = subprocess.run([*self.query, query], capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            return []
        if done.returncode != 0:
            return []
        return [[f.strip() for f in line.split(",")] for line in done.stdout.splitlines()]

    def now(self) -> int | None:
        """Device memory in use by every process."""
        if not self.on:
            return None
        rows = self._smi("--query-gpu=memory.used")
        return int(rows[0][0]) if rows and rows[0][0].isdigit() else None

    def own(self) -> int | None:
        """Device memory in use by this process and its descendants, as nvidia-smi names them."""
        ours = own_processes()
        used = [
            int(row[1])
            for row in self._smi("--query-compute-apps=pid,used_memory")
            if len(row) == 2 and row[0].isdigit() and row[1].isdigit() and int(row[0]) in ours
        ]
        return sum(used) if used else None

    def _poll(self) -> None:
        while not self.stop.wait(0.2):
            sample = (self.now(), self.own())
            self.peak = (
                bigger(self.peak[0], sample[0]),
                bigger(self.peak[1], sample[1]),
            )

    def take(self) -> tuple[int | None, int | None]:
        if not self.on:
            return None, None
        time.sleep(0.3)  # one more sample after the step's end
        peak, self.peak = self.peak, (None, None)
        return peak


def bigger(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def own_processes() -> set[int]:
    """This process and every process below it, from /proc's parent links."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        fields = text[text.rindex(")") + 2 :].split()
        parents[int(text.split(" ", 1)[0])] = int(fields[1])
    ours = {os.getpid()}
    grew = True
    while grew:
        below = {pid for pid, parent in parents.items() if parent in ours} - ours
        grew = bool(below)
        ours |= below
    return ours


# --- one problem -------------------------------------------------------------------------


def reference_kind(err: Exception) -> str:
    from harness.evaluate import WeakSpecError

    if isinstance(err, WeakSpecError):
        return "weak_spec"
    return "out_of_memory" if OOM_TEXT.search(str(err)) else "user_error"


def first_lines(text: str, lines: int = 4) -> str:
    return "\n".join(text.strip().splitlines()[:lines])


def make_candidate(path: Path, problem, kind: str) -> tuple[str, Candidate]:
    """The offline proposer's candidate where asked for and it has one, else the copy one."""
    if kind == "offline":
        from agents.offline import propose

        proposal = propose(problem)
        if proposal.candidate is not None:
            return "offline", proposal.candidate
    source = copy_candidate(path.read_text(), problem.class_name, problem.device)
    return "copy", Candidate(source=source, origin="kb_sweep")


def prebuild(
    evaluator, files: list[Path], kind: str, device: str
) -> dict[Path, tuple[str, Candidate]]:
    """Build every problem's candidate before the sweep, as many at once as there are cores
    (the build cache keeps them): one problem after another, each offline candidate's build
    took most of its time. A problem that cannot be read is left to its turn, which says why.
    Gives each problem's (kind, candidate), for its turn."""
    from harness.errors import UserError
    from harness.problem import problem_from_target

    jobs = []
    for path in files:
        try:
            problem = problem_from_target(str(path), device, "float32")
            jobs.append((path, problem, make_candidate(path, problem, kind)))
        except UserError:
            continue
    started = time.monotonic()
    workers = max(1, len(os.sched_getaffinity(0)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        reports = list(pool.map(lambda job: evaluator.build(job[1], job[2][1]), jobs))
    built = sum(report.status is None for report in reports)
    print(
        f"prebuilt {built} of {len(jobs)} candidates, {workers} at a time, "
        f"in {time.monotonic() - started:.0f} s",
        flush=True,
    )
    return {path: made for path, _, made in jobs}


def sweep_problem(
    evaluator,
    path: Path,
    kind: str,
    memory: MemoryPeak,
    row: SweepRow,
    prepared: dict[Path, tuple[str, Candidate]],
) -> None:
    """Fill ``row`` in: reference + audit, then one candidate."""
    from harness.errors import UserError
    from harness.problem import problem_from_target

    row.idle_mib = memory.now()
    memory.take()
    start = time.perf_counter()
    problem = None
    try:
        problem = problem_from_target(str(path), row.device, "float32")
        evaluator.reference(problem)
        row.reference_status = "ok"
    except UserError as err:
        row.reference_status, row.reference_message = reference_kind(err), first_lines(str(err))
    except Exception:  # a harness bug: recorded, and the sweep goes on to the next problem
        row.reference_status = "harness_error"
        row.reference_message = traceback.format_exc()[-1500:]
    row.reference_s = time.perf_counter() - start
    row.peak_reference_mib, row.own_peak_reference_mib = memory.take()
    try:
        if row.reference_status == "ok" and problem is not None:
            start = time.perf_counter()
            row.candidate_status = "interrupted"  # until the verdict comes
            try:
                made = prepared.get(path) or make_candidate(path, problem, kind)
                row.candidate_kind, candidate = made
                result = evaluator.evaluate(problem, candidate)
                row.candidate_status, row.candidate_reason = result.status.value, result.reason
                row.memory_error = "\n".join(
                    m.group(0) for m in OOM_TEXT.finditer(f"{result.reason}\n{result.log}")
                )[:1500]
            except UserError as err:
                row.candidate_status, row.candidate_reason = "user_error", str(err)
            except Exception:
                row.candidate_status = "harness_error"
                row.candidate_reason = traceback.format_exc()[-1500:]
            row.candidate_s = time.perf_counter() - start
            row.candidate_reason = row.candidate_reason[:300]
            row.peak_candidate_mib, row.own_peak_candidate_mib = memory.take()
    finally:
        if problem is not None:
            evaluator.release(problem)
    if row.reference_status == "out_of_memory":
        row.memory_error = row.reference_message
    elif not row.memory_error and OOM_TEXT.search(row.candidate_reason):
        row.memory_error = row.candidate_reason


# --- the sweep -----------------------------------------------------------------------------


def leading_number(path: Path) -> tuple[int, str]:
    number = re.match(r"\d+", path.name)
    return (int(number.group(0)) if number else sys.maxsize, path.name)


def problem_files(given: list[Path]) -> list[Path]:
    """The problems named, a folder standing for its .py files in the order of their leading
    numbers; none named: .kb/all/level1 then level2."""
    if not given:
        folder = ROOT / ".kb" / "all"
        given = [folder / "level1", folder / "level2"]
        if not any(level.is_dir() for level in given):
            sys.exit(f"no problems in {folder}: run bash bench/fetch_kernelbench.sh --all")
    files: list[Path] = []
    for path in given:
        if path.is_dir():
            files.extend(sorted(path.glob("*.py"), key=leading_number))
        elif path.is_file():
            files.append(path)
        else:
            sys.exit(f"{path}: no such problem file or folder")
    return files


def write_rows(path: Path, rows: list[SweepRow]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".part")
    partial.write_text(json.dumps([row.model_dump() for row in rows], indent=1))
    os.replace(partial, path)


def peaks(row: SweepRow) -> tuple[int | None, int | None]:
    """The reference's and the candidate's peak MiB: this sweep's own processes where
    nvidia-smi named them, else every process's."""
    if row.own_peak_reference_mib is not None:
        return row.own_peak_reference_mib, row.own_peak_candidate_mib
    return row.peak_reference_mib, row.peak_candidate_mib


def progress_line(row: SweepRow) -> str:
    shown = "/".join("-" if p is None else str(p) for p in peaks(row))
    reference = f"reference {row.reference_status} {row.reference_s or 0:.1f} s"
    if row.reference_status != "ok":
        reference += (
            f" ({row.reference_message.splitlines()[0][:160] if row.reference_message else ''})"
        )
    candidate = (
        f"{row.candidate_kind} candidate {row.candidate_status} {row.candidate_s or 0:.1f} s"
        if row.candidate_status
        else "no candidate"
    )
    return f"{row.name}: {reference}; {candidate}; peak MiB reference/candidate {shown}"


def sweep(args: argparse.Namespace) -> list[SweepRow]:
    from harness.config import EvalConfig
    from harness.evaluate import Evaluator

    rows = (
        [SweepRow(**row) for row in json.loads(args.out.read_text())]
        if args.resume and args.out.is_file()
        else []
    )
    # A problem the last call stopped inside is tried once more (it may have been the call's
    # time limit, not the problem); interrupted twice, it stays so. One that ran out of memory
    # while another sweep shared the device is run again too: alone, it may fit.
    retry = {
        row.name: row.attempt + 1
        for row in rows
        if (interrupted(row) and row.attempt < 2) or (row.memory_error and row.beside)
    }
    rows = [row for row in rows if row.name not in retry]
    done = {row.name for row in rows}
    files = [f for f in problem_files(args.problems) if problem_name(f) not in done]
    work = Path(tempfile.mkdtemp(prefix="kbsweep-", dir=args.work_dir))
    if args.scale_down:
        files = [scaled_copy(f, args.scale_down, work / "scaled") for f in files]
    evaluator = Evaluator(
        EvalConfig(),
        seed=0,
        work_dir=work / "eval",
        progress=(lambda message: print(f"  {message}", flush=True)) if args.verbose else None,
    )
    started = time.monotonic()
    print(
        f"{len(files)} problems to run ({len(done)} already in {args.out}), device {args.device}",
        flush=True,
    )
    try:
        prepared = prebuild(evaluator, files, args.candidate, args.device) if args.prebuild else {}
        with MemoryPeak(args.device) as memory:
            for number, path in enumerate(files, 1):
                if args.limit_s is not None and time.monotonic() - started > args.limit_s:
                    print(f"time limit: {len(files) - number + 1} problems not started", flush=True)
                    break
                row = SweepRow(
                    name=problem_name(path),
                    device=args.device,
                    published_size=not args.scale_down,
                    reference_status="interrupted",
                    attempt=retry.get(problem_name(path), 1),
                    beside=args.beside,
                )
                rows.append(row)
                write_rows(args.out, rows)
                sweep_problem(evaluator, path, args.candidate, memory, row, prepared)
                write_rows(args.out, rows)
                print(f"[{number}/{len(files)}] {progress_line(row)}", flush=True)
    except KeyboardInterrupt:  # a stage's time limit (SIGINT, or SIGTERM: see main)
        print(f"interrupted inside {rows[-1].name if rows else 'the start'}", flush=True)
    finally:
        evaluator.close()
        kill_children()
        write_rows(args.out, rows)
        shutil.rmtree(work, ignore_errors=True)
    return rows


def interrupted(row: SweepRow) -> bool:
    return "interrupted" in (row.reference_status, row.candidate_status)


def summary(rows: list[SweepRow]) -> str:
    reference = Counter(row.reference_status for row in rows)
    candidate = Counter(
        f"{row.candidate_status} ({row.candidate_kind})" if row.candidate_kind else "not run"
        for row in rows
    )
    memory = [row.name for row in rows if row.memory_error]
    sizes = (
        "published sizes"
        if all(r.published_size for r in rows)
        else "NOT all at published sizes (--scale-down)"
    )
    lines = [
        f"{len(rows)} problems, {sizes}",
        "reference: " + ", ".join(f"{k} {v}" for k, v in reference.most_common()),
        "candidate: " + ", ".join(f"{k} {v}" for k, v in candidate.most_common()),
        f"out of memory ({len(memory)}): " + (", ".join(memory) or "none"),
    ]
    for kind in ("harness_error", "user_error", "interrupted"):
        names = [r.name for r in rows if kind in (r.reference_status, r.candidate_status)]
        if names:
            lines.append(f"{kind} ({len(names)}): " + ", ".join(names))
    largest = [(max(p for p in peaks(r) if p is not None), r.name) for r in rows if any(peaks(r))]
    if largest:
        top = sorted(largest, reverse=True)[:5]
        lines.append("largest peaks (MiB): " + ", ".join(f"{name} {mib}" for mib, name in top))
    return "\n".join(lines)


def table(rows: list[SweepRow]) -> str:
    """The rows as a markdown table, for bench/BENCHMARKS.md."""
    lines = [
        "| problem | reference + audit | s | candidate | s | peak MiB (reference / candidate) |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        shown = " / ".join("-" if p is None else str(p) for p in peaks(row))
        own = "" if row.own_peak_reference_mib is not None or not row.beside else " (all)"
        candidate = f"{row.candidate_status} ({row.candidate_kind})" if row.candidate_kind else "-"
        seconds = "-" if row.candidate_s is None else f"{row.candidate_s:.1f}"
        lines.append(
            f"| {row.name} | {row.reference_status} | {row.reference_s or 0:.1f} | {candidate} "
            f"| {seconds} | {shown}{own} |"
        )
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "problems",
        nargs="*",
        type=Path,
        help="KernelBench problem files or folders of them (default: .kb/all/level1 then level2)",
    )
    parser.add_argument(
        "--device",
        default="cuda",
        choices=["cuda", "cpu"],
        help="where the problems run (default cuda)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("kb_sweep.json"),
        help="JSON list of rows, rewritten after every problem (default kb_sweep.json)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep --out's rows and skip their problems; one the last run stopped inside "
        "(interrupted) is run once more",
    )
    parser.add_argument(
        "--limit-s",
        type=float,
        metavar="S",
        help="start no new problem after S seconds of wall time",
    )
    parser.add_argument(
        "--scale-down",
        type=int,
        metavar="N",
        help="CPU trials only: divide the files' integer constants >= 256 by N (NOT the published sizes)",
    )
    parser.add_argument(
        "--candidate",
        choices=["copy", "offline"],
        default="copy",
        help="copy (default): the generic copy candidate; offline: the offline proposer's "
        "candidate where it has one (through the comparator and the timing), else copy",
    )
    parser.add_argument(
        "--prebuild",
        action="store_true",
        help="build every problem's candidate first, as many at once as there are cores",
    )
    parser.add_argument(
        "--table",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="run nothing: print the rows of these --out files as a markdown table, then the "
        "summary",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print the evaluator's progress lines (reference, checks, timing) as they come",
    )
    parser.add_argument(
        "--beside",
        type=int,
        default=0,
        metavar="N",
        help="N other sweeps share the device (recorded in each row; a problem that runs out "
        "of memory then is run again by --resume); default 0",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        metavar="DIR",
        help="where the case files go (default: the system temp)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # SIGTERM as SIGINT: the sweep ends through its finally blocks, workers stopped, rows kept.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.table:
        rows = [SweepRow(**row) for path in args.table for row in json.loads(path.read_text())]
        print(table(rows))
        print()
        print(summary(rows))
        return
    rows = sweep(args)
    print()
    print(summary(rows))


if __name__ == "__main__":
    main()
