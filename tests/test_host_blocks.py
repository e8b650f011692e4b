"""The NumPy target in cache-sized blocks: elementwise operators and fused expressions
evaluated block by block over the output (broadcast inputs, scalars, every rank, special
values), and the conv2d/dense epilogue's activation written over its result a block at a time:
each equal to the whole-array NumPy form bit for bit (tiny blocks here, so that every edge of
the cutting is crossed)."""

from __future__ import annotations

import numpy as np
import pytest

import gpucg
from gpucg.ops import _epilogue
from gpucg.strategies import elementwise

SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45, 3.0, -3.0, 0.5, 60.0,
                    -60.0, 1e30, -1e30], np.float32)


def _data(shape, rng):
    x = rng.standard_normal(shape).astype(np.float32) * 4
    flat = x.reshape(-1)
    flat[: min(flat.size, SPECIAL.size)] = SPECIAL[: flat.size]
    return x


@pytest.mark.parametrize("block", [1, 7, 64])
@pytest.mark.parametrize("shapes", [
    ((2, 3, 5, 7), (2, 3, 1, 1)),  # SE's scale: (n, c, 1, 1) over a feature map
    ((2, 3, 5, 7), (7,)),  # a lower rank, right-aligned
    ((1, 4, 9), (3, 1, 9)),  # both broadcast
    ((0, 5), (1, 5)),  # empty
    ((13,), ()),  # a 0-d input
])
def test_blocked_elementwise_equals_whole_arrays(monkeypatch, shapes, block):
    rng = np.random.default_rng(len(shapes[0]) + block)
    a, b = (_data(s, rng) for s in shapes)
    expr = "add(multiply(silu(x0), x1), hardswish(divide(x0, x1)))"  # computes: in blocks
    op = gpucg.get_op("fused")
    want = op.reference(a, b, op.make_attrs(expr=expr))
    monkeypatch.setattr(elementwise, "HOST_BLOCK", block)
    f = gpucg.compile("fused", gpucg.tensor(a.shape), gpucg.tensor(b.shape), target="numpy",
                      expr=expr)
    got = gpucg.to_host(f(a, b))
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    cuts = list(elementwise.host_blocks(want.shape, block))
    assert want.size < 2 * block or len(cuts) > 1


@pytest.mark.parametrize("activation", [a for a in _epilogue.ACTIVATIONS if a])
def test_activation_in_place_equals_the_operator(monkeypatch, activation):
    monkeypatch.setattr(_epilogue, "ACTIVATE_BLOCK", 5)
    y = np.concatenate([SPECIAL, np.linspace(-8, 8, 37, dtype=np.float32)])
    want = _epilogue.activate(y.copy(), activation)
    got = _epilogue.activate_in_place(y.copy(), activation)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "softmax", "log_softmax"])
def test_norms_by_blocks_of_rows_equal_whole_arrays(monkeypatch, op):
    """The host normalizes rows of the last axis a few at a time: the same numbers as all at
    once (rows of special values, huge and tiny rows, a ragged last block)."""
    from gpucg.strategies import norm

    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 7, 9)).astype(np.float32)
    x[0, 0], x[0, 1, :4], x[1, 2] = SPECIAL[:9], 1e30, 1e-30
    params = [rng.standard_normal(9).astype(np.float32) for _ in range(2)]
    kw = {} if op in ("softmax", "log_softmax") else {"gamma": params[0]}
    if op == "layer_norm":
        kw["beta"] = params[1]
    f = getattr(gpucg.ops, op)
    want = gpucg.to_host(f(x, **kw, target="numpy"))
    monkeypatch.setattr(norm, "NORM_BLOCK", 2 * 9)  # two rows a block, 11 blocks
    got = gpucg.to_host(f(x, **kw, target="numpy"))
    np.testing.assert_array_equal(got, want)
