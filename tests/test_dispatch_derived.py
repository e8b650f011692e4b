"""The generated dispatcher on derived sizes: input dimensions such as floor(h/2 - 1/2) + 1 (a
strided layer's output on a symbolic image side) whose symbol is no input's whole dimension.
The dispatcher reads the unknown part back from the size (floor division, exact for every
sign and magnitude), evaluates the strategy's conditions and the output shapes on it, and
checks the sizes that must agree; what it cannot solve is a clear error at compile time."""

import re

import numpy as np
import pytest
import sympy
from hypothesis import example, given, settings
from hypothesis import strategies as st

import gpucg
from gpucg import derived
from gpucg.derived import derive
from gpucg.shape import evaluate
from gpucg.strategy import Implementation, Strategy

h, w, n = gpucg.var("h"), gpucg.var("w"), gpucg.var("n")

#: the probe's implementations, tried in this order: (name, plevel, condition on the size d)
CHOICES = (("small", 20, lambda d: d <= 16), ("even", 15, lambda d: sympy.Eq(sympy.Mod(d, 2), 0)),
           ("any", 5, None))


def _out(d):
    """The probe's output sizes from its input's last size ``d``: a strided window's and a
    ceiling division, so that the dispatcher evaluates floors of the derived size."""
    return (sympy.floor((d - 1) / 2) + 1, sympy.ceiling(sympy.sympify(d) / 3))


def _type(ins, attrs):
    d = ins[0].shape[-1]
    return gpucg.TensorType(tuple(gpucg.shape.simplify_dim(e) for e in _out(d)), ins[0].dtype)


def _run(ctx):
    ctx.outputs[0][...] = ctx.inputs[0].shape[-1]


def _strategy(attrs, inputs, outputs, target):
    d = inputs[0].shape[-1]
    s = Strategy()
    for name, plevel, cond in CHOICES:
        s.add_implementation(Implementation(name, plevel, _run,
                                            condition=cond(d) if cond else None))
    return s


def _reference(x, attrs):
    return np.full(tuple(int(e) for e in _out(x.shape[-1])), x.shape[-1], x.dtype)


@pytest.fixture(scope="module", autouse=True)
def _probe():
    """The probe operator, registered when this module's tests run (not at collection, where
    the sweeps over every registered operator, tests/test_oclgrind.py's, list them)."""
    gpucg.register_op("probe_sides", num_inputs=1, type_rel=_type, reference=_reference,
                      input_names=("x",), override=True)
    gpucg.register_strategy("probe_sides", ["cpu"], _strategy, override=True)


def _array(*shape):
    """An int8 array of this shape that takes no memory (the dispatcher reads only shapes)."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape=shape,
                                           strides=(0,) * len(shape))


def _part(draw, inner, signed: bool):
    fn = draw(st.sampled_from([sympy.floor, sympy.ceiling]))
    c = draw(st.sampled_from([-7, -3, -2, 2, 3, 4, 7] if signed else [2, 3, 4, 7]))
    return fn((draw(st.integers(1, 3)) * inner + draw(st.integers(-9, 9))) / sympy.Integer(c))


@st.composite
def sides(draw, signed: bool = False):
    """a * F + b, F a floor or ceiling of (p*h + q)/c, or of such a quotient of one again."""
    f = _part(draw, h, signed)
    if draw(st.booleans()):
        f = _part(draw, f, signed)
    return draw(st.integers(1, 3)) * f + draw(st.integers(-2, 5))


#: sizes: small ones (the rounding edges) and large ones (past 32 bits, past a double's 53)
SIZES = st.one_of(st.integers(1, 40), st.sampled_from([2**31 - 1, 2**31, 2**53 + 1, 2**59]),
                  st.integers(1, 2**59))


@settings(max_examples=200, deadline=None)
@given(e=sides(signed=True), v=st.one_of(SIZES, st.integers(1, 2**80)))
@example(e=sympy.floor(h / 2 - sympy.Rational(1, 2)) + 1, v=2**53 + 1)
def test_printed_floor_and_ceiling_equal_sympys(e, v):
    """The Python the dispatcher prints for a size is exact: floor division, for negative
    numerators and divisors, and past a double's 53 bits of mantissa."""
    assert evaluate(e, {h: v}) == int(e.subs(h, v)), (e, v)


