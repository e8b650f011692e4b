"""What CUDA kernels use of the hardware, from ptxas, with no GPU: registers, shared memory,
stack and spills per kernel, the block size each launch uses, occupancy, and whether it fits.

The source of truth is ptxas's own report: NVRTC compiles each kernel for a real architecture
(``-arch=sm_90``, which runs ptxas) with ``-Xptxas=-v`` and the report comes back in NVRTC's
log. The block sizes come from the implementation itself: its run function is run against the
real CUDA backend on a stand-in for CuPy (gpucg.verify.cupy_standin) that records every
launch, so what is checked is what a GPU would be asked to launch.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass

from ..errors import CompileError, InputError
from . import nvrtc
from ..runtime import use_backend
from ..runtime.cuda_backend import CudaBackend
from .cupy_standin import StandInCupy
from .occupancy import limits, max_block, occupancy


@dataclass(frozen=True)
class KernelResources:
    """ptxas's report for one kernel on one architecture (bytes, registers per thread)."""

    entry: str
    arch: str
    registers: int
    #: bytes of shared memory a block: static (ptxas) and dynamic (the launch)
    shared: int
    stack: int
    spill_stores: int
    spill_loads: int
    barriers: int = 0

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


def parse_ptxas(log: str, arch: str) -> dict[str, KernelResources]:
    """entry -> KernelResources from ptxas's ``-v`` report."""
    out, entry, frame = {}, None, {}
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            entry, frame = m.group(1), {}
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m and entry:
            frame = dict(zip(("stack", "spill_stores", "spill_loads"), map(int, m.groups())))
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and entry:
            smem = re.search(r"(\d+) bytes smem", line)
            bars = re.search(r"used (\d+) barriers", line)
            out[entry] = KernelResources(
                entry, arch, int(m.group(1)), int(smem.group(1)) if smem else 0,
                frame.get("stack", 0), frame.get("spill_stores", 0), frame.get("spill_loads", 0),
                int(bars.group(1)) if bars else 0)
    return out


@functools.lru_cache(maxsize=8192)
def kernel_resources(source: str, entry: str, arch: str = "sm_90",
                     options: tuple = nvrtc.DEFAULT_OPTIONS) -> KernelResources:
    """ptxas's report of ``entry`` compiled for ``arch`` (cached in memory; the compile and
    its log on disk, by nvrtc.compile_to_cubin)."""
    limits(arch)
    try:
        _, log = nvrtc.compile_to_cubin(source, arch, tuple(options))
    except CompileError as exc:
        # ptxas refuses a kernel over a hard limit (static shared memory beyond 48 KiB) after
        # reporting what it uses: those figures say why the launch cannot fit
        found = parse_ptxas(exc.log, arch)
        if entry not in found:
            raise
        return found[entry]
    found = parse_ptxas(log, arch)
    if entry not in found:
        raise InputError(f"ptxas reported no kernel {entry!r} for {arch}; its log:\n{log}")
    return found[entry]


@dataclass
class ResourceRow:
    """One kernel of one implementation (and config) at one block size, on one architecture."""

    op: str
    impl: str
    config: str
    kernel: str
    index: str
    arch: str
    registers: int
    #: bytes of shared memory a block: static (ptxas) and dynamic (the launch)
    shared: int
    stack: int
    spill_stores: int
    spill_loads: int
    block: int
    launches: int
    max_block: int
    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float
    limiter: str
    fits: bool
    reason: str = ""
    #: the implementation's declared reasons for spills and low occupancy ("" if none)
    expect_spills: str = ""
    expect_low_occupancy: str = ""
    selected: bool = False
    #: the SASS instruction mix (gpucg.verify.sass.COLUMNS) when asked for, else None
    sass: dict | None = None

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


def _static(op: str, input_types) -> None:
    for i, t in enumerate(input_types):
        if not t.is_static:
            raise InputError(f"{op}: resources need constant shapes (the launch geometry depends "
                             f"on them); input {i} is {t}: give sizes (--size NAME=INT)")


def record_launches(op: str, input_types, target: str, impl: str, config=None, attrs=None):
    """(compiled op, launches) of one call of ``impl`` with ``config`` (default: the space's
    default), run by the CUDA backend on a stand-in that records instead of launching."""
    from ..compiled import compile as compile_op
    from ..target import Target

    attrs = dict(attrs or {})
    tgt = Target(target)
    cupy = StandInCupy(tgt.attrs.get("arch", "sm_90"), check=False)
    with use_backend("cuda", CudaBackend(cupy=cupy)):
        # records=False: the default config (or the one given), never a tuned one
        compiled = compile_op(op, *input_types, target=tgt, impl=impl, records=False,
                              config=None if config is None else dict(config), **attrs)
        compiled(*(cupy.empty(t.shape, t.dtype) for t in input_types))
    return compiled, cupy.launches


