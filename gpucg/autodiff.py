"""Gradients of operators, written with registered operators (as Relay's gradient registration).

An operator's gradient function (``gpucg.register_gradient``) receives a :class:`GradContext`
and returns the gradient of each input; :func:`grad` evaluates it eagerly, on the target the
inputs run on, so the gradient kernels are gpucg's own.
"""

from __future__ import annotations

from .eager import call
from .errors import InputError, OpError
from .op import get_op


class GradContext:
    """What a gradient function sees.

    Attributes:
        op: the operator's name; attrs: its validated attributes; kwargs: the attribute
            keywords as given (to call the operator again).
        inputs: the input arrays, as given; out_grad: the gradient of the output (a tuple for
            operators with several outputs); target: the target the calls run on.
    """

    def __init__(self, op: str, inputs, out_grad, attrs, kwargs: dict, target):
        self.op = op
        self.inputs = tuple(inputs)
        self.out_grad = out_grad
        self.attrs = attrs
        self.kwargs = dict(kwargs)
        self.target = target
        self._output = None

    @property
    def output(self):
        """The forward output at these inputs (computed once, when first read)."""
        if self._output is None:
            self._output = call(self.op, self.inputs, target=self.target, **self.kwargs)
        return self._output

    def call(self, op: str, *arrays, **attrs):
        """Run another registered operator eagerly on the same target."""
        return call(op, arrays, target=self.target, **attrs)


def grad(op: str, *inputs, out_grad, target=None, **attrs) -> tuple:
    """The gradients of ``op``'s inputs at ``inputs`` for the output gradient ``out_grad``.

    Example:
        >>> gx, = gpucg.grad("cumsum", x, out_grad=np.ones_like(x), axis=0)
    """
    opdef = get_op(op)
    if opdef.gradient is None:
        raise OpError(f"{op} has no gradient registered; gpucg.register_gradient({op!r}) adds one")
    opdef.check_count(len(inputs))
    attrs_obj = opdef.make_attrs(**attrs)
    grads = opdef.gradient(GradContext(op, inputs, out_grad, attrs_obj, attrs, target))
    grads = tuple(grads) if isinstance(grads, (tuple, list)) else (grads,)
    if len(grads) != len(inputs):
        raise OpError(f"the gradient of {op} returned {len(grads)} gradients for "
                      f"{len(inputs)} inputs")
    for name, x, g in zip(opdef.input_names, inputs, grads):
        if g is not None and tuple(g.shape) != tuple(x.shape):
            raise InputError(f"the gradient of {op} for {name} has shape {tuple(g.shape)}, "
                             f"but {name} has shape {tuple(x.shape)}")
    return grads
