"""The concrete sizes of one conv2d call, shared by the launches of strategies/conv2d.py and
strategies/conv2d_mma.py."""

from __future__ import annotations

import numpy as np

from ..ops.conv2d import data_dims, pads_for


class ConvCall:
    """The concrete sizes of one call, and the arguments every kernel shares."""

    def __init__(self, ctx):
        geo, attrs = ctx.info.geo, ctx.info.attrs
        self.data, self.weight = ctx.inputs[:2]
        extra = ctx.inputs[2:]  # the bias is the third input, the residual the fourth
        self.bias = extra[0] if len(extra) > 0 else None
        self.residual = extra[1] if len(extra) > 1 else None
        self.y = ctx.outputs[0]
        n, c, h, w = (int(v) for v in data_dims(self.data.shape, attrs.data_layout))
        _, _, oh, ow = (int(v) for v in data_dims(self.y.shape, attrs.data_layout))
        pads = pads_for(attrs, h, w, geo.kh, geo.kw)
        self.n, self.h, self.w, self.oh, self.ow = n, h, w, oh, ow
        self.pt, self.pl = pads[0], pads[1]
        s = ctx.size
        self.sizes = (s(n), s(h), s(w), s(oh), s(ow), np.int32(self.pt), np.int32(self.pl))

    @property
    def empty(self) -> bool:
        return self.y.size == 0

    @property
    def named_sizes(self) -> dict:
        """:attr:`sizes` by the kernels' parameter names."""
        return dict(zip(("N", "H", "W", "OH", "OW", "pt", "pl"), self.sizes))

    @property
    def named_epilogue(self) -> dict:
        """:attr:`epilogue_args` by the kernels' parameter names."""
        return {n: a for n, a in (("bias", self.bias), ("residual", self.residual))
                if a is not None}

    @property
    def epilogue_args(self) -> tuple:
        """The bias and the residual the call has, in the kernels' argument order."""
        return tuple(a for a in (self.bias, self.residual) if a is not None)
