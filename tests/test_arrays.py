"""Arrays that stay on the device (gpucg.asarray, gpucg.to_host), the context check of device
arrays, host memory used in place on CPU OpenCL devices (counted, never timed), and the eager
fast path for NumPy arrays, device arrays and torch tensors."""

from types import SimpleNamespace

import numpy as np
import pytest

import gpucg
from gpucg.runtime import get_backend, use_backend
from gpucg.runtime.cuda_backend import CudaBackend
from gpucg.verify.cupy_standin import StandInArray, StandInCupy

from conftest import backend_or_skip


def _opencl():
    backend_or_skip("opencl")
    return get_backend("opencl")


def _aligned(shape, dtype=np.float32, offset=0):
    """A C-contiguous array whose data starts ``offset`` bytes past a 64-byte boundary."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.zeros(n + 128, np.uint8)
    start = -raw.ctypes.data % 64 + offset
    return raw[start:start + n].view(dtype).reshape(shape)


def test_asarray_gives_the_targets_own_array(target):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = gpucg.asarray(x, target=target)
    if target == "numpy":
        assert type(a) is np.ndarray
    elif target == "cuda":
        import cupy

        assert isinstance(a, cupy.ndarray)
    else:
        import pyopencl.array as cla

        assert isinstance(a, cla.Array) and a.context == get_backend("opencl").context
    np.testing.assert_array_equal(gpucg.to_host(a), x)
    assert gpucg.asarray(a, target=target) is a  # already there: no copy
    h = gpucg.asarray(a, target=target, dtype="float16")
    assert np.dtype(h.dtype) == np.float16
    np.testing.assert_array_equal(gpucg.to_host(h), x.astype(np.float16))
    np.testing.assert_array_equal(gpucg.to_host(gpucg.asarray([[1, 2], [3, 4]], target=target,
                                                               dtype=np.int32)), [[1, 2], [3, 4]])


def test_device_arrays_stay_on_the_device():
    _opencl()
    import pyopencl.array as cla

    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    w = rng.standard_normal((32, 96)).astype(np.float32)
    xd, wd = gpucg.asarray(x, target="opencl"), gpucg.asarray(w, target="opencl")
    gpucg.stats(reset=True)
    y = gpucg.ops.dense(xd, wd)  # the target follows the arrays
    s = gpucg.ops.sum(y, axis=1)
    assert isinstance(y, cla.Array) and isinstance(s, cla.Array)
    counts = gpucg.stats()
    assert counts["uploads"] == counts["downloads"] == counts["borrowed"] == 0
    want = (x.astype(np.float64) @ w.T.astype(np.float64)).sum(axis=1)
    np.testing.assert_allclose(gpucg.to_host(s), want, rtol=1e-4, atol=1e-3)


def test_to_host_takes_every_kind_of_array():
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32)
    h = gpucg.to_host(t)
    assert type(h) is np.ndarray and np.shares_memory(h, t.numpy())
    x = np.arange(3.0)
    assert gpucg.to_host(x) is x
    np.testing.assert_array_equal(gpucg.to_host(np.float32(2)), 2)
    with pytest.raises(gpucg.InputError, match=r"to_host: a=.*object.*must be"):
        gpucg.to_host(object())
    with pytest.raises(gpucg.InputError, match="asarray: x="):
        gpucg.asarray(object(), target="numpy")


def _other_context():
    """A pyopencl array of a second context on the same (PoCL) device."""
    import pyopencl as cl
    import pyopencl.array as cla

    backend = _opencl()
    ctx = cl.Context([backend.device])
    return cla.to_device(cl.CommandQueue(ctx), np.ones((4, 8), np.float32)), ctx


def test_an_array_of_another_context_is_an_error():
    foreign, ctx = _other_context()
    own = gpucg.asarray(np.ones((4, 8), np.float32), target="opencl")
    np.testing.assert_array_equal(gpucg.to_host(gpucg.ops.sum(own, axis=1)), 8)  # memoized
    ours = get_backend("opencl").context
    message = (rf"sum: x is a pyopencl array of context {ctx.int_ptr:#x} \(device .+\), but "
               rf"target opencl runs on context {ours.int_ptr:#x} \(device .+\); make it with "
               r"gpucg.asarray\(x, target='opencl'\)")
    for _ in range(2):  # the fast path checks it too
        with pytest.raises(gpucg.InputError, match=message):
            gpucg.ops.sum(foreign, axis=1)
    f = gpucg.compile("sum", gpucg.tensor((gpucg.var("n"), 8), "float32"), axis=1,
                      target="opencl")
    with pytest.raises(gpucg.InputError, match=message):
        f(foreign)
    with pytest.raises(gpucg.InputError, match=r"asarray: x is a pyopencl array of context"):
        gpucg.asarray(foreign, target="opencl")
    np.testing.assert_array_equal(gpucg.asarray(gpucg.to_host(foreign), target="numpy"), 1)


def test_a_cupy_array_on_another_device_is_an_error():
    other = StandInArray((4, 8), np.float32)
    other.device = SimpleNamespace(id=1)  # CuPy arrays say where they live
    with use_backend("cuda", CudaBackend(cupy=StandInCupy("sm_90", check=False))):
        f = gpucg.compile("cumsum", gpucg.tensor((4, 8), "float32"), axis=1, target="cuda")
        with pytest.raises(gpucg.InputError, match=r"cumsum: data is a cupy array on CUDA "
                                                   r"device 1, but target cuda runs on device 0"):
            f(other)


# -- host memory in place on devices that share it ------------------------------------------

def _shares_host():
    backend = _opencl()
    if not backend.shares_host:
        pytest.skip("the OpenCL device here does not share memory with the host")
    return backend


def test_host_inputs_are_used_in_place_and_not_kept():
    _shares_host()
    x = _aligned((256, 512))
    x[:] = np.random.default_rng(2).standard_normal(x.shape)
    gpucg.stats(reset=True)
    first = gpucg.ops.sum(x, axis=1, target="opencl")
    counts = gpucg.stats()
    assert counts["uploads"] == 0 and counts["borrowed"] == 1, counts
    np.testing.assert_allclose(first, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-4)
    kept = first.copy()
    x += 1  # the caller's array changes after the call: the next call sees it, the last
    second = gpucg.ops.sum(x, axis=1, target="opencl")  # result does not
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_allclose(second, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-4)


def test_inputs_that_cannot_be_used_in_place_are_copied():
    _shares_host()
    for x in (_aligned((1000,), offset=4),            # not on a 16-byte boundary
              np.ones((64, 64), np.float32)[:, ::2],  # strided
              np.broadcast_to(np.float32(3), (50,))):  # read-only
        gpucg.stats(reset=True)
        y = gpucg.ops.cumsum(x, axis=-1, target="opencl")
        np.testing.assert_allclose(y, np.cumsum(x.astype(np.float64), axis=-1), rtol=1e-5)
        assert gpucg.stats()["uploads"] == 1 and gpucg.stats()["borrowed"] == 0


@pytest.mark.parametrize("dtype,copies", [("float32", 0), ("float64", 2)])
def test_kernels_with_wide_vectors_get_aligned_copies(dtype, copies):
    """gemv loads K four at a time: a float4 (16 bytes) reads a 16-byte-aligned host array in
    place; a double4 needs 32 bytes, so host arrays 16 bytes off get a copy at the launch."""
    _shares_host()
    rng = np.random.default_rng(4)
    x, w = _aligned((4, 256), dtype, offset=16), _aligned((24, 256), dtype, offset=16)
    x[:], w[:] = rng.standard_normal(x.shape), rng.standard_normal(w.shape)
    f = gpucg.compile("dense", gpucg.tensor(x.shape, dtype), gpucg.tensor(w.shape, dtype),
                      target="opencl", impl="gemv")
    vector = "double4" if dtype == "float64" else "float4"
    assert any(vector in src for src in f.sources.values())
    gpucg.stats(reset=True)
    y = f(x, w)
    counts = gpucg.stats()
    assert counts["borrowed"] == 2 and counts["uploads"] == copies, counts
    np.testing.assert_allclose(y, x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-4,
                               atol=1e-4)


def test_large_results_come_back_mapped():
    _shares_host()
    x = _aligned((512, 1024))  # 2 MiB of result
    x[:] = 1
    gpucg.stats(reset=True)
    y = gpucg.ops.cumsum(x, axis=1, target="opencl")
    counts = gpucg.stats()
    assert counts["mapped"] == 1 and counts["downloads"] == 0 and counts["uploads"] == 0, counts
    assert isinstance(y, np.ndarray) and not np.shares_memory(y, x)
    np.testing.assert_array_equal(y[:, -1], 1024)
    x[:] = 2
    z = gpucg.ops.cumsum(x, axis=1, target="opencl")
    np.testing.assert_array_equal(y[:, -1], 1024)  # the first result is its own memory
    np.testing.assert_array_equal(z[:, -1], 2048)
    y[0, 0] = -1  # results are the caller's to write
    assert y[0, 0] == -1


def test_results_outlive_the_device_arrays_they_came_from():
    """A large result (device-resident input, fresh output, mapped back) stays intact after
    every device array of the call is gone and the host reuses freed memory: no buffer of
    ours may be host memory that dies before the queue or the mapping is done with it (main
    at 84913a7 corrupted the heap this way under ResNet-50 on opencl)."""
    import gc

    _shares_host()
    be = get_backend("opencl")
    x = be.to_device(np.ones((1024, 1536), np.float32))  # 6 MiB: over any size threshold
    f = gpucg.compile("cumsum", gpucg.tensor((1024, 1536), "float32"), axis=1, target="opencl")
    junk = []
    for _ in range(4):  # results dropped while their kernels may still be queued
        f(x)
        gc.collect()
        junk.append(np.full((1024, 1536), -7.0, np.float32))  # reuse freed memory
    d = f(x)
    y = be.to_host(d)
    del x, d
    gc.collect()
    junk += [np.full((1024, 1536), -7.0, np.float32) for _ in range(4)]
    be.queue.finish()
    np.testing.assert_array_equal(y[:, -1], 1536)
    np.testing.assert_array_equal(y[:, 0], 1)
    assert all((j == -7).all() for j in junk), "a kernel wrote into freed host memory"


def test_operators_leave_inputs_used_in_place_unchanged():
    _shares_host()
    rng = np.random.default_rng(3)
    a, b = _aligned((48, 64)), _aligned((32, 64))
    a[:], b[:] = rng.standard_normal(a.shape), rng.standard_normal(b.shape)
    img = _aligned((1, 3, 10, 10))
    img[:] = rng.standard_normal(img.shape)
    calls = [lambda: gpucg.ops.cumsum(a, axis=0, target="opencl"),
             lambda: gpucg.ops.topk(a, k=5, target="opencl"),
             lambda: gpucg.ops.argsort(a, target="opencl"),
             lambda: gpucg.ops.softmax(a, target="opencl"),
             lambda: gpucg.ops.dense(a, b, target="opencl"),
             lambda: gpucg.ops.add(a, a, target="opencl"),
             lambda: gpucg.ops.max_pool2d(img, (3, 3), target="opencl")]
    before = a.copy(), b.copy(), img.copy()
    for call in calls:
        call()
    for kept, now in zip(before, (a, b, img)):
        np.testing.assert_array_equal(kept, now)


# -- the eager fast path ---------------------------------------------------------------------

def _fast_calls(fn, n=3):
    fn()
    before = gpucg.stats()["fast_calls"]
    for _ in range(n):
        out = fn()
    return gpucg.stats()["fast_calls"] - before, out


def test_the_fast_path_serves_device_arrays_and_tensors(target):
    torch = pytest.importorskip("torch")
    x = np.arange(1000, dtype=np.float32) / 100
    want = np.cumsum(x.astype(np.float64))
    served, y = _fast_calls(lambda: gpucg.ops.cumsum(x, target=target))
    assert served == 3 and type(y) is np.ndarray
    t = torch.from_numpy(x.copy())
    served, y = _fast_calls(lambda: gpucg.ops.cumsum(t, target=target))
    assert served == 3 and isinstance(y, torch.Tensor)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5)
    d = gpucg.asarray(x, target=target)
    served, y = _fast_calls(lambda: gpucg.ops.cumsum(d, target=target))
    assert served == 3 and type(y) is type(d)
    np.testing.assert_allclose(gpucg.to_host(y), want, rtol=1e-5)
    tt = torch.from_numpy(x.reshape(10, 100).copy()).T  # strided: a view comes in
    served, y = _fast_calls(lambda: gpucg.ops.add(tt, tt, target=target))
    assert served == 3
    np.testing.assert_array_equal(y.numpy(), 2 * x.reshape(10, 100).T)


def test_the_fast_path_keeps_no_input_alive():
    torch = pytest.importorskip("torch")
    import gc
    import weakref

    t = torch.ones(777)
    gone = weakref.ref(t)
    for _ in range(2):
        gpucg.ops.cumsum(t, target="numpy")
    del t
    gc.collect()
    assert gone() is None


def test_large_buffers_take_huge_pages_and_keep_their_values():
    """Buffers of HUGE_BYTES and more on a host-memory device are the device's own memory,
    asked for huge pages through one map before their first touch and filled through it: an
    upload of an odd size comes back exact, and a kernel's fresh result too."""
    from gpucg.runtime import host_memory

    _shares_host()
    be = get_backend("opencl")
    n = host_memory.HUGE_BYTES // 4 + 1001  # not a whole number of pages
    x = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    d = be.to_device(x)
    np.testing.assert_array_equal(be.to_host(d), x)
    y = be.to_host(gpucg.ops.negative(d, target="opencl"))
    np.testing.assert_array_equal(y, -x)
    if host_memory.huge_pages_advisable():
        page = np.empty(host_memory.HUGE_BYTES, np.uint8)
        assert host_memory.advise_huge_pages(page.ctypes.data, page.nbytes)
    assert not host_memory.advise_huge_pages(4097, 100)  # no whole page in the range
