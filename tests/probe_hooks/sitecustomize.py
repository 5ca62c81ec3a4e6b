"""A recording hook for tests/test_evaluator.py, never part of the product: with
KP_PROBE_SAMPLES=DIR and this folder first on PYTHONPATH, every candidate worker writes each
timing loop's raw per-call samples (wall-clock start of each call, milliseconds per call, which
implementation) to DIR/<pid>-<n>.json, and the start of every profiler session to
DIR/<pid>-profile-<n>.json. The harness's summaries keep only median, IQR and min.
The test checks that no profiler runs in a timing worker before its timing ends.
With KP_PROBE_END_BEFORE_READY=1, a prestarted timing worker ends before it is ready.
With KP_PROBE_NOPROFILE=1 as well, no profiler runs before the timing beside the candidate (the
reference's ops are not profiled, the checked calls are not profiled; the checks that need them
see no ops): does eager beside the candidate then match eager alone?
"""

import os

if os.environ.get("KP_PROBE_SAMPLES"):
    import json
    import time
    from pathlib import Path

    import harness.workers.timing as worker_timing

    _original_loop = worker_timing.time_loop
    _loops = [0]

    def _recording_loop(job, implementations, checks):
        names = {id(fn): name for name, fn in implementations.items()}
        calls: list = []
        original_call = worker_timing.Timer.__call__

        def timed(self, fn, inputs):
            started = time.time()
            measured = original_call(self, fn, inputs)
            calls.append([names.get(id(fn), "?"), started, measured.ms, measured.preempted])
            return measured

        worker_timing.Timer.__call__ = timed
        began = time.time()
        try:
            return _original_loop(job, implementations, checks)
        finally:
            worker_timing.Timer.__call__ = original_call
            _loops[0] += 1
            record = {
                "pid": os.getpid(),
                "loop": checks.window,
                "began": began,
                "ended": time.time(),
                "calls": calls,
            }
            folder = Path(os.environ["KP_PROBE_SAMPLES"])
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{os.getpid()}-{_loops[0]}.json").write_text(json.dumps(record))

    worker_timing.time_loop = _recording_loop

    import torch.profiler.profiler as _profiler

    _enter = _profiler.profile.__enter__
    _sessions = [0]

    def _recording_enter(self):
        _sessions[0] += 1
        folder = Path(os.environ["KP_PROBE_SAMPLES"])
        folder.mkdir(parents=True, exist_ok=True)
        record = {"pid": os.getpid(), "profile": time.time()}
        (folder / f"{os.getpid()}-profile-{_sessions[0]}.json").write_text(json.dumps(record))
        return _enter(self)

    _profiler.profile.__enter__ = _recording_enter

if os.environ.get("KP_PROBE_SAMPLES") and os.environ.get("KP_PROBE_NOPROFILE"):
    import contextlib

    import torch.profiler

    import harness.workers.candidate as worker_candidate

    _real_profile = torch.profiler.profile
    _timing_began = [False]

    class _NoEvents:
        def events(self):
            return []

    def _profile(*args, **kwargs):
        if _timing_began[0]:
            return _real_profile(*args, **kwargs)
        return contextlib.nullcontext(_NoEvents())

    def _loop_then_profile(job, implementations, samples, checks):
        if checks.window == "beside":
            _timing_began[0] = True
        return _recording_loop(job, implementations, samples, checks)

    torch.profiler.profile = _profile
    worker_candidate._profile_reference = lambda job, base: ([], 0)
    worker_timing.time_loop = _loop_then_profile

if os.environ.get("KP_PROBE_END_BEFORE_READY"):
    # A timing worker started beside its checks (harness.prestart) ends before it is ready, as
    # one that ran out of memory beside the checks' worker would (tests/test_prestart.py).
    import harness.workers.candidate as worker_candidate

    _run_time = worker_candidate.run_time

    def _ends_before_ready(job, job_dir, builder, go=None):
        if job.await_go:
            os._exit(3)
        return _run_time(job, job_dir, builder, go)

    worker_candidate.run_time = _ends_before_ready