def launch_rows(compiled, launches, arch: str, selected: bool = False,
                sass: bool = False) -> list[ResourceRow]:
    """One row per kernel and block size of the recorded launches of one compiled call (with
    ``sass``, each with its SASS instruction mix)."""
    choice = compiled.selection.choices[0]
    impl = choice.impl
    by_entry = {compiled.entry(0, key): key for key in impl.kernels}
    groups: dict = {}
    for ln in launches:
        block = int(ln.block[0])
        groups.setdefault((ln.entry, ln.source, ln.options, block, ln.shared_mem), []).append(ln)
    rows = []
    for (entry, source, options, block, dynamic), lns in groups.items():
        key = by_entry.get(entry, entry)
        res = kernel_resources(source, entry, arch, tuple(options) or nvrtc.DEFAULT_OPTIONS)
        occ = occupancy(arch, res.registers, res.shared, block, dynamic)
        spills, low = impl.kernels[key].expected(impl.template_params(key, choice.config)) \
            if key in impl.kernels else ("", "")
        wide = "64-bit indexing" in source.split("*/", 1)[0]
        rows.append(ResourceRow(
            compiled.op.name, impl.name, choice.config.short(), key, "int64" if wide else "int32",
            arch, res.registers, res.shared + dynamic, res.stack, res.spill_stores, res.spill_loads, block,
            len(lns), max_block(arch, res.registers), occ.blocks, occ.warps, occ.occupancy,
            occ.limiter, occ.fits, occ.reason, spills, low, selected,
            _mix(source, entry, arch, tuple(options)) if sass else None))
    return rows


def _mix(source, entry, arch, options):
    from .sass import kernel_mix

    return kernel_mix(source, entry, arch, options or nvrtc.DEFAULT_OPTIONS)


def resources(op: str, *input_types, target: str = "cuda -arch=sm_90", impl: str | None = None,
              all_configs: bool = False, sass: bool = False, **attrs) -> list[ResourceRow]:
    """Registers, shared memory, spills, block size and occupancy of every kernel an operator
    call launches on a CUDA GPU of the target's arch, with no GPU (ptxas through NVRTC).

    Args:
        op: the operator ("conv2d").
        input_types: ``gpucg.tensor(...)`` with constant shapes.
        target: a CUDA target; ``-arch=`` picks the architecture (default sm_90).
        impl: one implementation; default every one that applies to the call.
        all_configs: every config of each implementation's space, not only the default.
        sass: also each kernel's SASS instruction mix (cuobjdump; gpucg.verify.sass).
        attrs: the operator's attributes.

    Returns:
        One :class:`ResourceRow` per kernel, block size, implementation and config.
    """
    from ..compiled import compile as compile_op, explain
    from ..target import Target

    tgt = Target(target)
    if tgt.kind != "cuda":
        raise InputError(f"target={target!r}: resources are for CUDA targets "
                         "('cuda -arch=sm_90')")
    arch = tgt.attrs.setdefault("arch", "sm_90")
    limits(arch)
    ok, why = nvrtc.available()
    if not ok:
        from ..errors import BackendUnavailableError

        raise BackendUnavailableError(f"resources need NVRTC: {why}")
    _static(op, input_types)
    sel = explain(op, *input_types, target=tgt, records=False, **attrs)
    names = [c.name for c in sel.candidates if c.verdict != "excluded"]
    chosen = sel.choices[0].impl.name
    if impl is not None:
        names = [impl]  # compile() says clearly when it is not an implementation here
    rows = []
    for name in names:
        short = name.rsplit(".", 1)[0]
        choice = compile_op(op, *input_types, target=tgt, impl=short, records=False,
                            **attrs).selection.choices[0]
        if not choice.impl.kernels:
            continue  # host code: nothing for ptxas
        for config in list(choice.impl.space) if all_configs else [None]:
            compiled, launches = record_launches(op, input_types, str(tgt), short, config, attrs)
            rows += launch_rows(compiled, launches, arch, selected=choice.impl.name == chosen,
                                sass=sass)
    if not rows:
        raise InputError(f"{op} has no CUDA kernel implementation for this call "
                         f"(candidates: {', '.join(names) or 'none'})")
    return rows


