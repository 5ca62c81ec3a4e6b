"""Was the machine quiet enough to judge a candidate's timing? (pure)

A timed call during which the OS gave one of the timing process's cores to another process is
left out of the statistics (``harness.workers.timers``): its time is the machine's load. When
many are, the window's statistics rest on what little ran undisturbed, and the ratios the
verdict compares (eager before and after the candidate, eager and the candidate beside each
other) measure the load: on a 2-core machine under other work they ranged from 0.02x to 135x
for an honest kernel. Such a window is not judged: it is measured again, and after a bounded
number of tries the candidate is reported as not judged (``Status.unjudged``), never rejected
or accepted by default.
"""

from __future__ import annotations

from harness.timings import Timings, TimingStats

# A window is busy when more than this share of any implementation's timed calls was preempted.
# On an idle machine it is about 0 (a call of a few milliseconds meets another process's work
# now and then); under a CPU-bound process per core, calls of a millisecond or more are
# preempted more often than not.
BUSY_SHARE = 0.25

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


def busy_windows(timings: Timings) -> list[str]:
    """Each timing window too busy to judge, said with its figures (empty: all were quiet)."""
    found = []
    for window, fields in _WINDOWS.items():
        hit = [
            (name, stats)
            for name in fields
            if (stats := getattr(timings, name)) is not None and stats.preempted_share > BUSY_SHARE
        ]
        if not hit:
            continue
        calls = ", ".join(f"{_calls(stats)} {_WHAT[name]}" for name, stats in hit)
        load = timings.windows.get(window)
        found.append(
            f"{window}: preempted {calls} calls" + (f"; {load.describe()}" if load else "")
        )
    return found


def quiet_detail(timings: Timings) -> str:
    """How quiet the judged windows were: the preempted calls, the most other processes used."""
    stats = [s for fields in _WINDOWS.values() for name in fields if (s := getattr(timings, name))]
    preempted = sum(s.preempted for s in stats)
    timed = sum(s.timed or s.samples for s in stats)
    detail = f"{preempted} of {timed} timed calls preempted (left out)"
    if timings.windows:
        busiest = max(timings.windows.values(), key=lambda load: load.others_cores)
        detail += f"; at most {busiest.describe()}"
    return detail


def _calls(stats: TimingStats) -> str:
    return f"{stats.preempted} of {stats.timed or stats.samples}"
