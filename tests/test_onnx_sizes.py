"""gpucg.onnx on what the exporters write around the operators: shape computations on
symbolic sizes (Shape of a Reshape to computed sizes, Max, Where, Equal, Mod, Range,
ConstantOfShape), size-dependent values (an arange added to the data), Pad with computed pads,
a 1-D convolution, the activations (HardSwish, HardSigmoid, Softplus, Mish, Elu, Selu), the
boolean and special-value nodes; each graph
compiled once per target and run at two sizes against onnxruntime, NaN and infinities among
the inputs. And the size arithmetic alone (gpucg.graph.sizes), and a crash in lowering."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import sympy

for _module in ("onnx", "onnxruntime"):
    if importlib.util.find_spec(_module) is None:
        pytest.skip(f"gpucg.onnx's tests need {_module} (pip install 'gpucg[test]')",
                    allow_module_level=True)

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import gpucg  # noqa: E402
import gpucg.onnx  # noqa: E402
import onnx_models  # noqa: E402
from gpucg.graph import sizes  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64
N = helper.make_node


_model = onnx_models.graph_model


def _shapes():
    """x (b, s, 8): flattened to (Max(b*s, 1), 8) by sizes from Shape, Mul, Max, Concat; the
    Shape of that Reshape's result (the value that crashed: a type computed from sizes) read
    back to shape a second Reshape; arange(s) (Range over a size: size-dependent), cast and
    added; Where(Equal(shape, -1), 1, shape) as torch's Expand writes it; Mod of a size; a
    ConstantOfShape of the sizes added; then Pad by pads from a Concat of constants and sizes
    arithmetic that folds to constants; HardSwish and HardSigmoid."""
    c = {"zero": np.int64([0]), "one": np.int64([1]), "eight": np.int64([8]),
         "ax0": np.int64([0]), "minus": np.int64([-1, -1, -1]), "two": np.int64([2]),
         "i0": np.int64(0), "i1": np.int64(1), "pads_lo": np.int64([0, 1, 0]),
         "f1": np.float32(1.0)}
    nodes = [
        N("Shape", ["x"], ["shp"]), N("Gather", ["shp", "zero"], ["b"], axis=0),
        N("Gather", ["shp", "one"], ["s"], axis=0), N("Mul", ["b", "s"], ["bs"]),
        N("Max", ["bs", "one"], ["rows"]), N("Concat", ["rows", "eight"], ["flat"], axis=0),
        N("Reshape", ["x", "flat"], ["xf"]), N("Shape", ["xf"], ["fshp"]),
        N("Gather", ["fshp", "zero"], ["rows2"], axis=0),
        N("Div", ["rows2", "b"], ["s2"]), N("Concat", ["b", "s2", "eight"], ["back"], axis=0),
        N("Reshape", ["xf", "back"], ["xr"]),
        N("Squeeze", ["s", "zero"], ["s0"]), N("Range", ["i0", "s0", "i1"], ["pos"]),
        N("Cast", ["pos"], ["posf"], to=F), N("Unsqueeze", ["posf", "one"], ["pos2"]),
        N("Add", ["xr", "pos2"], ["xa"]),
        N("Equal", ["shp", "minus"], ["isneg"]), N("Where", ["isneg", "one", "shp"], ["tgt"]),
        N("Expand", ["xa", "tgt"], ["xe"]),
        N("Mod", ["s", "two"], ["odd"]), N("Concat", ["zero", "zero", "odd"], ["grow"], axis=0),
        N("Mul", ["grow", "zero"], ["nothing"]),  # zeros whatever s is: folds to a constant
        N("Concat", ["pads_lo", "nothing"], ["pads"], axis=0),
        N("Pad", ["xe", "pads"], ["xp"]),
        N("ConstantOfShape", ["shp"], ["ones"], value=numpy_helper.from_array(
            np.float32([0.5]))),
        N("Pad", ["ones", "pads"], ["onesp"]), N("Add", ["xp", "onesp"], ["y0"]),
        N("HardSwish", ["y0"], ["y1"]), N("HardSigmoid", ["y0"], ["y2"], alpha=0.3, beta=0.4)]
    return _model(nodes, [("x", F, ["b", "s", 8])], [("y1", F), ("y2", F)], c)


def _logic():
    """IsNaN, IsInf (both signs, and each alone), Not, And, Or, Xor on x and y, as floats."""
    nodes = [N("IsNaN", ["x"], ["n"]), N("IsInf", ["x"], ["i"]),
             N("IsInf", ["x"], ["ip"], detect_negative=0),
             N("IsInf", ["x"], ["in"], detect_positive=0),
             N("Greater", ["y", "zero"], ["p"]), N("Not", ["p"], ["np"]),
             N("And", ["n", "p"], ["a"]), N("Or", ["i", "np"], ["o"]),
             N("Xor", ["ip", "in"], ["xo"])]
    nodes += [N("Cast", [v], [v + "f"], to=F) for v in ("a", "o", "xo", "ip")]
    nodes += [N("Add", ["af", "of"], ["s1"]), N("Mul", ["xof", "ipf"], ["s2"]),
              N("Sub", ["s1", "s2"], ["z"])]
    return _model(nodes, [("x", F, ["b", "s"]), ("y", F, ["b", "s"])], [("z", F)],
                  {"zero": np.float32(0)})


def _conv1d():
    """Two 1-D convolutions (Whisper's front end: stride 1 and 2, padding 1), an activation between."""
    rng = np.random.default_rng(0)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((6, 4, 3), (6, 6, 3)))
    nodes = [N("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1]), N("Sigmoid", ["c1"], ["g1"]),
             N("Conv", ["g1", "w2"], ["c2"], pads=[1, 1], strides=[2]), N("Relu", ["c2"], ["y"])]
    return _model(nodes, [("x", F, ["b", 4, "s"])], [("y", F)],
                  {"w1": w1, "w2": w2, "b1": np.float32([0.1, -0.2, 0, 0.3, 0, 0.5])})


def _activations():
    """Softplus, Mish, Elu (alpha 0.5), Selu (ONNX's defaults), each of x, summed."""
    nodes = [N("Softplus", ["x"], ["a"]), N("Mish", ["x"], ["b"]),
             N("Elu", ["x"], ["c"], alpha=0.5), N("Selu", ["x"], ["d"]),
             N("Add", ["a", "b"], ["ab"]),
             N("Add", ["c", "d"], ["cd"]), N("Add", ["ab", "cd"], ["y"])]
    return _model(nodes, [("x", F, ["b", "s"])], [("y", F)], {})


GRAPHS = {"shapes": _shapes, "logic": _logic, "conv1d": _conv1d, "activations": _activations}


def _feeds(name, b, s, rng):
    if name == "conv1d":
        return {"x": rng.standard_normal((b, 4, s)).astype(np.float32)}
    if name == "shapes":
        return {"x": rng.standard_normal((b, s, 8)).astype(np.float32) * 4}
    x = rng.standard_normal((b, s)).astype(np.float32) * 8
    x.flat[:4] = [np.nan, np.inf, -np.inf, -0.0]
    return {"x": x} if name == "activations" else {"x": x, "y": np.roll(x, 1)}


@pytest.fixture(scope="module")
def compiled():
    return {}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_equals_onnxruntime_at_two_sizes(name, target, compiled):
    rng = np.random.default_rng(2)
    m = onnx_models.check_graph(compiled, name, GRAPHS[name], target,
                                lambda b, s: _feeds(name, b, s, rng), ((1, 5), (3, 8)), 2e-5)
    if name == "shapes":  # the size arithmetic folded: no kernel for it
        text = m.explain()
        assert "computed on the host once per new size: Range x1" in text
        assert "Pad" in text and "Mod" not in text.split("\n[")[1]


def test_the_size_arithmetic_on_symbols():
    """gpucg.graph.sizes folds shape computations on gpucg vars: what holds for every size is
    decided (Max(n*m, 1) is n*m; n == -1 is false), the rest is NotSymbolic."""
    n, m = gpucg.var("n"), gpucg.var("m")
    v = np.array([n, m, 4], dtype=object)
    assert list(sizes.fold("maximum", [v * 1, np.array([1, 1, 1], dtype=object)], {})) == \
        [n, m, 4]
    assert list(sizes.fold("equal", [v, np.array([-1, -1, 4], dtype=object)], {})) == \
        [False, False, True]
    assert list(sizes.fold("where", [np.array([True, False, True]), v,
                                     np.array([1, 2, 3], dtype=object)], {})) == [n, 2, 4]
    assert sizes.fold("floor_divide", [np.array([n * 64], dtype=object), np.int64([64])],
                      {})[0] == n
    assert sizes.fold("mod", [np.array([n * 6 + 4], dtype=object), np.int64([2])], {})[0] == 0
    assert list(sizes.fold("arange", [np.int64(1), np.int64(7), np.int64(2)], {})) == [1, 3, 5]
    assert sizes.same(64 * sympy.floor(64 * n / 64), 64 * n)
    for op, args in (("less", [v, np.array([m, n, 5], dtype=object)]),
                     ("arange", [np.int64(0), np.array([n], dtype=object), np.int64(1)])):
        with pytest.raises(sizes.NotSymbolic):
            sizes.fold(op, args, {})


def test_a_crash_in_lowering_names_the_node(monkeypatch):
    """An exception inside a node's lowering (not a GpucgError) is an OnnxError naming the
    node, its op type and its inputs with their kinds and types."""
    import gpucg.onnx.nodes as nodes

    def boom(lw, n, ins):
        raise ZeroDivisionError("boom")
    monkeypatch.setitem(nodes.TABLE, "Relu", boom)
    proto = _model([N("Relu", ["x"], ["y"], name="act")], [("x", F, ["n", 4])], [("y", F)], {})
    with pytest.raises(gpucg.onnx.OnnxError, match=r"lowering act \(Relu\) failed: "
                       r"ZeroDivisionError: boom; inputs: x \(tensor Tensor\[\(n, 4\), float32"):
        gpucg.onnx.compile(proto, target="numpy")


def test_zero_pads_are_a_view():
    """A Pad whose pads are all 0 (Swin's window pads where the side divides) is a view of
    its input: no pad call, the same values."""
    nodes = [N("Pad", ["x", "pads"], ["xp"]), N("Relu", ["xp"], ["y"])]
    m = gpucg.onnx.compile(_model(nodes, [("x", F, ["b", 2, 3])], [("y", F)],
                                  {"pads": np.zeros(6, np.int64)}), target="numpy")
    x = np.random.default_rng(0).standard_normal((2, 2, 3)).astype(np.float32)
    np.testing.assert_array_equal(m.run(None, {"x": x})[0], np.maximum(x, 0))
    assert "ops.pad" not in m.explain()
