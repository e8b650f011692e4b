"""Strategies of the transform family: one strided-copy kernel (templates/transform/copy.j2)
moves data for every operator but take, which gathers (templates/transform/take.j2).

GPU implementations:
  concat_copy   one launch per input: its (outer, n_i * inner) view copied into the output's
                slab at column offset off_i * inner (output read through strides)
  split_copy    one launch per output: the input's slab read through strides
  slice_copy    one work-item per output element, the input read at start + c * step per axis
  copy          a contiguous copy, converting the dtype for cast (flatten, squeeze, expand_dims)
  take_gather   one work-item per output element of the (outer, m, inner) view: neighbouring
                work-items read neighbouring elements of a row of x (an embedding lookup reads
                whole contiguous rows); under mode "raise" the first m work-items also count
                the out-of-range indices, read back after the launch
The numpy target runs NumPy (np.concatenate, np.split, slicing, np.take, astype).
"""

from __future__ import annotations

import numpy as np

from ..codegen import Code, dialect_for
from ..half import half_format
from ..implementation import Kernel, host_impl, kernel_impl
from ..op import get_op
from ..ops import _slicing as sl
from ..errors import StrategyError
from ..ops.transform import INTS, check_take_indices, flatten_axis
from ..runtime.base import ceil_div
from ..shape import normalize_axis
from ..space import ConfigSpace
from ..strategy import Strategy, only
from .view import with_view

_WG = ConfigSpace({"wg": (64, 128, 256, 512)}, {"wg": 256})


def _strides(shape) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= int(d)
    return out[::-1]


def _numel(shape) -> int:
    return int(np.prod([int(d) for d in shape], dtype=np.int64))


def _slabs(shape, axis: int) -> tuple[int, int]:
    """(outer, inner) of a contiguous shape around ``axis``."""
    return _numel(shape[:axis]), _numel(shape[axis + 1:])


def _dims(ctx, shape, side: str, base: int, strides) -> dict:
    """copy.j2's size arguments: the sizes s<r> of the walked shape and one side's ("i" in,
    "o" out) base offset <side>b and strides <side>st<r>."""
    s = ctx.size
    return ({f"s{r}": s(d) for r, d in enumerate(shape)} | {f"{side}b": s(base)}
            | {f"{side}st{r}": s(st) for r, st in enumerate(strides)})


def _concat_run(ctx, main) -> None:
    y = ctx.outputs[0]
    axis = normalize_axis(ctx.attrs.axis, y.ndim)
    outer, inner = _slabs(y.shape, axis)
    row = int(y.shape[axis]) * inner
    s, wg, off = ctx.size, ctx.config["wg"], 0
    for x in ctx.inputs:
        cols = int(x.shape[axis]) * inner
        n = outer * cols
        main(x=x, y=y, n=s(n), **_dims(ctx, (outer, cols), "o", off, (row, 1)),
             grid=ceil_div(n, wg), block=wg)
        off += cols


def _split_run(ctx, main) -> None:
    x = ctx.inputs[0]
    axis = normalize_axis(ctx.attrs.axis, x.ndim)
    outer, inner = _slabs(x.shape, axis)
    row = int(x.shape[axis]) * inner
    s, wg = ctx.size, ctx.config["wg"]
    for y, (start, length) in zip(ctx.outputs, sl.split_points(ctx.attrs, int(x.shape[axis]))):
        cols = length * inner
        n = outer * cols
        main(x=x, y=y, n=s(n), **_dims(ctx, (outer, cols), "i", start * inner, (row, 1)),
             grid=ceil_div(n, wg), block=wg)


def _slice_run(ctx, main) -> None:
    x, y = ctx.inputs[0], ctx.outputs[0]
    shape = tuple(int(d) for d in x.shape)  # the call's own sizes (symbolic ones too)
    own = _strides(shape)
    parts = sl.slices(ctx.attrs, shape)
    base = sum(start * st for (start, _, _), st in zip(parts, own))
    n = _numel(ctx.out_shapes[0])
    s, wg = ctx.size, ctx.config["wg"]
    steps = [step * st for (_, step, _), st in zip(parts, own)]
    main(x=x, y=y, n=s(n), **_dims(ctx, ctx.out_shapes[0], "i", base, steps),
         grid=ceil_div(n, wg), block=wg)


def _copy_run(ctx, main) -> None:
    x, y = ctx.inputs[0], ctx.outputs[0]
    n = _numel(y.shape)
    wg = ctx.config["wg"]
    main(x=x, y=y, n=ctx.size(n), grid=ceil_div(n, wg), block=wg)


def _take_run(ctx, main) -> None:
    x, ind = ctx.inputs
    y = ctx.outputs[0]
    if ctx.attrs.axis is None:
        n, inner = _numel(x.shape), 1
    else:
        axis = normalize_axis(ctx.attrs.axis, x.ndim)
        inner, n = _slabs(x.shape, axis)[1], int(x.shape[axis])
    total, m = _numel(y.shape), _numel(ind.shape)
    s, wg = ctx.size, ctx.config["wg"]
    args = dict(x=x, indices=ind, y=y, total=s(total), m=s(m), n=s(n), inner=s(inner))
    if ctx.attrs.mode != "raise":
        main(**args, grid=ceil_div(total, wg), block=wg)
        return
    # the kernel counts out-of-range indices where they live; the message comes from them
    bad = ctx.counter()
    main(**args, bad=bad, grid=ceil_div(max(total, m), wg), block=wg)
    if ctx.count(bad):
        check_take_indices(ctx.backend.to_host(ind), n, ctx.attrs)
        raise StrategyError(f"{ctx.impl.name}: the kernel counted {ctx.count(bad)} "
                            "out-of-range indices that the host check does not find")


