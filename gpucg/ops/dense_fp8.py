"""dense_fp8: y = (x * x_scale) @ (w * w_scale).T + bias, FP8 operands with float32 scales, the
product summed in float32 and rounded once to ``out_dtype`` (bfloat16 by default).

x is (..., k) and w (n, k), each float8_e4m3fn or float8_e5m2 (they may differ). The scales
(float32) come in three granularities, told apart by their shapes:

- per tensor: x_scale and/or w_scale of one element (shape () or (1,));
- per row / per column: x_scale (...,) or (..., 1) (one a row of x: per token), w_scale (n,)
  or (n, 1) (one an output channel); either may be per tensor instead;
- blockwise, with ``block_size=(bn, bk)`` (DeepGEMM's 128 x 128): x_scale (..., ceil(k/bk))
  (1 x bk blocks of x: a token's run of bk inputs) and w_scale (ceil(n/bn), ceil(k/bk))
  (bn x bk blocks of w); both are blockwise then.

The reference (:func:`reference`) is the float64 value of the scaled product, written as
DeepGEMM computes it: the per-block sums of x @ w.T each times its two scales (per-tensor and
per-row/column scales: the whole sum times both). The kernels keep every sum in float32 (what
DeepGEMM's FP8 GEMM promotes its tensor-core sums into every 128 of k): the products of FP8
values are exact in float32, so with s = sum_k |x w| |x_scale w_scale| a result is within
``(k + 4) * 2**-24 * s + u * |y|`` of the reference, u the output's unit roundoff (2**-8
bfloat16, 2**-11 float16, 2**-24 float32).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..eager import call
from ..errors import AttrError, DTypeError, InputError, describe
from ..half import FP8_DTYPES, numpy_dtype
from ..op import Case, Constraint, KernelInfo, OpPattern, register_op
from ..shape import TensorType, dtype_name, product, var

OUT_DTYPES = ("bfloat16", "float16", "float32")
BIAS_DTYPES = ("bfloat16", "float16", "float32")
NAMES = ("x", "w", "x_scale", "w_scale", "bias")


@dataclass(frozen=True)
class DenseFp8Attrs:
    """Attributes of dense_fp8.

    Attributes:
        out_dtype: "bfloat16" (default), "float16" or "float32".
        block_size: None (per-tensor or per-row/column scales), or (bn, bk): blockwise scales
            of 1 x bk blocks of x and bn x bk blocks of w (DeepGEMM: (128, 128)).
    """

    out_dtype: str = "bfloat16"
    block_size: tuple | None = None

    def __post_init__(self):
        object.__setattr__(self, "out_dtype", dtype_name(self.out_dtype, "out_dtype",
                                                         OUT_DTYPES))
        b = self.block_size
        if b is not None:
            ok = isinstance(b, (tuple, list)) and len(b) == 2 and all(
                isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 1 <= v <= 4096
                for v in b)
            if not ok:
                raise AttrError(f"dense_fp8: block_size={describe(b)} must be None or (bn, bk), "
                                "two ints in [1, 4096] (DeepGEMM's: (128, 128))")
            object.__setattr__(self, "block_size", (int(b[0]), int(b[1])))


@dataclass(frozen=True)
class Scales:
    """How the call's scales apply: x_mode "tensor", "row" or "block"; w_mode "tensor", "col"
    or "block"; the output's rows m and columns n, k, and blocks of k (kb)."""

    x_mode: str
    w_mode: str
    m: object
    n: object
    k: object
    kb: object


def _one(t: TensorType) -> bool:
    return all(d == 1 for d in t.shape) and t.ndim <= 1


def _match(got: tuple, want: tuple, rules: list, what: str) -> bool:
    """Whether shape ``got`` is ``want`` (symbolic dims: a rule checked when known)."""
    if len(got) != len(want):
        return False
    pending = []
    for g, w in zip(got, want):
        eq = sympy.Eq(sympy.sympify(g), sympy.sympify(w))
        if eq is sympy.false:
            return False
        if eq is not sympy.true:
            pending.append((eq, g, w))
    rules += [Constraint(eq, f"dense_fp8: {what}: {{}} where {{}} is needed", (g, w))
              for eq, g, w in pending]
    return True


