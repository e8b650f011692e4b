"""Every implementation of every operator under Oclgrind, a simulated GPU that checks every
memory access: its "small" Cases, forced with impl=, 32-bit indexing and 64-bit on the first,
with data-race and API checks (the default tier: an implementation's first case and the cases a
GPU selects it for; -m exhaustive: every case it may take). Zero reports, results equal to NumPy, and the
global memory traffic of the implementations a GPU selects no worse than tests/resources/.
"""

import sys
import textwrap
import time
from pathlib import Path

import pytest

import gpucg
from gpucg import procwatch
from gpucg.verify import oclgrind
from gpucg.verify.baseline import compare_traffic, family_of, load, traffic_key
from conftest import exhaustive_selected, under_oclgrind

BASELINE = Path(__file__).parent / "resources"  # one file per operator family

LOG = """
Read-write data race at global memory address 0x5000000000008
\tKernel: gpucg_topk_topk_radix_scan
\t
\tFirst entity:  Global(63,0,0) Local(63,0,0) Group(0,0,0)
\t  store i32 %sub, i32 addrspace(1)* %arrayidx40, align 4

Invalid read of size 4 at global memory address 0x1000000000200
\tKernel: k
\tEntity: Global(127,0,0) Local(63,0,0) Group(1,0,0)
"""

COUNTS = """Instructions executed for kernel 'a':
             256 - getelementptr
             130 - load global (520 bytes)
             128 - store global (512 bytes)
             128 - load local (512 bytes)
Instructions executed for kernel 'b':
           1,024 - load global (4,096 bytes)
"""


def test_parse_reports_and_counts():
    reports = oclgrind.parse_log(LOG)
    assert [(r.title.split(" at ")[0], r.kernel) for r in reports] == [
        ("Read-write data race", "gpucg_topk_topk_radix_scan"), ("Invalid read of size 4", "k")]
    counts = oclgrind.parse_counts(COUNTS)
    assert [(k.kernel, k.loaded, k.stored) for k in counts] == [("a", 520, 512), ("b", 4096, 0)]


VCALLS = """Instructions executed for kernel 'h':
               4 - call _Z10vload_halfmPU3AS1KDh()
               4 - call _Z10vload_halfmPU3AS3KDh()
               2 - call _Z11vload_half8mPU3AS1KDh()
               1 - call _Z12vloada_half3mPU3AS1KDh()
               4 - call _Z16vstore_half2_rteDv2_fmPU3AS1Dh()
               4 - call _Z11vstore_halffmPU3AS3Dh()
               3 - call _Z6vload4mPU3AS1Kf()
               1 - call _Z7vstore2Dv2_dmPU3AS1d()
           1,000 - call _Z13get_global_idj()
               4 - load global (8 bytes)
"""


def test_counts_include_vector_and_half_builtins():
    # vload_half & co. are builtin calls in Oclgrind, not loads; the local ones (AS3) move no
    # global bytes: 4*2 + 2*16 + 8 (vloada_half3 moves 4 halves) + 3*16 + 8 (ushort) loaded,
    # 4*4 + 16 stored
    [h] = oclgrind.parse_counts(VCALLS)
    assert (h.loaded, h.stored) == (8 + 32 + 8 + 48 + 8, 16 + 16)


def test_counts_include_global_atomics():
    """A look-back's flags: atomic_or and atomic_add load and store their word, atomic_xchg
    stores it; local atomics (AS3) move no global bytes."""
    [k] = oclgrind.parse_counts("Instructions executed for kernel 'k':\n"
                                "  72 - call _Z9atomic_orPU3AS1Vjj()\n"
                                "  32 - call _Z11atomic_xchgPU3AS1Vjj()\n"
                                "   9 - call _Z10atomic_addPU3AS1Vjj()\n"
                                "   5 - call _Z10atomic_addPU3AS3Vjj()\n")
    assert (k.loaded, k.stored) == (4 * (72 + 9), 4 * (72 + 32 + 9))