def _expected(d_value):
    for name, _, cond in CHOICES:
        if cond is None or bool(cond(sympy.Integer(d_value))):
            return name


@settings(max_examples=60, deadline=None)
@given(e=sides(), v=SIZES)
@example(e=sympy.floor(h / 2 - sympy.Rational(1, 2)) + 1, v=33)
@example(e=2 * sympy.ceiling(h / 3) + 1, v=1)
def test_a_derived_size_is_read_back_for_conditions_and_outputs(e, v):
    size = int(e.subs(h, v))
    if size < 0:
        return
    f = gpucg.compile("probe_sides", gpucg.tensor((e,), "int8"), target="numpy")
    derived = derive(f.input_types).sizes  # none where SymPy made e plain h
    assert e.is_Symbol or "    _s0 = x.shape[0]  # " in f.dispatcher_source
    plan = f.plan(_array(size))
    assert plan.out_shapes == (tuple(int(d.subs(h, v)) for d in _out(e)),)
    assert f.selection.choices[plan.index].impl.name == _expected(size)
    if any(abs(read.a) > 1 for read in derived.values()):  # a size no u gives for a*u + b
        with pytest.raises(gpucg.SignatureError, match=r"x.shape\[0\] is"):
            f.plan(_array(size + 1))


@settings(max_examples=60, deadline=None)
@given(e=sides(), v=st.one_of(st.integers(1, 40), st.integers(1, 2**28)))
def test_a_size_of_a_known_symbol_is_checked(e, v):
    """(h, E(h)): h is read from dimension 0, E(h) computed and compared, exactly."""
    size = int(e.subs(h, v))
    if size < 0:
        return
    f = gpucg.compile("probe_sides", gpucg.tensor((h, e), "int8"), target="numpy")
    assert "    h = x.shape[0]\n" in f.dispatcher_source
    plan = f.plan(_array(v, size))
    assert plan.out_shapes == (tuple(int(d.subs(h, v)) for d in _out(e)),)
    assert f.selection.choices[plan.index].impl.name == _expected(size)
    with pytest.raises(gpucg.SignatureError, match=rf"x.shape\[1\] is {size + 1}, but the "
                       rf"compiled signature needs .* = {size}"):
        f.plan(_array(v, size + 1))


def test_the_dispatcher_reads_as_a_person_writes_it():
    side = sympy.floor(h / 2 - sympy.Rational(1, 2)) + 1
    f = gpucg.compile("probe_sides", gpucg.tensor((n, side, 2 * w + 1), "int8"), target="numpy")
    src = f.dispatcher_source
    assert "    n = x.shape[0]\n" in src
    assert "    _s0 = x.shape[1]  # floor(h/2 - 1/2) + 1\n" in src
    assert "    _s1 = x.shape[2]  # 2*w + 1\n" in src  # w = (_s1 - 1) // 2 where it is needed
    assert "    _outs = ((1 + (-1 + _s1) // 2, -(-_s1 // 3)),)\n" in src
    assert "    if _s1 <= 16:\n" in src  # the strategy's conditions, on the sizes read
    assert f.input_types[0].shape == (n, side, 2 * w + 1)  # the signature as given
    assert f.output_types[0].shape == (w + 1, sympy.ceiling((2 * w + 1) / sympy.Integer(3)))
    y = f(np.zeros((2, 5, 7), np.int8))  # a real call on the derived sizes
    assert y.shape == (4, 3) and (y == 7).all()
    with pytest.raises(gpucg.SignatureError, match=r"x.shape\[2\] is 8, but the compiled "
                       r"signature needs 2\*w \+ 1, 2\*k \+ 1 for an integer k"):
        f(np.zeros((2, 5, 8), np.int8))
    g = gpucg.compile("probe_sides", gpucg.tensor((2 * sympy.ceiling(h / 3) + 1,), "int8"),
                      target="numpy")
    assert "    _s0 = x.shape[0]  # 2*ceiling(h/3) + 1\n    if (_s0 - 1) % 2:\n" in \
        g.dispatcher_source
    assert g.plan(_array(9)).out_shapes == ((5, 3),)
    with pytest.raises(gpucg.SignatureError, match=r"x.shape\[0\] is 4, but the compiled "
                       r"signature needs 2\*ceiling\(h/3\) \+ 1, 2\*k \+ 1 for an"):
        g.plan(_array(4))