def scales(inputs, attrs, rules: list | None = None) -> Scales:
    """The Scales of a call (input types), or InputError naming the scale whose shape fits
    none of the allowed ones."""
    rules = [] if rules is None else rules
    x, w, xs, ws = inputs[:4]
    lead, k, n = tuple(x.shape[:-1]), x.shape[-1], w.shape[0]
    m = product(lead)
    if attrs.block_size is None:
        kb = 1
        x_mode = "tensor" if _one(xs) else "row" if (
            _match(tuple(xs.shape), lead, rules, "x_scale")
            or _match(tuple(xs.shape), lead + (1,), rules, "x_scale")) else None
        w_mode = "tensor" if _one(ws) else "col" if (
            _match(tuple(ws.shape), (n,), rules, "w_scale")
            or _match(tuple(ws.shape), (n, 1), rules, "w_scale")) else None
        allowed = (f"x_scale () or (1,) (per tensor) or {lead} or {lead + (1,)} (per row); "
                   f"w_scale () or (1,) or ({n},) or ({n}, 1) (per column)")
    else:
        bn, bk = attrs.block_size
        kb = sympy.ceiling(sympy.sympify(k) / bk)
        kb = int(kb) if kb.is_Integer else kb
        nb = sympy.ceiling(sympy.sympify(n) / bn)
        nb = int(nb) if nb.is_Integer else nb
        x_mode = "block" if _match(tuple(xs.shape), lead + (kb,), rules, "x_scale") else None
        w_mode = "block" if _match(tuple(ws.shape), (nb, kb), rules, "w_scale") else None
        allowed = (f"with block_size=({bn}, {bk}): x_scale {lead + (kb,)} (1 x {bk} blocks) "
                   f"and w_scale ({nb}, {kb}) ({bn} x {bk} blocks)")
    for name, t, mode in (("x_scale", xs, x_mode), ("w_scale", ws, w_mode)):
        if mode is None:
            raise InputError(f"dense_fp8: {name} has shape {tuple(t.shape)}, which fits no "
                             f"scale granularity for x {tuple(x.shape)} and w "
                             f"{tuple(w.shape)}; allowed: {allowed}")
    return Scales(x_mode, w_mode, m, n, k, kb)


def _check(inputs, attrs):
    x, w, xs, ws = inputs[:4]
    for name, t in (("x", x), ("w", w)):
        if t.dtype not in FP8_DTYPES:
            raise DTypeError(f"dense_fp8: {name} dtype {t.dtype!r} is not supported; allowed: "
                             f"{', '.join(FP8_DTYPES)}")
    for name, t in (("x_scale", xs), ("w_scale", ws)):
        if t.dtype != "float32":
            raise DTypeError(f"dense_fp8: {name} dtype {t.dtype!r} is not supported; allowed: "
                             "float32")
    if x.ndim < 1 or w.ndim != 2:
        raise InputError(f"dense_fp8: x must be (..., k) and w (n, k); got x {tuple(x.shape)} "
                         f"and w {tuple(w.shape)}")
    rules: list = []
    eq = sympy.Eq(sympy.sympify(x.shape[-1]), sympy.sympify(w.shape[1]))
    if eq is sympy.false:
        raise InputError(f"dense_fp8: x {tuple(x.shape)} and w {tuple(w.shape)} differ along k "
                         f"({x.shape[-1]} and {w.shape[1]}); allowed: equal sizes along k")
    if eq is not sympy.true:
        rules.append(Constraint(eq, "dense_fp8: x has {} along k but w has {}",
                                (x.shape[-1], w.shape[1])))
    sc = scales(inputs, attrs, rules)
    if len(inputs) == 5:
        b = inputs[4]
        if b.dtype not in BIAS_DTYPES:
            raise DTypeError(f"dense_fp8: bias dtype {b.dtype!r} is not supported; allowed: "
                             f"{', '.join(BIAS_DTYPES)}")
        if not (b.ndim == 1 and _match(tuple(b.shape), (sc.n,), rules, "bias")):
            raise InputError(f"dense_fp8: bias has shape {tuple(b.shape)}; allowed: ({sc.n},) "
                             "(the output's columns)")
    return TensorType(tuple(x.shape[:-1]) + (w.shape[0],), attrs.out_dtype), rules


