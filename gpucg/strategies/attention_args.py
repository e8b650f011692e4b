"""What the attention kernels' launches share: the sizes, the arrays and the mask's strides."""

from __future__ import annotations

from ..ops.attention import dims


def _sizes(ctx):
    q, k = ctx.inputs[0], ctx.inputs[1]
    b, hq, sq, _ = (int(x) for x in dims(q, ctx.info.layout))
    _, hkv, skv, _ = (int(x) for x in dims(k, ctx.info.layout))
    return b, hq, hkv, sq, skv


def mask_strides(shape, full) -> tuple:
    """Element strides of a contiguous mask of ``shape`` read as (B, Hq, Sq, Skv) ``full``:
    0 along broadcast dimensions."""
    shape = (1,) * (4 - len(shape)) + tuple(int(s) for s in shape)
    strides, step = [], 1
    for s, f in zip(reversed(shape), reversed(full)):
        strides.append(step if s == f and s != 1 else 0)
        step *= s
    return tuple(reversed(strides))


def common_args(ctx):
    """(sizes, the arrays q, k, v[, mask], the mask's strides as sizes) of a launch."""
    b, hq, hkv, sq, skv = _sizes(ctx)
    arrays = tuple(ctx.inputs[:3]) + ((ctx.inputs[3],) if ctx.info.has_mask else ())
    strides = (mask_strides(ctx.inputs[3].shape, (b, hq, sq, skv))
               if ctx.info.has_mask else ())
    return (b, hq, hkv, sq, skv), arrays, tuple(ctx.size(s) for s in strides)


def named(arrays, mstr) -> dict:
    """:func:`common_args`' arrays and mask strides by the kernels' parameter names."""
    return dict(zip(("q", "k", "v", "mask"), arrays), **dict(zip(("msb", "msh", "msq", "msk"),
                                                                 mstr)))


def heads(ctx, hq: int, hkv: int, sq: int, skv: int) -> dict:
    """The head counts and sequence lengths by name (hq, hkv, group, sq, skv)."""
    s = ctx.size
    return dict(hq=s(hq), hkv=s(hkv), group=s(hq // hkv), sq=s(sq), skv=s(skv))


def outputs(ctx) -> dict:
    """The outputs by name: o, and lse where the call returns it."""
    return dict(zip(("o", "lse"), ctx.outputs))
