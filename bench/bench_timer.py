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

    python bench/bench_timer.py [--device auto|cpu|cuda] [--reps 50] [--only NAME ...] [--out FILE]

On cpu only the timer and host columns mean anything (no events, no device profile).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_offline import CHAINS, chain_problems, example_targets  # noqa: E402
from bench_verify_overhead import load_model_new  # noqa: E402

from agents.offline import propose  # noqa: E402
from harness import guards  # noqa: E402
from harness.cases import build_reference, make_inputs  # noqa: E402
from harness.devices import resolve_device  # noqa: E402
from harness.problem import problem_from_target  # noqa: E402
from harness.timing import Timer  # noqa: E402


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
            "timer": median_ms(lambda: self.timer(fn, self.fresh())[0], self.reps),
            "timer_same": median_ms(lambda: self.timer(fn, self.inputs)[0], self.reps),
            "timer_refill": median_ms(lambda: self.timer(fn, self.refill())[0], self.reps),
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--reps", type=int, default=50, help="Calls per median (default 50).")
    parser.add_argument("--out", type=Path, help="Write the rows as JSON here too.")
    names = [name for name, _ in example_targets()] + [f"chain_{next(iter(CHAINS))}"]
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        choices=names,
        help=f"Run only this target (repeatable): {', '.join(names)}.",
    )
    args = parser.parse_args()
    args.device = resolve_device(args.device)
    folder = Path(tempfile.mkdtemp(prefix="kp-timer-chains-"))
    targets = example_targets()
    targets += [(name, path) for name, path, _ in chain_problems(args.device, folder)][:1]
    targets = [t for t in targets if not args.only or t[0] in args.only]

    floor_probe = Probe(
        args.device, problem_from_target(targets[0][1], args.device, "float32"), 200
    )
    floor = {
        "timer": median_ms(lambda: floor_probe.timer(lambda *_: None, [])[0], 200),
        "events": median_ms(lambda: floor_probe.events(lambda *_: None), 200)
        if args.device == "cuda"
        else None,
    }
    print(f"device {args.device}, torch {torch.__version__}; timer floor (empty call): {floor}")
    rows = []
    for name, target in targets:
        problem = problem_from_target(target, args.device, "float32")
        reference = build_reference(problem, 0)
        proposal = propose(problem)
        implementations = {"eager": reference, "compiled": torch.compile(reference)}
        if proposal.candidate is not None:
            path = folder / f"{name}_candidate.py"
            path.write_text(proposal.candidate.source)
            implementations["candidate"] = load_model_new(problem, path, reference)
        probe = Probe(args.device, problem, args.reps)
        with torch.no_grad():
            measured = {impl: probe.measure(fn) for impl, fn in implementations.items()}
            if args.device == "cuda":  # last: CUPTI stays attached after a profile
                for impl, fn in implementations.items():
                    measured[impl]["device"] = probe.device_ms(fn)
        for impl, row in measured.items():
            rows.append({"target": name, "impl": impl, **row})
            print(json.dumps(rows[-1]), file=sys.stderr)
    columns = [
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
    print("\n| target | impl | " + " | ".join(f"{c} ms" for c in columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for row in rows:
        cells = ["-" if row[c] is None else f"{row[c]:.4f}" for c in columns]
        print(f"| {row['target']} | {row['impl']} | " + " | ".join(cells) + " |")
    if args.out:
        args.out.write_text(json.dumps({"floor": floor, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
