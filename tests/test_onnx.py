"""gpucg.onnx against onnxruntime: models built here (tests/onnx_models.py: torch modules
exported with their batch and sequence axes symbolic), each compiled once and run at two
sizes on numpy and opencl; the fusions explain shows; weights uploaded once; the error for
unsupported nodes; the command line."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

import gpucg

for _module in ("onnx", "onnxruntime", "torch"):
    # torch by its presence only: importing it (1.3 s) waits for the first model export, so
    # that collecting the suite stays fast
    if importlib.util.find_spec(_module) is None:
        pytest.skip(f"gpucg.onnx's tests need {_module} (pip install 'gpucg[test]' torch)",
                    allow_module_level=True)

import onnx  # noqa: E402
import onnxruntime  # noqa: E402

import gpucg.onnx  # noqa: E402
import onnx_models  # noqa: E402

#: (batch, sequence length) of the two calls
SIZES = ((1, 5), (3, 11))
#: (batch, image side) of the CNN's calls: its height and width are symbolic too, an odd
#: side and a rectangle among them (the strided layers' sizes are derived: floor(h/2 - 1/2) + 1)
IMAGES = ((1, 32), (3, (33, 40)))


@pytest.fixture(scope="module")
def models():
    """name -> (ModelProto, feeds, onnxruntime session), built once for the module."""
    out = {}
    for name, build in onnx_models.BUILDERS.items():
        model, feeds = build(image=16, symbolic_image=True) if name == "resnet" else build()
        session = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=["CPUExecutionProvider"])
        out[name] = (model, feeds, session)
    return out


@pytest.fixture(scope="module")
def compiled():
    """(name, target) -> compiled model, memoized over the module (one compile each)."""
    return {}


def _compiled(compiled, models, name, target):
    if (name, target) not in compiled:
        compiled[name, target] = gpucg.onnx.compile(models[name][0], target=target)
    return compiled[name, target]


@pytest.mark.parametrize("name", sorted(onnx_models.BUILDERS))
def test_equals_onnxruntime_at_two_sizes_through_one_compile(name, target, models, compiled):
    model, feeds, session = models[name]
    m = _compiled(compiled, models, name, target)
    count = m.compiles
    sizes = IMAGES if name == "resnet" else SIZES
    for batch, seq in sizes:
        inputs = feeds(batch, seq, seed=batch)
        want = session.run(None, inputs)
        got = m.run(None, inputs)
        assert [g.shape for g in got] == [w.shape for w in want]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4 * max(1.0, np.abs(w).max()))
        assert m.compiles == count, "a new size compiled an operator again"
    assert "; last run: " in m.explain()  # the implementation each dispatcher chose
    one = m(**feeds(*sizes[0]))  # the call form: one output, as an array
    np.testing.assert_array_equal(one, m.run(None, feeds(*sizes[0]))[0])


def test_explain_shows_the_bert_layers_fusions(models, compiled):
    text = _compiled(compiled, models, "bert_layer", "numpy").explain()
    assert "gpucg.ops.dense(activation='gelu')" in text and "gelu (5 node(s))" in text
    assert "gpucg.ops.attention(" in text and "attention pattern: MatMul(Q, K^T)" in text
    assert "additive mask" in text
    assert "layout='BSHD'" in text and "the heads' Transposes are read in place" in text
    assert text.count("Add (residual) in the epilogue") == 2
    assert text.count("fused: Add (bias) in the epilogue") == 6
    causal = _compiled(compiled, models, "gpt2_block", "numpy").explain()
    assert "causal=True" in causal and "causal Where(-inf)" in causal
    assert "activation='gelu_tanh'" in causal and "gpucg.ops.take(axis=0)" in causal
    cnn = _compiled(compiled, models, "resnet", "numpy").explain()
    assert cnn.count("batch_norm folded") == 6
    assert cnn.count("Add (residual) in the epilogue, before the activation") == 2
    assert "for the symbolic sizes batch, height, width" in cnn
    pool = next(s.op for s in _compiled(compiled, models, "resnet", "numpy").steps
                if s.call.op == "max_pool2d")  # its input's sides are derived sizes
    assert "_s0 = x.shape[2]  # floor(height/2 - 1/2) + 1" in pool.dispatcher_source
    assert "(batch, 8, 1 + (-1 + _s0) // 2, 1 + (-1 + _s1) // 2)" in pool.dispatcher_source


def test_weights_are_uploaded_once(models, compiled):
    """A forward on opencl uploads its inputs and nothing else: the weights stay on the
    device from compile on."""
    from conftest import backend_or_skip, counted

    backend_or_skip("opencl")
    _, feeds, _ = models["bert_layer"]
    m = _compiled(compiled, models, "bert_layer", "opencl")
    inputs = feeds(*SIZES[1])
    _, stats = counted(lambda: m.run(None, inputs))
    assert stats["uploads"] == len(inputs), stats
    weights = sum(1 for s in m.steps for i in s.call.inputs if i in m.graph.consts)
    assert weights >= 8  # what would be uploaded per call otherwise


def test_unsupported_nodes_are_listed_before_anything_runs():
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("Hardmax", ["a"], ["b"], name="hm"),
             helper.make_node("Frobnicate", ["b"], ["c"], name="custom", domain="com.example"),
             helper.make_node("Shape", ["c"], ["s"], name="folded"),  # foldable: not listed
             helper.make_node("Conv", ["x3", "w"], ["y"], name="conv3d")]
    x3 = helper.make_tensor_value_info("x3", TensorProto.FLOAT, ["n", 4, 5, 5, 5])
    w = numpy_helper.from_array(np.ones((2, 4, 3, 3, 3), np.float32), "w")
    model = helper.make_model(helper.make_graph(nodes, "g", [x, x3], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid("com.example", 1)])
    gpucg.stats(reset=True)
    with pytest.raises(gpucg.onnx.UnsupportedError) as info:
        gpucg.onnx.compile(model, target="numpy")
    text = str(info.value)
    assert "3 node(s) have no gpucg operator" in text
    assert "hm (Hardmax) domain 'ai.onnx'" in text
    assert "custom (Frobnicate) domain 'com.example'" in text
    assert "conv3d (Conv) domain 'ai.onnx': conv3d (Conv): a convolution with 3 spatial" in text
    assert "folded" not in text
    assert isinstance(info.value, gpucg.GpucgError) and gpucg.stats()["runs"] == 0


def test_without_onnx_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(gpucg.onnx.OnnxError, match=r"pip install gpucg\[onnx\]"):
        gpucg.onnx.compile("model.onnx")


def test_cli_explain(models, tmp_path, capsys):
    from gpucg.cli import main

    path = tmp_path / "bert.onnx"
    onnx.save(models["bert_layer"][0], str(path))
    assert main(["onnx", "explain", str(path), "--target", "numpy", "--dim", "batch=2"]) == 0
    out = capsys.readouterr().out
    assert "dense(activation='gelu')" in out and "attention pattern" in out
    assert "symbolic sizes seq" in out  # batch fixed by --dim
    assert main(["onnx", "explain", str(path), "--dim", "batch"]) == 2
    assert "--dim 'batch' must be NAME=INT" in capsys.readouterr().err
    assert main(["onnx", "explain", str(path), "--dim", "batsh=2"]) == 2
    assert "dims names ['batsh'], which no graph input has; its symbolic sizes: ['batch', " \
           "'seq']" in capsys.readouterr().err


def _graph_of_many_operators():
    """One graph through most rows of the coverage table, its batch symbolic."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    f = TensorProto.FLOAT
    consts = {"two": np.float32(2.0), "tenth": np.float32(0.1), "W": rng.standard_normal(
        (4, 6)).astype(np.float32), "C": rng.standard_normal(4).astype(np.float32),
        "starts": np.array([1]), "ends": np.array([2 ** 62]), "axes1": np.array([1]),
        "steps": np.array([2]), "axes0": np.array([0]), "cols": np.array([0, 2]),
        "split": np.array([1, 3]), "lo": np.float32(0.1), "hi": np.float32(4.0),
        "one": np.float32(1.0), "zero": np.float32(0.0)}
    N = helper.make_node
    nodes = [N("Abs", ["x"], ["abs"]), N("Sqrt", ["abs"], ["a"]), N("Pow", ["a", "two"], ["b"]),
             N("Clip", ["b", "lo", "hi"], ["c"]),
             N("ReduceMean", ["c"], ["r"], axes=[1], keepdims=1), N("Sub", ["c", "r"], ["d"]),
             N("Concat", ["d", "y"], ["e"], axis=1),
             N("Slice", ["e", "starts", "ends", "axes1", "steps"], ["f"]),
             N("Unsqueeze", ["f", "axes0"], ["u"]), N("Squeeze", ["u", "axes0"], ["s"]),
             N("Transpose", ["s"], ["t"], perm=[1, 0]),
             N("Gemm", ["s", "W", "C"], ["G"], transB=1, alpha=0.5, beta=2.0),
             N("Softmax", ["G"], ["sm"], axis=-1),
             N("ReduceMax", ["G"], ["m"], axes=[1], keepdims=0),
             N("Greater", ["G", "zero"], ["pos"]), N("Mul", ["G", "tenth"], ["small"]),
             N("Where", ["pos", "G", "small"], ["w"]), N("Cast", ["w"], ["cast"], to=11),
             N("ArgMax", ["G"], ["arg"], axis=1, keepdims=0),
             N("Gather", ["G", "cols"], ["k"], axis=1), N("LeakyRelu", ["k"], ["lk"], alpha=0.2),
             N("Split", ["G", "split"], ["sp1", "sp2"], axis=1),
             N("Add", ["sp2", "one"], ["sp3"]), N("Reciprocal", ["sp3"], ["rec"]),
             N("Tanh", ["sp1"], ["th"]), N("Identity", ["th"], ["ident"])]
    outs = {"sm": f, "m": f, "cast": TensorProto.DOUBLE, "arg": TensorProto.INT64, "lk": f,
            "rec": f, "ident": f, "t": f}
    graph = helper.make_graph(
        nodes, "many", [helper.make_tensor_value_info(v, f, ["n", 6]) for v in ("x", "y")],
        [helper.make_tensor_value_info(k, t, None) for k, t in outs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_many_operators_equal_onnxruntime():
    model = _graph_of_many_operators()
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    m = gpucg.onnx.compile(model, target="numpy")
    rng = np.random.default_rng(0)
    for n in (3, 5):
        feeds = {k: rng.standard_normal((n, 6)).astype(np.float32) for k in ("x", "y")}
        for name, got, want in zip(m.outputs, m.run(None, feeds), session.run(None, feeds)):
            assert got.dtype == want.dtype and got.shape == want.shape, name
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
    assert m.run(["ident"], feeds)[0].shape == (5, 1)


def test_the_dispatchers_check_a_size_once():
    """The run loop keeps each call's plan per size: a second forward of a size asks no
    dispatcher again, a new size asks each once, and the results stay the same."""
    m = gpucg.onnx.compile(_graph_of_many_operators(), target="numpy")
    asked = []
    for step in m.steps:
        if step.op is not None:
            step.op.plan = (lambda *a, _p=step.op.plan: asked.append(1) or _p(*a))
    rng = np.random.default_rng(1)
    feeds = {n: {k: rng.standard_normal((n, 6)).astype(np.float32) for k in ("x", "y")}
             for n in (3, 5)}
    first = m.run(None, feeds[3])
    calls = len(asked)
    assert calls == sum(s.op is not None for s in m.steps)
    for got, want in zip(m.run(None, feeds[3]), first):
        np.testing.assert_array_equal(got, want)
    assert len(asked) == calls
    m.run(None, feeds[5])
    assert len(asked) == 2 * calls


def test_a_constant_of_one_element_keeps_the_rank_it_broadcasts_to():
    """x (n,) + c (1, 1) is (1, n): the constant stays an input, not a literal."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["a"]), helper.make_node("Mul", ["a", "h"], ["y"])],
        "rank", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.full((1, 1), 2.0, np.float32), "c"),
         numpy_helper.from_array(np.float32(0.5), "h")])
    m = gpucg.onnx.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                           target="numpy")
    y = m(x=np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(y, [[1.0, 1.5, 2.0]])
    assert "multiply(add(x0, x1), 0.5)" in m.explain()


def test_bad_inputs_are_clear_errors(models, compiled):
    m = _compiled(compiled, models, "bert_layer", "numpy")
    x = np.zeros((2, 5, 32), np.float32)
    cases = [({"x": x}, r"\['mask'\] are missing; the model takes x: "),
             ({"x": x, "mask": np.ones((2, 5), np.float32), "z": x}, r"\['z'\] are not graph"),
             ({"x": x, "mask": np.ones((2, 5))}, "input 'mask' is float64 of shape"),
             ({"x": x, "mask": np.ones((2, 6), np.float32)},
              r"dimension 1 must be seq = 5 \(as an earlier input gave it\)"),
             ({"x": x[..., :3], "mask": np.ones((2, 5), np.float32)}, "dimension 2 must be 32")]
    for feeds, match in cases:
        with pytest.raises(gpucg.onnx.OnnxError, match=match):
            m.run(None, feeds)
    with pytest.raises(gpucg.onnx.OnnxError, match=r"'nope' is not a graph output"):
        m.run(["nope"], {"x": x, "mask": np.ones((2, 5), np.float32)})