def reference(x, w, x_scale, w_scale, *rest):
    """The float64 value of the scaled product (DeepGEMM's formula: block sums times their
    scales), plus bias, rounded to out_dtype."""
    *bias, attrs = rest
    k, n = x.shape[-1], w.shape[0]
    m = int(np.prod(x.shape[:-1], dtype=np.int64))
    x64 = x.astype(np.float64).reshape(m, k)
    w64 = w.astype(np.float64)
    xs = np.asarray(x_scale, np.float64)
    ws = np.asarray(w_scale, np.float64)
    with np.errstate(all="ignore"):
        if attrs.block_size is None:
            y = (x64 @ w64.T) * xs.reshape(-1, 1) * ws.reshape(1, -1)  # one, or one a row / column
        else:
            bn, bk = attrs.block_size
            xs, ws = xs.reshape(m, -1), ws.reshape(-(-n // bn), -1)
            y = np.zeros((m, n))
            for j, k0 in enumerate(range(0, k, bk)):
                part = x64[:, k0:k0 + bk] @ w64[:, k0:k0 + bk].T
                y += part * xs[:, j:j + 1] * np.repeat(ws[:, j], bn)[:n][None, :]
        if bias:
            y = y + bias[0].astype(np.float64)[None, :]
    return y.reshape(tuple(x.shape[:-1]) + (n,)).astype(numpy_dtype(attrs.out_dtype))


def _cases():
    t = TensorType
    e4, e5 = "float8_e4m3fn", "float8_e5m2"
    return [Case((t((4096, 4096), e4), t((4096, 4096), e4), t((4096, 32), "float32"),
                  t((32, 32), "float32")), {"block_size": (128, 128)}, "bench",
                 "4096^3, DeepGEMM's 1 x 128 and 128 x 128 blockwise scales"),
            Case((t((1024, 1024), e4), t((1024, 1024), e4), t((1024, 1), "float32"),
                  t((1024, 1), "float32")), {}, "bench", "square 1024, per-token x per-channel"),
            Case((t((3, 2, 24), e4), t((19, 24), e5), t((1,), "float32"), t((19,), "float32"),
                  t((19,), "float32")), {"out_dtype": "float16"}, "small",
                 "leading dims, e4m3 x e5m2, per-tensor x per-column, bias"),
            Case((t((5, 72), e4), t((33, 72), e4), t((5, 2), "float32"), t((3, 2), "float32")),
                 {"block_size": (16, 64)}, "small", "blockwise, ragged k and n blocks")]


register_op("dense_fp8", attrs=DenseFp8Attrs, num_inputs=5, optional_inputs=1,
            type_rel=lambda inputs, attrs: _check(inputs, attrs)[0],
            constraints=lambda inputs, attrs: _check(inputs, attrs)[1],
            pattern=OpPattern.OPAQUE, reference=reference, input_names=NAMES,
            kernel_info=KernelInfo(storage_dtypes=FP8_DTYPES + ("float16", "bfloat16")),
            cases=_cases, doc="FP8 x @ w.T with float32 scales (per tensor, row/column or "
                              "block), float32 sums, bias, rounded to out_dtype.",
            example=lambda: ((TensorType((var("m"), 4096), "float8_e4m3fn"),
                              TensorType((4096, 4096), "float8_e4m3fn"),
                              TensorType((var("m"), 32), "float32"),
                              TensorType((32, 32), "float32")), {"block_size": (128, 128)}))


def dense_fp8(x, w, x_scale, w_scale, *, bias=None, out_dtype="bfloat16", block_size=None,
              target=None):
    """``(x * x_scale) @ (w * w_scale).T + bias`` for FP8 x (..., k) and w (n, k).

    Args:
        x, w: float8_e4m3fn or float8_e5m2 (ml_dtypes NumPy arrays, pyopencl arrays or CPU
            torch float8 tensors).
        x_scale, w_scale: float32: per tensor (one element), per row of x ((...,) or
            (..., 1)) / per row of w ((n,) or (n, 1)), or with ``block_size=(bn, bk)``
            blockwise: x_scale (..., ceil(k/bk)), w_scale (ceil(n/bn), ceil(k/bk)).
        bias: None or (n,), bfloat16, float16 or float32.
        out_dtype: "bfloat16" (default), "float16" or "float32".

    Returns:
        (..., n) of out_dtype; sums in float32 (the bound: gpucg/ops/dense_fp8.py).
    """
    arrays = (x, w, x_scale, w_scale) + (() if bias is None else (bias,))
    return call("dense_fp8", arrays, target=target, out_dtype=out_dtype, block_size=block_size)
