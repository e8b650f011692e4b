"""Strategies for conv2d_winograd_without_weight_transform: conv2d's Winograd kernels without
the weight transform (the weight is U already), and its NumPy counterpart on the host."""

from __future__ import annotations

import numpy as np

from ..codegen import dialect_for
from ..ops.conv2d import epilogue, from_nchw, pads_for, to_nchw
from ..ops.conv2d_winograd import OP, winograd_geometry, winograd_matrices
from ..implementation import host_impl
from ..strategy import Strategy, only
from .conv2d import (WINOGRAD, ConvInfo, acc_dtype, common_params, winograd_params,
                     winograd_space)
from .conv2d_fused import FUSED, call_for, offer


def numpy_winograd(data, u, bias, attrs, out_dtype) -> np.ndarray:
    """F(m x m, 3 x 3) on the host from transformed weights ``u`` (alpha, alpha, O, C)."""
    m = attrs.tile_size
    alpha = m + 2
    AT, _, BT = winograd_matrices(m)
    acc = acc_dtype(data.dtype)
    x = to_nchw(data, attrs.data_layout)
    n, c, h, wd = x.shape
    pt, pl, pb, pr = pads_for(attrs.conv_attrs(), h, wd, 3, 3)
    oh, ow = h + pt + pb - 2, wd + pl + pr - 2
    th, tw = -(-oh // m), -(-ow // m)
    xp = np.zeros((n, c, th * m + 2, tw * m + 2), acc)
    hh, ww = min(h, th * m + 2 - pt), min(wd, tw * m + 2 - pl)
    xp[:, :, pt:pt + hh, pl:pl + ww] = x[:, :, :hh, :ww]
    tiles = np.lib.stride_tricks.sliding_window_view(xp, (alpha, alpha), axis=(2, 3))[:, :, ::m, ::m]
    v = np.einsum("ai,ncxyij,bj->abcnxy", BT.astype(acc), tiles, BT.astype(acc), optimize=True)
    mm = np.matmul(u.astype(acc).reshape(alpha * alpha, -1, c),
                   v.reshape(alpha * alpha, c, n * th * tw))
    mm = mm.reshape(alpha, alpha, -1, n, th, tw)
    y = np.einsum("ia,abonxy,jb->noxiyj", AT.astype(acc), mm, AT.astype(acc), optimize=True)
    y = y.reshape(n, -1, th * m, tw * m)[:, :, :oh, :ow]
    return from_nchw(epilogue(y, bias, attrs.activation, out_dtype), attrs.data_layout)


def _host_run(ctx):
    data, u, *bias = ctx.inputs
    return numpy_winograd(data, u, bias[0] if bias else None, ctx.attrs,
                          ctx.attrs.out_dtype or data.dtype)


WINOGRAD_HOST = host_impl("winograd_host", _host_run)


host_strategy = only(WINOGRAD_HOST)


def gpu_strategy(attrs, inputs, outputs, target):
    geo = winograd_geometry(inputs, attrs)
    conv = attrs.conv_attrs()
    common = common_params(conv, geo, inputs[0].dtype, outputs[0].dtype, len(inputs),
                           dialect_for(target.backend))
    s = Strategy(target)
    m = attrs.tile_size
    # as conv2d's: on a CPU the unfused kernels are faster than the fused ones
    fused, unfused = (12, 15) if target.on_cpu else (15, 12)
    call = call_for(geo, conv, inputs, outputs[0], m)  # as conv2d's
    s.add(FUSED[m, True], fused, info=ConvInfo(geo, conv),
          **offer(m, common["nchw"], call, target, winograd_params(common, m, target.on_cpu)))
    s.add(WINOGRAD[attrs.tile_size, False], unfused, info=ConvInfo(geo, conv),
          space=winograd_space(geo, attrs.tile_size, target.on_cpu),
          fixed=winograd_params(common, attrs.tile_size, target.on_cpu))
    return s


STRATEGIES = {OP: {"gpu": gpu_strategy, "cpu": host_strategy}}
