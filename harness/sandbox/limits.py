"""What a worker process is held to from its first instruction: an address-space limit, and
(where no sandbox gives it one) a network namespace of its own; and how a worker tells whether
it has any network."""

from __future__ import annotations

import ctypes
import os
import resource

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000


def limits(memory_limit_gb: float | None, isolate_network: bool):
    """Runs in the child before exec: address-space limit and a private network namespace."""

    def apply() -> None:
        if memory_limit_gb is not None:
            limit = int(memory_limit_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        if isolate_network:
            _unshare_network()

    return apply


def _unshare_network() -> None:
    """A new, empty network namespace: the candidate cannot reach the network.

    Needs root or unprivileged user namespaces; where neither is allowed the worker still
    runs, and ``network_isolated()`` inside it reports False (shown in the report).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) == 0:
        return
    libc.unshare(CLONE_NEWUSER | CLONE_NEWNET)


def network_isolated() -> bool:
    """True when this process has no network interface other than loopback."""
    try:
        names = os.listdir("/sys/class/net")
    except OSError:
        return False
    with open("/proc/net/dev") as handle:
        lines = handle.read().splitlines()[2:]
    interfaces = {line.split(":")[0].strip() for line in lines}
    return bool(names) and interfaces <= {"lo"}
