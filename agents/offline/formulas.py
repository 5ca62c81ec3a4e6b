"""C++ expressions for each pointwise kind, written as PyTorch computes them.

Every value is a ``float`` (the opmath type of float32, float16 and bfloat16). The math helpers
(``kp::exp``, ``kp::tanh``...) are defined per backend: libdevice on CUDA, vectorizable SLEEF-style
implementations on CPU. Operands are always plain variables or literals, so an expression may
name one twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GELU_ALPHA = "0.70710678118654752440f"  # 1/sqrt(2), ATen's kAlpha
GELU_BETA = "0.79788456080286535588f"  # sqrt(2/pi), ATen's kBeta
GELU_KAPPA = "0.044715f"

_UNARY = {
    "neg": "(-{0})",
    "relu": "({0} < 0.0f ? 0.0f : {0})",
    "sigmoid": "(1.0f / (1.0f + kp::exp(-{0})))",
    "silu": "({0} / (1.0f + kp::exp(-{0})))",
    "tanh": "kp::tanh({0})",
    "exp": "kp::exp({0})",
    "log": "kp::log({0})",
    "abs": "kp::abs({0})",
    "sqrt": "kp::sqrt({0})",
    "rsqrt": "(1.0f / kp::sqrt({0}))",
    "square": "({0} * {0})",
    "reciprocal": "(1.0f / {0})",
    "erf": "kp::erf({0})",
    "sin": "kp::sin({0})",
    "cos": "kp::cos({0})",
    "log1p": "kp::log1p({0})",
    "expm1": "kp::expm1({0})",
    "gelu": f"(({{0}} * 0.5f) * (1.0f + kp::erf({{0}} * {GELU_ALPHA})))",
    "gelu_tanh": (
        f"((0.5f * {{0}}) * (1.0f + kp::tanh({GELU_BETA} * ({{0}} + {GELU_KAPPA} * "
        "({0} * {0} * {0})))))"
    ),
    "hardsigmoid": "(kp::clamp({0} + 3.0f, 0.0f, 6.0f) / 6.0f)",
    "hardswish": "({0} * kp::clamp({0} + 3.0f, 0.0f, 6.0f) / 6.0f)",
    "mish": "({0} * kp::tanh(kp::log1p(kp::exp({0}))))",
}
COMPARISONS = ("gt", "lt", "ge", "le", "eq", "ne")
_BINARY = {
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "minimum": "kp::minimum({0}, {1})",
    "maximum": "kp::maximum({0}, {1})",
    "gt": "({0} > {1} ? 1.0f : 0.0f)",
    "lt": "({0} < {1} ? 1.0f : 0.0f)",
    "ge": "({0} >= {1} ? 1.0f : 0.0f)",
    "le": "({0} <= {1} ? 1.0f : 0.0f)",
    "eq": "({0} == {1} ? 1.0f : 0.0f)",
    "ne": "({0} != {1} ? 1.0f : 0.0f)",
}
# ATen special-cases these exponents of pow(tensor, scalar), on CPU and CUDA alike.
_POW_BY_CONSTANT = {
    0.0: "1.0f",
    1.0: "{0}",
    2.0: "({0} * {0})",
    3.0: "({0} * {0} * {0})",
    0.5: "kp::sqrt({0})",
    -0.5: "(1.0f / kp::sqrt({0}))",
    -1.0: "(1.0f / {0})",
    -2.0: "(1.0f / ({0} * {0}))",
}
KINDS = frozenset(
    {*_UNARY, *_BINARY, "add", "sub", "rsub", "pow", "clamp", "leaky_relu", "softplus", "where"}
)


@dataclass(frozen=True)
class Arg:
    """One operand: its C++ expression (None for an absent clamp bound), for Python constants
    their value (some kinds special-case it), and whether it is a Python number at all."""

    expr: str | None
    constant: float | None = None
    number: bool = False


def float_literal(value: float | int | bool) -> str:
    """A C++ float with the value PyTorch uses: the Python double rounded once to float."""
    number = float(value)
    if math.isnan(number):
        return "NAN"
    if math.isinf(number):
        return "INFINITY" if number > 0 else "(-INFINITY)"
    return f"float({number!r})"


def expression(kind: str, args: list[Arg]) -> str:
    exprs = [arg.expr for arg in args]
    if kind in _UNARY:
        return _UNARY[kind].format(*exprs)
    if kind in COMPARISONS:
        # ATen compares in the tensor's dtype: a Python number is first rounded to it.
        exprs = [f"kp::rounded<scalar_t>({arg.expr})" if arg.number else arg.expr for arg in args]
    if kind in _BINARY:
        return _BINARY[kind].format(*exprs)
    if kind in ("add", "sub", "rsub"):
        return _add_sub(kind, args)
    if kind == "pow":
        exponent = args[1].constant
        if exponent is not None and float(exponent) in _POW_BY_CONSTANT:
            return _POW_BY_CONSTANT[float(exponent)].format(exprs[0])
        return f"kp::pow({exprs[0]}, {exprs[1]})"
    if kind == "clamp":
        low, high = exprs[1], exprs[2]
        if low is None:
            return f"kp::clamp_max({exprs[0]}, {high})"
        if high is None:
            return f"kp::clamp_min({exprs[0]}, {low})"
        return f"kp::clamp({exprs[0]}, {low}, {high})"
    if kind == "leaky_relu":
        x, slope = exprs
        return f"({x} > 0.0f ? {x} : {x} * {slope})"
    if kind == "softplus":
        x, beta, threshold = exprs
        return f"(({x} * {beta}) > {threshold} ? {x} : kp::log1p(kp::exp({x} * {beta})) / {beta})"
    if kind == "where":
        condition, if_true, if_false = exprs
        return f"({condition} != 0.0f ? {if_true} : {if_false})"
    raise ValueError(f"no formula for pointwise kind {kind!r}")


def _add_sub(kind: str, args: list[Arg]) -> str:
    first, second, alpha = args
    scaled = second.expr if alpha.constant == 1 else f"{alpha.expr} * {second.expr}"
    if kind == "rsub":  # torch.rsub(input, other, alpha) = other - alpha * input
        scaled = first.expr if alpha.constant == 1 else f"{alpha.expr} * {first.expr}"
        return f"({second.expr} - {scaled})"
    return f"({first.expr} {'+' if kind == 'add' else '-'} {scaled})"
