"""The environment a worker starts with: the parent's, minus every secret and the runner's own
variables, with this interpreter's tools first on ``PATH`` and kernelpilot importable; an
unsandboxed worker also gets a temporary folder of its own."""

from __future__ import annotations

import getpass
import os
import re
import sys
import tempfile
from pathlib import Path

from harness.sandbox.redact import SECRET_NAME

# Set by the parent for a candidate's timing worker: its target's compiled baseline, read-only
# (harness.judge.baseline.seed_compiled_baseline), copied by the worker into its own cache.
INDUCTOR_SEED = "KERNELPILOT_INDUCTOR_SEED"

# Whole families a worker has no use for: the Actions runner's (its file-command paths, its
# runtime URLs), the action's inputs, the LLM endpoint's settings.
RUNNER_PREFIXES = ("GITHUB_", "ACTIONS_", "RUNNER_", "INPUT_", "OPENAI_")


def clean_environment() -> dict[str, str]:
    """The environment a worker sees: ours, minus anything that looks like a secret."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not SECRET_NAME.search(name) and not name.upper().startswith(RUNNER_PREFIXES)
    }
    env["PYTHONUNBUFFERED"] = "1"
    env["PATH"] = tools_first(env.get("PATH", ""))
    project_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [project_root, env.get("PYTHONPATH", "")] if p)
    return env


def private_temporary_folder(job_dir: Path) -> dict[str, str]:
    """An unsandboxed worker's temporary folder is its own, in its job folder, as a sandboxed
    one's private ``/tmp`` is: whatever it leaves there (Python's first ``tempfile`` call writes a
    probe file, and a worker killed at that moment leaves it) goes with the run's scratch. The
    compile cache stays where ``torch`` puts it by default, shared across workers and runs."""
    folder = job_dir / "tmp"
    folder.mkdir(exist_ok=True)
    return {"TMPDIR": str(folder), "TORCHINDUCTOR_CACHE_DIR": _inductor_cache()}


def _inductor_cache() -> str:
    """The folder ``torch.compile`` caches in, as ``torch._inductor.runtime.cache_dir_utils``
    finds it (importing that module costs a second)."""
    if chosen := os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return os.path.abspath(chosen)
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    user = re.sub(r'[\\/:*?"<>|]', "_", user)
    return os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")


def tools_first(path: str) -> str:
    """``path`` (a PATH value) with this interpreter's bin folder first: its tools (ninja)
    build every candidate, in a worker or not. Two ninja versions record a build command under
    other hashes, so a build cache used by both would be rebuilt at every switch."""
    tools = str(Path(sys.executable).parent)
    if path.split(os.pathsep)[0] == tools:
        return path
    return os.pathsep.join([tools, path])
