"""Dynamic local memory (gpucg/codegen/dynamic_local.py): a kernel's buffer sized at launch.
CUDA on the launch stand-in (the bytes passed as shared_mem, the opt-in attribute raised above
48 KiB, launches past the limits refused), OpenCL on PoCL (the buffer as the last argument, a
clear error past CL_DEVICE_LOCAL_MEM_SIZE), and occupancy counting the bytes; the fused
Winograd kernels' input-resident defaults as the users of it.
"""

import numpy as np
import pytest

import gpucg
from gpucg.arch import limits
from gpucg.codegen import CUDA, OPENCL
from gpucg.runtime import get_backend, use_backend
from gpucg.runtime.cuda_backend import CudaBackend
from gpucg.strategies import conv2d_fused
from gpucg.verify.cupy_standin import LaunchCheckError, StandInCupy, ptx_static_shared
from gpucg.verify.occupancy import occupancy

#: a kernel that reverses a block of floats through its dynamic buffer (one language each)
KERNEL = """{kernel} k({g} float* y{param})
{{
    {decl}
    const int t = (int){tid};
    buf[t] = (float)t;
    {barrier}
    y[t] = buf[{n} - 1 - t];
}}
"""


def _source(d, n: int) -> str:
    return KERNEL.format(kernel=d.kernel, g=d.global_ptr, param=d.dynamic.param("float", "buf"),
                         decl=d.dynamic.decl("float", "buf"), tid=d.local_id(0),
                         barrier=d.barrier, n=n)


def test_the_dialects_spell_the_buffer():
    assert CUDA.dynamic.param("float", "Xs") == ""
    assert CUDA.dynamic.decl("float", "Xs") == "extern __shared__ __align__(16) float Xs[];"
    assert OPENCL.dynamic.param("float", "Xs") == ",\n    __local float* restrict Xs"
    assert OPENCL.dynamic.decl("float", "Xs") == ""


def test_opencl_passes_the_buffer_and_names_its_limit():
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    backend = get_backend("opencl")
    prog = backend.compile(_source(OPENCL, 64), "k")
    y = backend.empty((64,), "float32")
    prog(y, grid=1, block=64, shared=64 * 4)
    assert (backend.to_host(y) == np.arange(64)[::-1]).all()
    have = int(backend.device.local_mem_size)
    with pytest.raises(gpucg.ResourceError, match=f"k: a dynamic local buffer of {have + 4} "
                       f"bytes .* CL_DEVICE_LOCAL_MEM_SIZE of {have} bytes") as err:
        prog(y, grid=1, block=64, shared=have + 4)
    assert (err.value.value, err.value.allowed) == (have + 4 + prog.static_local(), have)


@pytest.fixture
def cuda_kernel(nvrtc_or_skip):
    """The reversing kernel compiled by the CUDA backend on an sm_80 stand-in."""
    cupy = StandInCupy("sm_80")
    backend = CudaBackend(cupy=cupy)
    return cupy, backend.compile(_source(CUDA, 256), "k"), cupy.empty((256,), "float32")


def test_cuda_passes_the_bytes_and_raises_the_attribute_above_48_kib(cuda_kernel):
    cupy, prog, y = cuda_kernel
    prog(y, grid=1, block=256, shared=1024)
    assert cupy.launches[-1].shared_mem == 1024 and not cupy.attributes
    big = 100 * 1024
    for _ in range(2):  # the attribute is raised once
        prog(y, grid=1, block=256, shared=big)
    assert cupy.launches[-1].shared_mem == big
    assert cupy.attributes == [("k", "max_dynamic_shared_size_bytes", big)]
    optin = limits("sm_80").smem_per_block_optin
    with pytest.raises(gpucg.ResourceError, match=f"k: a dynamic local buffer of {optin + 4} "
                       f"bytes .* sharedMemPerBlockOptin of {optin} bytes"):
        prog(y, grid=1, block=256, shared=optin + 4)


