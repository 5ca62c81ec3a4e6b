"""The evaluator's comparator workers (``harness.judge.comparator``): per problem whose reference
outputs are made again per candidate, one on each GPU, kept for the problem's candidates and
stopped with the problem or the evaluator."""

from __future__ import annotations

import threading
import weakref
from pathlib import Path

from harness.config import EvalConfig
from harness.errors import UserError
from harness.gpus import environment
from harness.judge.comparator import Comparator, ComparatorStopped
from harness.problem.reference import ReferenceData
from harness.records import Problem


class Comparators:
    """Comparator workers by problem (its record's JSON) and GPU. A GPU's is started when a
    candidate there first asks for it, and again when a candidate's outputs ended it; one GPU's
    start does not hold up the others'."""

    def __init__(self, config: EvalConfig, work_dir: Path, cache_dir: Path) -> None:
        self.config, self.work_dir, self.cache_dir = config, work_dir, cache_dir
        self._running: dict[str, dict[str | None, Comparator]] = {}
        self._lock = threading.Lock()
        self._starting: dict[tuple[str, str | None], threading.Lock] = {}
        weakref.finalize(self, _close_all, self._running)

    def start(self, problem: Problem, seeds: list[int], gpu: str | None) -> Comparator:
        """A new comparator for ``problem`` on ``gpu``; ``set_up`` makes it ready."""
        return Comparator(
            problem, self.config, seeds, self.work_dir, self.cache_dir, environment(gpu)
        )

    def keep(self, key: str, gpu: str | None, comparator: Comparator) -> None:
        """Keep a comparator that is set up for the problem's later candidates on ``gpu``."""
        with self._lock:
            self._running.setdefault(key, {})[gpu] = comparator

    def on(self, problem: Problem, data: ReferenceData, gpu: str | None) -> Comparator:
        """The problem's comparator on ``gpu``: started there when first asked for, and again
        if a candidate's outputs ended it."""
        key = problem.model_dump_json()
        with self._lock:
            starting = self._starting.setdefault((key, gpu), threading.Lock())
        with starting:
            with self._lock:
                comparator = self._running.setdefault(key, {}).get(gpu)
            if comparator is None or not comparator.alive():
                if comparator is not None:
                    comparator.close()
                comparator = self.start(problem, data.seeds, gpu)
                set_up(comparator, data)
                self.keep(key, gpu, comparator)
            return comparator

    def running(self) -> list[Comparator]:
        """Every comparator kept, of every problem and GPU."""
        with self._lock:
            return [c for on_gpus in self._running.values() for c in on_gpus.values()]

    def release(self, key: str) -> None:
        """Stop the problem's comparators (they hold the reference's parameters on the GPUs)."""
        with self._lock:
            running = self._running.pop(key, {})
        for comparator in running.values():
            comparator.close()

    def close(self) -> None:
        """Stop every comparator (also done when this is collected)."""
        _close_all(self._running)


def set_up(comparator: Comparator, data: ReferenceData) -> None:
    """Give a started comparator the reference's report; a comparator that cannot start is
    the user's to see, with its log and the setting that does without it."""
    try:
        comparator.setup(data.report)
    except ComparatorStopped as err:
        log = comparator.close()
        raise UserError(
            f"the comparator worker could not start ({err}):\n{log[-3000:]}",
            where=f"{comparator.problem.source_path}:{comparator.problem.class_name}",
            fix='set eval.reference_outputs = "stored" in [tool.kernelpilot] to compare '
            "in the parent instead, and report this log",
        ) from err


def _close_all(running: dict[str, dict[str | None, Comparator]]) -> None:
    for on_gpus in list(running.values()):
        for comparator in on_gpus.values():
            comparator.close()
    running.clear()
