"""The other processes' load a timing window records (``harness.workers.machine_load``): a
process the worker starts is the worker's own, never "another process" that would make a window
look busy (and a cheat's verdict "not judged"); a process of another session is not the worker's.
"""

from __future__ import annotations

import json
import subprocess
import sys

# In a session of its own (as a worker is): the CPU seconds counted as its own while a child,
# started in this session or in a new one (setsid), burns 0.5 s of CPU and lives on (not reaped).
OWN = """
import json, os, subprocess, sys, time
sys.path.insert(0, sys.argv[2])
from harness.workers.machine_load import _TICKS, _own_seconds
burn = "import time\\nwhile time.process_time() < 0.5: pass\\ntime.sleep(60)\\n"
before = _own_seconds()
child = subprocess.Popen([sys.executable, "-c", burn], start_new_session=sys.argv[1] == "other")
def burnt():
    fields = open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS
while burnt() < 0.45:
    time.sleep(0.05)
print(json.dumps(_own_seconds() - before))
child.kill()
"""


def _own(where: str) -> float:
    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", OWN, where, str(ROOT)], capture_output=True,
                          text=True, check=True, start_new_session=True)  # fmt: skip
    return json.loads(done.stdout)


def test_a_process_the_worker_starts_is_its_own_load():
    # The child is known to have burnt 0.45 s (45 ticks); seconds are ticks over SC_CLK_TCK, a
    # difference of two such floats may fall a rounding below 0.45 (0.44999999999999996).
    assert _own("own") >= 0.445  # the child's 0.5 s, while it runs
    assert _own("other") < 0.3  # another session's: the parent's own work only
