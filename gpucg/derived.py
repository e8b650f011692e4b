"""Derived sizes: input dimensions such as ``floor(h/2 - 1/2) + 1`` (a strided layer's output
on a symbolic image side) whose symbols are no input's whole dimension.

The generated dispatcher reads a symbol from a dimension that is that symbol alone; it cannot
read ``h`` back from ``floor(h/2 - 1/2) + 1`` (several sides give one size), and it needs no
more than the unknown part. So before selection each such dimension ``a*u + b`` (``u`` one
unknown: a symbol, or a floor, ceiling, Mod, Max or Min of symbols; ``a`` a nonzero int; ``b``
computable from the sizes already read) becomes a size symbol of its own, ``_s0``, and ``u``
is ``_s0 - b`` (``a`` = 1), ``b - _s0`` (``a`` = -1) or ``floor((_s0 - b)/a)`` everywhere
else: in the other inputs' dimensions (then checked), so in the output types, the constraints
and the strategy's conditions. A dimension not of that form (``batch*seq``: a model's rows
flattened) is read whole, as one size, wherever it stands. The strategy sees plain size symbols, as for any signature,
and the dispatcher binds ``_s0 = x.shape[2]`` and evaluates the rest with integer arithmetic.
The other dimensions take the form they have for every size the dispatcher admits
(:func:`admissible`): the type relation compares ``64*batch`` read as ``_s0`` with ``_s0``,
not with ``64*floor(_s0/64)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from .shape import TensorType, simplify_dim


def _unknowns(expr, known: set) -> set:
    """The outermost parts of a size that cannot be computed from the ``known`` symbols: a
    symbol not known, or a floor, ceiling, Mod, Max or Min that mentions one (sums, products
    and powers are looked into)."""
    if expr.free_symbols <= known:
        return set()
    if isinstance(expr, (sympy.Add, sympy.Mul, sympy.Pow)):
        return set().union(*(_unknowns(a, known) for a in expr.args))
    return {expr}


def _linear(expr, u):
    """(a, b) with ``expr == a*u + b``, ``a`` a nonzero int and ``b`` free of ``u``; else None."""
    t = sympy.Dummy("u")
    f = sympy.expand(expr.xreplace({u: t}))
    a, b = f.coeff(t, 1), f.coeff(t, 0)
    if not (a.is_Integer and a != 0) or t in b.free_symbols or sympy.expand(f - a * t - b) != 0:
        return None
    return int(a), b


@dataclass(frozen=True)
class Size:
    """A derived size: the input dimension (``inputs[index].shape[axis]``) it is read from,
    as the signature gave it (``dim`` = ``a*u + b``)."""

    dim: object
    index: int
    axis: int
    a: int
    b: object


@dataclass(frozen=True)
class Derivation:
    """The input types with each derived size a symbol of its own (``types``), and what each
    such symbol stands for (``sizes``: symbol -> :class:`Size`)."""

    types: tuple
    sizes: dict

    def shown(self, expr):
        """A size as the signature's symbols give it (``_s0`` -> ``floor(h/2 - 1/2) + 1``)."""
        if isinstance(expr, int) or not self.sizes:
            return expr
        return simplify_dim(sympy.sympify(expr).xreplace({s: z.dim for s, z in self.sizes.items()}))

    def shown_types(self, types) -> tuple:
        if not self.sizes:
            return tuple(types)
        return tuple(TensorType(tuple(self.shown(d) for d in t.shape), t.dtype) for t in types)


def _reduce(expr, sub: dict):
    expr = sympy.sympify(expr)
    while True:
        out = expr.xreplace(sub)
        if out == expr:
            return out
        expr = out


def derive(input_types) -> Derivation:
    """The :class:`Derivation` of a signature."""
    input_types = tuple(input_types)
    known = {d for t in input_types for d in t.shape if not isinstance(d, int) and d.is_Symbol}
    todo = [(i, axis, d) for i, t in enumerate(input_types) for axis, d in enumerate(t.shape)
            if not isinstance(d, int) and not d.free_symbols <= known]
    if not todo:
        return Derivation(input_types, {})
    sub: dict = {}  # an unknown -> its value in the sizes read
    sizes: dict = {}
    read: dict = {}  # (input, axis) -> the symbol read from it
    progress = True
    while progress:  # a size read may make another dimension solvable
        progress = False
        for i, axis, dim in todo:
            e = _reduce(dim, sub)
            unknown = _unknowns(e, known) if (i, axis) not in read else set()
            solved = _linear(e, next(iter(unknown))) if len(unknown) == 1 else None
            if solved is None:
                continue
            (u,), (a, b) = unknown, solved
            s = sympy.Symbol(f"_s{len(sizes)}", integer=True, positive=True)
            sub[u] = s - b if a == 1 else b - s if a == -1 else sympy.floor((s - b) / a)
            known.add(s)
            sizes[s] = Size(dim, i, axis, a, b)
            read[i, axis] = s
            progress = True
        # a dimension still unsolved (batch*seq, a model's rows flattened; batch*total, an
        # unknown times a known size) is read whole, and so is the same size wherever else it stands; its parts
        # stay unknown (an input needing one of them alone is still refused below)
        for i, axis, dim in todo:
            e = _reduce(dim, sub)
            if (i, axis) in read or not _unknowns(e, known):
                continue
            s = sympy.Symbol(f"_s{len(sizes)}", integer=True, positive=True)
            sub[e] = s
            known.add(s)
            sizes[s] = Size(dim, i, axis, 1, 0)
            read[i, axis] = s
            progress = True
            break
    types = []
    for i, t in enumerate(input_types):  # every size is now read or computable
        dims = [read.get((i, axis), d) if (i, axis) in read or isinstance(d, int) or
                d.free_symbols <= known else admissible(_reduce(d, sub), sizes)
                for axis, d in enumerate(t.shape)]
        types.append(TensorType(tuple(dims), t.dtype))
    return Derivation(tuple(types), sizes)


def admissible(expr, sizes: dict):
    """``expr`` in the simplest form it takes for every value of the derived sizes the
    dispatcher admits, so that sizes equal for all of them compare equal in a type relation.

    A size read from ``a*u + b`` with ``|a| > 1`` is checked to be ``b`` plus a multiple of
    ``a``: written ``a*k + b`` (``k`` an integer), ``floor(_s0/64)`` is ``k`` and
    ``64*floor(_s0/64)`` is ``64*k``, which is ``_s0`` back again; ``Mod(_s0, 64)`` is 0.
    A part that does not come back to the read sizes (``floor(_s0/64)`` alone) stays as it was.
    """
    expr = sympy.sympify(expr)
    steps = {s: (sympy.Dummy("k", integer=True), z) for s, z in sizes.items()
             if abs(z.a) != 1 and s in expr.free_symbols}
    if not steps:
        return simplify_dim(expr)
    e = sympy.expand(expr.xreplace({s: z.a * k + z.b for s, (k, z) in steps.items()}))
    for s, (k, z) in steps.items():
        if k not in e.free_symbols:
            continue
        lin = _linear(e, k)
        if lin is None or lin[0] % z.a:
            return simplify_dim(expr)
        e = lin[0] // z.a * (s - z.b) + lin[1]
    return simplify_dim(sympy.expand(e))
