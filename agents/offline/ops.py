"""Recognise the pointwise operations of a torch.fx graph and normalise their many spellings.

``F.relu(x)``, ``torch.relu(x)``, ``x.relu()``, ``x.relu_()`` and ``nn.ReLU()`` all become one
``PointwiseOp(kind="relu", operands=(x,))`` (the module spellings:
``agents.offline.module_ops``); ``F.hardtanh``, ``nn.ReLU6`` and ``x.clamp_min`` all
become ``clamp``. Reductions over the last dimension are recognised too (kinds in ``ROW_KINDS``):
softmax and log-softmax (operands ``(input, dim)``), which read a whole row per element, and a
row's sum, mean and 2-norm kept as a dimension of 1 (``SUM_KINDS``, operands ``(input, dim,
keepdim)``, the norm's ``p`` last), one value a row that the ops after it broadcast. A row kernel
computes them (``agents.offline.rows``). What is not recognised here stays a PyTorch call in the
candidate.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

import torch
import torch.nn.functional as F
from torch.fx import Node

Operand = Node | float | int | bool | None

UNARY_KINDS = (
    "neg",
    "relu",
    "sigmoid",
    "tanh",
    "exp",
    "log",
    "abs",
    "sqrt",
    "rsqrt",
    "square",
    "reciprocal",
    "erf",
    "sin",
    "cos",
    "log1p",
    "expm1",
)
COMPARISON_KINDS = ("gt", "lt", "ge", "le", "eq", "ne")
BINARY_KINDS = ("mul", "div", "pow", "minimum", "maximum", *COMPARISON_KINDS)
SOFTMAX_KINDS = ("softmax", "log_softmax")
SUM_KINDS = ("sum", "mean", "norm")
ROW_KINDS = (*SOFTMAX_KINDS, *SUM_KINDS)


@dataclass(frozen=True)
class PointwiseOp:
    """One pointwise operation: a canonical kind and its operands in the kind's order."""

    kind: str
    operands: tuple[Operand, ...]
    inplace: bool = False


@dataclass(frozen=True)
class _Form:
    """One spelling of an op: its kind, positional parameters and defaults.

    A parameter written ``"min:min_val"`` is the operand ``min`` passed as keyword ``min_val``.
    Defaults may name operands that are not parameters: ``relu6`` is ``clamp`` with fixed bounds.
    """

    kind: str
    params: tuple[str, ...]
    defaults: Mapping[str, object] = field(default_factory=dict)
    inplace: bool = False


# Canonical operand order of every kind with more than one operand.
_OPERANDS = {
    "add": ("input", "other", "alpha"),
    "sub": ("input", "other", "alpha"),
    "rsub": ("input", "other", "alpha"),
    "clamp": ("input", "min", "max"),
    "leaky_relu": ("input", "negative_slope"),
    "softplus": ("input", "beta", "threshold"),
    "where": ("condition", "input", "other"),
    "gelu": ("input", "approximate"),
    **{kind: ("input", "other") for kind in BINARY_KINDS},
    **{kind: ("input", "dim") for kind in SOFTMAX_KINDS},
    "sum": ("input", "dim", "keepdim"),
    "mean": ("input", "dim", "keepdim"),
    "norm": ("input", "dim", "keepdim", "p"),
}
_SIMPLE_ACTIVATIONS = {"silu", "hardsigmoid", "hardswish", "mish"}