def test_the_stand_in_refuses_what_the_driver_would(cuda_kernel):
    cupy, prog, y = cuda_kernel
    fn = prog.function
    with pytest.raises(LaunchCheckError, match="49153 bytes of dynamic shared memory exceed "
                                               "49152 \\(no opt-in attribute is set\\)"):
        fn((1,), (256,), (y,), shared_mem=48 * 1024 + 1)
    fn.max_dynamic_shared_size_bytes = 64 * 1024
    with pytest.raises(LaunchCheckError, match="exceed its max dynamic shared memory "
                                               "attribute, 65536"):
        fn((1,), (256,), (y,), shared_mem=64 * 1024 + 4)
    with pytest.raises(LaunchCheckError, match="exceeds the opt-in limit 166912 of sm_80"):
        fn.max_dynamic_shared_size_bytes = 163 * 1024 + 4
    ptx = ".shared .align 4 .b8 _ZZ1kE1a[1024];\n.extern .shared .align 16 .b8 buf[];\n" \
          ".shared .align 8 .f64 b[3];"
    assert ptx_static_shared(ptx) == 1024 + 24


def test_occupancy_counts_the_dynamic_bytes():
    occ = occupancy("sm_90", 128, 30720, 224, dynamic_shared=184320)
    assert occ.fits and occ.blocks == 1 and occ.limiter == "shared memory"
    assert occ.shared == 30720 + 184320
    over = occupancy("sm_80", 128, 30720, 224, dynamic_shared=160 * 1024)
    assert not over.fits and "exceed the 166912 a block gets with the opt-in" in over.reason


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("m", [2, 4])
def test_the_resident_winograd_defaults_launch_with_their_buffer(nvrtc_or_skip, arch, m):
    """The fused kernels' defaults at 64 -> 64 channels, 56 x 56 (the region of every channel
    held: om > 1), run by the CUDA backend on a checking stand-in of each arch (NVRTC compiles
    them; the launch passes the declared bytes, above 48 KiB with the attribute raised)."""
    cupy = StandInCupy(arch)
    types = [gpucg.tensor((8, 64, 56, 56)), gpucg.tensor((64, 64, 3, 3))]
    with use_backend("cuda", CudaBackend(cupy=cupy)):
        f = gpucg.compile("conv2d", *types, padding=1, target="cuda", records=False,
                          impl=f"winograd_fused_{m}x{m}")
        f(*(cupy.empty(t.shape, t.dtype) for t in types))
    config = f.selection.choices[0].config
    limit = limits(arch).smem_per_block_optin
    assert config["om"] > 1 and f.selection.choices[0].impl.fixed["local_limit"] == limit
    lay = conv2d_fused.layout(config, m, True, 64, limit)
    static, dynamic = lay.split(config)
    (launch,) = cupy.launches
    assert launch.shared_mem == dynamic == f.specs(0)["fused"].dynamic_local > 48 * 1024
    assert static + dynamic <= limit
    assert cupy.attributes == [(launch.entry, "max_dynamic_shared_size_bytes", dynamic)]


def test_the_tuners_checks_see_the_dynamic_bytes(monkeypatch):
    """A device-limit check with a ``shared`` parameter gets the launch's dynamic bytes; one
    without keeps the five-argument signature."""
    from types import SimpleNamespace

    from gpucg.autotune import Dropped, checks

    seen = []

    def plain(backend, program, key, grid, block):
        seen.append(("plain", block))

    def sized(backend, program, key, grid, block, shared=0):
        seen.append(("sized", shared))
        return f"{shared} bytes" if shared > 1000 else None

    monkeypatch.setitem(checks.CHECKS, "fake", [plain, sized])
    check = checks.launch_checker(SimpleNamespace(name="fake"))
    check(None, "k", 1, 64, 512)
    with pytest.raises(Dropped, match="kernel k: 2048 bytes"):
        check(None, "k", 1, 64, 2048)
    assert seen == [("plain", 64), ("sized", 512), ("plain", 64), ("sized", 2048)]
