"""A worker that sleeps ``job_dir/probe.json``'s ``sleep`` seconds of its own running time and
reports it: ``python -m tests.sandbox.sleeper JOB_DIR FD`` (``tests/test_quiet.py``). Sleeping in
short steps, a stopped process (SIGSTOP) does not count the time it was stopped."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main(job_dir: Path, channel_fd: int) -> None:
    seconds = json.loads((job_dir / "probe.json").read_text())["sleep"]
    for _ in range(int(seconds * 100)):
        time.sleep(0.01)
    with os.fdopen(channel_fd, "w") as channel:
        channel.write(json.dumps({"kind": "report", "body": {"slept": seconds}}) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
