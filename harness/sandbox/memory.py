"""Running out of memory, as the user's code meets it in a worker: whether an exception is
that, how much was asked for, and which limit it hit (the worker's address-space limit, the
device's memory, the machine's).

A cpu worker runs under ``eval.memory_limit_gb`` (an address-space limit: an allocation past
it fails at once, nothing is touched); there torch raises a RuntimeError, not its
``OutOfMemoryError``, and Python and numpy raise ``MemoryError``.
"""

from __future__ import annotations

import os
import re
import resource

import torch

# torch's host allocator, and its CUDA one: how much one allocation asked for.
_CPU_ASKED = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")
_CUDA_ASKED = re.compile(r"Tried to allocate (\d+(?:\.\d+)? [KMGT]?i?B)")


def is_out_of_memory(err: BaseException) -> bool:
    """Did an allocation fail (host or device), rather than the code?"""
    if isinstance(err, MemoryError | torch.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and "can't allocate memory" in str(err)


def asked_for(err: BaseException) -> str:
    """How much the failed allocation asked for (``40.0 GiB``), or "" where it does not say."""
    text = str(err)
    cpu = _CPU_ASKED.search(text)
    if cpu:
        return f"{int(cpu.group(1)) / 2**30:.1f} GiB"
    cuda = _CUDA_ASKED.search(text)
    return cuda.group(1) if cuda else ""


def limit_hit(err: BaseException) -> str:
    """The limit this process ran into, said as the user can change it."""
    if isinstance(err, torch.OutOfMemoryError) and torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        return f"the GPU has {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB"
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        return f"the worker's memory limit is {soft / 2**30:g} GiB (eval.memory_limit_gb)"
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"this machine has {total / 2**30:.1f} GiB"


def ran_out(err: BaseException) -> str:
    """``ran out of memory allocating 64.0 GiB; <the limit hit>``: what a user's function did."""
    size = asked_for(err)
    return "ran out of memory" + (f" allocating {size}" if size else "") + f"; {limit_hit(err)}"