def _tables() -> tuple[dict[object, _Form], dict[str, _Form]]:
    functions: dict[object, _Form] = {}
    methods: dict[str, _Form] = {}

    def both(name: str, form: _Form, inplace_too: bool = True) -> None:
        if hasattr(torch, name):
            functions[getattr(torch, name)] = form
        methods[name] = form
        if inplace_too:
            inplace = _Form(form.kind, form.params, form.defaults, inplace=True)
            methods[name + "_"] = inplace
            if hasattr(torch, name + "_"):
                functions[getattr(torch, name + "_")] = inplace

    for kind in UNARY_KINDS:
        both(kind, _Form(kind, ("input",)))
    both("negative", _Form("neg", ("input",)))
    for name in ("add", "sub", "subtract"):
        both(name, _Form("sub" if name != "add" else "add", ("input", "other"), {"alpha": 1}))
    both("rsub", _Form("rsub", ("input", "other"), {"alpha": 1}), inplace_too=False)
    for name, kind in (("mul", "mul"), ("multiply", "mul"), ("pow", "pow")):
        both(name, _Form(kind, ("input", "other:exponent")))
    for name in ("div", "divide", "true_divide"):
        both(name, _Form("div", ("input", "other", "rounding_mode"), {"rounding_mode": None}))
    for kind in ("minimum", "maximum", *COMPARISON_KINDS):
        # In-place comparisons keep the float dtype: not the same op.
        both(kind, _Form(kind, ("input", "other")), inplace_too=False)
    for name in ("clamp", "clip"):
        both(name, _Form("clamp", ("input", "min", "max"), {"min": None, "max": None}))
    both("clamp_min", _Form("clamp", ("input", "min"), {"max": None}))
    both("clamp_max", _Form("clamp", ("input", "max"), {"min": None}))
    functions[torch.where] = _Form("where", ("condition", "input", "other"))
    methods["where"] = _Form("where", ("input", "condition", "other"))
    for name, kind in (("max", "maximum"), ("min", "minimum")):
        functions[getattr(torch, name)] = _Form(kind, ("input", "other"))
        methods[name] = _Form(kind, ("input", "other"))
    functions.update(_functional_forms())
    for kind in ("sum", "mean"):  # torch.sum(input, dim, keepdim=False, *, dtype=None), x.sum
        both(kind, _Form(kind, ("input", "dim", "keepdim", "dtype"), {"keepdim": False,
                                                                     "dtype": None}),
             inplace_too=False)  # fmt: skip
    # torch.norm(input, p="fro", dim=None, keepdim=False, out=None, dtype=None), x.norm
    both("norm", _Form("norm", ("input", "p", "dim", "keepdim", "out", "dtype"),
                       {"p": "fro", "keepdim": False, "out": None, "dtype": None}),
         inplace_too=False)  # fmt: skip
    for kind in SOFTMAX_KINDS:
        # F.softmax(input, dim, _stacklevel, dtype), torch.softmax(input, dim, dtype), x.softmax
        functions[getattr(F, kind)] = _Form(
            kind, ("input", "dim", "_stacklevel", "dtype"), {"_stacklevel": 3, "dtype": None}
        )
        both(kind, _Form(kind, ("input", "dim", "dtype"), {"dtype": None}), inplace_too=False)
    for symbol, kind in (
        (operator.add, "add"),
        (operator.sub, "sub"),
        (operator.mul, "mul"),
        (operator.truediv, "div"),
        (operator.pow, "pow"),
        (operator.gt, "gt"),
        (operator.lt, "lt"),
        (operator.ge, "ge"),
        (operator.le, "le"),
        (operator.eq, "eq"),
        (operator.ne, "ne"),
    ):
        alpha = {"alpha": 1} if kind in ("add", "sub") else {}
        functions[symbol] = _Form(kind, ("input", "other"), alpha)
    functions[operator.neg] = _Form("neg", ("input",))
    return functions, methods


def _functional_forms() -> dict[object, _Form]:
    inplace = {"inplace": False}
    forms: dict[object, _Form] = {
        F.relu: _Form("relu", ("input", "inplace"), inplace),
        F.gelu: _Form("gelu", ("input", "approximate"), {"approximate": "none"}),
        F.leaky_relu: _Form(
            "leaky_relu",
            ("input", "negative_slope", "inplace"),
            {"negative_slope": 0.01, **inplace},
        ),
        F.hardtanh: _Form(
            "clamp",
            ("input", "min:min_val", "max:max_val", "inplace"),
            {"min": -1.0, "max": 1.0, **inplace},
        ),
        F.relu6: _Form("clamp", ("input", "inplace"), {"min": 0.0, "max": 6.0, **inplace}),
        F.softplus: _Form("softplus", ("input", "beta", "threshold"), {"beta": 1, "threshold": 20}),
        F.sigmoid: _Form("sigmoid", ("input",)),
        F.tanh: _Form("tanh", ("input",)),
    }
    for name in _SIMPLE_ACTIVATIONS:
        forms[getattr(F, name)] = _Form(name, ("input", "inplace"), inplace)
    return forms


