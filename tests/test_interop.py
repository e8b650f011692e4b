"""Arrays from any framework: DLPack and __cuda_array_interface__ in, the same framework out.

array-api-strict (a light DLPack producer, in the test extra) runs everywhere; torch runs where
its CPU build installs (make test tries the local wheel); a torch CUDA tensor needs the GPU
tier. A framework's CPU array comes in without a copy (np.from_dlpack) and results go back out
through the framework's own from_dlpack.
"""

import numpy as np
import pytest

import gpucg
from gpucg.interop import ingest, ingest_all

xp = pytest.importorskip("array_api_strict", reason="array-api-strict is in the test extra")


def torch_or_skip():
    try:
        import torch
    except ImportError as exc:
        pytest.skip(f"torch is not installed here ({exc}); `make test` installs its CPU build "
                    "when the local wheel torch==2.13.0+cpu is reachable")
    return torch


def test_array_api_arrays_in_and_out(target):
    a = xp.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    y = gpucg.ops.cumsum(a, axis=1, target=target)
    assert type(y) is type(a)
    np.testing.assert_array_equal(np.from_dlpack(y), np.cumsum(np.from_dlpack(a), axis=1))
    values, indices = gpucg.ops.topk(a, k=2, target=target)
    assert type(values) is type(a) and type(indices) is type(a)
    np.testing.assert_array_equal(np.from_dlpack(indices), [[3, 2]] * 3)


def test_dlpack_cpu_input_is_not_copied():
    a = xp.asarray(np.arange(6, dtype=np.float64))
    native, kind, framework = ingest(a, "data", "cumsum")
    assert kind == "numpy" and framework.name == "array_api_strict"
    assert np.shares_memory(native, np.from_dlpack(a))


def test_mixed_frameworks_are_an_error():
    a = xp.asarray(np.ones(3, np.float32))
    with pytest.raises(gpucg.InputError, match=r"different frameworks \(a is a array_api_strict.Array, "
                                               r"b is a numpy.ndarray\)"):
        gpucg.ops.add(a, np.ones(3, np.float32), target="numpy")
    with pytest.raises(gpucg.InputError, match="different frameworks"):
        ingest_all((np.ones(2), a), ("x", "y"), "op")


def test_objects_that_are_not_arrays_are_an_error():
    with pytest.raises(gpucg.InputError, match=r"data=\[1, 2\].*__dlpack__"):
        gpucg.ops.cumsum([1, 2], target="numpy")


class _OnAnotherDevice:
    """A DLPack producer on a device gpucg does not take (kDLOpenCL = 4)."""

    def __dlpack_device__(self):
        return (4, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("never exported")


class _CudaInterfaceOnly:
    __cuda_array_interface__ = {"shape": (3,), "typestr": "<f4", "data": (0, False), "version": 3}


def test_unsupported_devices_and_missing_cupy_are_clear():
    with pytest.raises(gpucg.InputError, match="DLPack device type 4; gpucg takes CPU and CUDA"):
        gpucg.ops.cumsum(_OnAnotherDevice(), target="numpy")
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(gpucg.InputError, match="needs CuPy"):
            gpucg.ops.cumsum(_CudaInterfaceOnly(), target="numpy")


def test_torch_cpu_tensors_in_and_out(target):
    torch = torch_or_skip()
    t = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    y = gpucg.ops.cumsum(t, axis=-1, target=target)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.device.type == "cpu"
    assert torch.equal(y, torch.cumsum(t, dim=-1))
    v, i = gpucg.ops.topk(t.transpose(1, 2), k=2, axis=1, target=target)  # non-contiguous
    want = torch.topk(t.transpose(1, 2), k=2, dim=1)
    assert torch.equal(v, want.values) and torch.equal(i.long(), want.indices)
    s = gpucg.ops.argsort(torch.tensor([[3, 1, 2]], dtype=torch.int64), target=target)
    assert isinstance(s, torch.Tensor) and s.tolist() == [[1, 2, 0]]


def test_torch_output_shares_memory_with_the_result():
    torch = torch_or_skip()
    t = torch.ones(5, dtype=torch.float64)
    native, kind, framework = ingest(t, "data", "cumsum")
    assert kind == "numpy" and np.shares_memory(native, t.numpy())
    out = np.arange(4.0)
    wrapped = framework.wrap(out)
    assert isinstance(wrapped, torch.Tensor) and np.shares_memory(wrapped.numpy(), out)


def test_torch_with_numpy_is_an_error():
    torch = torch_or_skip()
    with pytest.raises(gpucg.InputError, match="a is a torch.Tensor, b is a numpy.ndarray"):
        gpucg.ops.add(torch.ones(3), np.ones(3, np.float32), target="numpy")


def test_compiled_op_takes_framework_arrays_too(target):
    a = xp.asarray(np.ones((4, 8), np.float32))
    f = gpucg.compile("cumsum", gpucg.tensor((gpucg.var("n"), 8), "float32"), axis=1,
                      target=target)
    y = f(a)
    assert type(y) is type(a)
    np.testing.assert_array_equal(np.from_dlpack(y)[:, -1], np.full(4, 8))
