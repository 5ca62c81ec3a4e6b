"""A problem and its cases: the reference module found and loaded, the cases drawn from seeds,
which cases, and whether the spec is strong enough."""