HALVES = textwrap.dedent("""
    import numpy as np, pyopencl as cl
    dev = [d for p in cl.get_platforms() for d in p.get_devices() if "Oclgrind" in d.name][0]
    ctx = cl.Context([dev]); q = cl.CommandQueue(ctx)
    src = '''__kernel void halves(__global const half* a, __global half* b, __global const ushort* c,
                                  __global ushort* d, __global const float* e, __global float* f) {
        __local ushort t[64];
        const int i = get_global_id(0);
        vstore_half(vload_half(i, a), i, (__local half*)t);
        barrier(CLK_LOCAL_MEM_FENCE);
        vstore_half2_rte(vload_half2(i, a + 64) + vload_half(63 - i, (__local half*)t), i, b);
        d[i] = c[i];
        vstore4(vload4(i, e), i, f);
    }'''
    prg = cl.Program(ctx, src).build()
    mf = cl.mem_flags
    buf = lambda n: cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.zeros(n, np.uint8))
    cl.Kernel(prg, "halves")(q, (64,), (64,), buf(512), buf(256), buf(128), buf(128),
                             buf(1024), buf(1024))
    q.finish()
""")


def test_counts_of_a_float16_kernel_under_oclgrind(oclgrind_or_skip, tmp_path):
    env = oclgrind.environment(tmp_path, checks=False, counts=True)
    done = procwatch.run([sys.executable, "-c", HALVES], env=env)
    assert done.returncode == 0, done.stderr
    [k] = oclgrind.parse_counts(done.stdout)
    # 64 work-items: half (2 B) + half2 (4 B) + ushort (2 B) + float4 (16 B) loaded,
    # half2 + ushort + float4 stored; the local half stores and loads are not global traffic
    assert (k.kernel, k.loaded, k.stored) == ("halves", 64 * 24, 64 * 22)


RACY = textwrap.dedent("""
    import gpucg  # first: each new OpenCL context makes Oclgrind start its log afresh
    print(gpucg.targets()[1].device)
    import numpy as np, pyopencl as cl
    dev = [d for p in cl.get_platforms() for d in p.get_devices() if "Oclgrind" in d.name][0]
    ctx = cl.Context([dev]); q = cl.CommandQueue(ctx)
    # work-item 0 reads b[1] while work-item 1 writes it, with no barrier between them
    src = '''__kernel void racy(__global const int* a, __global int* b) {
        const int i = get_global_id(0);
        b[i] = a[i] + (get_local_id(0) == 0 ? b[1] : 0);
    }'''
    prg = cl.Program(ctx, src).build()
    mf = cl.mem_flags
    a = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.arange(128, dtype=np.int32))
    b = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.zeros(128, dtype=np.int32))
    cl.Kernel(prg, "racy")(q, (128,), (64,), a, b); q.finish()
""")


def test_the_environment_selects_oclgrind_and_catches_a_race(oclgrind_or_skip, tmp_path):
    done, reports = under_oclgrind(RACY, tmp_path)
    assert "Oclgrind Simulator" in done.stdout and "gpu" in done.stdout
    titles = {r.title.split(" at ")[0] for r in reports}
    assert "Read-write data race" in titles


def test_normal_runs_never_pick_oclgrind(oclgrind_or_skip, tmp_path):
    env = oclgrind.environment(tmp_path)
    env.pop("GPUCG_OPENCL_DEVICE")
    code = "import gpucg; print(gpucg.targets()[1].device or gpucg.targets()[1].reason)"
    out = procwatch.run([sys.executable, "-c", code], env=env).stdout
    assert "Oclgrind" not in out


def _family(op: str) -> str:
    return family_of(op) or op


FAMILIES = sorted({_family(name) for name in gpucg.list_ops()})


#: operators whose kernels are another's with a different combining expression (the same
#: templates, loops and indexing): the simulator runs the other's, which covers their accesses
SAME_KERNELS = {"prod": "sum", "max": "sum", "min": "sum", "mean": "sum", "any": "all",
                "argmin": "argmax", "log_softmax": "softmax"}


