"""The GEMM family: dense and linear (TVM's and PyTorch's layout, one operator, with a fused
epilogue), matmul (NumPy's semantics) and batch_matmul (transposed operands and alpha on both),
all on one set of GEMM kernels.

Every call is one problem: C[b] (m x n) = A[b] (m x k) * B[b] (k x n) over the (broadcast)
batch dimensions b, where each operand lies in memory along k or along its own axis
(:func:`problem`). float16 and bfloat16 are stored in 16 bits and summed in float32; float64 sums in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..eager import call
from ..errors import DTypeError, InputError, require_bool
from ..op import (Case, Constraint, KernelInfo, OpPattern, added_attr, register_gradient,
                  register_op)
from ..shape import TensorType, broadcast_shapes, dtype_name, product, var
from . import _epilogue
from ._grads import dense_gradient, matmul_gradient

DTYPES = ("float16", "float32", "float64", "bfloat16")


def tf32_attr(value) -> bool:
    """The allow_tf32 attribute: None takes GPUCG_ALLOW_TF32 (off unless set); else a bool
    (0 and 1 too, as the command line passes them)."""
    from .. import settings

    if value is None:
        return bool(settings.allow_tf32())
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value in (0, 1):
        return bool(value)
    return require_bool("allow_tf32", value)


@dataclass(frozen=True)
class DenseAttrs:
    """Attributes of dense: the epilogue (gpucg/ops/_epilogue.py) and the output dtype.

    Attributes:
        activation: None, "relu", "gelu" (erf), "gelu_tanh", "sigmoid", "tanh", "silu" or
            "hardswish".
        out_dtype: the output dtype (None: the data's); float16, bfloat16, float32 or float64.
        alpha: scales the product; beta: scales the residual.
        residual_position: the residual is added "after" the activation or "before" it.
        allow_tf32: float32 operands may be rounded to TF32 for tensor cores (None: the
            GPUCG_ALLOW_TF32 knob, off by default).
    """

    activation: str | None = None
    out_dtype: str | None = None
    alpha: float = 1.0
    beta: float = 1.0
    residual_position: str = "after"
    allow_tf32: bool | None = added_attr(None, before=False)

    def __post_init__(self):
        object.__setattr__(self, "allow_tf32", tf32_attr(self.allow_tf32))
        _epilogue.check_epilogue(self)
        if self.out_dtype is not None:
            object.__setattr__(self, "out_dtype", dtype_name(self.out_dtype, "out_dtype", DTYPES))


def _gemm_attrs(attrs) -> None:
    object.__setattr__(attrs, "allow_tf32", tf32_attr(attrs.allow_tf32))
    object.__setattr__(attrs, "transpose_a", require_bool("transpose_a", attrs.transpose_a))
    object.__setattr__(attrs, "transpose_b", require_bool("transpose_b", attrs.transpose_b))
    object.__setattr__(attrs, "alpha", _epilogue.check_scale("alpha", attrs.alpha))


@dataclass(frozen=True)
class MatmulAttrs:
    """matmul follows NumPy's semantics; transpose_a / transpose_b: the operand's last two axes
    are read swapped (in place, no copy); alpha scales the product (in the kernel's epilogue);
    allow_tf32: float32 operands may be rounded to TF32 for tensor cores (None: the
    GPUCG_ALLOW_TF32 knob, off by default)."""

    allow_tf32: bool | None = added_attr(None, before=False)
    transpose_a: bool = added_attr(False, before=False)
    transpose_b: bool = added_attr(False, before=False)
    alpha: float = added_attr(1.0, before=1.0)

    def __post_init__(self):
        _gemm_attrs(self)


@dataclass(frozen=True)
class BatchMatmulAttrs:
    """Attributes of batch_matmul: whether a is (..., k, m) and b is (..., n, k); alpha scales
    the product; allow_tf32 as matmul's."""

    transpose_a: bool = False
    transpose_b: bool = False
    allow_tf32: bool | None = added_attr(None, before=False)
    alpha: float = added_attr(1.0, before=1.0)

    def __post_init__(self):
        _gemm_attrs(self)


@dataclass(frozen=True)
class Problem:
    """One batched GEMM: C[b] (m x n) = A[b] (m x k) * B[b] (k x n).

    ``batch`` is the output's batch shape, ``a_batch``/``b_batch`` the operands' batch shapes
    aligned to it (1 where they broadcast). ``a_k_major``: A[m][k] lies at m * k_size + k
    (else k * m_size + m); ``b_k_major``: B[k][p] lies at p * k_size + k (else k * n_size + p).
    ``a_k``/``b_k`` are the operands' sizes along k (equal for a valid call).
    """

    batch: tuple
    a_batch: tuple
    b_batch: tuple
    m: object
    n: object
    k: object
    a_k: object
    b_k: object
    a_k_major: bool
    b_k_major: bool
    out_shape: tuple

    @property
    def nb(self):
        """The number of products (the batch size)."""
        return product(self.batch)


def _align(shape, rank):
    return (1,) * (rank - len(shape)) + tuple(shape)


def _batch(op: str, a_shape, b_shape, an: str, bn: str) -> tuple:
    a_b, b_b = a_shape[:-2], b_shape[:-2]
    try:
        return broadcast_shapes(op, TensorType(a_b, "float32"), TensorType(b_b, "float32"))
    except InputError:
        raise InputError(f"{op}: the batch dimensions of {an} (shape {a_shape}) and {bn} (shape "
                         f"{b_shape}) do not broadcast: {a_b} against {b_b}; allowed: NumPy's "
                         "broadcasting (equal sizes, or 1)") from None


def problem(op: str, a_shape, b_shape, attrs) -> Problem:
    """The GEMM of an operator call from its operand shapes (ints or SymPy expressions).

    dense folds the data's leading dimensions into m (the data is contiguous, so (..., k) is
    (m, k) as it lies); matmul and batch_matmul broadcast their batch dimensions (NumPy's
    rules) and read a transposed operand in place (it lies along m or n rather than k)."""
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    if op == "dense":
        if len(a_shape) < 1 or len(b_shape) != 2:
            name, s, want = (("data", a_shape, "rank >= 1 (..., k)") if len(a_shape) < 1
                             else ("weight", b_shape, "rank 2 (n, k)"))
            raise InputError(f"dense: {name} has shape {s}; allowed: {want}")
        (n, bk), ak = b_shape, a_shape[-1]
        m = product(a_shape[:-1])
        return Problem((), (), (), m, n, ak, ak, bk, True, True, a_shape[:-1] + (n,))
    ta, tb = attrs.transpose_a, attrs.transpose_b
    for name, s, t in (("a", a_shape, ta), ("b", b_shape, tb)):
        low = 2 if op == "batch_matmul" or t else 1
        if len(s) < low:
            why = f"transpose_{name}=True" if t and op == "matmul" else op
            raise InputError(f"{op}: {name} has shape {s}; allowed for {why}: rank >= {low} "
                             "(..., rows, columns)")
    if len(a_shape) == 1:
        m, ak = 1, a_shape[0]
    else:
        m, ak = (a_shape[-1], a_shape[-2]) if ta else a_shape[-2:]
    if len(b_shape) == 1:
        bk, n = b_shape[0], 1
    else:
        bk, n = (b_shape[-1], b_shape[-2]) if tb else b_shape[-2:]
    batch = _batch(op, a_shape, b_shape, "a", "b")
    out = batch + ((m,) if len(a_shape) > 1 else ()) + ((n,) if len(b_shape) > 1 else ())
    return Problem(batch, _align(a_shape[:-2], len(batch)), _align(b_shape[:-2], len(batch)),
                   m, n, ak, ak, bk, not ta, tb or len(b_shape) == 1, out)


def _inner_rule(op: str, p: Problem, a_name: str, b_name: str, a_shape=(), b_shape=()):
    same = sympy.Eq(sympy.sympify(p.a_k), sympy.sympify(p.b_k))
    message = (f"{op}: inner dimensions do not match: {a_name} has {{}} along k but {b_name} "
               "has {}")
    if same is sympy.false:
        raise InputError(message.format(p.a_k, p.b_k) + f" (shapes {tuple(a_shape)} and "
                         f"{tuple(b_shape)}); allowed: equal sizes along k")
    return [] if same is sympy.true else [Constraint(same, message, (p.a_k, p.b_k))]


_NAMES = {"dense": ("data", "weight"), "matmul": ("a", "b"), "batch_matmul": ("a", "b")}


def _check(op: str, inputs, attrs):
    """(problem, output type, size rules) of a call; raises for what the types decide."""
    a, b = inputs[0], inputs[1]
    an, bn = _NAMES[op]
    for name, t in ((an, a), (bn, b)):
        if t.dtype not in DTYPES:
            raise DTypeError(f"{op}: {name} dtype {t.dtype!r} is not supported; allowed: "
                             f"{', '.join(DTYPES)}")
    if a.dtype != b.dtype:
        raise DTypeError(f"{op}: {an} and {bn} must have the same dtype, got {a.dtype} and "
                         f"{b.dtype} (mixed dtypes; convert one first)")
    p = problem(op, a.shape, b.shape, attrs)
    rules = _inner_rule(op, p, an, bn, a.shape, b.shape)
    out = TensorType(p.out_shape, getattr(attrs, "out_dtype", None) or a.dtype)
    if len(inputs) >= 3:
        bias = inputs[2]
        same = None if bias.ndim != 1 else sympy.Eq(sympy.sympify(bias.shape[0]),
                                                     sympy.sympify(p.n))
        if same is None or same is sympy.false:
            raise InputError(f"dense: bias must have shape ({p.n},) (the output columns), "
                             f"got {bias}")
        if bias.dtype != a.dtype:
            raise DTypeError(f"dense: bias dtype {bias.dtype} must equal the data dtype {a.dtype}")
        if same is not sympy.true:
            rules.append(Constraint(sympy.Eq(bias.shape[0], p.n),
                                    "dense: bias has {} values but the output has {} columns",
                                    (bias.shape[0], p.n)))
    if len(inputs) == 4:
        rules += _epilogue.residual_rules(op, inputs[3], out)
    return p, out, rules


def reference(op: str):
    """The NumPy reference of ``op``: float64 products, then the epilogue and the dtype."""
    def ref(a, b, *rest):
        *extra, attrs = rest
        x, w = a.astype(np.float64), b.astype(np.float64)
        if op == "dense":
            y = x @ w.T
        else:  # float64 products of the operands as the user sees them, then alpha
            y = np.matmul(np.swapaxes(x, -1, -2) if attrs.transpose_a else x,
                          np.swapaxes(w, -1, -2) if attrs.transpose_b else w) * attrs.alpha
        y = np.array(y, np.float64)
        if extra:
            y = _epilogue.apply(y, extra[0], extra[1] if extra[1:] else None, attrs)
        elif op == "dense":
            y = _epilogue.apply(y, None, None, attrs)
        return y.astype(getattr(attrs, "out_dtype", None) or a.dtype)
    return ref


#: the one long-K case (split-K needs k >= 2048): gemm_tiled's single work-group there drives
#: Oclgrind's race detector past 2.5 GiB resident; the other cases simulate gemm_tiled
_LONG_K = "Oclgrind's race checks of one work-group over k = 2049 need more than 2 GiB"


def _cases(op: str):
    def cases():
        t = TensorType
        if op == "dense":
            return [Case((t((16, 4096), "float32"), t((4096, 4096), "float32")), {}, "bench",
                         "small m (16, 4096) x (4096, 4096)"),
                    Case((t((1024, 768), "float32"), t((3072, 768), "float32"),
                          t((3072,), "float32")), {"activation": "gelu"}, "bench",
                         "BERT-base FFN (1024, 768) x (768, 3072) + bias + gelu"),
                    Case((t((1024, 1024), "float32"), t((1024, 1024), "float32")), {}, "bench",
                         "square 1024"),
                    Case((t((1, 7), "float32"), t((5, 7), "float32")), {}, "small", "m = 1"),
                    Case((t((2, 3, 7), "float32"), t((5, 7), "float32"), t((5,), "float32")), {},
                         "small", "leading dimensions (2, 3) folded into m"),
                    Case((t((33, 65), "float32"), t((17, 65), "float32"), t((17,), "float32")),
                         {"activation": "relu"}, "small", "odd sizes, bias + relu"),
                    Case((t((3, 2049), "float64"), t((9, 2049), "float64")), {}, "small",
                         "split-K, float64", not_simulated={"gemm_tiled": _LONG_K}),
                    Case((t((20, 9), "float16"), t((70, 9), "float16"), t((70,), "float16"),
                          t((20, 70), "float16")), {"activation": "gelu_tanh"}, "small",
                         "float16, bias, residual"),
                    Case((t((4096, 4096), "float16"), t((4096, 4096), "float16"),
                          t((4096,), "float16")), {"activation": "gelu"}, "bench",
                         "float16 4096^3 + bias + gelu (tensor cores)"),
                    Case((t((1024, 1024), "float32"), t((1024, 1024), "float32")),
                         {"allow_tf32": True}, "bench", "square 1024, TF32 allowed (tensor cores)")]
        if op == "matmul":
            return [Case((t((1024, 1024), "float32"), t((1024, 1024), "float32")), {}, "bench",
                         "square 1024"),
                    Case((t((4096, 4096), "float32"), t((4096, 4096), "float32")), {}, "bench",
                         "square 4096"),
                    Case((t((3, 1, 5, 7), "float32"), t((2, 7, 4), "float32")), {}, "small",
                         "broadcast batch"),
                    Case((t((7,), "float64"), t((7, 3), "float64")), {}, "small", "1-D a"),
                    Case((t((2, 1, 9, 5), "float32"), t((3, 6, 9), "float32")),
                         {"transpose_a": True, "transpose_b": True, "alpha": -1.5}, "small",
                         "broadcast batch, both transposed, alpha"),
                    Case((t((2048, 1024), "float16"), t((1024, 2048), "float16")), {}, "bench",
                         "float16, B along n (ldmatrix .trans)")]
        return [Case((t((64, 128, 64), "float32"), t((64, 64, 128), "float32")), {}, "bench",
                     "(64, 128, 64) x (64, 64, 128)"),
                Case((t((3, 9, 5), "float32"), t((1, 4, 9), "float32")),
                     {"transpose_a": True, "transpose_b": True}, "small", "transposed, batch 1"),
                Case((t((2, 3, 5, 16), "float32"), t((1, 3, 7, 16), "float32")),
                     {"transpose_b": True, "alpha": 0.25}, "small",
                     "attention scores: 4-D, a batch of 1 broadcast, k^T read in place, alpha")]
    return cases


_DOCS = {"dense": "data (..., k) times weight (n, k) transposed, with a fused epilogue.",
         "matmul": "Matrix product with NumPy's semantics (1-D promotion, broadcast batch), "
                   "optionally transposed operands and alpha.",
         "batch_matmul": "Batched matrix product over broadcast batch dimensions, a and b "
                         "optionally transposed, alpha."}

for _op, _attrs in (("dense", DenseAttrs), ("matmul", MatmulAttrs),
                    ("batch_matmul", BatchMatmulAttrs)):
    register_op(
        _op, attrs=_attrs, num_inputs=4 if _op == "dense" else 2,
        optional_inputs=2 if _op == "dense" else 0,
        type_rel=(lambda op: lambda inputs, attrs: _check(op, inputs, attrs)[1])(_op),
        constraints=(lambda op: lambda inputs, attrs: _check(op, inputs, attrs)[2])(_op),
        pattern=OpPattern.OPAQUE, reference=reference(_op),
        input_names=_NAMES[_op] + (("bias", "residual") if _op == "dense" else ()),
        kernel_info=KernelInfo(storage_dtypes=("float16", "bfloat16")), cases=_cases(_op), doc=_DOCS[_op],
        example=(lambda op: lambda: ((TensorType((var("m"), 4096), "float32"),
                                      TensorType((4096, 4096), "float32")), {})
                 if op != "batch_matmul" else
                 ((TensorType((var("b"), 128, 64), "float32"),
                   TensorType((var("b"), 64, 128), "float32")), {}))(_op))


def dense(data, weight, bias=None, activation=None, out_dtype=None, *, residual=None, alpha=1.0,
          beta=1.0, residual_position="after", target=None, allow_tf32=None):
    """``alpha * data @ weight.T + bias``, activated, plus ``beta * residual`` (TVM's dense).

    Args:
        data: (..., k): any leading dimensions, folded into the GEMM's rows without a copy;
            weight: (n, k); float16, bfloat16, float32 or float64, the same dtype.
        bias: None or (n,), the data's dtype.
        activation: None, "relu", "gelu" (erf form), "gelu_tanh", "sigmoid", "tanh", "silu"
            or "hardswish".
        out_dtype: the output dtype (default: the data's); float16 and bfloat16 sum in float32.
        residual: None or (..., n) (the output's shape) of the output dtype, times beta, added
            after the activation (residual_position "after") or before it ("before"). Without
            a bias, a zero bias is passed.
        target: "cuda", "opencl", "numpy" or None for the default target.
        allow_tf32: float32 operands may be rounded to TF32 for tensor cores (None: the
            GPUCG_ALLOW_TF32 knob, off by default).

    Returns:
        (..., n): the data's leading dimensions, then the weight's rows.
    """
    n = weight.shape[0] if len(weight.shape) == 2 else 0
    arrays = _epilogue.with_residual((data, weight), bias, residual, n, data.dtype)
    return call("dense", arrays, target=target, activation=activation, out_dtype=out_dtype,
                alpha=alpha, beta=beta, residual_position=residual_position,
                **_tf32_kw(allow_tf32))


def linear(x, weight, bias=None, *, activation=None, target=None, allow_tf32=None):
    """``x @ weight.T + bias`` with PyTorch's convention (torch.nn.functional.linear): weight is
    (out_features, in_features), x is (..., in_features), the result (..., out_features).

    This is :func:`dense` itself (TVM's dense stores its weight as (n, k) = (out, in) too), so
    the leading dimensions fold into the GEMM without a copy and the bias and ``activation``
    are fused into its epilogue.
    """
    return dense(x, weight, bias, activation, target=target, allow_tf32=allow_tf32)


def _tf32_kw(allow_tf32) -> dict:
    return {} if allow_tf32 is None else {"allow_tf32": allow_tf32}


def matmul(a, b, transpose_a=False, transpose_b=False, alpha=1.0, *, target=None,
           allow_tf32=None):
    """``alpha * a @ b`` with NumPy's semantics (np.matmul): 1-D operands are promoted and their
    unit axis dropped, batch dimensions broadcast. transpose_a / transpose_b swap the last two
    axes of a / b (each then of rank >= 2), read in place by the kernels; alpha is applied in
    the kernel's epilogue. allow_tf32 as dense's."""
    return call("matmul", (a, b), target=target, transpose_a=transpose_a,
                transpose_b=transpose_b, alpha=alpha, **_tf32_kw(allow_tf32))


def batch_matmul(a, b, transpose_a=False, transpose_b=False, alpha=1.0, *, target=None,
                 allow_tf32=None):
    """``alpha * a @ b`` over batches: a (..., m, k) and b (..., k, n), of rank >= 2, their batch
    dimensions broadcast as NumPy's (a batch of 1 is read again for every batch, with a zero
    stride, not copied); with transpose_a, a is (..., k, m); with transpose_b, b is (..., n, k)
    (attention's q @ k^T); allow_tf32 as dense's."""
    return call("batch_matmul", (a, b), target=target, transpose_a=transpose_a,
                transpose_b=transpose_b, alpha=alpha, **_tf32_kw(allow_tf32))


# -- gradients, written with registered operators (gpucg/ops/_grads.py) ---------------------------
register_gradient("dense", dense_gradient)
register_gradient("matmul", matmul_gradient)
