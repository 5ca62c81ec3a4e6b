"""The fast path's reading of a broadcast input (``kp::row_map``, ``kp::row_in_run`` in
``agents.offline.cxx_common``), compiled as it is in every candidate and checked on its own:
wherever it says an input can be read as rows x cols, the element it reads at (row, col) is
the broadcast input's, on every layout; and the conv epilogue's operands are read so."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from agents.offline.cxx_helpers import HOST_HELPERS
from agents.offline.layout import read_layout
from harness.builds.cache import CachedLoader, default_cache_dir

SOURCE = (
    "#include <ATen/ATen.h>\n#include <vector>\n#define KP_INLINE inline\n#define KP_HD\n"
    + HOST_HELPERS
    + """
std::vector<int64_t> row_map(const at::Tensor& t, std::vector<int64_t> out, int64_t m,
                             bool columns) {
  const kp::RowMap map = kp::row_map(t, out, m, columns);
  return {map.ok ? 1 : 0, map.stride, map.div, map.mod};
}
int64_t row_in_run(int64_t r, int64_t div, int64_t mod) { return kp::row_in_run(r, div, mod); }
"""
)


@pytest.fixture(scope="module")
def rows():
    load = CachedLoader(default_cache_dir(), "cpu", "float32")
    return load(name="kp_rowmap_test", cpp_sources=[SOURCE], functions=["row_map", "row_in_run"])


def read(rows, t: torch.Tensor, out: tuple[int, ...], m: int, columns: bool):
    """What the fast path reads of ``t`` as out[:m] x out[m:] (None where it says it cannot)."""
    ok, stride, div, mod = rows.row_map(t, list(out), m, columns)
    if not ok:
        return None
    count, cols = 1, 1  # rows, columns
    for d, size in enumerate(out):
        count, cols = (count * size, cols) if d < m else (count, cols * size)
    storage = torch.tensor([], dtype=t.dtype).set_(t.untyped_storage())
    row = torch.arange(count)
    offsets = t.storage_offset() + (row // div % mod) * stride
    offsets = offsets[:, None] + (torch.arange(cols)[None, :] if columns else 0)
    return storage[offsets.expand(len(row), cols)]


def test_the_conv_epilogues_operands_take_the_fast_path(rows):
    n, c, h, w = 4, 16, 6, 5
    out = (n, c, h, w)
    bias = torch.randn(c, 1, 1)
    assert rows.row_map(bias, list(out), 2, False) == [1, 1, 1, c]  # one value per n*c row
    assert rows.row_map(bias, list(out), 3, False) == [1, 1, h, c]  # ... per n*c*h row
    residual = torch.randn(c, h, w)
    assert rows.row_map(residual, list(out), 2, True)[0] == 1
    for t, m, columns in ((bias, 2, False), (bias, 3, False), (residual, 2, True)):
        expected = t.expand(out).reshape(-1, w * h if m == 2 else w)
        got = read(rows, t, out, m, columns)
        assert got is not None and torch.equal(got.expand_as(expected), expected)
    assert read_layout(tuple(bias.shape), out) == (False, frozenset({2, 3}))
    assert read_layout(tuple(residual.shape), out) == (True, frozenset({1, 2, 3}))


def test_row_in_run_is_the_division_and_the_modulus(rows):
    cases = [(0, 1, 1), (5, 1, 3), (2**31 + 5, 1, 7), (2**40, 3, 2**33), (17, 4, 2)]
    for r, div, mod in cases + [
        (r, d, m) for r, d, m in itertools.product(range(40), (1, 2, 5), (1, 3, 7))
    ]:
        assert rows.row_in_run(r, div, mod) == r // div % mod, (r, div, mod)


def _layouts(t: torch.Tensor) -> list[torch.Tensor]:
    """The input as it is, permuted, sliced and expanded where it can be."""
    found = [t, t.clone(memory_format=torch.contiguous_format)]
    if t.dim() >= 2:
        found.append(t.transpose(0, -1).contiguous().transpose(0, -1))
    bigger = torch.randn(*[2 * s for s in t.shape])
    found.append(bigger[tuple(slice(None, None, 2) for _ in t.shape)])
    return found


def test_wherever_it_says_yes_it_reads_the_broadcast_input(rows):
    draw = random.Random(28)
    said_yes = 0
    for _ in range(150):
        out = tuple(draw.choice((1, 2, 3, 4)) for _ in range(draw.randint(1, 4)))
        rank = draw.randint(1, len(out))
        shape = tuple(draw.choice((1, size)) for size in out[len(out) - rank :])
        for t in _layouts(torch.randn(shape)):
            expanded = t.expand(out)
            for m, columns in itertools.product(range(len(out) + 1), (True, False)):
                got = read(rows, t, out, m, columns)
                if got is None:
                    continue
                said_yes += 1
                cols = 1
                for size in out[m:]:
                    cols *= size
                expected = expanded.reshape(-1, cols) if cols else expanded.reshape(0, 0)
                if not columns:  # one value per row: every column holds it
                    expected = expected[:, :1]
                    got = got[:, :1]
                assert torch.equal(got, expected), (shape, t.stride(), out, m, columns)
    assert said_yes > 500  # the table exercises the fast path, not only its refusals
