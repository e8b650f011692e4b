"""The shared schedules (register_injective/broadcast/reduce_schedule) on small operators."""

import numpy as np
import pytest

import gpucg


@pytest.mark.parametrize("dtype", ["int32", "float32", "float64"])
def test_relu(target, dtype):
    x = (np.arange(-50, 51) * 1.5).astype(dtype).reshape(101, 1)
    np.testing.assert_array_equal(gpucg.ops.relu(x, target=target), np.maximum(x, 0))


@pytest.mark.parametrize("sa,sb", [((5, 7), (7,)), ((5, 1), (1, 7)), ((3, 1, 4), (2, 1)),
                                   ((6,), (6,)), ((1,), (4, 3)), ((0, 3), (3,))])
def test_add_broadcasts(target, sa, sb):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    np.testing.assert_allclose(gpucg.ops.add(a, b, target=target), a + b, rtol=1e-6)


def test_add_errors():
    with pytest.raises(gpucg.InputError, match="do not broadcast"):
        gpucg.ops.add(np.ones((2, 3), np.float32), np.ones((4,), np.float32), target="numpy")
    with pytest.raises(gpucg.DTypeError, match="same dtype"):
        gpucg.ops.add(np.ones(3, np.float32), np.ones(3, np.float64), target="numpy")


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_sum(target, axis):
    x = np.arange(2 * 3 * 5, dtype=np.int32).reshape(2, 3, 5)
    got = gpucg.ops.sum(x, axis=axis, target=target)
    np.testing.assert_array_equal(got, np.sum(x, axis=axis))
    assert got.dtype == np.int64


def test_shared_schedule_names():
    sel = gpucg.explain("add", gpucg.tensor((4, 4), "float32"), gpucg.tensor((4,), "float32"),
                        target="cuda")
    assert sel.choices[0].impl.name == "broadcast.cuda"
    assert gpucg.get_op("relu").pattern is gpucg.OpPattern.INJECTIVE
    assert gpucg.get_op("sum").pattern is gpucg.OpPattern.REDUCE
