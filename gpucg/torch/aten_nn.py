"""The aten operators of neural networks on gpucg's: GEMMs (``addmm(b, x, t(W))`` is dense,
W read as it is), reductions, softmax, layer and batch norms, convolutions, pools, scaled
dot-product attention, and the backward operators of activations, whose derivatives are the
ones gpucg's registered gradients use (gpucg/ops/_unary.py). :data:`TABLE` as in
gpucg/torch/aten.py.
"""

from __future__ import annotations

import numpy as np

from ..errors import OpError
from ..ops._expr import node as ew_node, parse
from ..ops._unary import derivative
from .aten import expr
from .reader import Ref


def _transposed(r, value: str):
    """W where ``value`` is t(W) of a 2-D W made by an earlier call (or a constant: its
    transpose, made once), else None."""
    if value in r.g.consts:
        return r.const(r.g.consts[value].T, f"{value}.T")
    for c in reversed(r.calls):
        if value in c.outputs:
            if c.op == "transpose" and tuple(c.attrs.get("axes") or ()) == (1, 0):
                return c.inputs[0]
            return None
    return None


def _mm(r, n, a):
    """mm, addmm, bmm: dense where the second operand is t(W) (with a 1-D bias: addmm's),
    else matmul (plus the bias)."""
    x, y = a.get("self") if "mat1" not in a else a["mat1"], a.get("mat2")
    bias = a.get("self") if "mat1" in a else None
    beta, alpha = a.get("beta", 1), a.get("alpha", 1)
    w = _transposed(r, y) if r.g.type_of(y).ndim == 2 else None
    one_d = bias is not None and r.g.type_of(bias).ndim == 1
    if w is not None and (bias is None or (one_d and beta == 1)):
        r.emit(n, "dense", [x, w] + ([bias] if bias else []), n.outputs[:1],
               **({"alpha": float(alpha)} if alpha != 1 else {}))
        return
    if bias is None:
        r.emit(n, "matmul", [x, y], n.outputs[:1])
        return
    (p,) = r.emit(n, "matmul", [x, y], None)
    expr(r, n, lambda u, v: u * alpha + v * beta if (alpha, beta) != (1, 1) else u + v,
         [p, bias])


def _linear(r, n, a):
    r.emit(n, "dense", [a["input"], a["weight"]] + ([a["bias"]] if a.get("bias") else []),
           n.outputs[:1])


def _reduce(op):
    def handler(r, n, a):
        dims = a.get("dim")
        if a.get("dtype") is not None:
            raise OpError(f"{n.label}: a reduction with dtype={a['dtype']}")
        axis = None if dims in (None, []) else tuple(dims) if isinstance(dims, (list, tuple)) \
            else (dims,)
        r.emit(n, op, [a["self"]], n.outputs[:1], axis=axis, keepdims=bool(a.get("keepdim")))
    return handler


def _softmax(op):
    def handler(r, n, a):
        if a.get("half_to_float"):
            raise OpError(f"{n.label}: half_to_float")
        r.emit(n, op, [a["self"]], n.outputs[:1], axis=a["dim"])
    return handler


def _layer_norm(r, n, a):
    """native_layer_norm: (y, mean, rstd); mean and rstd made only where read (training
    saves them for the backward)."""
    x, shape, eps = a["input"], a["normalized_shape"], float(a["eps"])
    t = r.g.type_of(x)
    if len(shape) != 1:
        raise OpError(f"{n.label}: layer_norm over {len(shape)} axes; gpucg normalizes the "
                      "last")
    w, b = a.get("weight"), a.get("bias")
    w = w or r.const(np.ones(shape, t.dtype), f"{n.name}.weight")
    b = b or r.const(np.zeros(shape, t.dtype), f"{n.name}.bias")
    r.emit(n, "layer_norm", [x, w, b], n.outputs[:1], axis=-1, eps=eps)
    if n.used & {1, 2}:
        (mean,) = r.emit(n, "mean", [x], n.outputs[1:2], axis=(-1,), keepdims=True)
        sq = expr(r, n, lambda u, m: (u - m) * (u - m), [x, mean], r.fresh(n.name))
        (var,) = r.emit(n, "mean", [sq], None, axis=(-1,), keepdims=True)
        expr(r, n, lambda v: ew_node("rsqrt", (v + eps,), {}), [var], n.outputs[2])