@pytest.mark.parametrize("dim", [h * w, sympy.floor(h / 2) + sympy.floor(h / 3), h**2,
                                 sympy.floor(h / 2) * w])
def test_a_size_not_of_the_solvable_form_is_read_whole(dim):
    """A dimension that is no a*u + b in one unknown (h*w: a model's rows flattened) is one
    size of its own: the dispatcher reads it whole, and the output follows from it."""
    g = gpucg.compile("probe_sides", gpucg.tensor((dim,), "int8"), target="numpy")
    assert f"    _s0 = x.shape[0]  # {dim}\n" in g.dispatcher_source
    assert g.plan(_array(12)).out_shapes == ((6, 4),)

@settings(max_examples=80, deadline=None)
@given(a=st.sampled_from([2, 3, 7, 64, -4]), b=st.integers(-5, 5), p=st.integers(-3, 3),
       q=st.integers(-70, 70), c=st.sampled_from([2, 3, 7, 32, 64, 128]),
       fn=st.sampled_from([sympy.floor, sympy.ceiling]), k=st.integers(1, 10**6))
@example(a=64, b=0, p=1, q=0, c=64, fn=sympy.floor, k=3)
def test_a_size_takes_its_admissible_form_equal_for_every_admissible_value(a, b, p, q, c, fn, k):
    """A size read from a*u + b (|a| > 1: the dispatcher checks (s - b) % a == 0) makes other
    dimensions simplest for the values it admits: equal to the original for each of them."""
    s = sympy.Symbol("_s0", integer=True, positive=True)
    sizes = {s: derived.Size(a * n + b, 0, 0, a, b)}
    value = {s: a * k + b}
    for e in (a * fn((p * s + q) / sympy.Integer(c)) + c, c * fn((s + q) / sympy.Integer(a)),
              sympy.Mod(p * s + q, c) + s, p * a * fn((s - b) / sympy.Integer(a)) + q):
        assert evaluate(derived.admissible(e, sizes), value) == evaluate(e, value), e
    assert derived.admissible(a * sympy.floor((s - b) / sympy.Integer(a)) + b, sizes) == s
    assert derived.admissible(sympy.Mod(s - b, a), sizes) == 0


def test_sizes_equal_for_every_admissible_value_compare_equal(target):
    """Swin's windows: a (64*n, 3, 5, 4) @ b (64*n, 3, 4, 6). The dispatcher reads _s0 =
    64*n from a and checks _s0 % 64 == 0, so b's 64*floor(_s0/64) is _s0: the batch dimensions
    broadcast; a size no n gives is refused."""
    a_t, b_t = gpucg.tensor((64 * n, 3, 5, 4)), gpucg.tensor((64 * n, 3, 4, 6))
    f = gpucg.compile("matmul", a_t, b_t, target=target)
    src = f.dispatcher_source
    assert "    if _s0 % 64:\n" in src and "    if b.shape[0] != _s0:\n" in src
    assert f.output_types[0].shape == (64 * n, 3, 5, 6)
    rng = np.random.default_rng(0)
    for batch in (1, 2):
        a, b = (rng.standard_normal((64 * batch,) + t.shape[1:]).astype(np.float32)
                for t in (a_t, b_t))
        np.testing.assert_allclose(gpucg.to_host(f(a, b)), a.astype(np.float64) @ b,
                                   rtol=1e-5, atol=1e-5)
    with pytest.raises(gpucg.SignatureError, match=r"a.shape\[0\] is 65, .* 64\*k for an"):
        f(np.zeros((65, 3, 5, 4), np.float32), np.zeros((65, 3, 4, 6), np.float32))
    with pytest.raises(gpucg.SignatureError, match=r"b.shape\[0\] is 128, .* 64\*n = 64"):
        f(np.zeros((64, 3, 5, 4), np.float32), np.zeros((128, 3, 4, 6), np.float32))
