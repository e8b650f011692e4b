"""Rotary position embeddings (RoPE) with a cos/sin cache, as vLLM and FlashInfer apply them:

rotary_embedding(x, cos, sin, positions, *, style="neox", rotary_dim=None)
    x (T, H, D): token t's heads rotated by the angles of position p = positions[t]; cos and
    sin (max_positions, R // 2) hold cos(p * theta_i) and sin(p * theta_i), R = rotary_dim
    (default D, even, at most D). Over the first R dims, pair i is
        neox (GPT-NeoX, LLaMA): (x[i], x[i + R/2])      gptj (GPT-J): (x[2i], x[2i + 1])
    and becomes (x1 cos_i - x2 sin_i, x2 cos_i + x1 sin_i); dims R..D are copied unchanged.

A position outside 0..max_positions - 1 is an InputError on every target naming it: the kernels
never read outside cos and sin, they count such positions and the host raises. x, cos and sin
may be float16, bfloat16, float32 or float64 (cos and sin alike); the sums are float32
(float64 when x or cos is). The head size D and R are constants of the compiled kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..eager import call
from ..errors import AttrError, DTypeError, InputError, describe
from ..op import Case, Constraint, KernelInfo, OpPattern, register_op
from ..shape import TensorType, var

FLOATS = ("float16", "bfloat16", "float32", "float64")
POSITIONS = ("int32", "int64")
STYLES = ("neox", "gptj")


@dataclass(frozen=True)
class RotaryAttrs:
    """style: "neox" (halves) or "gptj" (interleaved pairs); rotary_dim: the rotated dims R
    (None: x's head size; else even, at most the head size, 2 * cos.shape[1])."""

    style: str = "neox"
    rotary_dim: int | None = None

    def __post_init__(self):
        if self.style not in STYLES:
            raise AttrError(f"rotary_embedding: style={self.style!r} is not allowed; allowed: "
                            "'neox' (rotate halves), 'gptj' (rotate interleaved pairs)")
        r = self.rotary_dim
        if r is not None and (isinstance(r, bool) or not isinstance(r, (int, np.integer))
                              or r <= 0 or r % 2):
            raise AttrError(f"rotary_embedding: rotary_dim={describe(r)} must be a positive "
                            "even int (or None: the head size)")
        if r is not None:
            object.__setattr__(self, "rotary_dim", int(r))


def rotary_dims(x: TensorType, cos: TensorType, attrs) -> tuple[int, int]:
    """(D, R): x's head size and the rotated dims, both constants, checked against cos."""
    d, half = x.shape[-1], cos.shape[-1]
    for name, v in (("x's head size (x.shape[2])", d), ("cos.shape[1]", half)):
        if not isinstance(v, int):
            raise InputError(f"rotary_embedding: {name} is {v}; it must be a constant (the "
                             "kernel is specialized on it)")
    r = d if attrs.rotary_dim is None else attrs.rotary_dim
    if r > d or r % 2:
        raise InputError(f"rotary_embedding: rotary_dim={r} must be even and at most x's head "
                         f"size {d}")
    if half * 2 != r:
        raise InputError(f"rotary_embedding: cos and sin have {half} columns; rotary_dim={r} "
                         f"needs {r // 2} (rotary_dim // 2)")
    return d, r


def _rel(inputs, attrs):
    x, cos, sin, pos = inputs
    if x.dtype not in FLOATS:
        raise DTypeError(f"rotary_embedding: x dtype {x.dtype!r} is not supported; allowed: "
                         f"{', '.join(FLOATS)}")
    if cos.dtype not in FLOATS or sin.dtype != cos.dtype:
        raise DTypeError(f"rotary_embedding: cos and sin dtypes ({cos.dtype}, {sin.dtype}) "
                         f"must be equal and one of {', '.join(FLOATS)}")
    if pos.dtype not in POSITIONS:
        raise DTypeError(f"rotary_embedding: positions dtype {pos.dtype!r} is not supported; "
                         f"allowed: {', '.join(POSITIONS)}")
    for name, t, rank, shape in (("x", x, 3, "(T, H, D)"), ("cos", cos, 2, "(max_positions, "
                                 "rotary_dim // 2)"), ("sin", sin, 2, "cos's"),
                                 ("positions", pos, 1, "(T,)")):
        if t.ndim != rank:
            raise InputError(f"rotary_embedding: {name} has shape {t.shape}; it must be {shape}")
    rotary_dims(x, cos, attrs)
    return TensorType(x.shape, x.dtype)


def _constraints(inputs, attrs):
    x, cos, sin, pos = (tuple(sympy.sympify(d) for d in t.shape) for t in inputs)
    return [Constraint(sympy.Eq(sin[0], cos[0]), "rotary_embedding: sin has {} rows but cos "
                       "has {}; they must be equal (max_positions)", (sin[0], cos[0])),
            Constraint(sympy.Eq(sin[1], cos[1]), "rotary_embedding: sin has {} columns but cos "
                       "has {}; they must be equal", (sin[1], cos[1])),
            Constraint(sympy.Eq(pos[0], x[0]), "rotary_embedding: positions has {} entries but "
                       "x has {} tokens; one position a token", (pos[0], x[0]))]


def check_positions(positions: np.ndarray, max_positions: int) -> None:
    """InputError naming the first position outside 0..max_positions - 1, if any."""
    bad = np.flatnonzero((positions < 0) | (positions >= max_positions))
    if bad.size:
        i = int(bad[0])
        raise InputError(f"rotary_embedding: positions[{i}] = {int(positions[i])} is out of "
                         f"range: cos and sin have {max_positions} positions (allowed: 0 to "
                         f"{max_positions - 1}; {bad.size} bad position(s) in all)")


def compute_dtype(x_dtype: str, cos_dtype: str) -> str:
    return "float64" if "float64" in (x_dtype, cos_dtype) else "float32"


def reference(x, cos, sin, positions, attrs):
    """The rotation in the kernels' compute dtype, NumPy; positions checked first."""
    check_positions(positions, cos.shape[0])
    ct = compute_dtype(x.dtype.name, cos.dtype.name)
    r = x.shape[-1] if attrs.rotary_dim is None else attrs.rotary_dim
    c = cos.astype(ct)[positions][:, None, :]
    s = sin.astype(ct)[positions][:, None, :]
    y = x.astype(ct)
    first, second = (slice(0, r // 2), slice(r // 2, r)) if attrs.style == "neox" \
        else (slice(0, r, 2), slice(1, r, 2))
    x1, x2 = y[..., first].copy(), y[..., second].copy()
    with np.errstate(invalid="ignore", over="ignore"):
        y[..., first], y[..., second] = x1 * c - x2 * s, x2 * c + x1 * s
        y = y.astype(x.dtype)
    y[..., r:] = x[..., r:]  # the copied dims keep their bits (a NaN's payload too)
    return y


def _valid_samples(arrays, attrs, rng):
    """Random positions within the caches (sample_inputs draws -3..3)."""
    x, cos, sin, pos = arrays
    return x, cos, sin, rng.integers(0, max(cos.shape[0], 1), pos.shape).astype(pos.dtype)


def _cases():
    def c(t, h, d, dtype, cdtype, kind, label, r=None, style="neox", p=4096, pdtype="int64"):
        r = d if r is None else r
        return Case((TensorType((t, h, d), dtype), TensorType((p, r // 2), cdtype),
                     TensorType((p, r // 2), cdtype), TensorType((t,), pdtype)),
                    {"style": style, "rotary_dim": r}, kind, label)
    return [c(16, 32, 128, "float16", "float32", "bench", "decode, LLaMA-7B queries"),
            c(4096, 8, 128, "float16", "float16", "bench", "prefill, 8 KV heads", style="gptj"),
            c(5, 3, 64, "float16", "float32", "small", "whole vectors", p=37, pdtype="int32"),
            c(3, 2, 80, "float32", "float32", "small", "gptj, rotary_dim 64 of 80", r=64,
              style="gptj", p=11),
            c(4, 3, 10, "float64", "float64", "small", "odd sizes: scalar", r=6, p=9)]


register_op("rotary_embedding", attrs=RotaryAttrs, num_inputs=4, type_rel=_rel,
            constraints=_constraints, reference=reference, pattern=OpPattern.OPAQUE,
            input_names=("x", "cos", "sin", "positions"), cases=_cases,
            kernel_info=KernelInfo(storage_dtypes=("float16", "bfloat16"),
                                   valid_samples=_valid_samples),
            static_axes=lambda attrs: ({2}, {1}, {1}, set()),
            example=lambda: ((TensorType((var("t"), 32, 128), "float16"),
                              TensorType((var("p"), 64), "float32"),
                              TensorType((var("p"), 64), "float32"),
                              TensorType((var("t"),), "int64")), {}),
            doc="Rotary position embedding of x (T, H, D) at positions (T,) from cos/sin "
                "caches (max_positions, rotary_dim // 2), neox or gptj pairs.")


def rotary_embedding(x, cos, sin, positions, *, style="neox", rotary_dim=None, target=None):
    """x rotated by the angles of each token's position (RoPE), as vLLM and FlashInfer do.

    Args:
        x: (T, H, D) queries or keys, float16, bfloat16, float32 or float64.
        cos, sin: (max_positions, rotary_dim // 2), cos(p * theta_i) and sin(p * theta_i).
        positions: (T,) int32 or int64, token t's position (0 .. max_positions - 1; any other
            value is an InputError on every target).
        style: "neox" (pairs (i, i + R/2): GPT-NeoX, LLaMA) or "gptj" (pairs (2i, 2i + 1)).
        rotary_dim: the rotated dims R (None: D); dims R..D are copied unchanged.

    Returns:
        A new (T, H, D) array of x's dtype.
    """
    return call("rotary_embedding", (x, cos, sin, positions), target=target, style=style,
                rotary_dim=rotary_dim)
