"""The kernel cache survives corruption and concurrent writers."""

import threading

import numpy as np
import pytest

import gpucg
from gpucg import settings
from gpucg.runtime.cache import DiskCache, cache_key


def test_roundtrip_corruption_and_concurrency(tmp_path):
    cache = DiskCache(tmp_path, "t")
    key = cache_key("src", ("-O3",), "dev")
    assert cache.get(key) is None
    cache.put(key, b"binary")
    assert cache.get(key) == b"binary"
    path = next((tmp_path / "t").rglob(key))
    path.write_bytes(path.read_bytes()[:-1] + b"X")  # flip the payload
    assert cache.get(key) is None and not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"short")
    assert cache.get(key) is None

    def writer(i):
        for _ in range(20):
            cache.put(key, b"payload-%d" % i)
            got = cache.get(key)
            assert got is None or got.startswith(b"payload-")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.get(key).startswith(b"payload-")
    assert not [p for p in (tmp_path / "t").rglob(".tmp-*")]


def test_keys_differ_by_every_part():
    keys = {cache_key("a", (), "d"), cache_key("b", (), "d"), cache_key("a", ("-x",), "d"),
            cache_key("a", (), "e")}
    assert len(keys) == 4


def test_opencl_rebuilds_from_corrupted_disk_entry(tmp_path, monkeypatch):
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    from gpucg.runtime import get_backend

    be = get_backend("opencl")
    # PoCL's binaries stay out of gpucg's cache (test_pocl_binaries_stay_in_pocls_cache): the
    # path under test is a driver's whose binaries it keeps
    monkeypatch.setattr(be, "keeps_binaries", True)
    src = "__kernel void gpucg_cache_probe(__global float* a) { a[get_global_id(0)] *= 3.0f; }"
    with settings.scope(GPUCG_CACHE_DIR=str(tmp_path)):
        be.clear_memory_cache()
        be.compile(src, "gpucg_cache_probe")
        files = [p for p in (tmp_path / "opencl").rglob("*") if p.is_file()]
        assert len(files) == 1
        files[0].write_bytes(b"\0" * 40)
        be.clear_memory_cache()
        before = gpucg.stats()["compiles"]
        prog = be.compile(src, "gpucg_cache_probe")
        assert gpucg.stats()["compiles"] == before + 1
        be.clear_memory_cache()
        hits = gpucg.stats()["disk_hits"]
        prog = be.compile(src, "gpucg_cache_probe")
        assert gpucg.stats()["disk_hits"] == hits + 1
    a = be.to_device(np.ones(8, np.float32))
    prog(a, grid=1, block=8)
    np.testing.assert_array_equal(be.to_host(a), np.full(8, 3, np.float32))


def test_pocl_binaries_stay_in_pocls_cache(tmp_path, monkeypatch):
    """PoCL keeps its own cache by source; asking it for a binary would compile each kernel
    once more (for an open work-group size), so gpucg neither asks nor stores one there."""
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    from gpucg.runtime import get_backend
    from gpucg.runtime.cache import keeps_own_binaries

    assert keeps_own_binaries("Portable Computing Language")
    assert not keeps_own_binaries("NVIDIA CUDA")
    monkeypatch.setenv("POCL_KERNEL_CACHE", "0")
    assert not keeps_own_binaries("Portable Computing Language")
    be = get_backend("opencl")
    if "portable computing language" not in be.platform.name.lower():
        pytest.skip(f"the OpenCL platform here is {be.platform.name!r}, not PoCL")
    src = "__kernel void gpucg_cache_probe2(__global float* a) { a[get_global_id(0)] += 2.0f; }"
    with settings.scope(GPUCG_CACHE_DIR=str(tmp_path)):
        be.clear_memory_cache()
        prog = be.compile(src, "gpucg_cache_probe2")
    assert not be.keeps_binaries
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
    a = be.to_device(np.ones(8, np.float32))
    prog(a, grid=1, block=8)
    np.testing.assert_array_equal(be.to_host(a), np.full(8, 3, np.float32))


def test_setting_errors_are_clear():
    with settings.scope(GPUCG_DISK_CACHE="maybe"):
        with pytest.raises(gpucg.InputError, match="GPUCG_DISK_CACHE='maybe' is invalid"):
            settings.disk_cache()


def test_readme_lists_every_setting():
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    for name in settings.SETTINGS:
        assert f"`{name}`" in readme, name
