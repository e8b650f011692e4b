"""Registered gradients against central finite differences of the operators' NumPy references
in float64, on every backend here (the gradient functions call gpucg operators, so on OpenCL
the gradient kernels are gpucg's own)."""

import numpy as np
import pytest

import gpucg
from gpucg.ops.conv2d import Conv2dAttrs, reference_conv

rng = np.random.default_rng(11)


def finite_differences(f, inputs, g, eps=1e-6):
    """d <f(inputs), g> / d input, by central differences in float64."""
    out = []
    for i, x in enumerate(inputs):
        gx = np.zeros(x.shape)
        for idx in np.ndindex(x.shape):
            plus = [a.astype(np.float64) for a in inputs]
            minus = [a.astype(np.float64) for a in inputs]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            gx[idx] = np.sum((f(*plus) - f(*minus)) * g) / (2 * eps)
        out.append(gx)
    return out


def check(target, op, inputs, tol=1e-7, **attrs):
    opdef = gpucg.get_op(op)
    parsed = opdef.make_attrs(**attrs)
    y = opdef.reference(*inputs, parsed)
    g = rng.standard_normal(np.shape(y))
    got = gpucg.grad(op, *inputs, out_grad=g.astype(y.dtype), target=target, **attrs)
    want = finite_differences(lambda *xs: opdef.reference(*xs, parsed), inputs, g)
    assert len(got) == len(inputs)
    for k, (a, b) in enumerate(zip(got, want)):
        a = np.asarray(a, np.float64)
        assert a.shape == b.shape
        err = np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-12) if b.size else 0.0
        assert err < tol, f"{op} input {k}: relative error {err:.2e}"


def f64(*shape):
    return rng.standard_normal(shape)


CASES = [
    ("add", [f64(3, 4), f64(4)], {}),
    ("add", [f64(2, 1, 3), f64(4, 1)], {}),
    ("multiply", [f64(3, 1), f64(2, 1, 4)], {}),
    ("relu", [f64(3, 5)], {}),
    ("sigmoid", [f64(3, 5)], {}),
    ("tanh", [f64(4, 3)], {}),
    ("exp", [f64(3, 4)], {}),
    ("log", [np.abs(f64(3, 4)) + 0.5], {}),
    ("sqrt", [np.abs(f64(3, 4)) + 0.5], {}),
    ("rsqrt", [np.abs(f64(3, 4)) + 0.5], {}),
    ("abs", [f64(3, 4)], {}),
    ("negative", [f64(3, 4)], {}),
    ("erf", [f64(3, 4)], {}),
    ("gelu", [f64(3, 4)], {}),
    ("gelu", [f64(3, 4)], {"approximate": "tanh"}),
    ("leaky_relu", [f64(3, 4)], {"alpha": 0.2}),
    ("clip", [f64(3, 4)], {"a_min": -0.5, "a_max": 0.7}),
    ("silu", [f64(3, 4)], {}),
    ("hardswish", [f64(3, 4) * 3], {}),
    ("hardsigmoid", [f64(3, 4) * 3], {"alpha": 0.3, "beta": 0.4}),
    ("softplus", [f64(3, 4)], {}),
    ("mish", [f64(3, 4)], {}),
    ("elu", [f64(3, 4)], {"alpha": 0.7}),
    ("selu", [f64(3, 4)], {}),
    ("sum", [f64(3, 4, 2)], {"axis": 1}),
    ("sum", [f64(5, 3)], {"axis": -1}),
    ("cumsum", [f64(3, 5)], {"axis": 1}),
    ("cumsum", [f64(4, 3)], {"axis": 0, "exclusive": True}),
    ("cumsum", [f64(2, 3)], {}),
    ("cumprod", [f64(3, 5) + 3], {"axis": 1}),
    ("cumprod", [f64(2, 3) + 3], {"exclusive": True}),
    ("dense", [f64(3, 4), f64(5, 4)], {}),
    ("dense", [f64(3, 4), f64(5, 4), f64(5), f64(3, 5)],
     {"activation": "gelu", "alpha": 0.5, "beta": 2.0}),
    ("dense", [f64(3, 4), f64(5, 4), f64(5), f64(3, 5)],
     {"activation": "gelu_tanh", "residual_position": "before"}),
    ("dense", [f64(2, 6), f64(3, 6), f64(3)], {"activation": "sigmoid"}),
    ("dense", [f64(2, 6), f64(3, 6), f64(3)], {"activation": "tanh"}),
    ("dense", [f64(2, 6), f64(3, 6), f64(3)], {"activation": "relu"}),
    ("matmul", [f64(2, 1, 3, 4), f64(3, 4, 2)], {}),
    ("matmul", [f64(4), f64(2, 4, 3)], {}),
    ("matmul", [f64(3, 4), f64(4)], {}),
    ("dense", [f64(2, 3, 4), f64(5, 4), f64(5)], {"alpha": 0.5}),
    ("matmul", [f64(2, 1, 4, 3), f64(3, 2, 4)], {"transpose_a": True, "transpose_b": True,
                                                  "alpha": -1.5}),
    ("matmul", [f64(2, 3, 4), f64(1, 5, 4)], {"transpose_b": True, "alpha": 0.25}),
    ("matmul", [f64(4, 3), f64(4)], {"transpose_a": True}),
]