def _batch_norm(r, n, a):
    """_native_batch_norm_legit_no_training: batch_norm over axis 1; its two other outputs
    are empty (as torch's)."""
    if n.used & {1, 2}:
        raise OpError(f"{n.label}: the saved statistics are read")
    x = a["input"]
    c = r.g.type_of(x).shape[1]
    dtype = r.g.type_of(x).dtype
    w = a.get("weight") or r.const(np.ones(c, dtype), f"{n.name}.weight")
    b = a.get("bias") or r.const(np.zeros(c, dtype), f"{n.name}.bias")
    r.emit(n, "batch_norm", [x, w, b, a["running_mean"], a["running_var"]], n.outputs[:1],
           axis=1, eps=float(a["eps"]))


def _conv(r, n, a):
    if a["transposed"]:
        raise OpError(f"{n.label}: a transposed convolution (gpucg has none)")
    x, w, bias = a["input"], a["weight"], a.get("bias")
    rank = r.g.type_of(w).ndim
    stride, pad, dil = (tuple(a[k]) for k in ("stride", "padding", "dilation"))
    extra = [bias] if bias else []
    if rank == 4:
        r.emit(n, "conv2d", [x, w] + extra, n.outputs[:1], strides=stride, padding=pad,
               dilation=dil, groups=a["groups"])
        return
    if rank != 3:
        raise OpError(f"{n.label}: a convolution with {rank - 2} spatial dims; gpucg has "
                      "conv2d (and 1-D as a 1 x L conv2d)")
    (x2,) = r.emit(n, "expand_dims", [x], None, axis=2)
    (w2,) = r.emit(n, "expand_dims", [w], None, axis=2)
    (y2,) = r.emit(n, "conv2d", [x2, w2] + extra, None, strides=(1,) + stride,
                   padding=(0,) + pad, dilation=(1,) + dil, groups=a["groups"])
    r.emit(n, "squeeze", [y2], n.outputs[:1], axis=(2,))


def _pool(r, n, a):
    if n.used & {1}:
        raise OpError(f"{n.label}: the indices of max pooling are read")
    kernel = tuple(a["kernel_size"])
    stride = tuple(a["stride"]) or kernel
    common = dict(kernel=kernel, strides=stride, padding=tuple(a["padding"]),
                  ceil_mode=bool(a["ceil_mode"]))
    if "dilation" in a:
        r.emit(n, "max_pool2d", [a["self"]], n.outputs[:1], dilation=tuple(a["dilation"]),
               **common)
        return
    if a.get("divisor_override") is not None:
        raise OpError(f"{n.label}: divisor_override")
    r.emit(n, "avg_pool2d", [a["self"]], n.outputs[:1],
           count_include_pad=bool(a["count_include_pad"]), **common)


def _adaptive(r, n, a):
    if tuple(a["output_size"]) != (1, 1):
        raise OpError(f"{n.label}: adaptive pooling to {tuple(a['output_size'])} (gpucg pools "
                      "globally, to 1 x 1)")
    r.emit(n, "global_avg_pool2d", [a["self"]], n.outputs[:1])


def _attention(r, n, a):
    """scaled dot-product attention (torch's CPU flash kernel, its efficient kernel, the
    composite): gpucg.ops.attention, layout BHSD, its log-sum-exp only where read."""
    if a.get("dropout_p", 0.0):
        raise OpError(f"{n.label}: attention with dropout")
    mask = a.get("attn_mask", a.get("attn_bias"))
    if mask is not None and not isinstance(mask, Ref):
        raise OpError(f"{n.label}: attention mask {mask!r}")
    lse = bool(n.used & {1})
    if lse and len(n.outputs) < 2:
        raise OpError(f"{n.label}: the log-sum-exp is read")
    outs = n.outputs[:2] if lse else n.outputs[:1]
    r.emit(n, "attention", [a["query"], a["key"], a["value"]] + ([mask] if mask else []),
           outs, causal=bool(a.get("is_causal")), scale=a.get("scale"), layout="BHSD",
           return_lse=lse)


