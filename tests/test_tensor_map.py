"""Tensor maps on the host (gpucg/codegen/tma.py, gpucg/runtime/tensor_map.py): each of
cuTensorMapEncodeTiled's documented requirements refused with a clear error, the driver call's
arguments, the encode path up to the driver (a recording driver here; without libcuda a clear
error), and the launch stand-in's checks of tensor-map parameters."""

import types

import numpy as np
import pytest

import gpucg
from gpucg.codegen.tma import CUDA_TENSOR_MAP_TYPE, TensorMap
from gpucg.runtime.tensor_map import TensorMapArg, driver_arguments, encode
from gpucg.verify.cupy_standin import LaunchCheckError, StandInArray, check_args, kernel_params

GOOD = dict(dtype="float16", dims=(4096, 1024), strides=(8192,), box=(64, 128), swizzle=128,
            address=0x7F0000001000)


def test_a_good_map_and_its_driver_arguments():
    t = TensorMap(**GOOD)
    assert (t.rank, t.elem_bytes, t.box_bytes) == (2, 2, 64 * 128 * 2)
    assert driver_arguments(t) == dict(
        tensorDataType=6, tensorRank=2, globalAddress=0x7F0000001000, globalDim=[4096, 1024],
        globalStrides=[8192], boxDim=[64, 128], elementStrides=[1, 1], interleave=0,
        swizzle=3, l2Promotion=0, oobFill=0)
    # NumPy order in, the driver's out; FP8 travels as UINT8
    f = TensorMap.for_array((1024, 4096), "float8_e4m3fn", (128, 128), swizzle=128,
                            l2_promotion=256)
    assert (f.dims, f.strides, f.box) == ((4096, 1024), (4096,), (128, 128))
    assert driver_arguments(f)["tensorDataType"] == 0 and driver_arguments(f)["l2Promotion"] == 3
    s = TensorMap.for_array((8, 64, 96), "bfloat16", (1, 64, 64), strides=(64 * 256, 256, 2))
    assert s.strides == (256, 64 * 256) and driver_arguments(s)["tensorDataType"] == 9


BAD = [
    (dict(dims=()), "rank 0"),
    (dict(dims=(2,) * 6, strides=(16,) * 5, box=(1,) * 6), "rank 6 .* must be 1 to 5"),
    (dict(address=0x1008), "address=0x1008 must be 16-byte aligned"),
    (dict(interleave="32B", swizzle=32, dims=(64, 8, 8), strides=(128, 1024), box=(16, 8, 8),
          address=0x1010), "must be 32-byte aligned"),
    (dict(interleave="16B"), "interleave='16B' needs rank >= 3"),
    (dict(dims=(0, 1024)), r"dims\[0\]=0 must be in \[1, 2\*\*32\]"),
    (dict(dims=(4096, 2**32 + 1)), r"dims\[1\]"),
    (dict(strides=(8200,)), r"strides\[0\]=8200 bytes must be a positive multiple of 16"),
    (dict(strides=(2**40,)), "below 2\\*\\*40"),
    (dict(strides=(4096,)), r"strides\[0\]=4096 bytes overlaps dimension 0: at least "
                            r"dims\[0\] \* elem_bytes = 8192"),
    (dict(dims=(64, 8, 8), strides=(128, 512), box=(64, 8, 8)),
     r"strides\[1\]=512 bytes overlaps dimension 1: at least dims\[1\] \* strides\[0\] = 1024"),
    (dict(interleave="32B", swizzle=32, dims=(64, 8, 8), strides=(144, 2048), box=(16, 8, 8)),
     "multiple of 32 with interleave 32B"),
    (dict(box=(64, 257)), r"box\[1\]=257 must be in \[1, 256\]"),
    (dict(box=(0, 128)), r"box\[0\]=0"),
    (dict(box=(4, 128), swizzle=0), "box\\[0\\] \\* elem_bytes = 8 must be a multiple of 16"),
    (dict(box=(128, 128)), "256 bytes exceeds the 128-byte swizzle span"),
    (dict(box=(64, 128), swizzle=64), "128 bytes exceeds the 64-byte swizzle span"),
    (dict(element_strides=(1, 9)), r"element_strides\[1\]=9 must be in \[1, 8\]"),
    (dict(interleave="32B", swizzle=64, dims=(64, 8, 8), strides=(128, 1024), box=(16, 8, 8)),
     "interleave 32B needs swizzle=32"),
    (dict(dtype="int32", strides=(16384,), box=(32, 128), oob_fill="nan"),
     "oob_fill=.nan. needs a float dtype"),
    (dict(dtype="complex64"), "dtype='complex64' is not allowed"),
    (dict(swizzle=16), "swizzle=16 is not allowed"),
    (dict(l2_promotion=32), "l2_promotion=32 is not allowed"),
    (dict(interleave="8B"), "interleave='8B' is not allowed"),
    (dict(box=(64, 1.5)), "box=.* must be a sequence of ints"),
]


