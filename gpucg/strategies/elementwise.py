"""Strategies of the elementwise family: every elementwise operator, ``fused``, reshape,
broadcast_to, transpose and flip run one kernel template (templates/elementwise/ew.j2) that
evaluates an expression tree per element; pad and sum_to have kernels of their own.

GPU implementations of an elementwise call (the shapes decide which one applies):
  ew_contiguous  every input has the output's shape: inputs read at the output's index
  ew_strided     some input broadcasts (or is transposed, flipped): its index is decoded over
                 the output's dimensions, merged where no input changes between broadcasting
                 and not, so (n, m) + (m,) decodes one dimension pair, not a 4-D index
The NumPy target evaluates the tree with NumPy, node by node.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..space import ConfigSpace
from ..codegen import Code, dialect_for
from ..codegen.vector import WORD, itemsize
from ..implementation import Kernel, host_impl, kernel_impl
from ..op import get_op
from ..ops import _ewspec as spec, _expr, _layout as layout
from ..ops.elementwise import expression
from ..runtime.base import ceil_div
from ..shape import alignment, c_strides
from ..strategy import Strategy, only
from .view import with_view


@dataclass(frozen=True)
class EwInfo:
    """How each input is read: ("same",), ("bcast",), ("perm", axes) or ("flip", axes); and
    the output's axes merged into the kernel's dimensions."""

    access: tuple
    groups: tuple


def geometry(info: EwInfo, in_shapes, out_shape) -> tuple[list, list]:
    """(merged sizes, per strided input [base, strides...]) for concrete shapes."""
    sizes = [int(np.prod([out_shape[a] for a in g], dtype=np.int64)) for g in info.groups]
    args = []
    for acc, shape in zip(info.access, in_shapes):
        if acc[0] == "same":
            continue
        base = 0
        if acc[0] == "bcast":
            aligned = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
            full = [0 if d == 1 else s for d, s in zip(aligned, c_strides(aligned))]
            strides = [full[g[-1]] for g in info.groups]
        elif acc[0] == "perm":
            own = c_strides(shape)
            strides = [own[acc[1][g[0]]] for g in info.groups]
        else:  # flip: walk the flipped axes backwards from their last element
            own = c_strides(shape)
            strides = [-own[g[0]] if g[0] in acc[1] else own[g[0]] for g in info.groups]
            base = sum((int(shape[a]) - 1) * own[a] for a in acc[1] if int(shape[a]) > 0)
        args.append([base] + strides)
    return sizes, args


def _ew_run(ctx, main) -> None:
    y = ctx.outputs[0]
    n = int(np.prod(y.shape, dtype=np.int64))
    sizes, args = geometry(ctx.info, [x.shape for x in ctx.inputs], tuple(y.shape))
    s, wg, items = ctx.size, ctx.config["wg"], ctx.config["items"]
    chunk = wg * items * ctx.config["vw"]
    grid = ceil_div(n, chunk)
    named = {f"in{k}": x for k, x in enumerate(ctx.inputs)}
    access = ctx.info.access
    if access and any(a[0] != "same" for a in access):
        # rows of the innermost dimension long enough to fill most of a work-group's chunk:
        # one work-group per piece of a row, the row's offsets decoded once
        last = sizes[-1] if sizes else 1
        rows = n // last if sizes and last * 2 >= chunk else 0
        grid = rows * ceil_div(last, chunk) if rows else grid
        named.update(rows=s(rows), **{f"s{r}": s(v) for r, v in enumerate(sizes)})
        strided = [k for k, a in enumerate(access) if a[0] != "same"]
        for k, (base, *strides) in zip(strided, args):
            named[f"b{k}"] = s(base)
            named.update({f"st{k}_{r}": s(v) for r, v in enumerate(strides)})
    main(**named, y=y, n=s(n), grid=grid, block=wg)


EW_CONTIGUOUS = kernel_impl("ew_contiguous", _ew_run, main=Kernel(
    "elementwise/ew.j2", doc="the expression per element, inputs at the output's index"))
EW_STRIDED = kernel_impl("ew_strided", _ew_run, main=Kernel(
    "elementwise/ew.j2", doc="the expression per element, inputs through strides"))


def _merge(types, out_shape) -> tuple:
    """The output's axes merged into runs where every input is present throughout or
    broadcast throughout; axes of size 1 dropped."""
    runs = []
    for axis, size in enumerate(out_shape):
        if size == 1:
            continue
        has = tuple((t.shape[axis - (len(out_shape) - t.ndim)] != 1)
                    if axis >= len(out_shape) - t.ndim else False for t in types)
        if runs and runs[-1][1] == has:
            runs[-1] = (runs[-1][0] + (axis,), has)
        else:
            runs.append(((axis,), has))
    return tuple(g for g, _ in runs)


def _space(on_cpu: bool, strided: bool, vw: int) -> ConfigSpace:
    # PoCL (measured on a loaded 2-core machine, 4M float32): contiguous 256 x 1 ran at about
    # memory speed; the strided kernel liked smaller groups with a few elements each. GPUs move
    # 128 bits an access (vw elements; 1 where an input is transposed or flipped)
    default = ({"wg": 64, "items": 4, "vw": 1} if strided else
               {"wg": 256, "items": 1, "vw": 1}) if on_cpu \
        else {"wg": 256, "items": 4 if vw == 1 else 2, "vw": vw}
    return ConfigSpace({"wg": (64, 128, 256, 512), "items": (1, 2, 4, 8, 16),
                        "vw": tuple(sorted({1, vw}))}, default)


def _vector(dtypes, access, groups, inputs, out):
    """(vw, needs, step): the elements a 128-bit access of the narrowest dtype holds (wider
    dtypes move vw elements in several accesses), what the vw > 1 config needs of the call
    (every input read by vectors 16-byte aligned; with broadcasting, rows a multiple of vw so
    that each row starts aligned; vw = 1 where an input is transposed or flipped), and each
    input's step along the innermost merged dimension (1: neighbouring elements, 0: broadcast
    along it, read once a row)."""
    last = groups[-1][-1] if groups else None
    step = []
    for t, a in zip(inputs, access):
        lead = out.ndim - t.ndim
        step.append(1 if a[0] == "same" or (last is not None and last >= lead
                                              and t.shape[last - lead] != 1) else 0)
    if any(a[0] in ("perm", "flip") for a in access):
        return 1, None, tuple(step)
    vw = max(WORD // itemsize(dt) for dt in dtypes)
    row = sympy.Integer(1)
    for a in (groups[-1] if groups else ()):
        row *= out.shape[a]
    vec = [k for k, a in enumerate(access) if a[0] == "same" or step[k] == 1]

    def needs(config):
        if config["vw"] == 1:
            return None
        need = [alignment(k) >= WORD for k in vec]
        if groups:
            need.append(sympy.Eq(sympy.Mod(row, config["vw"]), 0))
        return sympy.And(*need), {"vw": 1}
    return vw, needs, tuple(step)


def _access(op: str, attrs, inputs, out) -> tuple:
    if op == "transpose":
        return (("perm", layout.permutation(inputs[0].ndim, attrs.axes)),)
    if op == "flip":
        return (("flip", layout.flip_axes(inputs[0].ndim, attrs.axes)),)
    if op == "reshape":
        return (("same",),)
    aligned = [(1,) * (out.ndim - t.ndim) + tuple(t.shape) for t in inputs]
    return tuple(("same",) if a == tuple(out.shape) else ("bcast",) for a in aligned)


def ew_gpu(op: str):
    def strategy(attrs, inputs, outputs, target):
        out = outputs[0]
        d = dialect_for(target.backend)
        tree = _expr.node("identity", _expr.placeholders(1), {}) if op in _MOVES \
            else expression(op, attrs)
        typed = _expr.typecheck(tree, tuple(t.dtype for t in inputs))
        lines, result, helpers = _expr.to_c(typed, d)
        access = _access(op, attrs, inputs, out)
        strided = any(a[0] != "same" for a in access)
        if not strided:
            groups = ()
        elif all(a[0] == "same" or a[0] == "bcast" for a in access):
            groups = _merge(inputs, out.shape)
        else:
            groups = tuple((a,) for a in range(out.ndim))
        dtypes = [t.dtype for t in inputs] + [out.dtype] + [lt for n in _nodes(typed)
                                                            for lt in n.loop]
        vw, needs, step = _vector([t.dtype for t in inputs] + [out.dtype], access, groups,
                                  inputs, out)
        params = dict(in_dtypes=tuple(t.dtype for t in inputs), out_dtype=(out.dtype,),
                      acc_dtype="float64" if "float64" in dtypes else "float32",
                      body=tuple(Code(x) for x in lines), result=Code(result),
                      helpers=Code("".join(helpers.values())), text=Code(str(tree)),
                      access=tuple("strided" if a[0] != "same" else "same" for a in access),
                      R=len(groups), step=step)
        s = Strategy(target)
        info = EwInfo(access, groups)
        use, skip = (EW_STRIDED, EW_CONTIGUOUS) if strided else (EW_CONTIGUOUS, EW_STRIDED)
        s.add(use, 10, space=_space(target.on_cpu, strided, vw), fixed=params, info=info,
              needs=needs)
        s.exclude(skip, 10, "an input is read through strides (it broadcasts, or is transposed "
                            "or flipped)" if strided else "no input needs strides")
        return s
    return strategy


def _nodes(t):
    yield t
    for a in t.args:
        yield from _nodes(a)


# -- pad and sum_to ---------------------------------------------------------------------------

def _pad_run(ctx, main) -> None:
    x, y = ctx.inputs[0], ctx.outputs[0]
    n = int(np.prod(y.shape, dtype=np.int64))
    own = c_strides(x.shape)
    s, dims = ctx.size, {}
    for r, (lo, _, _) in enumerate(ctx.attrs.pad_width):
        dims.update({f"s{r}": s(y.shape[r]), f"lo{r}": s(lo), f"in{r}": s(x.shape[r]),
                     f"st{r}": s(own[r])})
    wg = ctx.config["wg"]
    main(x=x, y=y, n=s(n), **dims, grid=ceil_div(n, wg), block=wg)


def _sum_to_run(ctx, main) -> None:
    x, y = ctx.inputs[0], ctx.outputs[0]
    n = int(np.prod(y.shape, dtype=np.int64))
    lead = x.ndim - y.ndim
    own = c_strides(x.shape)
    kept = [(y.shape[r], own[lead + r]) for r in range(y.ndim)]
    summed = [(x.shape[a], own[a]) for a in ctx.info]
    total = int(np.prod([sz for sz, _ in summed], dtype=np.int64))
    wg = ctx.config["wg"]
    s = ctx.size
    dims = {}
    for pre, pairs in (("", kept), ("r", summed)):  # kept dims s, st; summed dims rs, rst
        for r, (size, stride) in enumerate(pairs):
            dims.update({f"{pre}s{r}": s(size), f"{pre}st{r}": s(stride)})
    main(x=x, y=y, n=s(n), total=s(total), **dims, grid=ceil_div(n, wg),
         block=wg)


PAD = kernel_impl("pad", _pad_run, main=Kernel("elementwise/pad.j2",
                                                doc="one work-item per output element"))
SUM_TO = kernel_impl("sum_to", _sum_to_run, main=Kernel(
    "elementwise/sum_to.j2", doc="one work-item per output element, a loop over the summed"))
_WG = ConfigSpace({"wg": (64, 128, 256, 512)}, {"wg": 256})


def pad_gpu(attrs, inputs, outputs, target):
    dt = inputs[0].dtype
    s = Strategy(target)
    s.add(PAD, 10, space=_WG, fixed=dict(
        dtype=(dt,), R=inputs[0].ndim, steps=tuple(p[2] + 1 for p in attrs.pad_width),
        value=Code(spec.literal(attrs.value, dt, dialect_for(target.backend))),
        acc_dtype="float64" if dt == "float64" else "float32"))
    return s


def sum_to_gpu(attrs, inputs, outputs, target):
    x, y = inputs[0], outputs[0]
    d = dialect_for(target.backend)
    lead = x.ndim - y.ndim
    summed = tuple(a for a in range(x.ndim) if a < lead or (y.shape[a - lead] == 1
                                                            and x.shape[a] != 1))
    dt = x.dtype
    acc = "float" if dt in ("float16", "bfloat16", "float32") else d.type(dt)
    s = Strategy(target)
    s.add(SUM_TO, 10, space=_WG, info=summed, fixed=dict(
        dtype=(dt,), R=y.ndim, RR=len(summed), acc=Code(acc),
        acc_dtype="float64" if dt == "float64" else "float32"))
    return s


# -- the host ---------------------------------------------------------------------------------

HOST = host_impl("numpy_elementwise", lambda ctx: get_op(ctx.info).reference(*ctx.inputs,
                                                                              ctx.attrs))
#: output elements of one block of an elementwise operator on the host: a chain of NumPy
#: passes over a block stays in cache, where whole arrays go to memory (and fault in fresh
#: pages) once a pass (SiLU: 1.25-1.4x faster in 64K blocks)
HOST_BLOCK = 1 << 16
#: the operators whose NumPy passes compute enough for blocks to pay (an exp, a log, a tanh...);
#: plain arithmetic runs at memory speed whole, where a block's Python costs more than it saves
_COMPUTING = frozenset({"exp", "log", "sigmoid", "tanh", "erf", "gelu", "silu", "softplus",
                        "mish", "elu", "selu", "power"})


def host_blocks(shape, limit: int):
    """Index tuples cutting an array of ``shape`` into blocks of at most ``limit`` elements
    (or one innermost row): ints over the outer axes, a slice of one axis, the rest whole."""
    k, inner = len(shape), 1
    while k and inner * shape[k - 1] <= limit:
        k -= 1
        inner *= shape[k]
    if not k:
        yield ()
        return
    step = max(1, limit // inner)
    for outer in np.ndindex(*shape[:k - 1]):
        for s in range(0, shape[k - 1], step):
            yield outer + (slice(s, s + step),)


def _part(a, index: tuple, ndim: int):
    """Input ``a``'s part under output block ``index`` (NumPy broadcasting: a size-1 axis is
    read whole, missing leading axes are skipped)."""
    lead = ndim - np.ndim(a)
    if lead == ndim:
        return a
    return a[tuple(ix if a.shape[axis - lead] != 1 else 0 if isinstance(ix, int) else
                   slice(None) for axis, ix in enumerate(index) if axis >= lead)]


def _computes(e) -> bool:
    return e.op in _COMPUTING or any(_computes(a) for a in e.args if isinstance(a, _expr.Expr))


def _host_blocked(ctx):
    """The operator's NumPy form (``ctx.info``: its typed expression as one function, what
    the reference evaluates, and whether it computes enough for blocks) block by block over
    the output."""
    (fn, blocks), shape = ctx.info, ctx.out_shapes[0]
    if not blocks or int(np.prod(shape)) < 2 * HOST_BLOCK:
        y = fn(ctx.inputs)  # an input itself (identity) is the caller's: a result of its own
        return y.copy() if any(np.may_share_memory(y, a) for a in ctx.inputs) else y
    out = ctx.outputs[0]
    for index in host_blocks(shape, HOST_BLOCK):
        out[index] = fn([_part(a, index, len(shape)) for a in ctx.inputs])
    return out


#: reads its inputs as they lie (NumPy's ufuncs take any strides: a channels-last
#: convolution's result is read in place, not copied to NCHW first)
HOST_BLOCKED = host_impl("numpy_elementwise", _host_blocked, strided=True)


def _host_typed(op: str):
    def strategy(attrs, inputs, outputs, target):  # the expression typed once, at compile
        s = Strategy(target)
        tree = expression(op, attrs)
        s.add(HOST_BLOCKED, 10, info=(_expr.numpy_function(_expr.typecheck(
            tree, tuple(t.dtype for t in inputs))), _computes(tree)))
        return s
    return strategy


def host(op: str):
    return _host_typed(op) if op in _OPS else only(HOST, info=op)


_MOVES = ("reshape", "broadcast_to", "transpose", "flip")
_OPS = [op for op in spec.ARITY if op != "identity"] + ["fused"]
STRATEGIES = {**{op: {"gpu": with_view(op, ew_gpu(op)), "cpu": with_view(op, host(op))}
                   for op in _OPS + list(_MOVES)},
              "pad": {"gpu": pad_gpu, "cpu": host("pad")},
              "sum_to": {"gpu": sum_to_gpu, "cpu": host("sum_to")}}
