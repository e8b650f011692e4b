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
from . import _expr, _host_c, _unary
from ._expr import activation_tree

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


def memory_order(y: np.ndarray):
    """The axes of y from the outermost in memory to the innermost when y is one dense block
    of memory (C order, or a transposed view of one: a channels-last result), else None."""
    if y.flags.c_contiguous:
        return tuple(range(y.ndim))
    order = tuple(sorted(range(y.ndim), key=lambda a: -abs(y.strides[a])))  # stable
    return order if y.transpose(order).flags.c_contiguous else None


def dense_flat(y: np.ndarray):
    """y's elements in memory order as a 1-D view when y is one dense block of memory (C
    order, or a transposed view of one: a channels-last result), else None."""
    order = memory_order(y)
    return None if order is None else y.transpose(order).reshape(-1)


#: rows of at least this many elements take the bias broadcast along them; shorter ones a copy
#: of it tiled to a block's length (NumPy's inner loops then run a whole block, not a row)
ROW_RUN = 64


def bias_layout(y: np.ndarray, bias):
    """(flat, outer, channels, inner, bias vector) of a dense ``y`` whose bias varies along one
    axis: y's memory in order as (outer, channels, inner) (inner 1: channels last, a GEMM's
    columns; NCHW planes otherwise); None where y is not dense or the bias is otherwise."""
    order = memory_order(y)
    b = np.asarray(bias)
    b = b.reshape((1,) * (y.ndim - b.ndim) + b.shape)
    axes = [a for a in range(y.ndim) if b.shape[a] != 1]
    if order is None or len(axes) != 1 or b.ndim != y.ndim:
        return None
    pos, vec = order.index(axes[0]), b.reshape(-1).astype(y.dtype, copy=False)
    return (y.transpose(order).reshape(-1), math.prod(y.shape[a] for a in order[:pos]),
            vec.size, math.prod(y.shape[a] for a in order[pos + 1:]), vec)


def bias_blocks(y: np.ndarray, bias):
    """(block, its bias) pairs covering a dense ``y`` in memory order (:func:`bias_layout`),
    each block contiguous and about _unary's block size (in cache), its bias broadcasting
    against it: a (cols,) row where the biased axis is innermost, a (rows, 1) column
    otherwise. None where :func:`bias_layout` is."""
    layout = bias_layout(y, bias)
    if layout is None:
        return None
    flat, outer, _, inner, vec = layout
    size = _unary.BLOCK_ELEMENTS
    if inner == 1 and vec.size < ROW_RUN:  # short rows: the bias tiled to whole rows, added flat
        step = max(1, size // vec.size) * vec.size
        tile = np.tile(vec, step // vec.size)
        return [(flat[i:i + step], tile[:min(step, flat.size - i)])
                for i in range(0, flat.size, step)]
    if inner == 1:  # the bias along each row, broadcast (rows longer than a block split)
        m, step = flat.reshape(outer, vec.size), max(1, size // vec.size)
        return [(m[r:r + step, c:c + size], vec[c:c + size])
                for r in range(0, outer, step) for c in range(0, vec.size, size)]
    m, col = flat.reshape(outer * vec.size, inner), np.tile(vec, outer)[:, None]
    step = max(1, size // inner)
    return [(m[r:r + step, c:c + size], col[r:r + step])
            for r in range(0, m.shape[0], step) for c in range(0, inner, size)]


def _bias_activation(y: np.ndarray, bias, activation) -> bool:
    """Add the bias and activate a block at a time while the block is in cache (one pass over
    y's memory, where adding the bias first is a pass of its own): float32, as _unary.IN_PLACE;
    False where the blocks do not apply (y within one block, not writeable or not dense)."""
    fn = _unary.BLOCKS.get(activation)
    if fn is None or y.dtype != np.float32 or y.size <= _unary.BLOCK_ELEMENTS or \
            not y.flags.writeable:
        return False  # one block: the bias's pass costs less than the blocks' set-up
    blocks = bias_blocks(y, bias)
    if blocks is None:
        return False
    scratch = np.empty(max(xb.size for xb, _ in blocks), y.dtype)
    with np.errstate(all="ignore"):  # overflows and -inf * 0 give what the operator says
        for xb, bb in blocks:
            fn(xb, scratch[:xb.size].reshape(xb.shape), bb)
    return True


def _host_activation(y: np.ndarray, bias, activation) -> bool:
    """The bias and the activation in one pass of gpucg/ops/_host_c.py's C kernel (float32,
    y writeable and dense, an activation the kernels have); False where it does not apply."""
    if activation is None or y.dtype != np.float32 or not y.flags.writeable \
            or activation not in _host_c.ACTIVATIONS or _host_c.library() is None:
        return False  # a bias alone: NumPy's add costs no more
    layout = (dense_flat(y), 1, 1, y.size, None) if bias is None else bias_layout(y, bias)
    if layout is None or layout[0] is None:
        return False
    flat, outer, channels, inner, vec = layout
    return _host_c.epilogue(flat, outer, channels, inner, vec, activation)


def apply(y: np.ndarray, bias, residual, attrs) -> np.ndarray:
    """The epilogue on a float result ``y`` (modified in place where possible); ``bias``
    already broadcasts against ``y``, as does ``residual``."""
    if attrs.alpha != 1.0:
        y *= y.dtype.type(attrs.alpha)
    scaled = None
    if residual is not None:
        scaled = residual.astype(y.dtype, copy=False)
        if attrs.beta != 1.0:
            scaled = scaled * y.dtype.type(attrs.beta)
    before = scaled is not None and attrs.residual_position == "before"
    if not before and (_host_activation(y, bias, attrs.activation) or bias is not None and
                       _bias_activation(y, bias, attrs.activation)):
        return y if scaled is None else _add(y, scaled)
    if bias is not None:
        y += bias.astype(y.dtype, copy=False)
    if before:
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
    return y if scaled is None or before else _add(y, scaled)


def _add(y: np.ndarray, scaled: np.ndarray) -> np.ndarray:
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
