"""Sample inputs for an operator call, and outputs compared with its reference.

One rule for every tool that runs an operator on made-up data: the tuner (each candidate is
checked before it is timed), the Oclgrind worker and ``gpucg run --check``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .half import is_float, numpy_dtype

#: float tolerance, relative to the largest finite magnitude of the reference (at least 1)
TOLERANCE = {"float16": 1e-2, "bfloat16": 4e-2, "float32": 1e-4, "float64": 1e-9,
             "float8_e4m3fn": 1.3e-1, "float8_e5m2": 2.5e-1}
#: the same where float32 products may round their operands to TF32 (allow_tf32: 10 mantissa bits)
TF32_TOLERANCE = dict(TOLERANCE, float32=2e-3)


def sample_inputs(input_types, rng: np.random.Generator, *, sizes: Mapping | None = None,
                  magnitude: tuple[float, float] = (0.9, 1.1),
                  signed: bool = False, op=None, attrs=None) -> list[np.ndarray]:
    """Arrays for ``input_types``: booleans half set, integers in [-3, 3] ([0, 3] unsigned,
    so products stay in range), floats of a magnitude in ``magnitude`` (both signs when
    ``signed``, so sums cancel as in real data); then, given the operator (an OpDef) and its
    attributes, made valid for it by its ``kernel_info.valid_samples``.

    ``sizes`` gives the value of each symbolic dimension (every dimension must be an int
    without it).
    """
    from .shape import evaluate

    out = []
    for t in input_types:
        shape = tuple(int(d) if isinstance(d, (int, np.integer)) else int(evaluate(d, sizes or {}))
                      for d in t.shape)
        if t.dtype == "bool":
            out.append(rng.random(shape) < 0.5)
        elif t.dtype.startswith(("int", "uint")):
            low = 0 if t.dtype.startswith("uint") else -3
            out.append(rng.integers(low, 4, size=shape).astype(t.dtype))
        else:
            value = rng.uniform(*magnitude, size=shape)
            if signed:
                value = value * rng.choice([-1.0, 1.0], size=shape)
            out.append(value.astype(numpy_dtype(t.dtype)))
    fix = getattr(getattr(op, "kernel_info", None), "valid_samples", None)
    return list(fix(out, attrs, rng)) if fix is not None else out


def mismatch(got, want, tolerance: Mapping[str, float] = TOLERANCE) -> str:
    """'' when every output equals the reference: the same shapes and dtypes, integers and
    booleans exactly, floats within ``tolerance[dtype]`` times the reference's largest finite
    magnitude (at least 1), NaN where it has NaN and infinities where it has them; otherwise
    what differs."""
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    if len(got) != len(want):
        return f"{len(got)} outputs, the reference has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {i} is {g.shape} {g.dtype}, the reference {w.shape} {w.dtype}"
        if not is_float(w.dtype):
            if not np.array_equal(g, w):
                return f"output {i}: {int(np.sum(g != w))} of {w.size} elements differ"
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        scale = max(1.0, float(np.max(np.abs(w64[np.isfinite(w64)]), initial=0.0)))
        allowed = tolerance[w.dtype.name] * scale
        with np.errstate(invalid="ignore"):
            err = np.abs(g64 - w64)
            bad = ~((err <= allowed) | (np.isnan(g64) & np.isnan(w64)) | (g64 == w64))
        if bad.any():
            return (f"output {i}: {int(bad.sum())} of {w.size} elements differ "
                    f"(worst {float(np.nanmax(err)):.3g}, allowed {allowed:.3g})")
    return ""
