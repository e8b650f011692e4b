"""The fused epilogue that conv2d and the GEMM family share: what it computes, its attribute
checks, its NumPy form, and the template parameters of its C form (templates/gemm/_epilogue.j2).

For an accumulated value ``acc`` of output element (.., channel c, ..)::

    z = alpha * acc + bias[c]
    y = act(z) + beta * residual          residual_position "after" (the default)
    y = act(z + beta * residual)          residual_position "before"

computed in float32 (float64 for float64 data), in registers, before the single store. The
activation is the elementwise operator of that name (gpucg/ops/_unary.py), applied to z.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import sympy

from ..codegen import Code
from ..errors import AttrError, DTypeError, InputError, describe
from ..op import Constraint
from . import _expr, _unary

#: the fused activations: "gelu" is the exact (erf) form, "gelu_tanh" the tanh approximation
ACTIVATIONS = (None, *_unary.ACTIVATIONS)
RESIDUAL_POSITIONS = ("after", "before")


def check_scale(name: str, value) -> float:
    """``value`` as a finite float, or AttrError naming the attribute."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)):
        raise AttrError(f"{name}={describe(value)} must be a number")
    value = float(value)
    if not math.isfinite(value):
        raise AttrError(f"{name}={value!r} must be finite")
    return value


def check_epilogue(attrs) -> None:
    """Validate and normalize ``activation``, ``alpha``, ``beta`` and ``residual_position`` of a
    frozen attrs dataclass (called from its ``__post_init__``)."""
    if attrs.activation not in ACTIVATIONS:
        raise AttrError(f"activation={attrs.activation!r} is not allowed; allowed: "
                        f"{', '.join(map(repr, ACTIVATIONS))}")
    if attrs.residual_position not in RESIDUAL_POSITIONS:
        raise AttrError(f"residual_position={attrs.residual_position!r} is not allowed; allowed: "
                        f"{', '.join(map(repr, RESIDUAL_POSITIONS))}")
    object.__setattr__(attrs, "alpha", check_scale("alpha", attrs.alpha))
    object.__setattr__(attrs, "beta", check_scale("beta", attrs.beta))


def residual_rules(op: str, residual, out) -> list:
    """The residual must have the output's rank, dtype and sizes: errors for what the types
    decide, :class:`gpucg.op.Constraint` rules (checked by the dispatcher) for symbolic sizes."""
    if residual.ndim != out.ndim:
        raise InputError(f"{op}: residual must have the output's shape {tuple(out.shape)}, "
                         f"got {residual}")
    if residual.dtype != out.dtype:
        raise DTypeError(f"{op}: residual dtype {residual.dtype} must equal the output dtype "
                         f"{out.dtype}")
    rules = []
    for axis, (got, want) in enumerate(zip(residual.shape, out.shape)):
        same = sympy.Eq(sympy.sympify(got), sympy.sympify(want))
        if same is sympy.false:
            raise InputError(f"{op}: residual must have the output's shape {tuple(out.shape)}, "
                             f"got {residual}")
        if same is not sympy.true:
            rules.append(Constraint(same, f"{op}: residual.shape[{axis}] is {{}} but the output's "
                                          f"is {{}}", (got, want)))
    return rules


def with_residual(arrays: tuple, bias, residual, n: int, dtype) -> tuple:
    """The inputs of a call: ``arrays`` then the bias and the residual that are given (a
    residual without a bias gets a zero bias of length ``n``)."""
    if residual is not None and bias is None:
        bias = np.zeros(n, dtype)
    return arrays + tuple(a for a in (bias, residual) if a is not None)


# -- NumPy and C: the activation is the elementwise operator's expression -------------------

