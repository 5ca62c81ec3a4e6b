"""Kernel side of kernelpilot: problems, isolated workers, builds, verification and timing.

``harness`` imports neither ``agents`` nor ``bot``.
"""
