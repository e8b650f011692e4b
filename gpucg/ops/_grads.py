"""Gradients of the GEMM family, conv2d, the scans and sum, written with registered operators
(as Relay's gradient registration): every step is a gpucg operator on the call's target.

The families register them at the end of their modules (``register_gradient``); this module
imports none of them, so that stays free of import circles.
"""

from __future__ import annotations

from ..errors import OpError
from ..shape import normalize_axis
from ._unary import ACTIVATIONS, derivative
from ._window import is_same, same_pads

#: the output gradient x0 times the activation's derivative at the pre-activation x1
ACTIVATION_GRAD = {name: derivative(op, attrs) for name, (op, attrs) in ACTIVATIONS.items()}


def scale(ctx, x, factor: float):
    """x * factor (no work when factor is 1)."""
    return x if factor == 1.0 else ctx.call("fused", x, expr=f"multiply(x0, {float(factor)!r})")


def epilogue_backward(ctx, pre):
    """(gradient at the product, gradient of the residual or None) of a call whose epilogue
    is z = alpha * product + bias, then the activation and the residual (see
    gpucg/ops/_epilogue.py). ``pre(with_residual)`` recomputes z, plus beta * residual when
    ``with_residual``: the activation's input."""
    a = ctx.attrs
    if a.out_dtype not in (None, ctx.inputs[0].dtype.name):
        raise OpError(f"{ctx.op}: the gradient needs out_dtype equal to the data dtype, got "
                      f"{a.out_dtype}")
    has_res = len(ctx.inputs) >= 4
    before = has_res and a.residual_position == "before"
    gz = ctx.out_grad
    if a.activation is not None:
        gz = ctx.call("fused", gz, pre(before), expr=ACTIVATION_GRAD[a.activation])
    g_res = scale(ctx, gz if before else ctx.out_grad, a.beta) if has_res else None
    return gz, g_res