def _attention_grad(r, n, a):
    """The backward of scaled dot-product attention: gpucg's registered gradient of
    gpucg.ops.attention (gpucg.grad), its operators called on the target's arrays."""
    if a.get("dropout_p", 0.0):
        raise OpError(f"{n.label}: attention with dropout")
    mask = a.get("attn_mask")
    attrs = dict(causal=bool(a["is_causal"]), scale=a.get("scale"), layout="BHSD")
    target = r.target

    def backward(g, q, k, v, *m):
        from ..autodiff import grad

        return grad("attention", q, k, v, *m, out_grad=g, target=target, **attrs)[:3]
    ins = [a["grad_out"], a["query"], a["key"], a["value"]] + ([mask] if mask else [])
    r.host(n, backward, ins, n.types, "gpucg's registered gradient of attention (gpucg.grad)",
           n.outputs, on="target")


def _safe_softmax(r, n, a):
    """softmax whose rows of -inf only give zeros (attention's, when decomposed)."""
    x, axis = a["self"], a["dim"]
    (s,) = r.emit(n, "softmax", [x], None, axis=axis)
    (top,) = r.emit(n, "max", [x], None, axis=(axis,), keepdims=True)
    expr(r, n, lambda p, m: ew_node("where", (m > -3.0e38, p, 0.0), {}), [s, top])


def _activation_grad(op, **attrs):
    """The backward of an activation at its input: gpucg's registered derivative."""
    text = derivative(op, attrs)

    def handler(r, n, a):
        expr(r, n, lambda g, x: _substitute(parse(text), (g, x)),
             [a["grad_output"], a["self"]])
    return handler


def _substitute(e, args):
    from ..graph.index import substitute

    return substitute(e, args)


def _gelu_grad(r, n, a):
    _activation_grad("gelu", approximate=a["approximate"])(r, n, a)


def _threshold_grad(r, n, a):
    expr(r, n, lambda g, x: ew_node("where", (x > a["threshold"], g, 0), {}),
         [a["grad_output"], a["self"]])


def _output_grad(fn):
    """sigmoid and tanh backward, on their outputs as aten passes them."""
    def handler(r, n, a):
        expr(r, n, fn, [a["grad_output"], a["output"]])
    return handler


TABLE = {
    "aten.mm.default": _mm, "aten.addmm.default": _mm, "aten.bmm.default": _mm,
    "aten.linear.default": _linear,
    "aten.sum.dim_IntList": _reduce("sum"), "aten.sum.default": _reduce("sum"),
    "aten.mean.dim": _reduce("mean"), "aten.mean.default": _reduce("mean"),
    "aten.amax.default": _reduce("max"), "aten.amin.default": _reduce("min"),
    "aten._softmax.default": _softmax("softmax"), "aten._safe_softmax.default": _safe_softmax,
    "aten._log_softmax.default": _softmax("log_softmax"),
    "aten.native_layer_norm.default": _layer_norm,
    "aten._native_batch_norm_legit_no_training.default": _batch_norm,
    "aten.convolution.default": _conv, "aten.max_pool2d_with_indices.default": _pool,
    "aten.avg_pool2d.default": _pool, "aten.adaptive_avg_pool2d.default": _adaptive,
    "aten._adaptive_avg_pool2d.default": _adaptive,
    "aten._scaled_dot_product_flash_attention_for_cpu.default": _attention,
    "aten._scaled_dot_product_efficient_attention.default": _attention,
    "aten.scaled_dot_product_attention.default": _attention,
    "aten._scaled_dot_product_flash_attention_for_cpu_backward.default": _attention_grad,
    "aten.gelu_backward.default": _gelu_grad,
    "aten.silu_backward.default": _activation_grad("silu"),
    "aten.threshold_backward.default": _threshold_grad,
    "aten.sigmoid_backward.default": _output_grad(lambda g, y: g * y * (1.0 - y)),
    "aten.tanh_backward.default": _output_grad(lambda g, y: g * (1.0 - y * y)),
}
