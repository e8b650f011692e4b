"""Errors name the shapes of the call: an eager call's actual shapes (its compile is shared by
a symbolic signature, whose symbols the user never wrote), a compiled operator's symbols only
where its signature has them."""

import numpy as np
import pytest

import gpucg


def f32(*shape):
    return np.ones(shape, np.float32)


# (call, the error of an eager call on these arrays): type relations (rank, broadcasting) and
# size rules decided at run time by the dispatcher (concatenate, batch_norm)
EAGER = [
    (lambda t: gpucg.ops.conv2d(f32(2, 5, 7), f32(4, 5, 3, 3), target=t),
     r"conv2d: data must have rank 4 \(NCHW\), got Tensor\[\(2, 5, 7\), float32\]"),
    (lambda t: gpucg.ops.add(f32(3, 4), f32(5), target=t),
     r"add: shapes \(3, 4\) and \(5,\) do not broadcast \(dimension -1: 4 vs 5\)"),
    (lambda t: gpucg.ops.where(f32(3, 4) > 0, f32(3, 4), f32(2, 3), target=t),
     r"where: shapes \(3, 4\) and \(3, 4\) and \(2, 3\) do not broadcast"),
    (lambda t: gpucg.ops.max_pool2d(f32(3, 4, 5), (2, 2), target=t),
     r"max_pool2d: x has shape \(3, 4, 5\); it must be 4-D"),
    (lambda t: gpucg.ops.global_avg_pool2d(f32(3, 4), target=t),
     r"global_avg_pool2d: x has shape \(3, 4\); it must be 4-D"),
    (lambda t: gpucg.ops.concatenate([f32(3, 4), f32(3, 5)], axis=0, target=t),
     r"concatenate: arrays\[1\].shape\[1\] \(arrays\[0\].shape\[1\] = 4, axis=0\) is 5 but "
     r"must be 4"),
    (lambda t: gpucg.ops.batch_norm(f32(2, 3, 4, 4), f32(4), f32(3), f32(3), f32(3), target=t),
     r"batch_norm: gamma.shape\[0\] \(x.shape\[1\] = 3, axis=1\) is 4 but must be 3"),
]


@pytest.mark.parametrize("call,message", EAGER, ids=["conv2d", "add", "where", "max_pool2d",
                                                     "global_avg_pool2d", "concatenate",
                                                     "batch_norm"])
def test_eager_errors_name_the_shapes_passed(target, call, message):
    for _ in range(2):  # the second call meets the memoized symbolic compile
        with pytest.raises(gpucg.InputError, match=message) as err:
            call(target)
        assert "s0" not in str(err.value) and "s1" not in str(err.value)


def test_a_call_after_a_good_one_of_the_same_signature_names_its_shapes(target):
    gpucg.ops.concatenate([f32(3, 4), f32(3, 4)], axis=0, target=target)  # compiles (s0, s1)
    with pytest.raises(gpucg.InputError, match=r"\(arrays\[0\].shape\[1\] = 6, axis=0\) is 7"):
        gpucg.ops.concatenate([f32(5, 6), f32(5, 7)], axis=0, target=target)


def test_compiled_symbolic_signatures_keep_their_symbols(target):
    n, m, k = gpucg.var("n"), gpucg.var("m"), gpucg.var("k")
    with pytest.raises(gpucg.InputError, match=r"add: shapes \(n, m\) and \(k,\) do not "
                                               r"broadcast \(dimension -1: m vs k\)"):
        gpucg.compile("add", gpucg.tensor((n, m)), gpucg.tensor((k,)), target=target)
    with pytest.raises(gpucg.InputError, match=r"got Tensor\[\(n, 5, m\), float32\]"):
        gpucg.compile("conv2d", gpucg.tensor((n, 5, m)), gpucg.tensor((4, 5, 3, 3)),
                      target=target)
    f = gpucg.compile("concatenate", gpucg.tensor((n, m)), gpucg.tensor((n, k)), axis=0,
                      target=target)
    with pytest.raises(gpucg.InputError, match=r"\(arrays\[0\].shape\[1\] = m, axis=0\) is 5 "
                                               r"but must be 4"):
        f(f32(3, 4), f32(3, 5))
    with pytest.raises(gpucg.InputError, match=r"add: shapes \(3, 4\) and \(5,\)"):
        gpucg.compile("add", gpucg.tensor((3, 4)), gpucg.tensor((5,)), target=target)


def test_other_errors_are_left_as_they_are(target):
    with pytest.raises(gpucg.InputError, match=r"softmax: axis=2 is out of range for an input "
                                               r"of rank 2"):
        gpucg.ops.softmax(f32(3, 4), axis=2, target=target)
    with pytest.raises(gpucg.DTypeError, match="take: indices dtype 'float32'"):
        gpucg.ops.take(f32(3, 4), f32(2), target=target)