def _shaped(ctx, g, shape):
    """g summed to ``shape`` where it was broadcast, then reshaped to it."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = len(g.shape) - len(shape)
    if lead >= 0 and all(s in (1, d) for s, d in zip(shape, g.shape[lead:])):
        return ctx.call("sum_to", g, shape=shape)
    return ctx.call("reshape", g, shape=shape)


# -- the GEMM family --------------------------------------------------------------------------

def dense_gradient(ctx):
    """dense: d data = alpha * gz @ W, d weight = alpha * gz^T @ data, d bias = sum of gz."""
    x, w = ctx.inputs[:2]
    a = ctx.attrs

    def pre(with_residual):
        ins = ctx.inputs if with_residual else ctx.inputs[:3]
        return ctx.call("dense", *ins, alpha=a.alpha, beta=a.beta,
                        residual_position=a.residual_position)
    gz, g_res = epilogue_backward(ctx, pre)
    gs = scale(ctx, gz, a.alpha)
    # leading dimensions of the data: the weight's gradient sums over all of them (rows)
    g2 = gs if len(x.shape) == 2 else ctx.call("reshape", gs, shape=(-1, w.shape[0]))
    x2 = x if len(x.shape) == 2 else ctx.call("reshape", x, shape=(-1, w.shape[1]))
    grads = [ctx.call("matmul", gs, w), ctx.call("matmul", g2, x2, transpose_a=True)]
    if len(ctx.inputs) >= 3:
        grads.append(ctx.call("sum_to", gz, shape=(w.shape[0],)))
    if len(ctx.inputs) >= 4:
        grads.append(g_res)
    return tuple(grads)


def matmul_gradient(ctx):
    """matmul (NumPy's): with A' = A or A^T and B' as the flags say, d A' = alpha g @ B'^T and
    d B' = alpha A'^T @ g over the promoted operands, each written as one matmul with transpose
    flags (no transposed copies), then summed over the batch axes each operand was broadcast
    along."""
    a, b = ctx.inputs
    at = ctx.attrs
    ta, tb = at.transpose_a, at.transpose_b
    k = a.shape[-2] if ta else a.shape[-1]
    A = a if a.ndim > 1 else ctx.call("reshape", a, shape=(1, k))
    B = b if b.ndim > 1 else ctx.call("reshape", b, shape=(k, 1))
    g = ctx.out_grad
    batch = tuple(g.shape[:len(g.shape) - (a.ndim > 1) - (b.ndim > 1)])
    m = A.shape[-1] if ta else A.shape[-2]
    n = B.shape[-2] if tb else B.shape[-1]
    G = ctx.call("reshape", g, shape=batch + (m, n)) if (a.ndim == 1 or b.ndim == 1) else g

    def mm(x, y, tx, ty):
        return ctx.call("matmul", x, y, transpose_a=tx, transpose_b=ty, alpha=at.alpha)
    da = mm(B, G, tb, True) if ta else mm(G, B, False, not tb)
    db = mm(G, A, True, ta) if tb else mm(A, G, not ta, False)
    da = _shaped(ctx, _shaped(ctx, da, A.shape), a.shape)
    db = _shaped(ctx, _shaped(ctx, db, B.shape), b.shape)
    return da, db


# -- scans and sum ----------------------------------------------------------------------------

def _reverse_cumsum(ctx, g, axis: int, exclusive: bool):
    """sum of g over i >= j (i > j when exclusive) along ``axis``: the adjoint of a scan.
    A scan that runs backwards (a ``reverse`` attribute, where the scan has one) has the
    forward scan as its adjoint."""
    if getattr(ctx.attrs, "reverse", False):
        return ctx.call("cumsum", g, axis=axis, exclusive=exclusive)
    flipped = ctx.call("flip", g, axes=(axis,))
    return ctx.call("flip", ctx.call("cumsum", flipped, axis=axis, exclusive=exclusive),
                    axes=(axis,))


def _scan_view(ctx):
    """(x as the scan sees it, the axis): axis None scans the flattened input."""
    x, a = ctx.inputs[0], ctx.attrs
    if a.axis is None:
        return ctx.call("reshape", x, shape=(-1,)), 0
    return x, normalize_axis(a.axis, x.ndim)


def cumsum_gradient(ctx):
    """cumsum: the reverse cumulative sum of the output gradient."""
    x = ctx.inputs[0]
    _, axis = _scan_view(ctx)
    return (ctx.call("reshape", _reverse_cumsum(ctx, ctx.out_grad, axis, ctx.attrs.exclusive),
                     shape=tuple(x.shape)),)


def cumprod_gradient(ctx):
    """cumprod: reverse_cumsum(g * y) / x (TensorFlow's formula; inputs must be nonzero)."""
    x = ctx.inputs[0]
    flat, axis = _scan_view(ctx)
    gy = ctx.call("multiply", ctx.out_grad, ctx.output)
    gx = ctx.call("divide", _reverse_cumsum(ctx, gy, axis, ctx.attrs.exclusive), flat)
    return (ctx.call("reshape", gx, shape=tuple(x.shape)),)


def sum_gradient(ctx):
    """sum: the output gradient broadcast back over the summed axes."""
    x, a = ctx.inputs[0], ctx.attrs
    axis = getattr(a, "axis", None)
    axes = range(x.ndim) if axis is None else (
        [axis] if isinstance(axis, int) else list(axis))
    axes = {normalize_axis(i, x.ndim) for i in axes}
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    g = ctx.out_grad if getattr(a, "keepdims", False) else \
        ctx.call("reshape", ctx.out_grad, shape=kept)
    return (ctx.call("broadcast_to", g, shape=tuple(x.shape)),)


# -- conv2d -----------------------------------------------------------------------------------

def _pads(a, h, w, kh, kw):
    if not is_same(a.padding):
        return a.padding
    lower = a.padding == "SAME_LOWER"
    t, b = same_pads(h, kh, a.strides[0], a.dilation[0], lower)
    left, r = same_pads(w, kw, a.strides[1], a.dilation[1], lower)
    return (t, left, b, r)


def conv2d_gradient(ctx):
    """conv2d: the data gradient is a convolution of the (stride-dilated, padded) output
    gradient with the flipped, group-transposed weights; the weight gradient a convolution
    over the batch: the padded input, channels as the batch, with the output gradient as
    the weights (strides and dilation swap roles); the bias gradient a sum."""
    a = ctx.attrs
    nhwc, hwio = a.data_layout == "NHWC", a.kernel_layout == "HWIO"
    t = ctx.call
    x = t("transpose", ctx.inputs[0], axes=(0, 3, 1, 2)) if nhwc else ctx.inputs[0]
    w = t("transpose", ctx.inputs[1], axes=(3, 2, 0, 1)) if hwio else ctx.inputs[1]

    def pre(with_residual):
        ins = ctx.inputs if with_residual else ctx.inputs[:3]
        return ctx.call("conv2d", *ins, **dict(ctx.kwargs, activation=None))
    gz, g_res = epilogue_backward(ctx, pre)
    g = t("transpose", gz, axes=(0, 3, 1, 2)) if nhwc else gz
    gs = scale(ctx, g, a.alpha)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = g.shape[2:]
    groups, og = a.groups, o // a.groups
    (sh, sw), (dh, dw) = a.strides, a.dilation
    pt, pl, pb, pr = _pads(a, h, wd, kh, kw)
    # data: conv of the dilated, padded gradient with W'[g*Cg + c, o] = W[g*Og + o, c] flipped
    lo_h, lo_w = (kh - 1) * dh - pt, (kw - 1) * dw - pl
    hi_h = h + (kh - 1) * dh - lo_h - ((oh - 1) * sh + 1)
    hi_w = wd + (kw - 1) * dw - lo_w - ((ow - 1) * sw + 1)
    gp = t("pad", gs, pad_width=((0, 0), (0, 0), (lo_h, hi_h, sh - 1), (lo_w, hi_w, sw - 1)))
    wt = t("reshape", t("transpose", t("reshape", w, shape=(groups, og, cg, kh, kw)),
                        axes=(0, 2, 1, 3, 4)), shape=(c, og, kh, kw))
    dx = t("conv2d", gp, t("flip", wt, axes=(2, 3)), dilation=(dh, dw), groups=groups)
    # weight: X''[c, g*N + n] = xpad[n, g*Cg + c], W''[o, n] = g[n, o]
    xp = t("pad", x, pad_width=((0, 0), (0, 0), (pt, pb), (pl, pr)))
    xs = t("reshape", t("transpose", t("reshape", xp, shape=(n, groups, cg) + xp.shape[2:]),
                        axes=(2, 1, 0, 3, 4)), shape=(cg, groups * n) + xp.shape[2:])
    dwt = t("conv2d", xs, t("transpose", gs, axes=(1, 0, 2, 3)), strides=(dh, dw),
            dilation=(sh, sw), groups=groups)
    dwt = t("pad", dwt, pad_width=((0, 0), (0, 0), (0, kh - dwt.shape[2]), (0, kw - dwt.shape[3])))
    dw_ = t("transpose", dwt, axes=(1, 0, 2, 3))
    grads = [t("transpose", dx, axes=(0, 2, 3, 1)) if nhwc else dx,
             t("transpose", dw_, axes=(2, 3, 1, 0)) if hwio else dw_]
    if len(ctx.inputs) >= 3:
        grads.append(t("reshape", t("sum_to", g, shape=(o, 1, 1)), shape=(o,)))
    if len(ctx.inputs) >= 4:
        grads.append(g_res)
    return tuple(grads)
