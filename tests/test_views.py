"""Views: reshape, flatten, squeeze, expand_dims and transpose return views of their input (no
kernel, no copy) on every target: NumPy views sharing memory on numpy, pyopencl arrays over the
same buffer on opencl. A strided pyopencl input that a kernel needs contiguous is packed on
the device (one gather kernel), never through the host. Ends with a BERT-style attention
block whose only buffers are its kernels' outputs."""

import numpy as np
import pytest

import gpucg
from gpucg.half import numpy_dtype
from conftest import counted, opencl_arrays

rng = np.random.default_rng(5)

VIEWS = [  # (operator, input shape, attrs, NumPy)
    ("reshape", (4, 6, 8), {"shape": (8, 3, -1)}, lambda x: x.reshape(8, 3, -1)),
    ("reshape", (0, 5), {"shape": (5, 0)}, lambda x: x.reshape(5, 0)),
    ("flatten", (2, 3, 5, 7), {"axis": 2}, lambda x: x.reshape(6, 35)),
    ("flatten", (7,), {"axis": 0}, lambda x: x.reshape(1, 7)),
    ("squeeze", (3, 1, 5, 1), {"axis": -1}, lambda x: x[..., 0]),
    ("squeeze", (1, 1), {}, lambda x: x.reshape(())),
    ("expand_dims", (3, 5), {"axis": (0, -1)}, lambda x: x[None, :, :, None]),
    ("transpose", (2, 5, 12, 8), {"axes": (0, 2, 1, 3)}, lambda x: x.transpose(0, 2, 1, 3)),
    ("transpose", (3, 4), {}, lambda x: x.T),
]
DTYPES = ["float32", "int8", "float64", "float16", "bfloat16"]




@pytest.mark.parametrize("op,shape,attrs,fn", VIEWS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_views_share_memory(op, shape, attrs, fn, dtype):
    x = (rng.standard_normal(shape) * 50).astype(numpy_dtype(dtype))
    got = getattr(gpucg.ops, op)(x, target="numpy", **attrs)
    np.testing.assert_array_equal(got, fn(x))
    assert got.size == 0 or np.shares_memory(got, x)
    assert gpucg.compile(op, gpucg.tensor(shape, dtype), target="numpy",
                         **attrs).last_impl in (None, "shape_view", "transpose_view")


@pytest.mark.parametrize("op,shape,attrs,fn", VIEWS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_opencl_views_share_the_buffer(op, shape, attrs, fn, dtype):
    be, cla = opencl_arrays()
    x = (rng.standard_normal(shape) * 50).astype(numpy_dtype(dtype))
    xd = cla.to_device(be.queue, x)
    got, stats = counted(lambda: getattr(gpucg.ops, op)(xd, **attrs))
    assert isinstance(got, cla.Array) and got.base_data is xd.base_data
    assert stats["launches"] == stats["buffers"] == stats["device_copies"] == 0, stats
    np.testing.assert_array_equal(be.to_host(got), fn(x))
    # the copy kernels stay, forced
    kernel = {"reshape": "ew_contiguous", "transpose": "ew_strided"}.get(op, "copy")
    f = gpucg.compile(op, gpucg.tensor(shape, dtype), target="opencl", impl=kernel, **attrs)
    np.testing.assert_array_equal(f(x), fn(x))


def test_views_of_views_and_numpy_inputs_on_opencl():
    be, cla = opencl_arrays()
    x = rng.standard_normal((2, 5, 12, 8)).astype(np.float32)
    xd = cla.to_device(be.queue, x)
    t = gpucg.ops.transpose(xd, (0, 2, 1, 3))
    # a reshape the strides allow stays a view; one they do not is packed on the device
    split, stats = counted(lambda: gpucg.ops.reshape(t, (2, 12, 5, 2, 4)))
    assert split.base_data is xd.base_data and stats["device_copies"] == 0
    merged, stats = counted(lambda: gpucg.ops.reshape(t, (2, 12, 40)))
    assert stats["device_copies"] == 1 and stats["launches"] == 1, stats
    assert stats["uploads"] == stats["downloads"] == 0, stats
    np.testing.assert_array_equal(merged.get(), x.transpose(0, 2, 1, 3).reshape(2, 12, 40))
    # a NumPy input on opencl: uploaded once, the view comes back as NumPy
    got = gpucg.ops.transpose(x, (0, 2, 1, 3), target="opencl")
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, x.transpose(0, 2, 1, 3))


@pytest.mark.parametrize("dtype", ["float32", "int16", "float64", "uint8"])
def test_strided_pyopencl_inputs_never_go_through_the_host(dtype):
    """A transposed view and an offset slice into kernels that need packed input: gathered
    on the device (one kernel, one buffer), no upload and no download."""
    be, cla = opencl_arrays()
    x = (rng.standard_normal((3, 7, 10)) * 20).astype(dtype)
    xd = cla.to_device(be.queue, x)
    for view, want in ((xd.transpose((2, 0, 1)), x.transpose(2, 0, 1)), (xd[1:], x[1:]),
                       (gpucg.ops.transpose(xd[1:], (1, 0, 2)), x[1:].transpose(1, 0, 2))):
        got, stats = counted(lambda: gpucg.ops.cast(view, "float64"))
        assert stats["uploads"] == stats["downloads"] == 0, stats
        assert stats["device_copies"] == 1 and stats["launches"] in (1, 2), stats  # + the cast
        np.testing.assert_array_equal(got.get(), want.astype(np.float64))


def test_bert_attention_block_copies_nothing():
    """q, k and v from linear on (B, S, 768), viewed as (B, 12, S, 64) heads (reshape and
    transpose: views), scores by batch_matmul with transpose_b and alpha = 1/sqrt(64), softmax,
    the context by batch_matmul: every buffer is a kernel's output, nothing is uploaded,
    downloaded or copied on the device."""
    be, cla = opencl_arrays()
    B, S, H, D = 2, 9, 12, 64
    E = H * D
    x = rng.standard_normal((B, S, E)).astype(np.float32)
    ws = [(rng.standard_normal((E, E)) / np.sqrt(E)).astype(np.float32) for _ in range(3)]
    bs = [rng.standard_normal(E).astype(np.float32) for _ in range(3)]
    dev = [cla.to_device(be.queue, a) for a in [x] + ws + bs]

    def block():
        xd, wq, wk, wv, bq, bk, bv = dev
        heads = [gpucg.ops.transpose(gpucg.ops.reshape(gpucg.ops.linear(xd, w, b), (B, S, H, D)),
                                     (0, 2, 1, 3)) for w, b in ((wq, bq), (wk, bk), (wv, bv))]
        q, k, v = heads
        scores = gpucg.ops.batch_matmul(q, k, transpose_b=True, alpha=1 / np.sqrt(D))
        probs = gpucg.ops.softmax(scores, axis=-1)
        return gpucg.ops.batch_matmul(probs, v)

    out, stats = counted(block)
    kernels = stats["launches"]
    assert stats["buffers"] == kernels, stats  # 3 linear, 2 batch_matmul, softmax's
    assert stats["uploads"] == stats["downloads"] == stats["device_copies"] == 0, stats
    x64 = x.astype(np.float64)
    q, k, v = ((x64 @ w.T.astype(np.float64) + b).reshape(B, S, H, D).transpose(0, 2, 1, 3)
               for w, b in zip(ws, bs))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(out.get(), p @ v, rtol=1e-4, atol=1e-5)
