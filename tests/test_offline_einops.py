"""Modules written with einops, as vision model libraries write their attention (vit-pytorch's
``rearrange(t, 'b n (h d) -> b h n d', h=heads)`` over ``qkv.chunk(3, dim=-1)``): the offline
proposer traces through einops into the reshapes and permutes it makes, the candidate keeps the
einops imports its copied forward needs (the static gate lets through einops' functions by
name, nothing else of it), and its kernels compute what the reference does, at the traced
shape and at another.
"""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch

import agents.offline.hinted as hinted
from agents.offline import propose_here
from harness.static.python import check_python
from tests.test_offline_guards import guard_lines, problem, source_of
from tests.test_offline_guards_run import Built, run
from tests.test_offline_proposer import build_in_parallel

# vit-pytorch's Attention and FeedForward, reduced: bases named through ``from torch.nn import
# Module``, heads split and merged by einops, a tanh-GELU between the two linears, and the
# attention's output scaled per channel before its residual add (vit-pytorch's CaiT), with a
# tanh between them: the chain the proposer fuses (the other pointwise ops stand alone, as eager
# runs them; without the tanh the chain saves 4.3% of the block's memory traffic, under what
# agents.offline.traffic asks of a kernel).
EINOPS = """
from torch.nn import Module
from einops import rearrange


class FeedForward(Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(approximate="tanh"),
                                 nn.Linear(hidden, dim))

    def forward(self, x):
        return self.net(x)


class Model(Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.norm = nn.LayerNorm(dim)
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.ff = FeedForward(dim, dim * 2)
        self.layer_scale = nn.Parameter(torch.full((dim,), 0.1))  # CaiT's LayerScale

    def forward(self, x):
        qkv = self.to_qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = map(lambda t: rearrange(t, "b n (h d) -> b h n d", h=self.heads), qkv)
        attn = (torch.matmul(q, k.transpose(-1, -2)) * self.scale).softmax(dim=-1)
        out = rearrange(torch.matmul(attn, v), "b h n d -> b n (h d)")
        x = torch.tanh(self.to_out(out) * self.layer_scale) + x
        return self.ff(x) + x


def get_inputs():
    return [torch.randn(4, 16, 32)]


def get_init_inputs():
    return [32, 4]
"""

# vit-pytorch's ViT, reduced: patches cut by einops' Rearrange layer inside an nn.Sequential (a
# layer the candidate calls as it is), a class token repeated over the batch by einops.
PATCHES = """
from einops import repeat
from einops.layers.torch import Rearrange


class Model(nn.Module):
    def __init__(self, dim=32, patch=4, channels=3, patches=16):
        super().__init__()
        self.to_patch_embedding = nn.Sequential(
            Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=patch, p2=patch),
            nn.LayerNorm(patch * patch * channels),
            nn.Linear(patch * patch * channels, dim),
        )
        self.cls_token = nn.Parameter(torch.randn(1, dim))
        self.pos_embedding = nn.Parameter(torch.randn(patches + 1, dim))

    def forward(self, img):
        x = self.to_patch_embedding(img)
        cls_tokens = repeat(self.cls_token, "... d -> b ... d", b=img.shape[0])
        x = torch.cat((cls_tokens, x), dim=1)
        x = x + self.pos_embedding[: x.shape[1]]
        return torch.nn.functional.gelu(x, approximate="tanh") * 2.0


def get_inputs():
    return [torch.randn(4, 3, 16, 16)]


def get_init_inputs():
    return [32, 4, 3, 16]
"""


def test_a_forward_written_with_einops_gets_a_candidate_the_gate_accepts(tmp_path) -> None:
    source = source_of(problem(tmp_path, "einops_block", EINOPS))
    assert check_python(source, "Model", "float32") == []
    assert "from einops import rearrange" in source  # the original forward's, where guards fail
    assert "class FeedForward(nn.Module):" in source  # the gate resolves bases through imports
    fused = source[source.index("    def forward(", source.index("class ModelNew")) :]
    # einops traced into what it does, the head count it was told a constant checked on entry
    assert "rearrange" not in fused and ".permute(" in fused and ".reshape(" in fused
    assert "self.heads == 4" in guard_lines(source)


def test_without_einops_seeing_the_trace_there_is_no_candidate(tmp_path, monkeypatch) -> None:
    """The trace's backend is what lets einops take a traced value: without it, einops refuses
    the proxy and the proposal says so."""
    monkeypatch.setattr(hinted, "_einops_sees_proxies", nullcontext)
    proposal = propose_here(problem(tmp_path, "einops_plain", EINOPS))
    assert proposal.candidate is None and "einops" in proposal.reason, proposal.reason


def test_an_einops_layer_is_called_as_the_reference_calls_it(tmp_path) -> None:
    source = source_of(problem(tmp_path, "einops_patches", PATCHES))
    assert check_python(source, "Model", "float32") == []
    assert "from einops.layers.torch import Rearrange" in source  # its constructor builds one
    fused = source[source.index("    def forward(", source.index("class ModelNew")) :]
    assert "self.to_patch_embedding[0](" in fused and "repeat(" not in fused


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Built]:
    directory = tmp_path_factory.mktemp("einops")
    worlds = {
        "heads": Built(directory, "einops_run", EINOPS),
        "patches": Built(directory, "einops_patches_run", PATCHES),
    }
    build_in_parallel([world.paths[0] for world in worlds.values()])
    for world in worlds.values():
        world.load()
    return worlds


@pytest.mark.slow
def test_its_kernels_compute_the_reference_at_the_traced_shape_and_another(built) -> None:
    world = built["heads"]
    reference, fused = world.pair(32, 4)
    for x in (torch.randn(4, 16, 32), torch.randn(2, 9, 32)):
        ours, calls = run(world, fused, x)
        assert calls >= 1, x.shape
        torch.testing.assert_close(ours, reference(x), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_another_head_count_runs_the_original_forward(built) -> None:
    """Built with 8 heads, the traced split (4 heads of 8) does not hold: the einops call of the
    original forward splits it, and the result is the reference's."""
    world = built["heads"]
    reference, fused = world.pair(32, 8)
    x = torch.randn(4, 16, 32)
    ours, calls = run(world, fused, x)
    assert calls == 0
    torch.testing.assert_close(ours, reference(x), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_patches_cut_by_an_einops_layer_run_the_kernels_at_another_batch(built) -> None:
    world = built["patches"]
    reference, fused = world.pair(32, 4, 3, 16)
    for img in (torch.randn(4, 3, 16, 16), torch.randn(1, 3, 16, 16)):
        ours, calls = run(world, fused, img)
        assert calls >= 1, img.shape
        torch.testing.assert_close(ours, reference(img), rtol=1e-4, atol=1e-5)
