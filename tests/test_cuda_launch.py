"""The CUDA launch path executed with no GPU: CudaBackend and CudaProgram run on a stand-in for
CuPy (gpucg.verify.cupy_standin) that compiles every kernel to PTX with NVRTC and checks
every launch against the PTX ``.entry`` parameters (count, pointer or value, width) and the
device limits, for every implementation of every operator on its small and bench Cases.
"""

import functools

import numpy as np
import pytest

import gpucg
from gpucg.runtime import use_backend
from gpucg.runtime.cuda_backend import CudaBackend
from gpucg.verify.cupy_standin import (LaunchCheckError, StandInCupy, kernel_params,
                                        ptx_entry_params, source_params)
from gpucg.verify import nvrtc
from conftest import exhaustive_selected


def _calls():
    """(operator, case number, case) of every operator's small and bench Cases: the
    implementations each may run are listed by the test, not at collection (selection is work)."""
    for name in gpucg.list_ops():
        for i, case in enumerate(gpucg.get_op(name).representative()):
            yield pytest.param(name, i, case, id=f"{name}-{case.kind}{i}")


@functools.lru_cache(maxsize=None)
def _impls(op: str, i: int) -> tuple:
    """The CUDA implementations that may run ``op``'s case ``i``."""
    case = gpucg.get_op(op).representative()[i]
    sel = gpucg.explain(op, *case.inputs, target="cuda", **case.attrs)
    return tuple(c.name.rsplit(".", 1)[0] for c in sel.candidates if c.verdict != "excluded")


@pytest.mark.widens
@pytest.mark.parametrize("op,i,case", list(_calls()))
def test_every_implementation_launches_what_its_kernels_declare(nvrtc_or_skip, request, op, i,
                                                                case):
    """32-bit indexing, and 64-bit on the first case an implementation takes (on every case
    with -m exhaustive); arrays without memory, so benchmark sizes cost nothing."""
    impls = _impls(op, i)
    assert impls, "every representative call has a CUDA implementation"
    every = exhaustive_selected(request.config)
    earlier = {name for j in range(i) for name in _impls(op, j)}
    cupy = StandInCupy("sm_90")
    ran = 0
    with use_backend("cuda", CudaBackend(cupy=cupy)):
        for impl in impls:
            for index in ("int32", "int64") if every or impl not in earlier else ("int32",):
                f = gpucg.compile(op, *case.inputs, target="cuda", impl=impl, index=index,
                                  **case.attrs)
                before = len(cupy.launches)
                out = f(*(cupy.empty(t.shape, t.dtype) for t in case.inputs))
                outs = out if isinstance(out, tuple) else (out,)
                assert [o.shape for o in outs] == [tuple(t.shape) for t in f.output_types]
                kernels = f.selection.choices[0].impl.kernels
                launched = cupy.launches[before:]
                if kernels and not any(0 in tuple(t.shape) for t in case.inputs):
                    assert launched, impl
                wide = {("64-bit indexing" in ln.source.split("*/", 1)[0]) for ln in launched}
                assert wide <= {index == "int64"}, (impl, index)
                ran += len(launched)
    assert ran


# -- the check catches bad launches ----------------------------------------------------------

@pytest.fixture
def scan_kernel(nvrtc_or_skip):
    """The 32-bit scan_rows kernel of cumsum compiled by the CUDA backend on the stand-in:
    ``scan(x, y, int n)``."""
    cupy = StandInCupy("sm_80")
    backend = CudaBackend(cupy=cupy)
    f = gpucg.compile("cumsum", gpucg.tensor((8, 1000), "float32"), axis=1, target="cuda",
                      impl="scan_rows", index="int32")
    source = f.sources["scan_rows.cuda/scan"]
    prog = backend.compile(source, "gpucg_cumsum_scan_rows_scan")
    x, y = cupy.empty((8, 1000), "float32"), cupy.empty((8, 1000), "float32")
    return cupy, backend, prog, x, y


def test_a_correct_launch_passes(scan_kernel):
    cupy, _, prog, x, y = scan_kernel
    prog(x, y, np.int32(1000), grid=8, block=256)
    (ln,) = cupy.launches
    assert (ln.entry, ln.grid, ln.block) == ("gpucg_cumsum_scan_rows_scan", (8,), (256,))


