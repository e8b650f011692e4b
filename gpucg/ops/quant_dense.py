"""Weight-only quantized dense layers, for the memory-bound projections of LLM decoding:

dense_int4(x, qweight, scales, zeros=None, *, group_size=128, bias=None)
    y = x @ W^T + bias, W[n, k] = (q[n, k] - zeros[n, g]) * scales[n, g], g = k // group_size:
    qweight uint8 (N, K // 2) holds two 4-bit q a byte, the even k in the low nibble; scales
    (N, K // group_size) float16, bfloat16 or float32; zeros uint8 (N, K // group_size), each
    0..15 (default 8: symmetric).
dense_int8(x, qweight, scales, *, bias=None)
    the same with qweight int8 (N, K) and per-channel scales (N,): W[n, k] = q[n, k] * scales[n].

x is (..., K) float16, bfloat16 or float32; y (..., N) of x's dtype, summed in float32. The
kernels dequantize the weights in registers inside their main loop (Marlin's idea): the
weights cross memory once, 4 (or 8) bits each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..eager import call
from ..errors import AttrError, DTypeError, InputError, describe
from ..op import Case, Constraint, KernelInfo, NoAttrs, OpPattern, register_op
from ..shape import TensorType, var
from . import _epilogue

X_DTYPES = ("float16", "bfloat16", "float32")
SCALE_DTYPES = ("float16", "bfloat16", "float32")
#: operator -> its packed weight dtype and the k values a byte holds
QUANT = {"dense_int4": ("uint8", 2), "dense_int8": ("int8", 1)}


@dataclass(frozen=True)
class Int4Attrs:
    """group_size: the k values sharing a scale and a zero point (a positive even int dividing
    K; per-channel scales are group_size = K)."""

    group_size: int = 128

    def __post_init__(self):
        g = self.group_size
        if isinstance(g, (bool, np.bool_)) or not isinstance(g, (int, np.integer)) or g <= 0 \
                or g % 2:
            raise AttrError(f"dense_int4: group_size={describe(g)} must be a positive even int "
                            "(32, 64, 128 ...: the k values sharing a scale)")
        object.__setattr__(self, "group_size", int(g))


def groups_of(op: str, k, attrs):
    """Scale columns a weight row has: K // group_size (dense_int4), 1 (dense_int8)."""
    if op == "dense_int8":
        return 1
    return sympy.floor(sympy.sympify(k) / attrs.group_size)


def _check(op, name, t, dtypes, rank):
    if t.dtype not in dtypes:
        raise DTypeError(f"{op}: {name} dtype {t.dtype!r} is not supported; allowed: "
                         f"{', '.join(dtypes)}")
    if t.ndim != rank:
        raise InputError(f"{op}: {name} has shape {t.shape}; it must have rank {rank}")


def _rel(op: str):
    def rel(inputs, attrs):
        x, qw, scales, *rest = inputs
        if x.ndim == 0:
            raise InputError(f"{op}: x is 0-d; it must be (..., K)")
        _check(op, "x", x, X_DTYPES, x.ndim)
        _check(op, "qweight", qw, (QUANT[op][0],), 2)
        _check(op, "scales", scales, SCALE_DTYPES, 2 if op == "dense_int4" else 1)
        if rest:
            _check(op, "bias", rest[0], (x.dtype,), 1)
        if len(rest) > 1:
            _check(op, "zeros", rest[1], ("uint8",), 2)
        return TensorType(tuple(x.shape[:-1]) + (qw.shape[0],), x.dtype)
    return rel


def _constraints(op: str):
    """The packed weight, the scales, zeros and bias agree with x's K and the weight's N."""
    def constraints(inputs, attrs):
        x, qw, scales, *rest = inputs
        per = QUANT[op][1]
        k, n = sympy.sympify(x.shape[-1]), sympy.sympify(qw.shape[0])
        out = [Constraint(sympy.Eq(sympy.sympify(qw.shape[1]) * per, k),
                          f"{op}: qweight has {{}} columns; x's K = {{}} needs K // {per} "
                          f"({per} weight{'s' if per > 1 else ''} a byte)", (qw.shape[1], k))]
        if op == "dense_int4":
            g = attrs.group_size
            out += [Constraint(sympy.Eq(sympy.Mod(k, g), 0),
                               f"{op}: x's K = {{}} is not a multiple of group_size={g}", (k,)),
                    Constraint(sympy.Eq(sympy.sympify(scales.shape[1]) * g, k),
                               f"{op}: scales has {{}} columns; K = {{}} with group_size={g} "
                               "needs K // group_size", (scales.shape[1], k))]
        named = [("scales", scales)] + list(zip(("bias", "zeros"), rest))
        for name, t in named:
            out.append(Constraint(sympy.Eq(sympy.sympify(t.shape[0]), n),
                                  f"{op}: {name} has {{}} rows; qweight has N = {{}}",
                                  (t.shape[0], n)))
        if len(rest) > 1:
            out.append(Constraint(sympy.Eq(sympy.sympify(rest[1].shape[1]),
                                           sympy.sympify(scales.shape[1])),
                                  f"{op}: zeros has {{}} columns; scales has {{}}",
                                  (rest[1].shape[1], scales.shape[1])))
        return out
    return constraints


