"""A compiled operator on OpenCL replays a kernel implementation's launches for arrays of shapes
it has run (gpucg.run_context.Replay): the same kernels, grids and scalars, on fresh outputs and
scratch, without the implementation's launch code. These tests check that a replayed call is a
call (new data, new results, errors still raised) and that runs doing more than launching are
never replayed."""

from __future__ import annotations

import numpy as np
import pytest

import gpucg
from gpucg import counters

from conftest import backend_or_skip


@pytest.fixture
def opencl():
    backend_or_skip("opencl")
    from gpucg.runtime import get_backend

    return get_backend("opencl")


def _counted(fn) -> tuple[int, int]:
    """(kernels launched, calls replayed) while ``fn`` runs."""
    before = counters.snapshot()
    fn()
    after = counters.snapshot()
    return after["launches"] - before["launches"], after["replays"] - before["replays"]


def test_a_replayed_call_is_the_same_launches_on_new_data(opencl):
    """argmax over long rows takes two passes through scratch (split rows); the second call of
    each shape replays them, and every call's indices are NumPy's, NaN and ties included."""
    n = gpucg.var("n")
    f = gpucg.compile("argmax", gpucg.tensor((n, 20000), "float32"), axis=-1, target="opencl",
                      impl="reduce_split", config={"wg": 64, "unroll": 2, "two_pass": False,
                                                    "vw": 1, "simd": 1, "chunk_items": 16,
                                                    "groups": 1024})
    rng = np.random.default_rng(0)
    counts = []
    for rows in (3, 3, 5, 3, 5):
        x = opencl.to_device(rng.standard_normal((rows, 20000)).astype(np.float32))
        got = []
        counts.append(_counted(lambda: got.append(opencl.to_host(f(x)))))
        x = opencl.to_host(x)
        np.testing.assert_array_equal(got[0], np.argmax(x, axis=-1))
        x[0, 7], x[1, 5:9] = np.nan, 1e30  # NaN wins; the first of equal maxima
        np.testing.assert_array_equal(opencl.to_host(f(opencl.to_device(x))), np.argmax(x, -1))
    # part and merge each time; the first call of each shape records, the others replay
    assert counts == [(2, 0), (2, 1), (2, 0), (2, 1), (2, 1)]


def test_host_inputs_and_outputs_through_a_replay(opencl):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    f = gpucg.compile("sum", gpucg.tensor((4, 6), "float32"), axis=0, target="opencl")
    for k in range(3):
        got = []
        _, replayed = _counted(lambda: got.append(f(x + k)))
        np.testing.assert_allclose(got[0], (x + k).sum(axis=0))
        assert replayed == (k > 0)


def test_an_input_passed_twice_is_not_mistaken_for_one(opencl):
    """A run recorded with one array as both inputs is not replayed for two arrays."""
    f = gpucg.compile("add", gpucg.tensor((5, 7), "float32"), gpucg.tensor((5, 7), "float32"),
                      target="opencl")
    a = opencl.to_device(np.ones((5, 7), np.float32))
    b = opencl.to_device(np.full((5, 7), 3, np.float32))
    np.testing.assert_array_equal(opencl.to_host(f(a, a)), 2)
    np.testing.assert_array_equal(opencl.to_host(f(a, b)), 4)
    np.testing.assert_array_equal(opencl.to_host(f(b, a)), 4)
    np.testing.assert_array_equal(opencl.to_host(f(b, b)), 6)


def test_runs_that_read_data_back_are_never_replayed(opencl):
    """take checks its indices on the device and reads the count back: each call runs its
    launch code, so a bad index after good ones of the same shape still raises."""
    f = gpucg.compile("take", gpucg.tensor((4, 5), "float32"), gpucg.tensor((3,), "int64"),
                      axis=1, target="opencl")
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    for _ in range(2):
        got = []
        _, replayed = _counted(lambda: got.append(f(x, np.array([0, 4, -1]))))
        np.testing.assert_array_equal(got[0], np.take(x, [0, 4, -1], axis=1))
        assert not replayed
    with pytest.raises(gpucg.InputError, match=r"indices\[1\] = 5 is out of range"):
        f(x, np.array([0, 5, 1]))