_FUNCTIONS, _METHODS = _tables()


def function_op(target: object, args: tuple, kwargs: dict) -> PointwiseOp | None:
    form = _FUNCTIONS.get(target)
    return _bind(form, args, kwargs) if form is not None else None


def method_op(name: str, args: tuple, kwargs: dict) -> PointwiseOp | None:
    form = _METHODS.get(name)
    return _bind(form, args, kwargs) if form is not None else None


def _bind(form: _Form, args: tuple, kwargs: dict) -> PointwiseOp | None:
    if len(args) > len(form.params):
        return None
    values: dict[str, object] = dict(form.defaults)
    keyword_to_name = {}
    for index, param in enumerate(form.params):
        name, _, keyword = param.partition(":")
        keyword_to_name[keyword or name] = name
        if index < len(args):
            values[name] = args[index]
    for keyword, value in kwargs.items():
        if keyword not in keyword_to_name:
            return None
        values[keyword_to_name[keyword]] = value
    inplace = form.inplace or bool(values.pop("inplace", False))
    values.pop("_stacklevel", None)
    dropped = [values.pop(name, None) for name in ("rounding_mode", "dtype", "out")]
    if any(value is not None for value in dropped):
        return None
    if form.kind == "gelu":
        return gelu_op(values.get("input"), values.get("approximate"), inplace)
    names = _OPERANDS.get(form.kind, ("input",))
    if any(name not in values for name in names) or set(values) - set(names):
        return None
    operands = tuple(values[name] for name in names)
    if not valid_operands(form.kind, operands):
        return None
    return PointwiseOp(form.kind, cast(tuple[Operand, ...], operands), inplace)


def gelu_op(x: object, approximate: object, inplace: bool = False) -> PointwiseOp | None:
    kinds = {"none": "gelu", "tanh": "gelu_tanh"}
    if not isinstance(x, Node) or approximate not in kinds:
        return None
    return PointwiseOp(kinds[str(approximate)], (x,), inplace)


def valid_operands(kind: str, operands: tuple) -> bool:
    if not any(isinstance(value, Node) for value in operands):
        return False
    if kind in SOFTMAX_KINDS:
        return _over_last_dimension(*operands)
    if kind in SUM_KINDS:
        x, dim, keepdim = operands[:3]
        if kind == "norm" and operands[3] not in (2, 2.0, "fro"):  # one dimension: fro is 2
            return False
        if isinstance(dim, list | tuple) and len(dim) == 1:
            dim = dim[0]
        return keepdim is True and _over_last_dimension(x, dim)
    if kind in ("add", "sub", "rsub") and isinstance(operands[2], Node):
        return False  # alpha must be a constant
    if kind in ("maximum", "minimum") and not _is_tensor(operands[1]):
        return False  # torch.max(x, dim) is a reduction, not a pointwise max
    if kind == "clamp" and operands[1] is None and operands[2] is None:
        return False
    for index, value in enumerate(operands):
        optional = kind == "clamp" and index > 0
        if value is None and not optional:
            return False
        if value is not None and not isinstance(value, Node | float | int | bool):
            return False
    return True


def _over_last_dimension(x: object, dim: object) -> bool:
    """A reduction the row kernel computes: of a traced tensor, over its last dimension."""
    if not _is_tensor(x) or type(dim) is not int:
        return False
    rank = len(cast(Node, x).meta["tensor_meta"].shape)
    return rank > 0 and dim in (-1, rank - 1)


def _is_tensor(value: object) -> bool:
    return isinstance(value, Node) and "tensor_meta" in value.meta
