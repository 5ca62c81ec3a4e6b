"""What code in a worker's sandbox can reach: run as ``python -m tests.sandbox.probe JOB_DIR FD``
by ``harness.sandbox.run.run_worker`` in place of the harness's worker, as hostile pull-request code
would run there. ``job_dir/probe.json`` names what to try; the findings go back on the channel
as one ``report`` message. Every attempt is made for real; nothing here asks the harness."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def _writable(folder: str) -> bool:
    try:
        probe = Path(folder) / f".kp-probe-{os.getpid()}"
        probe.write_text("x")
        probe.unlink()
        return True
    except OSError:
        return False


def _writable_mounts() -> list[str]:
    """Every mount point of this sandbox that takes a write."""
    mountinfo = _read("/proc/self/mountinfo") or ""
    points = sorted({line.split()[4] for line in mountinfo.splitlines() if len(line.split()) > 4})
    return [point for point in points if point not in ("/proc", "/dev") and _writable(point)]


def _connects(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def main(job_dir: Path, channel_fd: int) -> None:
    channel = os.fdopen(channel_fd, "w")
    plan = json.loads((job_dir / "probe.json").read_text())
    plan.setdefault("parent_pid", os.getppid())
    plan.setdefault("secret_file", "/nonexistent")
    plan.setdefault("home", "/nonexistent")
    plan.setdefault("checkout", str(job_dir))
    plan.setdefault("port", 9)
    pids = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
    findings = {
        "environ": dict(os.environ),
        "parent_environ": _read(f"/proc/{plan['parent_pid']}/environ"),
        "visible_pids": pids,
        "secret_file": _read(plan["secret_file"]),
        "home_listing": sorted(os.listdir(plan["home"])) if os.path.isdir(plan["home"]) else None,
        "checkout_writable": _writable(plan["checkout"]),
        "job_dir_writable": _writable(str(job_dir)),
        "network": _connects(plan["port"]),
        "limits": _read("/proc/self/limits"),
        "writable_mounts": _writable_mounts(),
    }
    if plan.get("leave_behind"):
        # A process that tries to outlive the worker and write after it ended.
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import time, pathlib, sys; time.sleep(3); "
                "pathlib.Path(sys.argv[1]).write_text('outlived')",
                plan["leave_behind"],
            ],
            start_new_session=True,
        )
    channel.write(json.dumps({"kind": "report", "body": findings}) + "\n")
    channel.flush()
    os._exit(0)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
