"""A test hook, never part of the product: with this folder first on PYTHONPATH, a bug is put
into the harness's own code in every worker, as a slip in an edit would (a function called
with the wrong arguments: the TypeError is raised in the harness's frame).

KP_TEST_HARNESS_BUG=reference: in the reference worker's report (its copy-bandwidth
measurement); =checks: in the checks' worker, staging a case's inputs (their guard value).
"""

import os

if os.environ.get("KP_TEST_HARNESS_BUG") == "reference":
    import harness.devices as devices

    devices.copy_bandwidth_gbs = devices.resolve_device  # takes one argument, not two
elif os.environ.get("KP_TEST_HARNESS_BUG") == "checks":
    import harness.workers.guards as guards

    guards.guard_fill = guards.poison_memory  # takes two arguments, not one
