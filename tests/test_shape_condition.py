import pickle

import numpy as np
import pytest
import sympy

import gpucg
from gpucg.condition import SpecializedCondition
from gpucg.shape import evaluate, pyexpr


def test_var_is_positive_integer():
    n = gpucg.var("n")
    assert n.is_integer and n.is_positive


@pytest.mark.parametrize("bad", ["", "1x", "for", "_n", 3])
def test_var_rejects_bad_names(bad):
    with pytest.raises(gpucg.InputError, match="var name"):
        gpucg.var(bad)


def test_tensor_types():
    n = gpucg.var("n")
    t = gpucg.tensor((n, 1024), np.float32)
    assert t.dtype == "float32" and t.shape == (n, 1024) and not t.is_static
    assert str(t) == "Tensor[(n, 1024), float32]"
    assert gpucg.tensor((3,), "int64").is_static


@pytest.mark.parametrize("shape", [(-1,), (1.5,), (True,), ("n",), (sympy.Symbol("x"),)])
def test_tensor_rejects_bad_dims(shape):
    with pytest.raises(gpucg.InputError, match=r"shape\[0\]"):
        gpucg.tensor(shape, "float32")


def test_tensor_rejects_bad_dtype():
    with pytest.raises(gpucg.DTypeError, match="allowed: bool, int8, int16, int32"):
        gpucg.tensor((2,), "complex64")
    with pytest.raises(gpucg.DTypeError, match="not a dtype"):
        gpucg.tensor((2,), object())


def test_condition_cnf_and_python():
    n, m = gpucg.var("n"), gpucg.var("m")
    c = SpecializedCondition(sympy.Or(sympy.And(n <= 4, m >= 8), sympy.Eq(m, 1)))
    assert len(c.clauses) == 2
    assert all(len(cl) == 2 for cl in c.clauses)
    src = c.to_python()
    assert " and " in src and " or " in src
    for nv in (1, 4, 5):
        for mv in (1, 7, 8):
            assert c.evaluate({n: nv, m: mv}) == ((nv <= 4 and mv >= 8) or mv == 1)


def test_condition_decide():
    n = gpucg.var("n")
    assert SpecializedCondition(n <= 4).decide() is None
    assert SpecializedCondition(n <= 4).decide({n: 3}) is True
    assert SpecializedCondition(4 * n <= 0).decide() is False  # n is positive


def test_condition_rejects_non_shape_symbols():
    x = sympy.Symbol("x")
    with pytest.raises(gpucg.ConditionError, match="not shape symbols"):
        SpecializedCondition(x <= 3)
    with pytest.raises(gpucg.ConditionError, match="not a comparison"):
        SpecializedCondition(gpucg.var("n") + 1)
    n, k = gpucg.var("n"), gpucg.var("k")
    with pytest.raises(gpucg.ConditionError, match="appear in no input"):
        SpecializedCondition(k <= 3, allowed={n})


def test_python_printer_is_exact():
    n = gpucg.var("n")
    e = sympy.floor((n + 3) / 4) * 4 + sympy.ceiling(n / 3)
    assert evaluate(e, {n: 2**40 + 1}) == ((2**40 + 4) // 4) * 4 + -(-(2**40 + 1) // 3)
    assert eval(pyexpr(sympy.Max(n, 3)), {"n": 2}) == 3


def test_errors_pickle():
    err = gpucg.CompileError("failed", "int x", ("-O3",), "line 1: error")
    back = pickle.loads(pickle.dumps(err))
    assert back.log == "line 1: error" and back.source == "int x" and "error" in str(back)
    assert back.numbered_source() == "1 | int x"
    r = pickle.loads(pickle.dumps(gpucg.ResourceError("too big", "wg", 2048, 1024)))
    assert r.allowed == 1024
