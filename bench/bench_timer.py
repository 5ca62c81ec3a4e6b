"""Where the harness's timed window goes: the timer itself, host launch time, device time.

For each target (the examples and the bias_gelu chain by default), eager, torch.compile and the
offline proposer's candidate are each measured five ways, medians over ``--reps`` calls:

- ``timer``: the harness's Timer, fresh guarded inputs every call (what the harness reports);
- ``timer_same``: the harness's Timer, one set of inputs for every call;
- ``events``: L2 flush, synchronize, start event, the call, end event, synchronize (the end
  event on the current stream, no device-wide synchronize before it);
- ``device``: the summed duration of the kernels and copies the call ran (torch.profiler,
  measured last: the profiler leaves CUPTI attached, which slows later launches);
- ``host``: perf_counter around the call alone, the device idle before it (launch cost).

Plus the timer's floor: the Timer and the event pair around a call that does nothing.

    python -m bench timer [--device auto|cpu|cuda] [--reps 50] [--only NAME ...] [--out FILE]

On cpu only the timer and host columns mean anything (no events, no device profile).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import click
import torch

from agents.offline import propose
from bench.bench_offline import CHAINS, chain_problems, example_targets
from bench.bench_verify_overhead import load_model_new
from bench.results_format import BenchmarkRecord, finish, new_record, out_option
from harness.devices import resolve_device
from harness.problem.cases import build_reference, make_inputs
from harness.problem.load import problem_from_target
from harness.workers import guards
from harness.workers.timers import Timer

COLUMNS = [
    "timer",
    "timer_same",
    "timer_refill",
    "events",
    "stream_end",
    "sync_gap",
    "device",
    "host",
    "host_fresh",
]


def median_ms(measure, reps: int) -> float:
    return statistics.median(measure() for _ in range(reps))


class Probe:
    """The five measurements of one implementation on one problem."""

    def __init__(self, device: str, problem, reps: int) -> None:
        self.device, self.problem, self.reps = device, problem, reps
        self.timer = Timer(device)
        self.inputs = self.fresh()

    def fresh(self) -> list:
        inputs = make_inputs(self.problem, int(time.monotonic_ns() % 2**31))
        return [guards.guarded(x) if isinstance(x, torch.Tensor) else x for x in inputs]

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def measure(self, fn) -> dict[str, float | None]:
        for _ in range(3):
            fn(*self.inputs)
        row: dict[str, float | None] = {
            "timer": median_ms(lambda: self.timer(fn, self.fresh()).ms, self.reps),
            "timer_same": median_ms(lambda: self.timer(fn, self.inputs).ms, self.reps),
            "timer_refill": median_ms(lambda: self.timer(fn, self.refill()).ms, self.reps),
            "host": median_ms(lambda: self.host(fn, self.inputs), self.reps),
            "host_fresh": median_ms(lambda: self.host(fn, self.fresh()), self.reps),
            "events": None,
            "stream_end": None,
            "sync_gap": None,
            "device": None,
        }
        if self.device == "cuda":
            row["events"] = median_ms(lambda: self.events(fn), self.reps)
            pairs = [self.dual(fn, self.fresh()) for _ in range(self.reps)]
            row["stream_end"] = statistics.median(p[0] for p in pairs)
            row["sync_gap"] = statistics.median(p[1] - p[0] for p in pairs)
        return row

    def refill(self) -> list:
        """The same tensors (same addresses), new values."""
        for mine, new in zip(self.inputs, self.fresh(), strict=True):
            if isinstance(mine, torch.Tensor):
                mine.copy_(new)
        return self.inputs

    def dual(self, fn, inputs: list) -> tuple[float, float]:
        """(start to an end event on the current stream right after the call, start to an end
        event recorded after a device-wide synchronize)."""
        assert self.timer.flush_buffer is not None
        self.timer.flush_buffer.zero_()
        torch.cuda.synchronize()
        start, stream_end, device_end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record()
        fn(*inputs)
        stream_end.record()
        torch.cuda.synchronize()
        device_end.record()
        device_end.synchronize()
        return start.elapsed_time(stream_end), start.elapsed_time(device_end)

    def host(self, fn, inputs: list) -> float:
        self.sync()
        start = time.perf_counter()
        fn(*inputs)
        elapsed = (time.perf_counter() - start) * 1e3
        self.sync()
        return elapsed

    def events(self, fn) -> float:
        assert self.timer.flush_buffer is not None
        self.timer.flush_buffer.zero_()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*self.inputs)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def device_ms(self, fn) -> float:
        """Kernel and copy time per call, from a profile of ``reps`` calls."""
        from torch.profiler import ProfilerActivity, profile

        total = 0.0
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(self.reps):
                fn(*self.inputs)
                torch.cuda.synchronize()
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                total += event.time_range.elapsed_us()
        return total / 1e3 / self.reps


def target_names() -> list[str]:
    return [name for name, _ in example_targets()] + [f"chain_{next(iter(CHAINS))}"]


@click.command("timer")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto")
@click.option("--reps", type=click.IntRange(min=1), default=50, show_default=True,
              help="Calls per median.")  # fmt: skip
@click.option("--only", multiple=True, type=click.Choice(target_names()), metavar="NAME",
              help=f"Run only this target (repeatable): {', '.join(target_names())}.")  # fmt: skip
@out_option
def cli(device: str, reps: int, only: tuple, out: Path | None) -> None:
    """Where the timed window goes: the timer itself, host launch time, device time."""
    device = resolve_device(device)
    folder = Path(tempfile.mkdtemp(prefix="kp-timer-chains-"))
    targets = example_targets()
    targets += [(name, path) for name, path, _ in chain_problems(device, folder)][:1]
    targets = [t for t in targets if not only or t[0] in only]
    floor = timer_floor(device, targets[0][1])
    print(f"device {device}, torch {torch.__version__}; timer floor (empty call): {floor}")
    record = new_record("timer", device, context={"floor": floor})
    for name, target in targets:
        for impl, row in measure_target(device, name, target, reps, folder).items():
            record.rows.append({"target": name, "impl": impl, **row})
            print(json.dumps(record.rows[-1]), file=sys.stderr)
    finish(record, out, render)


def timer_floor(device: str, target: str) -> dict[str, float | None]:
    """The Timer and the event pair around a call that does nothing."""
    probe = Probe(device, problem_from_target(target, device, "float32"), 200)
    return {
        "timer": median_ms(lambda: probe.timer(lambda *_: None, []).ms, 200),
        "events": median_ms(lambda: probe.events(lambda *_: None), 200)
        if device == "cuda"
        else None,
    }


def measure_target(device: str, name: str, target: str, reps: int, folder: Path) -> dict:
    """Implementation -> its measurements: eager, compiled and the offline candidate."""
    problem = problem_from_target(target, device, "float32")
    reference = build_reference(problem, 0)
    proposal = propose(problem)
    implementations = {"eager": reference, "compiled": torch.compile(reference)}
    if proposal.candidate is not None:
        path = folder / f"{name}_candidate.py"
        path.write_text(proposal.candidate.source)
        implementations["candidate"] = load_model_new(problem, path, reference)
    probe = Probe(device, problem, reps)
    with torch.no_grad():
        measured = {impl: probe.measure(fn) for impl, fn in implementations.items()}
        if device == "cuda":  # last: CUPTI stays attached after a profile
            for impl, fn in implementations.items():
                measured[impl]["device"] = probe.device_ms(fn)
    return measured


def render(record: BenchmarkRecord) -> str:
    lines = [
        "| target | impl | " + " | ".join(f"{c} ms" for c in COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    for row in record.rows:
        cells = ["-" if row[c] is None else f"{row[c]:.4f}" for c in COLUMNS]
        lines.append(f"| {row['target']} | {row['impl']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
