"""The offline proposer's worker: ``python -m agents.offline.worker JOB_DIR FD``.

Tracing a module imports and runs it: that is the pull request's code, so it runs here, in a
sandboxed worker (``harness.sandbox.run``), never in kernelpilot's own process. The worker sends
the ``Proposal`` back on its channel as data, or a ``user_error`` message when the module's
own code is at fault.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from harness.errors import UserError
from harness.records import Problem
from harness.sandbox.jobs import UserErrorReport


def main(job_dir: Path, channel_fd: int) -> None:
    channel = os.fdopen(channel_fd, "w")  # opened before any of the module's code runs
    problem = Problem.model_validate_json((job_dir / "job.json").read_text())
    from agents.offline import propose_here

    try:
        kind, body = "report", propose_here(problem).model_dump(mode="json")
    except UserError as err:
        report = UserErrorReport(what=err.what, where=err.where, fix=err.fix)
        kind, body = "user_error", report.model_dump()
    channel.write(json.dumps({"kind": kind, "body": body}) + "\n")
    channel.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if kind == "report" else 3)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