def _impls(op: str, case) -> set:
    sel = gpucg.explain(op, *case.inputs, target="opencl -device=gpu", records=False, **case.attrs)
    return {(c.name, c.verdict) for c in sel.candidates}


def test_operators_left_to_another_share_its_implementations():
    for op, other in SAME_KERNELS.items():
        mine, theirs = (gpucg.get_op(n).representative("small") for n in (op, other))
        assert len(mine) == len(theirs), op
        for a, b in zip(mine, theirs):
            assert a.inputs == b.inputs and _impls(op, a) == _impls(other, b), (op, a.label)


# one test a family, so that pytest-xdist spreads the simulator's minutes over its workers;
# the default tier runs an implementation on its first case and where a GPU selects it,
# -m exhaustive on every case it may take
@pytest.mark.widens
@pytest.mark.parametrize("family", FAMILIES)
def test_every_implementation_under_oclgrind(family, oclgrind_or_skip, request):
    ops = [name for name in gpucg.list_ops() if _family(name) == family
           and name not in SAME_KERNELS]
    tasks = oclgrind.tasks_for(ops, every_case=exhaustive_selected(request.config))
    assert not tasks or {t.index for t in tasks} == {"int32", "int64"}
    t0 = time.perf_counter()
    results = oclgrind.run(tasks, checks=True, counts=True)
    took = time.perf_counter() - t0
    bad = [r.describe() for r in results if not r.ok]
    slowest = sorted(results, key=lambda r: -r.seconds)[:3]
    peaks: dict = {}  # worker -> (peak resident bytes, the call that reached it)
    for r in results:
        if r.worker and r.peak_rss > peaks.get(r.worker, (0, ""))[0]:
            peaks[r.worker] = (r.peak_rss, f"{r.task.op}/{r.impl}")
    print(f"\nOclgrind: {len(results)} calls in {took:.0f} s, {len(bad)} with reports or wrong "
          "results; slowest: " + "; ".join(f"{r.task.op}/{r.impl} {r.seconds:.1f} s"
                                         for r in slowest))
    print("peak resident memory per worker: " + "; ".join(
        f"{w} {b / 2**20:.0f} MiB (at {at})" for w, (b, at) in sorted(peaks.items())))
    assert not bad, "\n\n".join(bad)
    assert peaks and max(b for b, _ in peaks.values()) <= oclgrind.MEMORY_BYTES
    impls = {(t.op, t.impl) for t in tasks}
    for name in ops:  # every kernel implementation a GPU may run was forced
        for case in gpucg.get_op(name).representative("small"):
            sel = gpucg.explain(name, *case.inputs, target="opencl -device=gpu", records=False,
                                **case.attrs)
            assert all((name, c.name.rsplit(".", 1)[0]) in impls for c in sel.candidates
                       if c.verdict != "excluded")
    # the traffic of what a GPU selects, against the checked-in figures
    selected = []
    for r in results:
        t = r.task
        case = gpucg.get_op(t.op).representative("small")[t.case]
        sel = gpucg.explain(t.op, *case.inputs, target="opencl -device=gpu", records=False,
                            **case.attrs)
        if t.index == "int32" and sel.choices[0].impl.name == r.impl:
            selected.append(r)
    figures = load(BASELINE).get("traffic", {})
    known = [r for r in selected if traffic_key(r) in figures]
    assert known or not selected, f"{BASELINE} has no {family} traffic figures: run `make resources-json`"
    assert not compare_traffic(known, figures), "\n".join(compare_traffic(known, figures))
    for r in selected:
        print("  " + oclgrind.traffic_line(r))


def test_cli_resources_traffic(oclgrind_or_skip, nvrtc_or_skip, capsys):
    from gpucg import cli

    assert cli.main(["resources", "relu", "--input", "3,1001:float32", "--arch", "sm_80",
                     "--traffic"]) == 0
    out = capsys.readouterr().out
    assert "ew_contiguous.cuda*" in out
    assert ("relu [broadcast, odd sizes] ew_contiguous.opencl: 12,012 B loaded + 12,012 B "
            "stored = 1.00x the compulsory 24,024 B") in out
