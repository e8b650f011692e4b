"""Views: reshape, flatten, squeeze, expand_dims and transpose without a kernel or a copy, on
every target (the families' strategies offer these at the highest plevel; their copy kernels
stay, forced with impl=).

  shape_view      the input as the output's shape, sharing its memory: a NumPy view, a
                  pyopencl array over the same buffer (at the same offset), a CuPy view. Where
                  the input's strides cannot hold the new shape (a reshape of a transposed
                  view), the input is first made contiguous on its own device.
  transpose_view  the input with its axes permuted: a strided view of the same memory;
                  operators that read strides (the GEMMs' host code) take it as it is, the
                  others get it made contiguous on the device (OpenCLBackend.contiguous runs a
                  strided gather kernel there: never a trip through the host).
"""

from __future__ import annotations

from ..implementation import view_impl
from ..ops._layout import permutation


def reshaped(backend, x, shape: tuple):
    """``x`` (an array of ``backend``) as ``shape``: a view sharing its memory, or, where its
    strides cannot hold the shape, a contiguous copy made on its own device first."""
    x = backend.export(x)  # gpucg's own buffer as the backend's array, no copy
    try:
        return x.reshape(shape)
    except ValueError:  # pyopencl: these strides cannot hold the shape without a copy
        return backend.export(backend.contiguous(x)).reshape(shape)


def _shape_view(ctx):
    return reshaped(ctx.backend, ctx.inputs[0], tuple(int(d) for d in ctx.out_shapes[0]))


def _transpose_view(ctx):
    x = ctx.backend.export(ctx.inputs[0])
    return x.transpose(permutation(x.ndim, ctx.attrs.axes))


SHAPE_VIEW = view_impl("shape_view", _shape_view, strided=True)
TRANSPOSE_VIEW = view_impl("transpose_view", _transpose_view, strided=True)
#: above every kernel: a view costs nothing
PLEVEL = 30


#: the operators whose result can always be a view of their input
OPS = ("reshape", "flatten", "squeeze", "expand_dims", "transpose")


def offer(s, op: str) -> None:
    """Offer the view of ``op`` (one of :data:`OPS`) on strategy s."""
    s.add(TRANSPOSE_VIEW if op == "transpose" else SHAPE_VIEW, PLEVEL)


def with_view(op: str, strategy):
    """``strategy`` (a strategy function) with the view of ``op`` offered first when ``op``
    is one of :data:`OPS`."""
    if op not in OPS:
        return strategy

    def viewed(attrs, inputs, outputs, target):
        s = strategy(attrs, inputs, outputs, target)
        offer(s, op)
        return s
    return viewed
