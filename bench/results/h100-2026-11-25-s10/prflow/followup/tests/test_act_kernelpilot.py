"""kernelpilot: ActivationKernelpilot (models/act_kernelpilot.py) against Activation (models/act.py)."""

import importlib.util
import pathlib
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEVICE = 'cuda'
DTYPE = torch.float32
RTOL, ATOL = 0.0001, 0.0001  # atol is relative to the output's RMS


def _load(relative):
    path = ROOT / relative
    for folder in (str(ROOT), str(path.parent)):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location("kp_" + path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _place(value):
    if isinstance(value, torch.Tensor):
        return value.to(DEVICE, DTYPE) if value.is_floating_point() else value.to(DEVICE)
    return value


def _outputs(value):
    return list(value) if isinstance(value, (tuple, list)) else [value]


@pytest.mark.skipif(
    DEVICE == "cuda" and not torch.cuda.is_available(), reason="verified on a CUDA GPU"
)
def test_activation_kernelpilot_matches_the_original():
    original = _load('models/act.py')
    kernel = _load('models/act_kernelpilot.py')
    init_args, init_kwargs = [1024], {}
    reference = original.Activation(*init_args, **init_kwargs).to(DEVICE, DTYPE).eval()
    candidate = kernel.ActivationKernelpilot(*init_args, **init_kwargs).to(DEVICE, DTYPE).eval()
    candidate.load_state_dict(reference.state_dict(), strict=True)
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        inputs = list(original.make_inputs())
        inputs = [_place(value) for value in inputs]
        with torch.no_grad():
            expected = _outputs(reference(*inputs))
            actual = _outputs(candidate(*inputs))
        assert len(actual) == len(expected)
        for got, want in zip(actual, expected):
            scale = want.double().pow(2).mean().sqrt().item() if want.numel() else 1.0
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL * max(scale, 1e-30))
