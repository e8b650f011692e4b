"""Size-dependent values: what depends on the sizes but on no data (a causal mask sliced to the
sequence, ``arange(seq)``, RoPE's cosines), computed on the host once per new binding of the
sizes by the node that makes it (its ``compute``: a front end's evaluator, or a
:class:`~gpucg.graph.ir.HostNode`'s function), never per call. Where a front end does not know
their types (symbolic), they are found by computing them at a few probe bindings of the sizes
and fitting each dimension as an integer affine function of the symbols, checked at one more
binding."""

from __future__ import annotations

import numpy as np
import sympy

from ..shape import TensorType
from .ir import Graph, HostNode
from .sizes import concrete

#: probe sizes: small (a tiny model's position table has 64 rows: past + seq stays below
#: them), distinct, never 1
PRIMES = [3, 5, 7, 11, 13, 17, 19, 23]


def value_at(g: Graph, name: str, binding: dict, memo: dict) -> np.ndarray:
    """A constant, size vector or size-dependent value for one binding of the symbols
    (symbol -> int), computed on the host; ``memo`` keeps what was computed."""
    if name in g.consts:
        return g.consts[name]
    if name in g.sizes:
        return concrete(g.sizes[name], binding).astype(g.size_dtypes.get(name, "int64"))
    if name not in memo:
        node = g.dynamic.get(name)
        if node is None:
            raise g.error(f"value {name!r} depends on the model's input data, not on its "
                            "sizes only")
        args = [value_at(g, i, binding, memo) for i in node.inputs if i]
        memo.update(zip(node.outputs, (np.asarray(v) for v in node.compute(args))))
    return memo[name]


def host_value(g: Graph, name: str, what: str, fn, inputs: list, type_=None) -> str:
    """A size-dependent value ``name`` = ``fn(*inputs)`` on their NumPy values (constants, size
    vectors, size-dependent values), computed once per binding of the sizes; ``what`` names
    it in explain; ``type_``: its TensorType where known (else found at probe sizes)."""
    g.dynamic[name] = HostNode(name, what, list(inputs), [name], fn)
    if type_ is not None:
        g.types[name] = type_
    return name


def size_vector(g: Graph, name: str, dims) -> str:
    """A size vector ``name`` of ``dims`` (ints and the model's symbols)."""
    g.sizes[name] = np.array(list(dims), dtype=object)
    return name


def size_ones(g: Graph, name: str, dims) -> str:
    """A size-dependent value ``name``: True of sizes ``dims`` (ints and the model's symbols),
    made on the host once per binding of the sizes (what a symbolic broadcast selects its
    input against)."""
    shape = size_vector(g, name + "/shape", dims)
    return host_value(g, name, "ones", lambda s: np.ones(tuple(s), bool), [shape],
                      TensorType(tuple(dims), "bool"))


def probes(g: Graph, count: int = 2) -> list[dict]:
    """``count`` bindings of the model's symbols to distinct small sizes, each a different
    draw (so that the columns of an affine fit are independent)."""
    out = []
    for off in range(count):
        pick = np.random.default_rng(off).permutation(len(PRIMES))
        out.append({s: PRIMES[pick[k % len(PRIMES)]] for k, s in enumerate(g.symbols.values())})
    return out


def dynamic_type(g: Graph, name: str) -> TensorType:
    """The type of a size-dependent value: each dim an integer affine function of the
    symbols, fitted at probe bindings (as many as the symbols, plus two) and checked at
    another."""
    free = list(g.symbols.values())
    bindings = probes(g, len(free) + 2)
    values = [value_at(g, name, b, {}) for b in bindings]
    if len({v.ndim for v in values}) != 1:
        raise g.error(f"value {name!r}: its rank depends on the sizes")
    dims = []
    for axis in range(values[0].ndim):
        seen = [v.shape[axis] for v in values]
        if len(set(seen)) == 1:
            dims.append(int(seen[0]))
            continue
        dims.append(_fit(g, name, free, bindings, seen))
    return TensorType(tuple(dims), values[0].dtype.name)


def _fit(g, name, free, bindings, seen):
    a = np.array([[1] + [b[s] for s in free] for b in bindings], dtype=np.float64)
    coef, *_ = np.linalg.lstsq(a[:-1], np.array(seen[:-1], np.float64), rcond=None)
    c = np.rint(coef).astype(np.int64)
    if not np.allclose(coef, c, atol=1e-6) or int(a[-1] @ c) != seen[-1]:
        raise g.error(f"value {name!r} has a dimension ({', '.join(map(str, seen))} at "
                        "the probe sizes) that is no integer affine function of the model's "
                        "symbolic sizes")
    expr = int(c[0]) + sum(int(k) * s for k, s in zip(c[1:], free))
    return int(expr) if sympy.sympify(expr).is_Integer else expr