@pytest.mark.parametrize("args,msg", [
    (lambda x, y: (x, y, np.int64(1000)), "64-bit int where the kernel reads 32-bit int"),
    (lambda x, y: (x, y, 1000), "Python int 1000 (passed as int64)"),
    (lambda x, y: (x, y), "declares 3 parameters (PTX .entry) but the launch passes 2"),
    (lambda x, y: (x, np.int32(1000), np.int32(1000)), "the kernel takes a device array"),
    (lambda x, y: (x, y, y), "the kernel takes a value"),
    (lambda x, y: (x, y, np.float32(1000)), "32-bit float where the kernel reads 32-bit int"),
])
def test_a_wrong_launch_is_a_launch_error(scan_kernel, args, msg):
    _, _, prog, x, y = scan_kernel
    with pytest.raises(gpucg.LaunchError, match="CUDA launch of gpucg_cumsum_scan_rows_scan "
                                                "failed") as err:
        prog(*args(x, y), grid=8, block=256)
    assert msg in str(err.value)


def test_wrong_element_size_and_device_limits(scan_kernel):
    cupy, backend, prog, x, y = scan_kernel
    with pytest.raises(gpucg.LaunchError, match="elements of 8 bytes where the kernel reads 4"):
        prog(cupy.empty((8, 1000), "float64"), y, np.int32(1000), grid=8, block=256)
    with pytest.raises(gpucg.ResourceError, match="work-group size 2048 exceeds the device "
                                                  "limit 1024"):
        prog(x, y, np.int32(1000), grid=8, block=2048)
    with pytest.raises(gpucg.LaunchError, match="exceeds 2\\^31-1"):
        prog(x, y, np.int32(1000), grid=2**31, block=256)


def test_ptx_parameters_and_the_signature():
    ptx = (".visible .entry k(\n\t.param .u64 k_param_0,\n\t.param .u32 k_param_1,\n"
           "\t.param .align 8 .f64 k_param_2\n)\n{\n}")
    assert ptx_entry_params(ptx, "k") == ["u64", "u32", "f64"]
    assert ptx_entry_params(ptx, "other") is None
    src = 'extern "C" __global__ void k(const float* __restrict__ x, int n, double a) {}'
    assert source_params(src, "k") == ["const float* __restrict__ x", "int n", "double a"]
    params = kernel_params(src, "k", ptx)
    assert [(p.pointer, p.pointee, p.bits) for p in params] == [(True, 4, 64), (False, 0, 32),
                                                                (False, 0, 64)]
    with pytest.raises(LaunchCheckError, match="named symbol not found"):
        kernel_params(src, "other", ptx)


@pytest.mark.parametrize("op,shape", [("softmax", (2, 40009)), ("log_softmax", (3, 70001)),
                                      ("conv2d", None), ("cumsum", (1, 100000))])
def test_standins_quick_ptx_keeps_entries_and_never_undercounts_shared(nvrtc_or_skip, op, shape):
    """The stand-in compiles with nvrtc.check_options: each launched kernel's entry parameters
    equal an optimized compile's, and its static shared memory is at least theirs (the
    optimizer may drop a __shared__ variable the quick compile keeps), so the limits checks never
    pass what an optimized kernel would fail."""
    from gpucg.verify.cupy_standin import ptx_static_shared

    inputs = ((gpucg.tensor((2, 16, 14, 14), "float16"), gpucg.tensor((32, 16, 3, 3), "float16"))
              if shape is None else (gpucg.tensor(shape, "float32"),))
    cupy = StandInCupy("sm_90")
    with use_backend("cuda", CudaBackend(cupy=cupy)):
        f = gpucg.compile(op, *inputs, target="cuda", **({"padding": 1} if shape is None else {}))
        f(*(cupy.empty(t.shape, t.dtype) for t in inputs))
    assert cupy.launches
    for ln in {(ln.entry, ln.source): ln for ln in cupy.launches}.values():
        quick = nvrtc.compile_to_ptx(ln.source, "sm_90", nvrtc.check_options(ln.options))
        full = nvrtc.compile_to_ptx(ln.source, "sm_90", ln.options)
        assert ptx_entry_params(quick, ln.entry) == ptx_entry_params(full, ln.entry) is not None
        assert ptx_static_shared(quick) >= ptx_static_shared(full), ln.entry


