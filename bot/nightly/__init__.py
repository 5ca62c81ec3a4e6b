"""The nightly regression benchmark: measure shipped kernels and configured targets, judge, record,
publish."""