_COPY = "transform/copy.j2"
CONCAT = kernel_impl("concat_copy", _concat_run, main=Kernel(
    _COPY, doc="one launch per input, one work-item per element"))
SPLIT = kernel_impl("split_copy", _split_run, main=Kernel(
    _COPY, doc="one launch per output, one work-item per element"))
SLICE = kernel_impl("slice_copy", _slice_run, main=Kernel(
    _COPY, doc="one work-item per output element"))
COPY = kernel_impl("copy", _copy_run, main=Kernel(_COPY, doc="one work-item per element"))
TAKE = kernel_impl("take_gather", _take_run, main=Kernel(
    "transform/take.j2", doc="one work-item per output element"))


# -- conversions ------------------------------------------------------------------------------

def _int_max(dtype: str, d) -> str:
    info = np.iinfo(dtype)
    if info.bits == 64:
        return f"(({d.type(dtype)}){hex(int(info.max)).upper().replace('X', 'x')}{d.u64_suffix})"
    return f"{int(info.max)}u" if dtype == "uint32" else str(int(info.max))


def _flit(value: float, src: str) -> str:
    text = repr(float(value))
    return text if src == "float64" else text + "f"


def convert(src: str, dst: str, d) -> tuple[str, str]:
    """(C expression of ``v``, a src -> dst, as the kernel's value) and the rule in words."""
    ct = "float" if half_format(dst) else d.type(dst)
    if src == dst:
        return "v", "a copy"
    if dst == "bool":
        return "v != 0", "nonzero (NaN too) is 1"
    if (half_format(src) or src.startswith("float")) and dst in INTS:
        info = np.iinfo(dst)
        hi, lo = _flit(2.0 ** (info.bits - (info.min < 0)), src), _flit(float(info.min), src)
        low = "0" if info.min == 0 else f"({ct}){lo}"
        return (f"v != v ? 0 : v >= {hi} ? {_int_max(dst, d)} : v <= {lo} ? {low} : ({ct})v",
                "truncation toward zero; NaN is 0, out-of-range values saturate to "
                f"[{info.min}, {info.max}]")
    rule = ("rounded to nearest even (float64 through float32; FP8 as gpucg/codegen/fp8.py "
            "says)" if dst.startswith("float") or half_format(dst)
            else "wraps modulo 2^bits as NumPy's astype" if src != "bool" else "0 or 1")
    return f"({ct})v", rule


def _params(target, src: str, dst: str, what: str, R: int, ins: bool, outs: bool) -> dict:
    expr, rule = convert(src, dst, dialect_for(target.backend))
    return dict(in_dtype=(src,), out_dtype=(dst,), R=R, in_strided=ins, out_strided=outs,
                convert=Code(expr), rule=Code(rule), what=Code(what),
                fp64="float64" if "float64" in (src, dst) else "float32")


def _what(op: str, attrs, x, y) -> str:
    if op == "flatten":
        return f"flatten at axis {flatten_axis(attrs, x.ndim)}: a contiguous copy"
    if op in ("squeeze", "expand_dims"):
        return f"{op} axis {attrs.axis}: a contiguous copy"
    if op == "cast":
        return f"cast to {y.dtype}"
    return f"strided_slice of {tuple(x.shape)}"


def transform_gpu(op: str):
    def strategy(attrs, inputs, outputs, target):
        x, y = inputs[0], outputs[0]
        decl, ins, outs, R = COPY, False, False, 0
        what = _what(op, attrs, x, y)
        if op == "concatenate":
            decl, outs, R, what = CONCAT, True, 2, "concatenate: one input into its slab"
        elif op == "split":
            decl, ins, R, what = SPLIT, True, 2, "split: one piece from its slab"
        elif op == "strided_slice":
            decl, ins, R = SLICE, True, x.ndim
        s = Strategy(target)
        s.add(decl, 10, space=_WG, fixed=_params(target, x.dtype, y.dtype, what, R, ins, outs))
        return s
    return strategy


def take_gpu(attrs, inputs, outputs, target):
    x, ind = inputs
    if attrs.axis is None:
        outer1, inner1 = True, True
    else:
        axis = normalize_axis(attrs.axis, x.ndim)
        outer1, inner1 = all(d == 1 for d in x.shape[:axis]), all(d == 1 for d in x.shape[axis + 1:])
    s = Strategy(target)
    s.add(TAKE, 10, space=_WG, fixed=dict(
        dtype=(x.dtype,), ind_dtype=(ind.dtype,), OUTER1=outer1, INNER1=inner1, mode=attrs.mode,
        fp64="float64" if x.dtype == "float64" else "float32"))
    return s


HOST = host_impl("numpy_transform", lambda ctx: get_op(ctx.info).reference(*ctx.inputs,
                                                                            ctx.attrs),
                 strided=True)  # NumPy's slicing, indexing, concatenate read any strides


def host(op: str):
    return only(HOST, info=op)


STRATEGIES = {op: {"gpu": with_view(op, take_gpu if op == "take" else transform_gpu(op)),
                   "cpu": with_view(op, host(op))}
              for op in ("concatenate", "split", "strided_slice", "take", "flatten", "squeeze",
                         "expand_dims", "cast")}
