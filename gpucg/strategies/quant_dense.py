"""Strategies of dense_int4 and dense_int8: which kernel runs for which number of rows.

GPU implementations, by plevel (conditions on the symbolic sizes, checked at run time):
  quant_gemv  15  m <= 16 (decoding): a warp a few output columns, its lanes splitting K, each
                  lane reading 128 bits of packed weights a load with several in flight,
                  dequantizing them in registers and multiplying every row of x; the lanes'
                  sums meet by xor shuffles (templates/quant_dense/gemv.j2)
  quant_gemm  10  any m: the SIMT GEMM tile (templates/gemm/_tile.j2), its B tile dequantized
                  from 128-bit loads of packed weights on its way into local memory
                  (templates/quant_dense/gemm.j2)
Both read 128 bits an access (the `vec` config) where K is a multiple of a load's weights,
an int4 group holds whole loads and x and the weights are 16-byte aligned; else a weight a
byte. The numpy target dequantizes to float32 and multiplies by BLAS.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..implementation import Kernel, host_impl, kernel_impl
from ..ops.quant_dense import QUANT, dequantize
from ..runtime.base import ceil_div
from ..shape import alignment, product
from ..space import ConfigSpace
from ..strategy import Strategy, only
from .gemm_tile import local_bytes, work_group

GEMV_MAX_M = 16


def _sizes(ctx):
    x, qw = ctx.inputs[0], ctx.inputs[1]
    m = int(np.prod(x.shape[:-1], dtype=np.int64))
    return m, int(qw.shape[0]), int(x.shape[-1])


def _tensors(ctx) -> dict:
    """The kernels' tensor arguments by name: the inputs (x, qweight, scales, then the bias
    and the zero points the call has) and y."""
    names = ("x", "qweight", "scales", "bias", "zeros")
    return dict(zip(names, ctx.inputs), y=ctx.outputs[0])


def _gemv_run(ctx, main) -> None:
    m, n, k = _sizes(ctx)
    c, s = ctx.config, ctx.size
    cols = c["wg"] // 32 * c["cols"]
    if m * n:
        main(**_tensors(ctx), M=s(m), N=s(n), K=s(k), grid=ceil_div(n, cols), block=c["wg"])


def _gemm_run(ctx, main) -> None:
    m, n, k = _sizes(ctx)
    c, s = ctx.config, ctx.size
    if m * n:
        main(**_tensors(ctx), M=s(m), P=s(n), K=s(k),
             grid=ceil_div(m, c["bm"]) * ceil_div(n, c["bn"]), block=work_group(c))


def _gemv_occupancy(p) -> str:
    """Why the GEMV's occupancy may fall under 25%: many rows."""
    return ("up to 16 rows: 16 x cols sums, and the compiler keeps every row's x values of a "
            "step in flight (145 registers on sm_90)" if p["MR"] > 8 else "")


QUANT_GEMV = kernel_impl("quant_gemv", _gemv_run, main=Kernel(
    "quant_dense/gemv.j2", low_occupancy=_gemv_occupancy,
    doc="a warp a few output columns, weights dequantized in registers"))
QUANT_GEMM = kernel_impl("quant_gemm", _gemm_run, main=Kernel(
    "quant_dense/gemm.j2", {"vw": 1, "double_buffer": False},
    doc="the GEMM tile, its weight tile dequantized on its way into local memory"))


def _gemv_space(on_cpu: bool, mr: int) -> ConfigSpace:
    """cols: the weight rows a warp takes, each x load serving them all (x is read again for
    every warp: at m = 1 and cols = 4, one 128-bit x load a 128-bit weight load, from cache);
    the accumulators are mr x cols registers (mr = 16 and cols = 2 took 168 on sm_80, so
    fewer columns the more rows)."""
    cols = 4 if mr <= 2 else 2 if mr <= 8 else 1
    default = {"wg": 128, "cols": 1 if on_cpu else cols, "unroll": 1 if on_cpu else 2,
               "vec": True}
    return ConfigSpace({"wg": (32, 64, 128, 256), "cols": (1, 2, 4), "unroll": (1, 2, 4),
                        "vec": (False, True)}, default)


