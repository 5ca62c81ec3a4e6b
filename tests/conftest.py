"""Shared fixtures: fast evaluation settings and the paths of test inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.config import EvalConfig

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fast_config(**overrides) -> EvalConfig:
    """Full verification, short timing, no torch.compile baseline (it takes minutes on cpu)."""
    settings = {"compile_baseline": False, "time_budget_s": 0.2, "min_reps": 5, "max_reps": 50}
    settings.update(overrides)
    return EvalConfig(**settings)


@pytest.fixture
def fast() -> EvalConfig:
    return fast_config()


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
