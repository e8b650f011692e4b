"""The OpenCL twin of Hopper's asynchronous operations (``d.hopper`` of the OpenCL dialect):
TMA copies, mbarriers and wgmma emulated as collectives of the work-group, called in uniform
control flow, in the order templates/tile/_tma_pipeline.j2 gives the roles
(gpucg/codegen/hopper_ops.py describes each; this module spells them).
"""

from __future__ import annotations

from dataclasses import dataclass

from .hopper_ops import _rank, _regs
from . import wgmma as wg
from .warp import OPENCL_TF32_ROUND

# -- OpenCL: the twin -----------------------------------------------------------------------------

_OCL_MBAR = """\
/* an mbarrier's 8 bytes (gpucg/codegen/hopper_ops.py): word 0 phase bit 31, expected arrivals
   bits 15-29, pending bits 0-14; word 1 the transaction count. Collectives: every work-item
   calls them, work-item 0 updates the state between two barriers */
static inline void gpucg_mbar_step(__local uint* m, int arrivals, int tx)
{
    uint w = m[0];
    int pending = (int)(w & 0x7FFFu) - arrivals, count = (int)m[1] + tx;
    if (pending == 0 && count == 0) {
        w = (w ^ 0x80000000u) & 0xFFFF8000u;
        w |= (w >> 15) & 0x7FFFu;
    } else {
        w = (w & 0xFFFF8000u) | ((uint)pending & 0x7FFFu);
    }
    m[0] = w;
    m[1] = (uint)count;
}
static inline void gpucg_mbar_init(__local uchar* smem, uint bar, uint count)
{
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        __local uint* m = (__local uint*)(smem + bar);
        m[0] = (count & 0x7FFFu) | ((count & 0x7FFFu) << 15);
        m[1] = 0u;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
static inline void gpucg_mbar_update(__local uchar* smem, uint bar, int arrivals, int tx)
{
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0)
        gpucg_mbar_step((__local uint*)(smem + bar), arrivals, tx);
    barrier(CLK_LOCAL_MEM_FENCE);
}
/* whether the phase of this parity has completed (the current phase's parity differs) */
static inline int gpucg_mbar_wait(__local uchar* smem, uint bar, uint parity)
{
    barrier(CLK_LOCAL_MEM_FENCE);
    return (int)((((__local const uint*)(smem + bar))[0] >> 31) != (parity & 1u));
}
"""

_OCL_TMA = """\
/* the box of a tensor map (dimension 0 fastest) as TMA moves it: element i of the box lies at
   local byte dst + i * elem_bytes, swizzled by address; load: elements outside the tensor are
   zeros (NaN with the map's NaN fill), then the box's bytes complete on the mbarrier; store:
   elements outside are skipped. Every work-item copies a share. */
static inline uint gpucg_tma_swizzle(uint a, uint sw)
{
    return sw ? a ^ (((a >> 7) & ((sw >> 4) - 1u)) << 4) : a;
}
static inline void gpucg_tma_box(__local uchar* smem, uint at, __global uchar* g,
    __global const long* map, int c0, int c1, int c2, int c3, int c4, int load)
{
    const int rank = (int)map[0], eb = (int)map[1];
    const uint sw = (uint)map[2];
    long total = 1;
    for (int i = 0; i < rank; ++i) total *= map[13 + i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (long e = get_local_id(0); e < total; e += get_local_size(0)) {
        long rest = e, off = map[18];
        int inside = 1;
        for (int i = 0; i < rank; ++i) {
            const long x = (i == 0 ? c0 : i == 1 ? c1 : i == 2 ? c2 : i == 3 ? c3 : c4)
                + rest % map[13 + i];
            rest /= map[13 + i];
            inside &= x >= 0 && x < map[4 + i];
            off += x * (i ? map[8 + i] : (long)eb);
        }
        const uint a = gpucg_tma_swizzle(at + (uint)e * (uint)eb, sw);
        for (int b = 0; b < eb; ++b) {
            if (load)
                smem[a + b] = inside ? g[off + b] : map[3] ? (uchar)(b == eb - 1 ? 0x7F : 0xFF) : (uchar)0;
            else if (inside)
                g[off + b] = smem[a + b];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
static inline void gpucg_tma_load(__local uchar* smem, uint dst, __global const uchar* g,
    __global const long* map, uint bar, int c0, int c1, int c2, int c3, int c4)
{
    gpucg_tma_box(smem, dst, (__global uchar*)g, map, c0, c1, c2, c3, c4, 1);  /* read only */
    long bytes = map[1];
    for (int i = 0; i < (int)map[0]; ++i) bytes *= map[13 + i];
    gpucg_mbar_update(smem, bar, 0, -(int)bytes);
}
"""


def _coords(coords) -> str:
    cs = [str(c) for c in coords] + ["0"] * (5 - len(coords))
    return ", ".join(cs)


