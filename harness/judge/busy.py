"""Was the machine quiet enough to judge a candidate's timing? (pure)

A timed call during which the timing process's threads waited for a core is left out of the
statistics (``harness.workers.timers``): its time is the machine's load. When many are, and
other processes were using the machine meanwhile, the window's statistics rest on what little
ran undisturbed, and the ratios the verdict compares (eager before and after the candidate,
eager and the candidate beside each other) measure the load: on a 2-core machine under other
work they ranged from 0.02x to 135x for an honest kernel. Such a window is not judged: it is
measured again, and after a bounded number of tries the candidate is reported as not judged
(``Status.unjudged``), never rejected or accepted by default.

Waits with no other process busy are the timing process's own doing (a candidate whose threads
crowd or pin the baseline's): judged, so the disturbance check sees them.
"""

from __future__ import annotations

from harness.timings import Timings, TimingStats, WindowLoad

# A window is busy when more than this share of some implementation's timed calls was preempted
# (on an idle 2-core machine 0-3 %, under a CPU-bound process per core 10-50 %: python -m bench
# busy) while other processes used at least OTHERS_BUSY cores' worth of CPU time.
BUSY_SHARE = 0.25
OTHERS_BUSY = 0.25

# How a timing the machine was too busy to judge is said: why it is timed again, and the verdict.
TOO_BUSY = "the machine was too busy to judge the timing"

_WINDOWS = {
    "alone": ("eager_alone", "compiled_alone"),
    "beside": ("candidate", "eager_beside", "compiled_beside"),
    "after": ("eager_after",),
}
_WHAT = {
    "eager_alone": "eager",
    "compiled_alone": "torch.compile",
    "candidate": "candidate",
    "eager_beside": "eager",
    "compiled_beside": "torch.compile",
    "eager_after": "eager",
}


def judged_timings(timings: Timings) -> Timings:
    """The timings the verdict is taken on: in a window where other processes were busy, each
    implementation's calls that were kept waiting for a core are left out (their time is the
    load's); where nobody else was, every call counts, so a candidate cannot have its own slow
    calls left out by crowding its own threads."""
    judged = timings.model_copy(deep=True)
    for window, fields in _WINDOWS.items():
        others_busy = _others_busy(judged, window)
        for name in fields:
            stats = getattr(judged, name)
            if stats is None:
                continue
            if others_busy and stats.undisturbed is not None:
                clean = stats.undisturbed.model_copy(
                    update={
                        "preempted": stats.preempted,
                        "timed": stats.timed,
                        "preempted_left_out": True,
                    }  # fmt: skip
                )
                setattr(judged, name, clean)
            else:
                stats.undisturbed = None
    return judged


def busy_windows(timings: Timings) -> list[str]:
    """Each timing window too busy to judge, said with its figures (empty: all were quiet)."""
    found = []
    for window, fields in _WINDOWS.items():
        hit = [
            (name, stats)
            for name in fields
            if (stats := getattr(timings, name)) is not None and stats.preempted_share > BUSY_SHARE
        ]
        if not hit or not _others_busy(timings, window):
            continue
        load = timings.windows.get(window)
        calls = ", ".join(f"{_calls(stats)} {_WHAT[name]}" for name, stats in hit)
        found.append(
            f"{window}: preempted {calls} calls" + (f"; {load.describe()}" if load else "")
        )
    return found


def quiet_detail(timings: Timings) -> str:
    """How quiet the judged windows were: the preempted calls, the most other processes used."""
    stats = [s for fields in _WINDOWS.values() for name in fields if (s := getattr(timings, name))]
    preempted = sum(s.preempted for s in stats)
    timed = sum(s.calls for s in stats)
    left_out = sum(s.preempted for s in stats if s.preempted_left_out)
    detail = f"{preempted} of {timed} timed calls preempted ({left_out} left out)"
    if timings.windows:
        busiest = max(timings.windows.values(), key=lambda load: load.others_cores)
        detail += f"; at most {busiest.describe()}"
    return detail


def not_judged(figures: list[str]) -> str:
    """The reason of a verdict not judged, with each busy window's (or each try's) figures."""
    return f"not judged: the machine was too busy ({'; '.join(figures)})"


def each_worker(figures: list[str]) -> list[str]:
    """Figures of consecutive measurements, each in a fresh worker, numbered as they ran."""
    return [f"worker {n}: {text}" for n, text in enumerate(figures, 1)]


def baseline_window(
    eager: TimingStats, compiled: TimingStats | None, load: WindowLoad | None
) -> tuple[TimingStats, TimingStats | None, list[str]]:
    """A baseline worker's one window (eager and torch.compile, no candidate: the nightly's),
    judged by the same rule: the statistics to judge, and the window's figures if it was too
    busy to judge."""
    timings = Timings(
        eager_alone=eager, compiled_alone=compiled, windows={"alone": load} if load else {}
    )
    judged = judged_timings(timings)
    assert judged.eager_alone is not None
    return judged.eager_alone, judged.compiled_alone, busy_windows(timings)


def _others_busy(timings: Timings, window: str) -> bool:
    """Whether other processes used the machine during ``window`` (where it was not recorded,
    as in a record from before windows were: nothing rules it out)."""
    load = timings.windows.get(window)
    return load is None or load.others_cores >= OTHERS_BUSY


def _calls(stats: TimingStats) -> str:
    return f"{stats.preempted} of {stats.calls}"
