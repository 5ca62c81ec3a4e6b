"""A test hook, never part of the product: with KP_TEST_HARNESS_OOM=1 and this folder first on
PYTHONPATH, a worker's reading back of a candidate's outputs (``guards.fingerprint``, the
harness's own work after the candidate's call) raises torch.OutOfMemoryError, as it did on an
H100 with 8 GiB outputs (tests/test_memory.py)."""

import os

if os.environ.get("KP_TEST_HARNESS_OOM"):
    import torch

    import harness.workers.guards as guards

    def _out_of_memory(outputs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB (test hook)")

    guards.fingerprint = _out_of_memory
