"""Size arithmetic: the shape computations models carry (a shape, taken, concatenated,
sliced, compared, a range, a mod ...) folded on gpucg's own symbolic sizes, so that a reshape's
or a broadcast's target is known for every batch and sequence size at once.

A *size vector* is a NumPy object array of ints and SymPy expressions over gpucg vars
(``gpucg.var``: positive integers), int64 in meaning. :func:`fold` computes one operator on
size vectors, named as gpucg's operators are (``take``, ``concatenate``, ``strided_slice``,
``maximum``, ``where``, ``floor_divide`` ...): nothing here reads a model format, so a front end
maps its own nodes onto these names (gpucg.onnx's lowering has its table). An operator whose
result is not a size vector of known length (a comparison undecided for some sizes, a range of
symbolic length) raises :class:`NotSymbolic`, and the front end computes it on the host once
per binding of the sizes instead.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..shape import simplify_dim


class NotSymbolic(Exception):
    """An operator the size arithmetic does not decide for every size."""


def ints(a) -> np.ndarray:
    """A constant as a flat int64 vector."""
    return np.asarray(a).astype(np.int64).reshape(-1)


def plain(x):
    """An int where the expression is an integer constant, else the SymPy expression."""
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    return simplify_dim(sympy.sympify(x))


def is_int(x) -> bool:
    return isinstance(plain(x), int)


def same(a, b) -> bool:
    """Two sizes equal for every value of their symbols."""
    a, b = plain(a), plain(b)
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0


def decide(rel) -> bool:
    """A comparison of sizes true or false for every size, else NotSymbolic."""
    rel = sympy.sympify(rel)
    if rel in (sympy.true, sympy.false):
        return bool(rel)
    simple = sympy.simplify(rel)
    if simple in (sympy.true, sympy.false):
        return bool(simple)
    raise NotSymbolic(f"{rel} depends on the sizes")


def _vec(fn, *arrays):
    arrays = np.broadcast_arrays(*(np.asarray(a, dtype=object) for a in arrays))
    out = np.empty(arrays[0].shape, dtype=object)
    for idx in np.ndindex(out.shape):
        out[idx] = fn(*(a[idx] for a in arrays))
    return out


def _trunc_div(p, q):
    p, q = plain(p), plain(q)
    if isinstance(p, int) and isinstance(q, int):
        return abs(p) // abs(q) * (1 if (p >= 0) == (q > 0) else -1)
    if q == 0:
        raise NotSymbolic("a division by zero")
    # sizes are positive: truncation is floor division wherever the signs are known
    if decide(sympy.sympify(p) >= 0) and (not isinstance(q, int) or q > 0):
        return sympy.floor(sympy.sympify(p) / q)
    raise NotSymbolic("an integer division of a size of unknown sign")


def _mod(p, q):
    p, q = plain(p), plain(q)
    if isinstance(p, int) and isinstance(q, int):
        return p % q  # Python's sign, as NumPy
    return sympy.Mod(sympy.sympify(p), q)


def _max(p, q):
    p, q = plain(p), plain(q)
    if isinstance(p, int) and isinstance(q, int):
        return max(p, q)
    return sympy.Max(p, q)


def _min(p, q):
    p, q = plain(p), plain(q)
    if isinstance(p, int) and isinstance(q, int):
        return min(p, q)
    return sympy.Min(p, q)


_COMPARE = {"equal": sympy.Eq, "not_equal": sympy.Ne, "less": sympy.Lt,
            "less_equal": sympy.Le, "greater": sympy.Gt, "greater_equal": sympy.Ge}
_ARITH = {"add": lambda p, q: plain(p) + plain(q), "subtract": lambda p, q: plain(p) - plain(q),
          "multiply": lambda p, q: plain(p) * plain(q), "floor_divide": _trunc_div,
          "mod": _mod, "maximum": _max, "minimum": _min}


def _slice(x, starts, ends, axes, steps):
    index = [slice(None)] * x.ndim
    for k, a in enumerate(axes):
        s, e, st = int(starts[k]), int(ends[k]), int(steps[k])
        bound = 2 ** 62
        index[int(a)] = slice(max(min(s, bound), -bound), max(min(e, bound), -bound), st)
    return x[tuple(index)]


def fold(op: str, values: list, attrs: dict, shapes=None) -> np.ndarray:
    """``op`` (a gpucg operator name) on size vectors and constants ``values`` (None for an
    absent input); ``shapes``: for ``shape``, the input's shape (ints and symbols). The result
    is a size vector, or NotSymbolic. Booleans come out decided (True/False) or not at all."""
    at = attrs
    if op == "shape":
        dims = np.array([plain(d) for d in shapes], dtype=object)
        return dims[at.get("start", 0):at.get("end", len(dims))]
    x = None if not values else values[0]
    if op in ("identity", "cast"):
        if at.get("dtype") == "bool":
            return _vec(lambda v: decide(sympy.Ne(plain(v), 0)), x)
        if at.get("dtype", "int64").startswith(("int", "uint")):
            return np.asarray(x, dtype=object)
        raise NotSymbolic("a size cast to a float")  # a float size: computed on the host
    if op in _ARITH:
        return _vec(lambda p, q: plain(_ARITH[op](p, q)), values[0], values[1])
    if op in _COMPARE:
        return _vec(lambda p, q: decide(_COMPARE[op](plain(p), plain(q))), values[0], values[1])
    if op in ("logical_and", "logical_or", "logical_xor"):
        fn = {"logical_and": lambda p, q: p and q, "logical_or": lambda p, q: p or q,
              "logical_xor": lambda p, q: p != q}[op]
        return _vec(lambda p, q: bool(fn(bool(p), bool(q))), values[0], values[1])
    if op == "logical_not":
        return _vec(lambda p: not bool(p), x)
    if op == "negative":
        return _vec(lambda p: plain(-plain(p)), x)
    if op == "abs":
        return _vec(lambda p: plain(sympy.Abs(plain(p))), x)
    if op == "where":
        return _vec(lambda c, p, q: plain(p) if bool(c) else plain(q), *values[:3])
    if op == "take":
        return np.take(np.asarray(x, dtype=object), ints(values[1]).reshape(
            np.shape(values[1])), axis=at.get("axis", 0))
    if op == "gather_nd":
        return _gather_nd(np.asarray(x, dtype=object), np.asarray(values[1]).astype(np.int64),
                          int(at.get("batch_dims", 0)))
    if op == "expand_dims":
        x = np.asarray(x, dtype=object)
        axes = at["axes"]
        for a in sorted(int(a) % (x.ndim + len(axes)) for a in axes):
            x = np.expand_dims(x, a)
        return x
    if op == "squeeze":
        x = np.asarray(x, dtype=object)
        axes = at.get("axes")
        return np.squeeze(x, tuple(int(a) % x.ndim for a in axes)) if axes else np.squeeze(x)
    if op == "concatenate":
        return np.concatenate([np.asarray(v, dtype=object).reshape(-1) if np.ndim(v) == 0 else
                               np.asarray(v, dtype=object) for v in values],
                              axis=at.get("axis", 0))
    if op == "strided_slice":
        starts, ends = values[1], values[2]
        if not all(is_int(v) for v in list(np.ravel(starts)) + list(np.ravel(ends))):
            raise NotSymbolic("a slice of a size vector at symbolic bounds")
        n = len(ints(starts))
        axes = ints(values[3]) if len(values) > 3 and values[3] is not None else range(n)
        steps = ints(values[4]) if len(values) > 4 and values[4] is not None else [1] * n
        return _slice(np.asarray(x, dtype=object), ints(starts), ints(ends), axes, steps)
    if op == "reshape":
        return np.asarray(x, dtype=object).reshape(tuple(int(v) for v in ints(values[1])))
    if op == "broadcast_to":
        shape = [plain(v) for v in np.ravel(values[1])]
        if not all(isinstance(v, int) for v in shape):
            raise NotSymbolic("a size vector broadcast to symbolic sizes")
        x = np.asarray(x, dtype=object)
        return np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(shape))).copy()
    if op in ("prod", "sum"):
        return _reduce(op, np.asarray(x, dtype=object), at)
    if op == "full":  # ConstantOfShape: a vector of constant length
        shape = [plain(v) for v in np.ravel(x)]
        if not all(isinstance(v, int) for v in shape):
            raise NotSymbolic("a constant of symbolic shape")
        fill = at["value"]
        return np.full(shape, fill.item() if hasattr(fill, "item") else fill, dtype=object)
    if op == "arange":
        start, limit, delta = (plain(np.ravel(v)[0]) for v in values[:3])
        count = plain(sympy.ceiling(sympy.sympify(limit - start) / delta))
        if not isinstance(count, int):
            raise NotSymbolic("a range of symbolic length")
        return np.array([plain(start + k * delta) for k in range(max(count, 0))], dtype=object)
    raise NotSymbolic(op)


def _gather_nd(data, idx, batch_dims: int):
    if batch_dims:
        raise NotSymbolic("GatherND with batch_dims")
    k = idx.shape[-1]
    out = np.empty(idx.shape[:-1] + data.shape[k:], dtype=object)
    for pos in np.ndindex(idx.shape[:-1]):
        out[pos] = data[tuple(int(i) for i in idx[pos])]
    return out


def _reduce(op, x, at):
    axes = at.get("axes")
    keep = at.get("keepdims", True)
    axes = tuple(range(x.ndim)) if axes is None else tuple(int(a) % x.ndim for a in axes)
    out = x
    for a in sorted(axes, reverse=True):
        parts = np.moveaxis(out, a, 0)
        acc = parts[0] if len(parts) else np.full(parts.shape[1:], 1 if op == "prod" else 0,
                                                  dtype=object)
        for p in parts[1:]:
            acc = _vec(lambda u, v: plain(u * v if op == "prod" else u + v), acc, p)
        out = np.expand_dims(np.asarray(acc, dtype=object), a) if keep else \
            np.asarray(acc, dtype=object)
    return out


def concrete(sizes: np.ndarray, binding: dict) -> np.ndarray:
    """A size vector with its symbols replaced by their values (int64)."""
    return np.array([int(sympy.sympify(d).subs(binding)) for d in sizes.reshape(-1)],
                    dtype=np.int64).reshape(sizes.shape)


def all_ints(sizes) -> bool:
    return all(isinstance(plain(v), (int, bool)) for v in np.ravel(sizes))