@pytest.mark.parametrize("change,msg", BAD, ids=[m[:24] for _, m in BAD])
def test_each_documented_requirement_is_checked(change, msg):
    with pytest.raises(gpucg.InputError, match="TensorMap.*" + msg):
        TensorMap(**{**GOOD, **change})


class RecordingDriver(types.SimpleNamespace):
    """cuda.bindings.driver's surface that encode() uses, recording the call."""

    def __init__(self, err=0):
        ident = lambda v: v  # noqa: E731
        super().__init__(cuuint32_t=ident, cuuint64_t=ident, CUtensorMapDataType=ident,
                         CUtensorMapInterleave=ident, CUtensorMapSwizzle=ident,
                         CUtensorMapL2promotion=ident, CUtensorMapFloatOOBfill=ident,
                         calls=[], err=err)

    def cuTensorMapEncodeTiled(self, *args):
        self.calls.append(args)
        return self.err, types.SimpleNamespace(opaque=list(range(16)))


def test_encode_up_to_the_driver_call():
    drv = RecordingDriver()
    arg = encode(TensorMap(**{**GOOD, "address": 0}), 0x7F0000002000, driver=drv)
    (call,) = drv.calls
    assert call == (6, 2, 0x7F0000002000, [4096, 1024], [8192], [64, 128], [1, 1], 0, 3, 0, 0)
    assert arg.tensor_map.address == 0x7F0000002000 and np.asarray(arg.value).nbytes == 128
    assert np.frombuffer(arg.value.tobytes(), np.uint64).tolist() == list(range(16))
    with pytest.raises(gpucg.LaunchError, match="cuTensorMapEncodeTiled refused .* error 1"):
        encode(TensorMap(**GOOD), driver=RecordingDriver(err=1))
    with pytest.raises(gpucg.InputError, match="address=0x7 must be 16-byte aligned"):
        encode(TensorMap(**GOOD), 7, driver=drv)


def test_encode_without_a_driver_is_a_clear_error():
    try:
        arg = encode(TensorMap(**GOOD))
    except gpucg.BackendUnavailableError as exc:  # no libcuda (CI, this machine)
        assert "needs the CUDA driver (libcuda)" in str(exc) or "cuda-bindings" in str(exc)
    else:  # a machine with a driver encodes for real
        assert np.asarray(arg.value).nbytes == 128


KERNELS = CUDA_TENSOR_MAP_TYPE + """
struct gpucg_unaligned_map { unsigned long long opaque[16]; };
extern "C" __global__ void k(const __grid_constant__ gpucg_tensor_map tm, float* y, int n)
{ if (threadIdx.x == 0) y[0] = (float)tm.opaque[3] + n; }
extern "C" __global__ void u(const __grid_constant__ gpucg_unaligned_map tm, float* y)
{ if (threadIdx.x == 0) y[0] = (float)tm.opaque[3]; }
extern "C" __global__ void p(const gpucg_tensor_map* tm, float* y)
{ if (threadIdx.x == 0) y[0] = (float)tm->opaque[3]; }
"""


def test_the_stand_in_checks_tensor_map_parameters(nvrtc_or_skip):
    from gpucg.verify import nvrtc

    ptx = nvrtc.compile_to_ptx(KERNELS, "sm_90")
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    params = {e: kernel_params(KERNELS, e, ptx) for e in ("k", "u", "p")}
    assert params["k"][0].tensor_map and params["k"][0].align == 64
    y = StandInArray((4,), np.float32)
    good = TensorMapArg(TensorMap(**GOOD), np.zeros(1, np.dtype((np.void, 128)))[0])
    check_args("k", params["k"], (good, y, np.int32(3)))

    def bad(entry, args, msg):
        with pytest.raises(LaunchCheckError, match=msg):
            check_args(entry, params[entry], args)

    bad("k", (y, y, np.int32(3)), "takes a tensor map by value")
    bad("p", (good, y), "a tensor map goes by value to a 'const __grid_constant__' parameter")
    bad("u", (good, y), "declared 8-byte aligned; a tensor map needs 64")
    unbound = TensorMapArg(TensorMap(**{**GOOD, "address": 0}), good.value)
    bad("k", (unbound, y, np.int32(3)), "bound to no address")
    small = TensorMapArg(TensorMap(**{**GOOD, "dims": (4096, 100)}), good.value)
    check_args("k", params["k"], (small, y, np.int32(3)))  # a box past the tensor: filled
    short = TensorMapArg(TensorMap(**GOOD), np.zeros(1, np.dtype((np.void, 64)))[0])
    bad("k", (short, y, np.int32(3)), "64 bytes, not 128")