def dequantize(op: str, qweight: np.ndarray, scales: np.ndarray, zeros, attrs,
               dtype=np.float32) -> np.ndarray:
    """W (N, K) in ``dtype``: (q - zero) * scale, as the kernels compute it."""
    if op == "dense_int8":
        return qweight.astype(dtype) * scales.astype(dtype)[:, None]
    q = np.empty((qweight.shape[0], qweight.shape[1] * 2), np.int16)
    q[:, 0::2], q[:, 1::2] = qweight & 15, qweight >> 4
    z = np.int16(8) if zeros is None else zeros.astype(np.int16)
    g = attrs.group_size
    groups = q.reshape(q.shape[0], -1, g) - (z if zeros is None else z[:, :, None])
    return (groups.astype(dtype) * scales.astype(dtype)[:, :, None]).reshape(q.shape)


def _reference(op: str):
    def ref(x, qweight, scales, *rest):
        *rest, attrs = rest
        bias, zeros = (rest + [None, None])[:2]
        w = dequantize(op, qweight, scales, zeros, attrs)
        with np.errstate(all="ignore"):
            y = x.astype(np.float32) @ w.T
            if bias is not None:
                y = y + bias.astype(np.float32)
            return y.astype(x.dtype)
    return ref


def _valid_samples(arrays, attrs, rng):
    """Zero points 0..15 and 4-bit values of every kind (sample_inputs draws 0..3)."""
    out = list(arrays)
    out[1] = rng.integers(0, 256, out[1].shape).astype(out[1].dtype) if out[1].dtype == np.uint8 \
        else rng.integers(-128, 128, out[1].shape).astype(np.int8)
    if len(out) > 4:
        out[4] = rng.integers(0, 16, out[4].shape).astype(np.uint8)
    scale = rng.uniform(0.005, 0.02, out[2].shape)
    out[2] = scale.astype(out[2].dtype)
    return out


def _cases(op: str):
    def cases():
        t = TensorType
        int4 = op == "dense_int4"

        def c(m, n, k, dtype, kind, label, g=128, zeros=False, bias=False, skip=None):
            qw = t((n, k // 2), "uint8") if int4 else t((n, k), "int8")
            sc = t((n, k // g), "float16") if int4 else t((n,), "float16")
            ins = (t((m, k), dtype), qw, sc)
            if bias or zeros:
                ins += (t((n,), dtype),)
            if zeros:
                ins += (t((n, k // g), "uint8"),)
            return Case(ins, {"group_size": g} if int4 else {}, kind, label,
                        not_simulated=skip or {})
        return [c(1, 4096, 4096, "float16", "bench", "decode GEMV 4096 x 4096"),
                c(16, 11008, 4096, "float16", "bench", "decode batch 16, up projection"),
                c(512, 4096, 4096, "float16", "bench", "prefill 512 tokens"),
                c(3, 40, 96, "float16", "small", "GEMV, K past a warp's chunk", g=32,
                  zeros=int4, skip={"quant_gemm": "the GEMM case simulates it (Oclgrind's "
                                                  "time)"}),
                c(17, 29, 96, "float32", "small", "GEMM, ragged tiles", g=32, bias=True),
                c(2, 9, 40, "float16", "small", "odd K: scalar accesses", g=40, zeros=int4,
                  bias=True)]
    return cases


def _example(op: str):
    """The decode GEMV case with a symbolic number of rows."""
    first = _cases(op)()[0]
    return (TensorType((var("m"), 4096), "float16"),) + first.inputs[1:], first.attrs


for _op in QUANT:
    register_op(_op, attrs=Int4Attrs if _op == "dense_int4" else NoAttrs,
                num_inputs=5 if _op == "dense_int4" else 4,
                optional_inputs=2 if _op == "dense_int4" else 1,
                type_rel=_rel(_op), constraints=_constraints(_op), reference=_reference(_op),
                pattern=OpPattern.OPAQUE, cases=_cases(_op),
                input_names=("x", "qweight", "scales", "bias", "zeros")[:5 if _op == "dense_int4"
                                                                         else 4],
                kernel_info=KernelInfo(storage_dtypes=("float16", "bfloat16"),
                                       valid_samples=_valid_samples),
                example=(lambda op: lambda: _example(op))(_op),
                doc=("x @ dequantized int4 weights^T (+ bias): group-wise scales and zero "
                     "points" if _op == "dense_int4" else
                     "x @ dequantized int8 weights^T (+ bias): per-channel scales"))


def dense_int4(x, qweight, scales, zeros=None, *, group_size=128, bias=None, target=None):
    """x @ ((q - zeros) * scales)^T + bias with 4-bit weights, dequantized in registers.

    Args:
        x: (..., K) float16, bfloat16 or float32.
        qweight: uint8 (N, K // 2): q[n, 2j] in the low nibble of byte j, q[n, 2j + 1] in
            the high one.
        scales: (N, K // group_size) float16, bfloat16 or float32.
        zeros: None (every zero point 8) or uint8 (N, K // group_size), values 0..15.
        group_size: the k values a scale and a zero point cover (an even divisor of K).
        bias: None or (N,), x's dtype.

    Returns:
        (..., N) of x's dtype (float32 sums).
    """
    arrays = _epilogue.with_residual((x, qweight, scales), bias, zeros, qweight.shape[0],
                                     x.dtype)
    return call("dense_int4", arrays, target=target, group_size=group_size)


def dense_int8(x, qweight, scales, *, bias=None, target=None):
    """x @ (q * scales[:, None])^T + bias with int8 (N, K) weights and per-channel scales
    (N,); see :func:`dense_int4`."""
    arrays = (x, qweight, scales) + ((bias,) if bias is not None else ())
    return call("dense_int8", arrays, target=target)
