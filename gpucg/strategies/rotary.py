"""Strategies of rotary_embedding: one kernel (templates/rotary/rope.j2) on GPUs, NumPy on the
host.

rope: a (token, head) row of D dims is R / 2 / V units of V rotation pairs, then the copied
dims; a work-group takes a chunk of one token's H rows, a work-item one unit k of several
rows (the angles of k read once for all of them), and reads the token's position once: an
out-of-range one is counted (RunContext.counter) and the host raises, naming it. The vector config (V pairs a unit: 128-bit loads of x, cos and sin, 128-bit
stores) needs R / 2 a multiple of V and D of x's vector (the shapes decide it) and x, cos
and sin 16-byte aligned (the dispatcher checks); else V = 1.
"""

from __future__ import annotations

import sympy

from ..codegen.vector import lanes
from ..implementation import Kernel, host_impl, kernel_impl
from ..ops.rotary import check_positions, compute_dtype, reference, rotary_dims
from ..runtime.base import ceil_div
from ..shape import alignment
from ..space import ConfigSpace
from ..strategy import Strategy, only
from ..errors import StrategyError




def _run(ctx, main) -> None:
    x, cos, sin, pos = ctx.inputs
    y = ctx.outputs[0]
    t, h = int(x.shape[0]), int(x.shape[1])
    p = _derive({**ctx.fixed, **ctx.config})
    chunks = ceil_div(h, p["HB"] * ctx.config["items"])
    if not t * chunks:
        return
    bad = ctx.counter()
    s = ctx.size
    main(x=x, cos_cache=cos, sin_cache=sin, positions=pos, y=y, bad=bad, H=s(h),
         P=s(int(cos.shape[0])), chunks=s(chunks), grid=t * chunks, block=p["KB"] * p["HB"])
    if ctx.count(bad):
        check_positions(ctx.backend.to_host(pos), int(cos.shape[0]))
        raise StrategyError(f"{ctx.impl.name}: the kernel counted out-of-range positions that "
                            "the host check does not find")


def _derive(p: dict) -> dict:
    """The vector config's pairs a unit (V) and copied dims a unit (PV), 1 and 1 without it;
    the units of a row (U), the work-items a row (KB, at most wg) and rows a pass (HB)."""
    v = p["VEC"] if p["vw"] > 1 else 1
    pv = v if (p["D"] - p["R"]) % v == 0 else 1
    u = (p["R"] // 2) // v + (p["D"] - p["R"]) // pv
    kb = min(u, p["wg"])
    return {"V": v, "PV": pv, "U": u, "KB": kb, "HB": max(1, p["wg"] // kb)}


ROPE = kernel_impl("rope", _run, main=Kernel(
    "rotary/rope.j2", derive=_derive,
    doc="pairs rotated by the token's position, 128-bit accesses, a chunk of a token a group"))


def gpu_strategy(attrs, inputs, outputs, target):
    x, cos = inputs[0], inputs[1]
    d, r = rotary_dims(x, cos, attrs)
    vec = max(lanes(x.dtype), lanes(cos.dtype))  # pairs a unit: whole vectors of x and cos
    whole = (r // 2) % vec == 0 and d % lanes(x.dtype) == 0
    vws = (1, vec) if whole else (1,)

    def needs(config):
        if config["vw"] == 1:
            return None
        return sympy.And(*(alignment(i) >= 16 for i in range(3))), {"vw": 1}

    default = {"wg": 128, "items": 2, "vw": vws[-1]}
    s = Strategy(target)
    s.add(ROPE, 10, needs=needs if whole else None,
          space=ConfigSpace({"wg": (32, 64, 128, 256), "items": (1, 2, 4), "vw": vws},
                            default),
          fixed=dict(dtype=x.dtype, cdtype=cos.dtype, pdtype=inputs[3].dtype, D=d, R=r,
                     VEC=vec, style=attrs.style,
                     acc_dtype=compute_dtype(x.dtype, cos.dtype)))
    return s


HOST = host_impl("numpy_rope", lambda ctx: reference(*ctx.inputs, ctx.attrs))
STRATEGIES = {"rotary_embedding": {"gpu": gpu_strategy, "cpu": only(HOST)}}
