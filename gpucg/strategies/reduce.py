"""Strategies of the reductions: which kernel reduces which rows, on which target.

A reduction of one run of neighbouring axes is the (outer, n, inner) view of its input: n the
reduced length, inner the product of the dimensions after it (1 when the last axes are
reduced). Reducing separate runs of axes takes one pass per run.

GPU implementations, by plevel (conditions on the symbolic sizes, checked at run time):
  reduce_warp    inner == 1 and n <= 512: 32 work-items (a warp) a row, 8 rows a work-group.
  reduce_split   inner == 1, n >= 16384 and outer < 1024: few long rows; each row split over
                 several work-groups, the partial results reduced by a second pass.
  reduce_group   inner == 1: one work-group a row.
  reduce_cols    any inner: a non-last axis read where it lies, 32 neighbouring columns a
                 work-group (coalesced), split down the columns when they are too few;
                 vw > 1: a work-item's vec columns by 128-bit loads where x is aligned and
                 inner a multiple of vw (the last, partial block element by element).
  reduce_passes  any axes: one pass per run of reduced axes, each a row or column reduction;
                 the first (which reads the input) by 128-bit loads where aligned.
The warp and group reductions meet in local memory with barriers, not sub-group shuffles:
cl_khr_subgroups is not portable (PoCL on CPUs and Oclgrind lack it), and one template serves
CUDA and OpenCL. On an OpenCL CPU device (PoCL) the same kernels run with one work-item per
row or column, each streaming its own run of memory (argmax/argmin search their blocks by
256-bit vectors, a column kernel folds 8 rows a step over 2048 columns); the host target runs
NumPy itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..codegen.literals import compute_dtype
from ..codegen.simd import SIMD_DTYPES
from ..codegen.vector import WORD, itemsize, lanes
from ..half import half_format
from ..space import ConfigSpace
from ..implementation import Kernel, host_impl, kernel_impl
from ..ops._axes import passes, reduced_count
from ..ops.reduce import ARG_OPS, OPS, acc_dtype, reduced_axes
from ..runtime.base import ceil_div, split_chunks, vector_chunks
from ..shape import alignment
from ..strategy import Strategy

WARP_N_MAX = 512
#: elements of a block of the two-pass argmax/argmin (4 KiB of float32: in L1 for the search)
ARG_BLOCK = 1024
SPLIT_N_MIN = 16384
#: bytes of one vector of the argmax/argmin search where the target has vector arithmetic
#: (AVX2's 256 bits)
SIMD_BYTES = 32
SPLIT_ROWS_MAX = 1024


@dataclass(frozen=True)
class ReduceInfo:
    """What the run functions need: the reduction and the reduced axes of the input."""

    op: str
    axes: tuple
    acc: str


def _view(ctx):
    return passes(tuple(int(d) for d in ctx.inputs[0].shape), ctx.info.axes)


def _single(ctx):
    (view,) = _view(ctx)
    return view


def _count(ctx) -> int:
    return int(reduced_count(ctx.inputs[0].shape, ctx.info.axes))


def _partials(ctx, size: int) -> tuple:
    """Scratch for partial results (and their indices, for argmax/argmin)."""
    vals = ctx.empty((size,), np.dtype(ctx.info.acc))
    return (vals, ctx.empty((size,), ctx.idx)) if ctx.info.op in ARG_OPS else (vals,)


def _io(src, dst) -> dict:
    """The kernels' array arguments by name: x and y, with xi / yi the indices of partial
    results (argmax/argmin)."""
    return dict(zip(("x", "xi"), src)) | dict(zip(("y", "yi"), dst))


def _rows(kern, ctx, src, dst, rows, n, chunk, chunks, lanes):
    s, wg = ctx.size, ctx.config["wg"]
    kern(**_io(src, dst), rows=s(rows), n=s(n), chunk=s(chunk), chunks=s(chunks),
         count=s(_count(ctx)), grid=ceil_div(rows, wg // lanes), block=wg)


def _cols(kern, ctx, src, dst, outer, n, inner, chunk, chunks):
    s, tx = ctx.size, ctx.config["tx"]
    colblocks = ceil_div(inner, tx * ctx.config["vec"])
    kern(**_io(src, dst), n=s(n), inner=s(inner), chunk=s(chunk), chunks=s(chunks),
         colblocks=s(colblocks), count=s(_count(ctx)), grid=outer * chunks * colblocks, block=tx * ctx.config["ty"])


def _warp_run(ctx, main) -> None:
    outer, n, _ = _single(ctx)
    _rows(main, ctx, ctx.inputs, ctx.outputs, outer, n, n, 1, ctx.config["lanes"])


def _group_run(ctx, main) -> None:
    outer, n, _ = _single(ctx)
    _rows(main, ctx, ctx.inputs, ctx.outputs, outer, n, n, 1, ctx.config["wg"])


def _split_run(ctx, main, part, merge) -> None:
    outer, n, _ = _single(ctx)
    c, wg = ctx.config, ctx.config["wg"]
    chunk, chunks = vector_chunks(n, outer, wg * c["unroll"] * c["chunk_items"], c["groups"],
                                  c["vw"])
    if chunks == 1:
        _rows(main, ctx, ctx.inputs, ctx.outputs, outer, n, n, 1, wg)
        return
    mid = _partials(ctx, outer * chunks)
    _rows(part, ctx, ctx.inputs, mid, outer * chunks, n, chunk, chunks, wg)
    _rows(merge, ctx, mid, ctx.outputs, outer, chunks, chunks, 1, wg)


def _cols_run(ctx, main, part, merge) -> None:
    outer, n, inner = _single(ctx)
    c = ctx.config
    colblocks = ceil_div(inner, c["tx"] * c["vec"])
    chunk, chunks = split_chunks(n, outer * colblocks, c["ty"] * c["chunk_items"], c["groups"])
    if chunks == 1:
        _cols(main, ctx, ctx.inputs, ctx.outputs, outer, n, inner, n, 1)
        return
    mid = _partials(ctx, outer * chunks * inner)
    _cols(part, ctx, ctx.inputs, mid, outer, n, inner, chunk, chunks)
    _cols(merge, ctx, mid, ctx.outputs, outer, chunks, inner, chunks, 1)


def _passes_run(ctx, rows_in_part, rows_in_final, rows_part_part, rows_part_final,
                cols_in_part, cols_in_final, cols_part_part, cols_part_final) -> None:
    kernels = {("rows", "in", "part"): rows_in_part, ("rows", "in", "final"): rows_in_final,
               ("rows", "part", "part"): rows_part_part, ("rows", "part", "final"): rows_part_final,
               ("cols", "in", "part"): cols_in_part, ("cols", "in", "final"): cols_in_final,
               ("cols", "part", "part"): cols_part_part, ("cols", "part", "final"): cols_part_final}
    views = _view(ctx)
    src = ctx.inputs
    for k, (outer, n, inner) in enumerate(views):
        last = k == len(views) - 1
        dst = ctx.outputs if last else _partials(ctx, outer * inner)
        kind = "rows" if inner == 1 else "cols"
        kern = kernels[(kind, "in" if k == 0 else "part", "final" if last else "part")]
        if kind == "rows":
            _rows(kern, ctx, src, dst, outer, n, n, 1, ctx.config["wg"])
        else:
            _cols(kern, ctx, src, dst, outer, n, inner, n, 1)
        src = dst


def _kernel(template: str, src: str, dst: str, doc: str, lanes_is_wg: bool = False) -> Kernel:
    derive = (lambda p: {"lanes": p["wg"]}) if lanes_is_wg else None
    fixed = {"src": src, "dst": dst, **({"two_pass": False} if template == "cols" else {})}
    return Kernel(f"reduce/{template}.j2", fixed, derive, doc)


_GROUP = dict(lanes_is_wg=True)
REDUCE_WARP = kernel_impl("reduce_warp", _warp_run, main=_kernel(
    "rows", "input", "final", "a warp of work-items reduces each row"))
REDUCE_GROUP = kernel_impl("reduce_group", _group_run, main=_kernel(
    "rows", "input", "final", "one work-group reduces each row", **_GROUP))
REDUCE_SPLIT = kernel_impl(
    "reduce_split", _split_run,
    main=_kernel("rows", "input", "final", "a row short enough for one work-group", **_GROUP),
    part=_kernel("rows", "input", "partial", "pass 1: each work-group reduces one chunk of a row",
                 **_GROUP),
    merge=_kernel("rows", "partial", "final", "pass 2: the partial results of each row", **_GROUP))
REDUCE_COLS = kernel_impl(
    "reduce_cols", _cols_run,
    main=_kernel("cols", "input", "final", "each output reduces one column, read coalesced"),
    part=_kernel("cols", "input", "partial", "pass 1: one chunk of each column"),
    merge=_kernel("cols", "partial", "final", "pass 2: the partial results of each column"))
REDUCE_PASSES = kernel_impl("reduce_passes", _passes_run, **{
    f"{kind}_{s}_{t}": _kernel(kind, {"in": "input", "part": "partial"}[s],
                               {"part": "partial", "final": "final"}[t],
                               f"one pass over a run of axes ({kind}, {s} -> {t})",
                               **(_GROUP if kind == "rows" else {}))
    for kind in ("rows", "cols") for s in ("in", "part") for t in ("part", "final")})


def _spaces(on_cpu: bool, vw: int, simd: int = 1) -> dict:
    """Config spaces of each implementation; a CPU gets one work-item a row or column. The row
    kernels' vw: elements a 128-bit load brings (vw elements of the input's dtype in 16
    bytes on GPUs; 1: scalar loads, the CPU's default). simd > 1 (argmax/argmin where the
    target has vector arithmetic): the row kernels' own space, whose two-pass search takes
    blocks simd elements a vector (the CPU's default: 256-bit vectors, unroll of them; the
    one-pass kernels, two_pass=False, ignore it)."""
    # two_pass: argmax/argmin find each block's extreme value, then its first index where the
    # block beats the best so far (a CPU vectorizes that; a GPU tracks indices in one pass)
    vws = tuple(sorted({1, vw}))
    simds = {"simd": tuple(sorted({1, simd}))} if simd > 1 else {}
    rows = {"wg": (1, 64, 128, 256, 512, 1024), "unroll": (1, 2, 4, 8, 16),
            "two_pass": (False, True), "vw": vws, **simds}
    split = {**rows, "chunk_items": (16, 64, 4096), "groups": (8, 256, 1024, 4096)}
    cols = {"tx": (1, 16, 32, 64), "ty": (1, 4, 8, 16),
            "vec": (1, 2, 4, 8, 16, 64, 128, 256, 1024, 2048),
            "chunk_items": (16, 256), "groups": (8, 256, 1024, 4096), "vw": vws,
            "unroll_rows": (1, 2, 4, 8)}
    # a work-group of at most 1024 work-items, and its tree in at most 32 KiB of local memory;
    # vw > 1: a work-item's vec columns are whole 128-bit loads, at most 16 values a row
    def fits(c):
        return (c["tx"] * c["ty"] <= 1024 and c["tx"] * c["ty"] * c["vec"] * 16 <= 32768
                and c["vec"] % c["vw"] == 0 and (c["vw"] == 1 or c["vec"] <= 16))

    if on_cpu:
        # simd: four 256-bit vectors in flight (8 accumulators of scalars otherwise)
        d_rows = {"wg": 1, "unroll": 4 if simds else 8, "two_pass": True, "vw": 1,
                  **({"simd": simd} if simds else {})}
        # a column block of 2048 (8 KiB of float32: two pages a row, which a CPU's prefetcher
        # streams; 256 columns took 1.2-1.5x NumPy's time on (256, 32000) over axis 0), 8 rows
        d_cols = {"tx": 1, "ty": 1, "vec": 2048, "vw": 1, "unroll_rows": 8}
        d_split = dict(d_rows, chunk_items=4096, groups=8)
        d_cols.update(chunk_items=256, groups=8)
    else:
        d_rows = {"wg": 256, "unroll": 2, "two_pass": False, "vw": vw, **{k: 1 for k in simds}}
        # a column block of 32 work-items x one 128-bit load (8-bit types: two scalars)
        cvw = vw if vw <= 8 else 1
        d_cols = {"tx": 32, "ty": 8, "vec": max(2, cvw), "vw": cvw, "unroll_rows": 1}
        d_split = dict(d_rows, chunk_items=16, groups=1024)
        d_cols.update(chunk_items=16, groups=1024)
    # the passes reduce separate runs of axes, without splitting a pass (no argmax either)
    passes = {"wg": rows["wg"], "unroll": rows["unroll"], "tx": cols["tx"], "ty": cols["ty"],
              "vec": cols["vec"], "vw": vws}
    def scalar_find(c):  # the two-pass search loads by vw = 1 (simd: vectors of its own)
        return c["vw"] == 1 or not c["two_pass"]

    return {
        "warp": ConfigSpace({"wg": (64, 128, 256), "lanes": (4, 8, 16, 32), "unroll": (1, 2, 4),
                             "two_pass": (False, True), "vw": vws, **simds},
                            {"wg": 256, "lanes": 32, "unroll": 2, "two_pass": False,
                             "vw": 1 if on_cpu else vw, **{k: 1 for k in simds}},
                            constraint=scalar_find),
        "group": ConfigSpace(rows, d_rows, constraint=scalar_find),
        "split": ConfigSpace(split, d_split, constraint=scalar_find),
        "cols": ConfigSpace(cols, d_cols, constraint=fits),
        "passes": ConfigSpace(passes, {k: {**d_rows, **d_cols, "vec": min(d_cols["vec"], 256)}[k]
                                       for k in passes},
                              constraint=fits),
    }


def first_pass_needs(n, inner):
    """Implementation.needs of a kernel whose vw > 1 reads the input 16 bytes at a time, for
    the first pass, (outer, n, inner), the one that reads it: the input's address 16-byte
    aligned, and rows (inner == 1) of n a multiple of vw (each row starts aligned) or columns
    (vw neighbouring ones a load) of inner a multiple of vw; else vw = 1."""
    def needs(config):
        if config["vw"] == 1:
            return None
        vw = config["vw"]
        rows = sympy.And(sympy.Eq(inner, 1), sympy.Eq(sympy.Mod(n, vw), 0))
        cols = sympy.And(sympy.Ne(inner, 1), sympy.Eq(sympy.Mod(inner, vw), 0))
        return sympy.And(alignment(0) >= WORD, sympy.Or(rows, cols)), {"vw": 1}
    return needs


def _value(dtype: str) -> str:
    return compute_dtype(dtype)


def gpu_strategy_for(op: str, axes_of):
    """The GPU strategy of reduction ``op`` (a template op name) whose reduced axes are
    ``axes_of(attrs, input_type)``; the global pools use it too."""
    def strategy(attrs, inputs, outputs, target):
        (x,), (y,) = inputs, outputs
        axes = axes_of(attrs, x)
        acc = acc_dtype(op, x.dtype)
        # float16 and bfloat16 are storage only: the kernels load and store float32 values
        params = dict(op=op, in_dtype=_value(x.dtype), acc_dtype=acc, out_dtype=_value(y.dtype),
                      in_half=half_format(x.dtype), out_half=half_format(y.dtype),
                      two_pass=False, block=ARG_BLOCK, vw=1, simd=1, unroll_rows=1)
        info = ReduceInfo(op, axes, acc)
        # argmax/argmin: their own row space, with vectors of 32 bytes where the target has them
        simd = (SIMD_BYTES // itemsize(x.dtype) if op in ARG_OPS and x.dtype in SIMD_DTYPES
                and target.capabilities.native("simd") else 1)
        spaces = _spaces(target.on_cpu, lanes(x.dtype), simd)
        views = passes(x.shape, axes)
        s = Strategy(target)

        def add(decl, plevel, space, condition=None):
            # params holds defaults (two_pass, vw) for the kernels whose space has no such knob
            knobs = spaces[space].knobs
            s.add(decl, plevel, condition=condition, space=spaces[space], info=info,
                  fixed={k: v for k, v in params.items() if k not in knobs},
                  needs=first_pass_needs(*views[0][1:]) if "vw" in knobs else None)

        if len(views) == 1:
            outer, n, inner = views[0]
            rows = sympy.Eq(inner, 1)
            # a CPU core streams one row best; GPUs want many work-items on each row
            p = (9, 13, 12, 11) if target.on_cpu else (14, 13, 12, 11)
            add(REDUCE_WARP, p[0], "warp", sympy.And(rows, n <= WARP_N_MAX))
            add(REDUCE_SPLIT, p[1], "split",
                sympy.And(rows, n >= SPLIT_N_MIN, outer < SPLIT_ROWS_MAX))
            add(REDUCE_GROUP, p[2], "group", rows)
            add(REDUCE_COLS, p[3], "cols")
        else:
            why = (f"reduces {len(views)} separate runs of axes; it needs one (outer, n, inner) "
                   "view")
            for decl, plevel in ((REDUCE_WARP, 14), (REDUCE_SPLIT, 13), (REDUCE_GROUP, 12),
                                 (REDUCE_COLS, 11)):
                s.exclude(decl, plevel, why)
        add(REDUCE_PASSES, 1, "passes")
        return s
    return strategy


# -- the host target: NumPy's own reductions --------------------------------------------------

def numpy_reduce(op: str, x: np.ndarray, axes: tuple, keepdims: bool, out_dtype: str):
    """``op`` over ``axes`` by NumPy (float16 accumulated in float32, as the kernels do)."""
    if op in ARG_OPS:
        fn = np.argmax if op == "argmax" else np.argmin
        return np.asarray(fn(x, axis=axes[0] if len(axes) == 1 else None, keepdims=keepdims))
    if op == "mean":
        count = int(reduced_count(x.shape, axes))
        total = np.sum(x, axis=axes, keepdims=keepdims, dtype=acc_dtype(op, x.dtype.name))
        with np.errstate(invalid="ignore", divide="ignore"):  # the mean of nothing is NaN
            return np.asarray(np.true_divide(total, count)).astype(out_dtype, copy=False)
    fn = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "all": np.all,
          "any": np.any}[op]
    kw = {"dtype": acc_dtype(op, x.dtype.name)} if op in ("sum", "prod") else {}
    return np.asarray(fn(x, axis=axes, keepdims=keepdims, **kw)).astype(out_dtype, copy=False)


def _host_run(ctx):
    op, axes, out_dtype = ctx.info
    return numpy_reduce(op, ctx.inputs[0], axes, ctx.attrs.keepdims, out_dtype)


NUMPY_REDUCE = host_impl("numpy_reduce", _host_run)


def host_strategy(op: str):
    def strategy(attrs, inputs, outputs, target):
        s = Strategy(target)
        s.add(NUMPY_REDUCE, 10, info=(op, reduced_axes(op, inputs[0], attrs), outputs[0].dtype))
        return s
    return strategy


STRATEGIES = {op: {"gpu": gpu_strategy_for(op, lambda attrs, x, op=op: reduced_axes(op, x, attrs)),
                   "cpu": host_strategy(op)} for op in OPS}
