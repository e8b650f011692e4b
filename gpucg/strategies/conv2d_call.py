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
        self.size = s
        #: the size arguments every kernel of the call takes, by the kernels' parameter names
        self.named_sizes = dict(N=s(n), H=s(h), W=s(w), OH=s(oh), OW=s(ow),
                                pt=np.int32(self.pt), pl=np.int32(self.pl))

    @property
    def empty(self) -> bool:
        return self.y.size == 0

    @property
    def named_epilogue(self) -> dict:
        """The bias and the residual the call has, by the kernels' parameter names."""
        return {n: a for n, a in (("bias", self.bias), ("residual", self.residual))
                if a is not None}

    @property
    def tensors(self) -> dict:
        """x, wt, the epilogue's tensors and y (the kernels' tensor_params) by name."""
        return dict(x=self.data, wt=self.weight, **self.named_epilogue, y=self.y)

    def winograd_input(self, v, th: int, tw: int) -> dict:
        """The arguments of winograd_input.j2: x into the transformed tiles ``v``."""
        s = self.size
        return dict(x=self.data, V=v, N=s(self.n), H=s(self.h), W=s(self.w), TH=s(th), TW=s(tw),
                    pt=np.int32(self.pt), pl=np.int32(self.pl))

    def winograd_output(self, mo, th: int, tw: int) -> dict:
        """The arguments of winograd_output.j2: the products ``mo`` into y, with the epilogue."""
        s = self.size
        return dict(Mo=mo, **self.named_epilogue, y=self.y, N=s(self.n), OH=s(self.oh),
                    OW=s(self.ow), TH=s(th), TW=s(tw))