def test_in_place_writes_are_never_replayed(opencl):
    """kv_cache_write's outputs are its inputs: not recorded, and each call writes its own."""
    t, nb, bs, h, d = 3, 2, 4, 1, 8
    f = gpucg.compile("kv_cache_write", gpucg.tensor((t, h, d), "float32"),
                      gpucg.tensor((t, h, d), "float32"), gpucg.tensor((nb, bs, h, d), "float32"),
                      gpucg.tensor((nb, bs, h, d), "float32"), gpucg.tensor((t,), "int32"),
                      target="opencl")
    kc, vc = np.zeros((nb, bs, h, d), np.float32), np.zeros((nb, bs, h, d), np.float32)
    for step in range(2):
        k = np.full((t, h, d), step + 1, np.float32)
        slots = np.arange(t, dtype=np.int32) + step * t
        assert _counted(lambda: f(k, -k, kc, vc, slots))[1] == 0
        np.testing.assert_array_equal(kc.reshape(-1, h, d)[slots], k)
        np.testing.assert_array_equal(vc.reshape(-1, h, d)[slots], -k)


def test_the_tuners_launch_check_sees_every_launch(opencl):
    f = gpucg.compile("sum", gpucg.tensor((4, 6), "float32"), axis=1, target="opencl")
    seen = []
    f.launch_check = lambda program, key, grid, block, shared: seen.append(key)
    x = np.ones((4, 6), np.float32)
    assert sum(_counted(lambda: f(x))[1] for _ in range(3)) == 0
    assert len(seen) == 3


def test_replays_are_kept_for_a_bounded_number_of_shapes(opencl, monkeypatch):
    """With room for two shapes, a third begins the memo anew: the first is recorded again."""
    from gpucg import compiled

    monkeypatch.setattr(compiled, "REPLAYS", 2)
    n = gpucg.var("n")
    f = gpucg.compile("relu", gpucg.tensor((n,), "float32"), target="opencl")
    replayed = []
    for size in (1, 2, 1, 2, 3, 1, 1):
        x = np.linspace(-1, 1, size, dtype=np.float32)
        got = []
        replayed.append(_counted(lambda: got.append(f(x)))[1])
        np.testing.assert_array_equal(got[0], np.maximum(x, 0))
    assert replayed == [0, 0, 1, 1, 0, 0, 1]


def test_a_call_made_again_checks_what_it_must(opencl):
    """A call whose arguments have the types, shapes and dtypes of one that replayed goes
    straight to the replay (gpucg.run_context.CallsAgain); anything else takes the whole path:
    another dtype is still refused, a pyopencl view is still copied before the kernels read it,
    and a tuner's launch_check still sees every launch."""
    import pyopencl.array as cla

    f = gpucg.compile("argmax", gpucg.tensor((gpucg.var("n"), 300), "float32"), axis=-1,
                      target="opencl")
    rng, first = np.random.default_rng(1), True
    for make in (lambda a: a, opencl.to_device, lambda a: cla.to_device(opencl.queue, a)):
        for _ in range(3):
            x = rng.standard_normal((4, 300)).astype(np.float32)
            x[1, 17] = np.nan
            x[2, 5:9] = 7.0
            got = []
            counts = _counted(lambda: got.append(opencl.to_host(f(make(x)))))
            np.testing.assert_array_equal(got[0], np.argmax(x, -1))
            assert counts == (1, 0 if first else 1)  # the first records; the rest replay
            first = False
    with pytest.raises(gpucg.errors.SignatureError, match="float64"):
        f(x.astype(np.float64))
    with pytest.raises(gpucg.errors.SignatureError, match="rank"):
        f(x[0])
    # a view at an offset and a strided one: never made again as they are
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((5, 300), (4, 600)))
    da, db = cla.to_device(opencl.queue, a), cla.to_device(opencl.queue, b)
    for view, want in ((da[1:], a[1:]), (db[:, ::2], b[:, ::2])):
        for _ in range(2):
            np.testing.assert_array_equal(opencl.to_host(f(view)), np.argmax(want, -1))
    seen = []
    f.launch_check = lambda *a: seen.append(a)
    np.testing.assert_array_equal(f(x), np.argmax(x, -1))
    assert seen


def test_a_call_made_again_after_the_memo_is_full(opencl, monkeypatch):
    """Room for two kinds of call: a third begins the memo anew, and every call is right."""
    from gpucg import compiled

    monkeypatch.setattr(compiled, "REPLAYS", 2)
    f = gpucg.compile("sum", gpucg.tensor((gpucg.var("n"),), "float32"), axis=0, target="opencl")
    for n in (3, 4, 5, 3, 4, 5, 6):
        x = np.arange(n, dtype=np.float32)
        for _ in range(2):
            assert float(f(x)) == float(x.sum())
        d = opencl.to_device(x)  # another kind of array: remembered beside the NumPy one
        assert float(opencl.to_host(f(d))) == float(x.sum())
