"""The offline candidate's guards, as written: what a trace fixed (a split size read from an
attribute, a dropout left out in eval, a config's fields, the inputs' ranks and dtypes) is
checked on every call, and the reference's own forward runs where a check does not hold. The
candidates built and run, and verified by the harness, are tests/test_offline_guards_run.py.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import torch
from torch.fx import Proxy

from agents.offline import propose_here
from agents.offline.cxx_common import COMPUTED_IN_FLOAT
from agents.offline.guards import FLOAT_SIZES
from harness.problem.cases import build_reference
from harness.problem.load import problem_from_target
from harness.problem.user_code import reference_class
from harness.records import Problem
from harness.static.python import check_python
from tests.conftest import write_module

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
# q, k, v = x.split(self.n_embd, dim=2) of a GPT, reduced to a gate: the split size is an
# attribute, and the unpacking fixes the count.
SPLIT = """
class Model(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.width = width
        self.scale = nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        gate, up = x.split(self.width, dim=-1)
        return torch.sigmoid(gate) * up * self.scale


def get_inputs():
    return [torch.randn(8, 16, 64)]


def get_init_inputs():
    return [32]
"""
# Traced in eval: both dropouts are identities there, and the graph has none.
DROPOUT = """
class Model(nn.Module):
    def __init__(self, dim, p=0.1):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.drop = nn.Dropout(p)
        self.p = p

    def forward(self, x):
        h = self.drop(F.gelu(self.proj(x)))
        return F.dropout(h * 2.0, self.p, self.training) + x


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return [32]
"""


def problem(directory: Path, name: str, body: str) -> Problem:
    path = write_module(directory, name, HEADER + textwrap.dedent(body))
    return problem_from_target(str(path), "cpu", None)


def source_of(target: Problem) -> str:
    proposal = propose_here(target)
    assert proposal.candidate is not None, proposal.reason
    return proposal.candidate.source


def guard_lines(source: str) -> list[str]:
    forward = source[source.index("    def forward(") :]
    return [line.strip().removeprefix("and ") for line in forward.splitlines()]


# A block as whisper writes one: forward reads its input's shape as Python values (unpacked,
# star-iterated into a view, compared), branches on a mask and a flag left at their defaults,
# casts through a LayerNorm subclass, and reads a flag set by a guarded import.
SHAPES = """
try:
    from torch.nn.functional import scaled_dot_product_attention
    FAST = True
except ImportError:
    FAST = False


class LayerNorm(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.float()).type(x.dtype)


class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm = LayerNorm(dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, mask=None, scale=True):
        n_batch, n_ctx, n_state = x.shape
        h = self.proj(self.norm(x))
        h = h.view(*h.shape[:2], self.heads, -1)
        if mask is not None:
            h = h + mask
        if scale and n_ctx > 1 and FAST:
            h = h * (n_state // self.heads) ** -0.5
        return torch.sigmoid(h).flatten(2) * x


def get_inputs():
    return [torch.randn(8, 16, 32)]


def get_init_inputs():
    return [32, 4]
"""

# A rank and a length that follow from sizes: x.squeeze(1) keeps a dimension of 2, and len(y)
# is the size transposed to the front. Traced at [4, 1, 6, 8]: the rank is 3, the length 6.
RANKS = """
class Model(nn.Module):
    def forward(self, x):
        y = torch.sigmoid(x.squeeze(1).transpose(0, 1))
        if y.dim() == 3:
            return y * len(y)
        return torch.relu(y) * 3.0


def get_inputs():
    return [torch.randn(4, 1, 6, 8)]


def get_init_inputs():
    return []
"""

# --- what is guarded (no builds) ---------------------------------------------------------------


def test_a_gpt_attention_guards_its_split_size_heads_and_mode(tmp_path: Path) -> None:
    """The values nanoGPT's attention reads (n_embd as the split size, n_head in the views,
    training for dropout_p, fields of its config), and the unpacked counts."""
    source = source_of(
        problem(
            tmp_path,
            "attention",
            """
            from dataclasses import dataclass

            @dataclass
            class Config:
                n_embd: int = 32
                n_head: int = 4
                dropout: float = 0.1
                scale: float = 0.5

            class Model(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.config = config
                    self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
                    self.resid_dropout = nn.Dropout(config.dropout)
                    self.n_head, self.n_embd = config.n_head, config.n_embd

                def forward(self, x):
                    B, T, C = x.size()
                    q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
                    q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                    k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                    v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                    p = self.config.dropout if self.training else 0
                    y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
                    y = y.transpose(1, 2).contiguous().view(B, T, C)
                    return self.resid_dropout(F.gelu(y) * self.config.scale)

            def get_inputs():
                return [torch.randn(2, 8, 32)]

            def get_init_inputs():
                return [Config()]
            """,
        )
    )
    lines = guard_lines(source)
    for expected in [
        "x.dim() == 3",
        "self.n_embd == 32",
        "self.n_head == 4",
        "self.training == False",
        "self.config.scale == 0.5",
        "type(self.resid_dropout) is nn.Dropout",
        "self.resid_dropout.training == False",
        "if not (len(split) == 3):",
    ]:
        assert expected in lines, (expected, lines)
    assert "self.config.dropout == 0.1" not in lines  # not read in eval: not fixed
    assert "if not (len(size) == 3):" not in lines  # x's rank is checked on entry already
    assert check_python(source, "Model", "float32") == []


def test_a_forward_using_its_shapes_knows_them_and_guards_what_it_took(tmp_path: Path) -> None:
    """torch.fx cannot trace SHAPES with proxies alone (it iterates a shape, branches on a
    size). Traced knowing the inputs' shapes, the shapes stay values of the graph (it holds
    for another batch), and what Python took from them is checked where it is made: the
    length iterated, the branch taken; with the arguments left at their defaults and the
    attribute read, on entry."""
    source = source_of(problem(tmp_path, "shapes", SHAPES))
    lines = guard_lines(source)
    for expected in [
        "mask is None",
        "scale is True",
        "self.heads == 4",
        "type(self.norm) is LayerNorm",
        "if not (gt):",  # n_ctx > 1, as traced
        "if not (len(getitem_3) == 2):",  # h.shape[:2], iterated
    ]:
        assert expected in lines, (expected, lines)
    assert not any(".shape ==" in line for line in lines), lines
    assert "view(getitem_4, getitem_5, 4, -1)" in source  # the shape, as values
    assert "FAST = True" in source  # the guarded import's flag, as the reference file set it


def test_a_constant_the_file_sets_in_a_branch_is_copied_as_its_value(tmp_path: Path) -> None:
    """The original forward, copied into the candidate, reads a flag the file sets under an
    ``if``: it is written as the plain value it held when the reference ran. One that is not a
    plain value (a list) cannot be written, and there is no candidate."""
    body = """
        import sys

        if sys.version_info >= (3, 8):
            SCALE = 2.0
        else:
            SCALE = 1.0

        class Model(nn.Module):
            def forward(self, x):
                return torch.relu(x) * SCALE

        def get_inputs():
            return [torch.randn(4, 8)]

        def get_init_inputs():
            return []
        """
    source = source_of(problem(tmp_path, "branch", body))
    assert "\nSCALE = 2.0\n" in source
    listed = body.replace("SCALE = 2.0", "SCALE = [2.0]").replace("* SCALE", "* SCALE[0]")
    proposal = propose_here(problem(tmp_path, "listed", listed))
    assert proposal.candidate is None
    assert "the class needs 'SCALE'" in proposal.reason


def test_inputs_passed_by_keyword_are_traced_as_those_arguments(tmp_path: Path) -> None:
    """A captured call passed ``bias`` by name, after a parameter left at its default: the
    trace binds each input to its own parameter, as the harness calls the module."""
    target = problem(
        tmp_path,
        "keyword",
        """
        class Model(nn.Module):
            def forward(self, x, mask=None, bias=None):
                if mask is not None:
                    x = x * mask
                return torch.relu(x if bias is None else x + bias)

        def get_inputs():
            return [torch.randn(4, 8), torch.randn(8)]

        def get_init_inputs():
            return []
        """,
    ).model_copy(update={"input_keywords": ["bias"]})
    lines = guard_lines(source_of(target))
    assert "mask is None" in lines  # taken positionally, the bias would have been the mask
    assert "bias.dim() == 1" in lines and "x.dim() == 2" in lines


def test_numbers_read_from_another_package_are_written_as_their_values(tmp_path: Path) -> None:
    """A causal mask filled with ``-np.inf`` as whisper builds one (cmath here: no numpy
    needed): the candidate may import only torch and math, so the number is written."""
    source = source_of(
        problem(
            tmp_path,
            "numbers",
            """
            import cmath

            class Model(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    mask = torch.empty(n, n).fill_(-cmath.inf).triu_(1)
                    self.register_buffer("mask", mask, persistent=False)

                def forward(self, x):
                    return torch.relu(x + self.mask) * cmath.pi

            def get_inputs():
                return [torch.randn(4, 8, 8)]

            def get_init_inputs():
                return [8]
            """,
        )
    )
    assert "fill_(-math.inf)" in source and "* 3.141592653589793" in source
    assert "cmath." not in source and "import cmath" not in source


def test_what_the_file_bound_when_it_ran_is_what_the_candidate_binds(tmp_path: Path) -> None:
    """A flag set in a ``try`` whose import failed holds the handler's value; an infinity is
    written as math.inf; an import in a ``try`` that failed, with the handler binding another
    function, is not copied as the try body wrote it."""
    body = """
        try:
            FAST = True
            from torch.nn.functional import no_such_function
        except ImportError:
            FAST = False

        LIMIT = float("inf")

        class Model(nn.Module):
            def forward(self, x):
                y = torch.clamp(torch.relu(x), max=LIMIT)
                return y * 2.0 if FAST else y * 3.0

        def get_inputs():
            return [torch.randn(4, 8)]

        def get_init_inputs():
            return []
        """
    source = source_of(problem(tmp_path, "bound", body))
    assert "\nFAST = False\n" in source and "\nLIMIT = math.inf\n" in source
    act = body.replace(
        "from torch.nn.functional import no_such_function",
        "from torch.nn.functional import no_such_function as act",
    ).replace(
        "FAST = False", "FAST = False\n            from torch.nn.functional import relu as act"
    )
    act = act.replace("torch.relu(x)", "act(x)")
    proposal = propose_here(problem(tmp_path, "rebound", act))
    assert proposal.candidate is None
    assert "'act' was bound otherwise when the reference file ran" in proposal.reason


def test_parameters_named_alike_keep_their_names(tmp_path: Path) -> None:
    """``mask`` is left at None and fixed; ``mask_value`` is a parameter of its own."""
    source = source_of(
        problem(
            tmp_path,
            "alike",
            """
            class Model(nn.Module):
                def forward(self, x, mask=None, mask_value=0.5):
                    if mask is not None:
                        x = x.masked_fill(mask, mask_value)
                    return torch.relu(x) * mask_value

            def get_inputs():
                return [torch.randn(4, 8)]

            def get_init_inputs():
                return []
            """,
        )
    )
    assert "def forward(self, x, mask=None, mask_value=0.5):" in source


def test_a_mask_left_at_none_is_traced_as_none_and_the_rest_stays_symbolic(tmp_path: Path):
    """A proxy is never None: traced with one, ``if mask is not None`` took the masked branch.
    The argument left out is traced as the None it is, and guarded; the graph, symbolic, holds
    for any shape (no shape guard)."""
    source = source_of(
        problem(
            tmp_path,
            "masked",
            """
            class Model(nn.Module):
                def forward(self, x, mask=None):
                    if mask is not None:
                        x = x.masked_fill(mask, 0.0)
                    return torch.relu(x) * 2.0

            def get_inputs():
                return [torch.randn(4, 8)]

            def get_init_inputs():
                return []
            """,
        )
    )
    lines = guard_lines(source)
    assert "mask is None" in lines
    assert not any(".shape ==" in line for line in lines), lines
    assert "masked_fill" not in source[source.index("    def forward(") :]


def test_every_field_of_a_namespace_config_counts_as_read(tmp_path: Path) -> None:
    """A SimpleNamespace's class cannot be swapped to watch its reads: all its fields are
    guarded instead."""
    source = source_of(
        problem(
            tmp_path,
            "namespace",
            """
            import types

            class Model(nn.Module):
                def __init__(self, cfg):
                    super().__init__()
                    self.cfg = cfg

                def forward(self, x):
                    return torch.tanh(x) * self.cfg.alpha

            def get_inputs():
                return [torch.randn(4, 8)]

            def get_init_inputs():
                return [types.SimpleNamespace(alpha=0.5, unused=3, table={"a": (1, 2)})]
            """,
        )
    )
    lines = guard_lines(source)
    assert "self.cfg.alpha == 0.5" in lines and "self.cfg.unused == 3" in lines
    assert "self.cfg.table == {'a': (1, 2)}" in lines


def test_the_float_sizes_name_exactly_the_dtypes_the_kernels_compute() -> None:
    floating = {
        value
        for value in vars(torch).values()
        if isinstance(value, torch.dtype) and value.is_floating_point
    }
    assert {dtype for dtype in floating if dtype.itemsize in FLOAT_SIZES} == set(COMPUTED_IN_FLOAT)


def test_tracing_leaves_the_module_and_torch_fx_as_they_were(tmp_path: Path) -> None:
    target = problem(tmp_path, "split", SPLIT)
    iterate = Proxy.__iter__
    source_of(target)
    assert Proxy.__iter__ is iterate
    reference = build_reference(target, seed=0)
    assert type(reference) is reference_class(target)


def test_a_value_no_guard_can_compare_means_no_candidate(tmp_path: Path) -> None:
    target = problem(
        tmp_path,
        "opaque",
        """
        import enum

        class Mode(enum.Enum):
            FAST = 1

        class Model(nn.Module):
            def __init__(self, mode):
                super().__init__()
                self.mode = mode

            def forward(self, x):
                return torch.relu(x) * (2.0 if self.mode is Mode.FAST else 3.0)

        def get_inputs():
            return [torch.randn(4, 8)]

        def get_init_inputs():
            return [Mode.FAST]
        """,
    )
    proposal = propose_here(target)
    assert proposal.candidate is None
    assert "self.mode, a Mode, which a guard cannot compare" in proposal.reason


def test_no_guard_after_a_write_that_outlives_the_call(tmp_path: Path) -> None:
    """Falling back after a parameter was written in place would write it twice."""
    target = problem(
        tmp_path,
        "counter",
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.decay = nn.Parameter(torch.ones(()))

            def forward(self, x):
                self.decay.mul_(0.5)
                a, b = (x * 2.0).chunk(2, dim=-1)
                return torch.sigmoid(a) * b

        def get_inputs():
            return [torch.randn(4, 8)]

        def get_init_inputs():
            return []
        """,
    )
    proposal = propose_here(target)
    assert proposal.candidate is None
    assert "writes in place into memory that outlives the call" in proposal.reason


def test_types_lengths_functions_and_leaf_attributes_are_guarded(tmp_path: Path) -> None:
    """A loop over a ModuleList is unrolled (its length is fixed), its items' forward inlined
    (their type is fixed), a function held in an attribute inlined (which one is fixed), and a
    torch.nn module's attribute read by forward (``out_features``) kept as a constant."""
    source = source_of(
        problem(
            tmp_path,
            "stack",
            """
            def scaled_gelu(x):
                return F.gelu(x) * 1.5

            class Layer(nn.Module):
                def __init__(self, dim, act):
                    super().__init__()
                    self.proj = nn.Linear(dim, dim)
                    self.act = act

                def forward(self, x):
                    return self.act(self.proj(x)).view(-1, self.proj.out_features)

            class Model(nn.Module):
                def __init__(self, dim, depth):
                    super().__init__()
                    acts = [scaled_gelu, F.silu]
                    self.layers = nn.ModuleList([Layer(dim, acts[i % 2]) for i in range(depth)])

                def forward(self, x):
                    for layer in self.layers:
                        x = x + layer(x)
                    return x

            def get_inputs():
                return [torch.randn(16, 8)]

            def get_init_inputs():
                return [8, 2]
            """,
        )
    )
    lines = guard_lines(source)
    for expected in [
        "len(self.layers) == 2",
        "type(self.layers[0]) is Layer",
        "type(self.layers[1]) is Layer",
        "self.layers[0].act is scaled_gelu",
        "self.layers[1].act is F.silu",
        "self.layers[0].proj.out_features == 8",
    ]:
        assert expected in lines, (expected, lines)
    assert lines.index("len(self.layers) == 2") < lines.index("type(self.layers[0]) is Layer")
    assert "\ndef scaled_gelu(x):" in source  # the copy the guard compares with