def _gemm_space(kv: int, smem: int, shape: tuple) -> ConfigSpace:
    """The GEMM tile; ``shape``: (m, n), each an int where known, else None."""
    def ok(c):
        return (c["tm"] <= c["bm"] and c["tn"] <= c["bn"] and 16 <= work_group(c) <= 256
                and (c["bk"] % kv == 0 or not c["vec"]) and local_bytes(c) <= smem)
    default = {"bm": 64, "bn": 64, "bk": 32 if kv == 32 else 16, "tm": 4, "tn": 4,
               "vec": True, "conflict_free": True}
    m_rows, n_cols = shape
    if isinstance(m_rows, int) and m_rows <= 32:  # few rows: no idle tile rows
        default.update(bm=32, tm=2 if n_cols is None or n_cols > 32 else 4)
    if isinstance(n_cols, int) and n_cols <= 32:  # few columns (a narrow layer)
        default.update(bn=32)
    return ConfigSpace({"bm": (16, 32, 64, 128), "bn": (32, 64, 128), "bk": (16, 32, 64),
                        "tm": (1, 2, 4, 8), "tn": (2, 4, 8), "vec": (False, True),
                        "conflict_free": (False, True)}, default, constraint=ok)


def gpu_strategy(op: str):
    def strategy(attrs, inputs, outputs, target):
        x, qw, scales = inputs[:3]
        bits = 4 if op == "dense_int4" else 8
        kv = 32 if bits == 4 else 16
        g = attrs.group_size if bits == 4 else 0
        m = sympy.sympify(product(x.shape[:-1]))
        k = sympy.sympify(x.shape[-1])
        # a 128-bit load of packed weights holds kv values of one group: K a multiple of kv
        # (so are the rows' starts), the group too (or one group a row)
        whole = sympy.Eq(k, g) if bits == 4 and g % kv else sympy.true

        def needs(config):
            if not config["vec"]:
                return None
            return sympy.And(alignment(0) >= 16, alignment(1) >= 16,
                             sympy.Eq(sympy.Mod(k, kv), 0), whole), {"vec": False}
        fixed = dict(bits=bits, dtype=x.dtype, sdtype=scales.dtype, G=g,
                     has_bias=len(inputs) >= 4, has_zeros=len(inputs) >= 5,
                     acc_t="float", acc_dtype="float32", a_k_major=True, b_k_major=True)
        mr = max(int(m), 1) if m.is_Integer and m <= GEMV_MAX_M else GEMV_MAX_M
        s = Strategy(target)
        s.add(QUANT_GEMV, 15, condition=m <= GEMV_MAX_M, needs=needs,
              space=_gemv_space(target.on_cpu, mr), fixed=dict(fixed, MR=mr))
        s.add(QUANT_GEMM, 10, needs=needs, fixed=fixed,
              space=_gemm_space(kv, target.capabilities.smem_static_max, tuple(
                  int(v) if v.is_Integer else None for v in (m, sympy.sympify(qw.shape[0])))))
        return s
    return strategy


def _host_run(ctx):
    """Dequantized to float32, then BLAS: y = x @ W^T (+ bias)."""
    x, qw, scales, *rest = ctx.inputs
    bias, zeros = (list(rest) + [None, None])[:2]
    w = dequantize(ctx.compiled.op.name, qw, scales, zeros, ctx.attrs)
    with np.errstate(all="ignore"):  # NaN and infinities of x propagate as IEEE says
        y = np.matmul(x.astype(np.float32), w.T)
        if bias is not None:
            y += bias.astype(np.float32)
        return y.astype(x.dtype)


HOST = host_impl("numpy_quant_dense", _host_run)
STRATEGIES = {op: {"gpu": gpu_strategy(op), "cpu": only(HOST)} for op in QUANT}