@dataclass(frozen=True)
class OpenCLHopper:
    """The twin: collectives of the work-group (see the module's docstring)."""

    concurrent_roles: bool = False
    base: str = "0u"
    #: a pointer to the aligned block (at ``sbase``) for ordinary loads and stores
    generic: str = "gpucg_smem"

    def helpers(self, wgmma=(), loads=(), stores=(), arch_specific: bool = False,
                mbarrier: bool = True, elect: bool = False, tf32: bool = False) -> str:
        parts = [OPENCL_TF32_ROUND] if tf32 else []
        parts += [_OCL_MBAR] if mbarrier or loads else []
        parts += [_OCL_TMA] if loads or stores else []
        if wgmma:
            parts.append(wg.opencl_decoders(a.kind for a, _, _ in wgmma))
            majors = sorted({(m, a.elem_bytes) for a, am, bm in wgmma
                             for m in ((bm,) if a.a_regs else (am, bm))})
            parts += [wg.opencl_address(m, eb) for m, eb in majors]
            parts += [wg.opencl_wgmma(*w) for w in dict.fromkeys(wgmma)]
        return "\n".join(parts)

    def map_param(self, name: str, writable: bool = False) -> str:
        return (f"__global {'' if writable else 'const '}uchar* restrict {name}_g,\n    "
                f"__global const long* restrict {name}")

    def wg_setup(self, tid: str, warpgroups: int, consumer: str, rs: bool = False) -> str:
        """The warpgroup thread (``gpucg_wt``), whether it computes (``consumer``, a C
        condition) and, for wgmma with A from registers (``rs``), its warpgroup's scratch of
        128 x 4 words."""
        lines = [f"const int gpucg_wt = (int)({tid}) & 127, gpucg_consumer = {consumer};"]
        if rs:
            lines += [f"__local uint gpucg_wg_scratch[{int(warpgroups) * 512}];",
                      f"__local uint* gpucg_wgs = gpucg_wg_scratch + ((int)({tid}) >> 7) * 512;"]
        else:
            lines += ["__local uint* gpucg_wgs = 0;"]
        return "\n".join(lines)

    def state(self) -> str:
        """The twin's record of its waits: cleared by a wait that would block."""
        return "int gpucg_pipe_ok = 1;"

    def poison(self, value: str) -> str:
        """``value``, or NaN where a wait of this work-group's order would have blocked."""
        return f"(gpucg_pipe_ok ? {value} : NAN)"

    def init(self, bar: str, count) -> str:
        return f"gpucg_mbar_init(gpucg_smem, {bar}, {count});"

    def init_fence(self) -> str:
        return "/* fence.mbarrier_init: the twin's barriers are ordered by the work-group's */"

    def arrive(self, bar: str, count=1) -> str:
        return f"gpucg_mbar_update(gpucg_smem, {bar}, {count}, 0);"

    def expect_tx(self, bar: str, nbytes) -> str:
        return f"gpucg_mbar_update(gpucg_smem, {bar}, 1, {nbytes});"

    def wait(self, bar: str, parity: str) -> str:
        return f"gpucg_pipe_ok &= gpucg_mbar_wait(gpucg_smem, {bar}, {parity});"

    def tma_load(self, dst: str, tmap: str, bar: str, coords) -> str:
        _rank(len(coords))
        return (f"gpucg_tma_load(gpucg_smem, {dst}, {tmap}_g, {tmap}, {bar}, "
                f"{_coords(coords)});")

    def tma_store(self, tmap: str, src: str, coords) -> str:
        _rank(len(coords))
        return (f"gpucg_tma_box(gpucg_smem, {src}, {tmap}_g, {tmap}, "
                f"{_coords(coords)}, 0);")

    def store_commit(self) -> str:
        return "/* cp.async.bulk.commit_group: the twin's stores are done */"

    def store_wait_read(self, n: int = 0) -> str:
        return "/* cp.async.bulk.wait_group.read: the twin's stores are done */"

    def store_wait(self) -> str:
        return "/* cp.async.bulk.wait_group: the twin's stores are done */"

    def prefetch(self, tmap: str) -> str:
        return "/* prefetch.tensormap: nothing to prefetch in the twin */"

    def fence_proxy(self) -> str:
        return "/* fence.proxy.async: one proxy in the twin */"

    def elect(self) -> str:
        return "((get_local_id(0) & 31) == 0)"

    def bar_sync(self, bar_id, threads: int) -> str:
        return "barrier(CLK_LOCAL_MEM_FENCE);"

    def bar_arrive(self, bar_id, threads: int) -> str:
        return "/* bar.arrive: the twin's named barriers are the work-group's, in its one order */"

    def setmaxnreg(self, regs: int, inc: bool) -> str:
        return f"/* setmaxnreg.{'inc' if inc else 'dec'} {_regs(regs)}: no registers to move in the twin */"

    def wgmma(self, atom, a_major: str, b_major: str, d: str, a: str, b: str, scale_d,
              wt: str = "gpucg_wt", active: str = "gpucg_consumer", ws: str = "gpucg_wgs") -> str:
        return (f"{wg.fn_name(atom, a_major, b_major)}({ws}, {wt}, {active}, gpucg_smem, {d}, "
                f"{a}, {b}, {scale_d});")

    def wgmma_fence(self) -> str:
        return "/* wgmma.fence: the twin's products are synchronous */"

    def wgmma_commit(self) -> str:
        return "/* wgmma.commit_group: the twin's products are synchronous */"

    def wgmma_wait(self, n: int) -> str:
        return "/* wgmma.wait_group: the twin's products are synchronous */"

    def wgmma_keep(self, d: str, n: int) -> str:
        return "/* the twin's accumulators are never in flight */"


OPENCL_HOPPER = OpenCLHopper()
