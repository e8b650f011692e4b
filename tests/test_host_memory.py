"""The numpy target's allocator setting (gpucg/runtime/host_memory.py): a compiled model on the
numpy target asks glibc's malloc once to keep freed memory, so arrays of a later call reuse
mapped pages (no page faults); GPUCG_HOST_KEEP_MEMORY=0 leaves malloc alone."""

from __future__ import annotations

import platform
import resource

import numpy as np
import pytest

import gpucg
from gpucg.runtime import host_memory

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")


@pytest.fixture(autouse=True)
def _forget():
    host_memory.keep_freed_memory.cache_clear()
    yield
    host_memory.keep_freed_memory.cache_clear()


def test_off_leaves_malloc_alone():
    with gpucg.settings.scope(GPUCG_HOST_KEEP_MEMORY="0"):
        assert host_memory.keep_freed_memory() == 0


@glibc
def test_a_numpy_model_keeps_freed_pages():
    """After an ONNX model is compiled for the numpy target, arrays of a model's sizes (14 MB
    to 600 KB, each freed as the next is made) reuse the pages of the round before: no page
    faults, where malloc left alone maps and trims them anew (about 1,400 faults)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    model = gpucg.onnx.compile(helper.make_model(graph), target="numpy")
    assert host_memory.keep_freed_memory.cache_info().currsize == 1  # the compile asked
    assert host_memory.keep_freed_memory() > 0
    np.testing.assert_array_equal(model(x=np.float32([-1, 2])), [0, 2])

    def layers():
        for size in (14 << 20, 3 << 20, 5 << 20, 1 << 20, 600 << 10, 9 << 20):
            a = np.ones(size // 4, np.float32)
        return a

    layers()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    last = layers()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert last[-1] == 1 and faults < 100, faults