def test_static_shared_counts_arrays_and_scalars():
    """norm_split's apply kernel as PTX spells it optimized (gstat[2] split into two scalars,
    gskip a scalar) and quick (gstat an array): 12 bytes either way; the dynamic buffer is not
    static."""
    from gpucg.verify.cupy_standin import ptx_static_shared

    full = ("\t.shared .align 4 .u32 _ZZ1kE5gskip;\n\t.shared .align 4 .f32 _ZZ1kE5gstat_$_0;\n"
            "\t.shared .align 4 .f32 _ZZ1kE5gstat_$_1;\n\t.extern .shared .align 16 .b8 dyn[];\n")
    quick = "\t.shared .align 4 .b8 _ZZ1kE5gstat[8];\n\t.shared .align 4 .u32 _ZZ1kE5gskip;\n"
    assert ptx_static_shared(full) == ptx_static_shared(quick) == 12
    assert ptx_static_shared("\t.shared .align 8 .f64 t[3];\n\tld.shared.u32 %r1, [gskip];") == 24


# -- the backend's own logic, without a driver -----------------------------------------------

def test_device_properties_and_status():
    backend = CudaBackend(cupy=StandInCupy("sm_86", name="Stand-in RTX"))
    assert backend.status() == (True, "Stand-in RTX (sm_86)", "")
    assert backend.max_block() == 1024 and backend.arch == "sm_86"
    gone = CudaBackend(cupy=StandInCupy("sm_90", device_count=0))
    assert gone.status() == (False, "", "no CUDA device")
    with pytest.raises(gpucg.TargetUnavailableError, match="CUDA is not usable here: no CUDA"):
        gone.compile("", "k")

    class NoDriver(StandInCupy):
        def __init__(self):
            super().__init__("sm_90")
            self.cuda.runtime.getDeviceCount = self.fail

        @staticmethod
        def fail():
            raise RuntimeError("cudaErrorInsufficientDriver")

    assert "no CUDA device (RuntimeError: cudaErrorInsufficientDriver)" in \
        CudaBackend(cupy=NoDriver()).status()[2]


def test_compile_cache_and_errors(nvrtc_or_skip):
    backend = CudaBackend(cupy=StandInCupy("sm_90"))
    src = 'extern "C" __global__ void k(float* a, int n) { if (threadIdx.x < n) a[0] = 1; }'
    gpucg.stats(reset=True)
    first = backend.compile(src, "k")
    assert backend.compile(src, "k") is first
    assert gpucg.stats()["memory_hits"] == 1 and gpucg.stats()["compiles"] == 1
    assert backend.compile(src, "k", ("-std=c++17",)) is not first  # options are in the key
    with pytest.raises(gpucg.CompileError, match="CUDA compile of bad failed") as err:
        backend.compile(src.replace("float*", "flot*"), "bad")
    assert "flot" in err.value.log
    with pytest.raises(gpucg.CompileError, match="named symbol not found"):
        backend.compile(src, "missing")


def test_arrays_and_timing():
    cupy = StandInCupy("sm_90")
    backend = CudaBackend(cupy=cupy)
    a = backend.to_device(np.arange(6, dtype=np.int64).reshape(2, 3))
    assert backend.owns(a) and not backend.owns(np.zeros(2)) and a.shape == (2, 3)
    assert backend.to_host(a).shape == (2, 3) and backend.contiguous(a) is a
    assert backend.time(lambda: None, repeat=3) == [0.0, 0.0, 0.0]


def test_end_to_end_from_numpy_arrays(nvrtc_or_skip):
    """The public call path: NumPy in, the dispatcher, launches, NumPy out (zeros here)."""
    cupy = StandInCupy("sm_90")
    with use_backend("cuda", CudaBackend(cupy=cupy)):
        n = gpucg.var("n")
        f = gpucg.compile("cumsum", gpucg.tensor((n, 1024), "float32"), axis=1, target="cuda")
        out = f(np.ones((300, 1024), np.float32))
    assert isinstance(out, np.ndarray) and out.shape == (300, 1024)
    assert [(ln.entry, ln.grid, ln.block) for ln in cupy.launches] == \
        [("gpucg_cumsum_scan_rows_scan", (300,), (256,))]
    assert nvrtc.available()[0]