@pytest.mark.parametrize("op,inputs,attrs", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_gradient_matches_finite_differences(target, op, inputs, attrs):
    check(target, op, inputs, **attrs)


CONV = [  # (data, weight, bias, residual, attrs)
    ((2, 3, 7, 6), (4, 3, 3, 3), True, False, dict(padding=1)),
    ((2, 4, 9, 8), (6, 2, 3, 2), True, True,
     dict(padding=(1, 0, 2, 1), strides=(2, 3), dilation=(2, 1), groups=2, activation="gelu",
          alpha=0.5, beta=1.5)),
    ((1, 7, 6, 4), (3, 3, 4, 2), False, False,
     dict(padding="SAME", strides=2, data_layout="NHWC", kernel_layout="HWIO",
          activation="sigmoid")),
    ((2, 3, 5, 5), (6, 1, 3, 3), True, True,
     dict(padding=1, groups=3, activation="relu", residual_position="before")),
]


@pytest.mark.parametrize("case", range(len(CONV)))
def test_conv2d_gradient(target, case):
    """conv2d runs in float32 (it has no float64): its gradients, computed in float32 by
    convolutions, against finite differences of the float64 reference. OpenCL runs the two
    cases that cover groups, strides, dilation, both layouts and the residual (compiling a
    gradient's dozen kernels takes PoCL a while)."""
    if target == "opencl" and case not in (1, 2):
        pytest.skip("covered by cases 1 and 2 on OpenCL, all cases on numpy")
    data, weight, bias, residual, attrs = CONV[case]
    x, w = f64(*data), f64(*weight)
    o = weight[0] if attrs.get("kernel_layout", "OIHW") == "OIHW" else weight[3]
    ins = [x, w] + ([f64(o)] if bias else [])
    conv = Conv2dAttrs(**attrs)

    def f(*xs):
        return reference_conv(xs[0], xs[1], xs[2] if bias else None, conv, "float64",
                              residual=xs[-1] if residual else None)

    if residual:
        ins.append(rng.standard_normal(reference_conv(x, w, None, conv, "float64").shape))
    g = rng.standard_normal(f(*ins).shape)
    got = gpucg.grad("conv2d", *[a.astype(np.float32) for a in ins],
                     out_grad=g.astype(np.float32), target=target, **attrs)
    for k, (a, b) in enumerate(zip(got, finite_differences(f, ins, g))):
        err = np.max(np.abs(a - b)) / np.max(np.abs(b))
        assert err < 1e-4, f"conv2d input {k}: relative error {err:.2e}"


def test_gradient_errors():
    with pytest.raises(gpucg.InputError, match="sum_to: x dtype bool"):
        gpucg.ops.sum_to(np.ones((2, 2), bool), (2,), target="numpy")
    with pytest.raises(gpucg.OpError, match="out_dtype equal to the data dtype"):
        gpucg.grad("dense", np.ones((2, 3), np.float32), np.ones((4, 3), np.float32),
                   out_grad=np.ones((2, 4)), out_dtype="float64", activation="relu",
                   target="numpy")