def activation_tree(activation, dtype: str):
    """The activation as a typed elementwise expression of one input (x0) of ``dtype``
    (gpucg/ops/_unary.py holds its math), or None."""
    if activation is None:
        return None
    if activation not in _unary.ACTIVATIONS:
        raise AttrError(f"activation={activation!r} is unknown")
    op, attrs = _unary.ACTIVATIONS[activation]
    return _expr.typecheck(_expr.node(op, _expr.placeholders(1), attrs), (dtype,))


def activate(y: np.ndarray, activation) -> np.ndarray:
    """The activation on a float array, as the elementwise operator of that name computes it."""
    return y if activation is None else _activation_function(activation, y.dtype.name)([y])


@functools.lru_cache(maxsize=None)
def _activation_function(activation, dtype: str):
    """The activation's NumPy function (typed once per dtype: a call's epilogue reuses it)."""
    return _expr.numpy_function(activation_tree(activation, dtype))


#: elements of one block of :func:`activate_in_place` (its temporaries stay in cache)
ACTIVATE_BLOCK = 1 << 16


def activate_in_place(y: np.ndarray, activation) -> np.ndarray:
    """:func:`activate` on a writeable contiguous float array, written over it a block at a
    time: the operator's own values, with temporaries of a block's size (the whole-array
    form allocates several arrays of y's size, each a fresh run of pages to fault in)."""
    fn = _activation_function(activation, y.dtype.name)
    flat = y.reshape(-1)
    for i in range(0, flat.size, ACTIVATE_BLOCK):
        block = flat[i:i + ACTIVATE_BLOCK]
        block[...] = fn([block])
    return y


def dense_flat(y: np.ndarray):
    """y's elements in memory order as a 1-D view when y is one dense block of memory (C
    order, or a transposed view of one: a channels-last result), else None."""
    t = y.transpose(np.argsort([-abs(s) for s in y.strides], kind="stable"))
    return t.reshape(-1) if t.flags.c_contiguous else None


def apply(y: np.ndarray, bias, residual, attrs) -> np.ndarray:
    """The epilogue on a float result ``y`` (modified in place where possible); ``bias``
    already broadcasts against ``y``, as does ``residual``."""
    if attrs.alpha != 1.0:
        y *= y.dtype.type(attrs.alpha)
    if bias is not None:
        y += bias.astype(y.dtype, copy=False)
    scaled = None
    if residual is not None:
        scaled = residual.astype(y.dtype, copy=False)
        if attrs.beta != 1.0:
            scaled = scaled * y.dtype.type(attrs.beta)
    if scaled is not None and attrs.residual_position == "before":
        y += scaled
    flat = dense_flat(y) if attrs.activation and y.flags.writeable else None
    if attrs.activation == "relu" and y.flags.writeable:  # in place: the same np.maximum
        np.maximum(y, y.dtype.type(0), out=y)
    elif attrs.activation in _unary.IN_PLACE and y.dtype == np.float32 and flat is not None:
        _unary.IN_PLACE[attrs.activation](flat)  # in place: the operator's own values
    elif flat is not None:
        activate_in_place(flat, attrs.activation)
    else:
        y = activate(y, attrs.activation)
    if scaled is not None and attrs.residual_position == "after":
        y += scaled
    return y


def template_params(attrs, has_bias: bool, has_residual: bool, acc_dtype: str, d) -> dict:
    """The parameters of templates/gemm/_epilogue.j2 for a call whose sums are ``acc_dtype``
    (float32 or float64), in dialect ``d``: the activation as statements on ``val`` ending in
    the variable ``act_result``."""
    tree = activation_tree(attrs.activation, acc_dtype)
    lines, result, _ = ([], "val", {}) if tree is None else \
        _expr.to_c(tree, d, inputs=("val",), temp="act")  # no helpers: float activations
    return dict(has_bias=has_bias, has_residual=has_residual, activation=attrs.activation or "none",
                ep_alpha=attrs.alpha, ep_beta=attrs.beta,
                residual_before=attrs.residual_position == "before",
                act_body=tuple(Code(x) for x in lines), act_result=Code(result))