def config_fits(compiled, config, arch: str = "sm_90", impl: str | None = None) -> tuple[bool, str]:
    """Whether every kernel an implementation launches with ``config`` can be launched on
    ``arch``: registers x block within the register file, shared memory within the block's
    limit (what a GPU refuses with "too many resources requested for launch").

    The autotuner calls it to drop configs before measuring them; it needs NVRTC, no GPU.

    Args:
        compiled: a :class:`gpucg.CompiledOp` with constant shapes (any target: the check
            is of the CUDA rendering of the same templates and launch geometry).
        config: a mapping of the implementation's knobs (a Config of its space).
        arch: the CUDA architecture ("sm_80", "sm_90", ...).
        impl: the implementation (default: the one the compiled op selected).

    Returns:
        (True, "") or (False, the first reason, naming the kernel and the limit).
    """
    name = impl or compiled.selection.choices[0].impl.short_name
    attrs = dataclasses.asdict(compiled.attrs)
    _static(compiled.op.name, compiled.input_types)
    done, launches = record_launches(compiled.op.name, compiled.input_types,
                                     f"cuda -arch={arch}", name, config, attrs)
    for row in launch_rows(done, launches, arch):
        if not row.fits:
            return False, f"{row.impl} kernel {row.kernel} (block {row.block}): {row.reason}"
    return True, ""


def format_rows(rows) -> str:
    """The rows as the table ``gpucg resources`` prints."""
    cw = max([len("config")] + [len(r.config) for r in rows])
    head = (f"{'implementation':<22} {'config':<{cw}} {'kernel':<13} {'idx':<5} {'regs':>4} "
            f"{'smem':>6} {'stack':>5} {'spill':>9} {'block':>5} {'max':>5} {'blk/SM':>6} "
            f"{'occ':>5}  {'limiter':<13} fits")
    out = [head]
    for r in rows:
        spill = f"{r.spill_stores}/{r.spill_loads}"
        note = "" if r.fits else f"  NO: {r.reason}"
        notes = [f"declared: {x}" for x in (r.expect_spills, r.expect_low_occupancy) if x]
        out.append(f"{r.impl + ('*' if r.selected else ''):<22} {r.config:<{cw}} "
                   f"{r.kernel[:13]:<13} {r.index[3:]:<5} {r.registers:>4} {r.shared:>6} "
                   f"{r.stack:>5} {spill:>9} {r.block:>5} {r.max_block:>5} "
                   f"{r.blocks_per_sm:>6} {r.occupancy:>5.0%}  {r.limiter:<13} "
                   f"{'yes' if r.fits else 'no'}{note}" + "".join(f"  ({n})" for n in notes))
    return "\n".join(out)


def explain_lines(compiled, arch: str | None = None) -> list[str]:
    """One line per kernel of each selected implementation of a CUDA compiled op: registers,
    shared memory and spills from ptxas; with constant shapes, the block and occupancy too."""
    arch = arch or compiled.target.attrs.get("arch", "sm_90")
    static = all(t.is_static for t in compiled.input_types)
    attrs = dataclasses.asdict(compiled.attrs)
    out = []
    for i, choice in enumerate(compiled.selection.choices):
        impl = choice.impl
        if not impl.kernels:
            continue
        if static and len(compiled.selection.choices) == 1:
            done, launches = record_launches(compiled.op.name, compiled.input_types,
                                             f"cuda -arch={arch}", impl.short_name, None, attrs)
            for r in launch_rows(done, launches, arch):
                out.append(f"  {arch} {r.impl}/{r.kernel}: {r.registers} registers, {r.shared} B "
                           f"shared, {r.spills} B spilled, block {r.block}: {r.occupancy:.0%} "
                           f"occupancy ({r.limiter}){'' if r.fits else ', DOES NOT FIT: ' + r.reason}")
            continue
        for key in impl.kernels:
            res = kernel_resources(compiled.source(i, key), compiled.entry(i, key), arch,
                                   tuple(impl.options) or nvrtc.DEFAULT_OPTIONS)
            out.append(f"  {arch} {impl.name}/{key}: {res.registers} registers, {res.shared} B "
                       f"shared, {res.spills} B spilled; blocks up to "
                       f"{max_block(arch, res.registers)} threads fit")
    return out


def cuda_resource_check(backend, program, key, grid, block, shared=0):
    """The autotuner's check of a CUDA launch (gpucg.autotune.checks): registers x block and
    shared memory against the device, from ptxas; None (no objection) without NVRTC or for an
    architecture outside the limits table."""
    from .occupancy import ARCHS

    source = getattr(program, "source", None)
    arch = getattr(backend, "arch", None)
    if source is None or arch not in ARCHS or not nvrtc.available()[0]:
        return None
    got = kernel_resources(source, program.entry, arch, tuple(program.options))
    occ = occupancy(arch, got.registers, got.shared, block, shared)
    return None if occ.fits else occ.reason


def _register_check() -> None:
    from ..autotune.checks import register_check

    register_check("cuda", cuda_resource_check)


_register_check()
