"""gpucg.onnx against onnxruntime: models built here (tests/onnx_models.py: torch modules
exported with their batch and sequence axes symbolic), each compiled once and run at two
sizes on numpy and opencl; the fusions explain shows; weights uploaded once; the error for
unsupported nodes; the command line."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import gpucg

for _module in ("onnx", "onnxruntime", "torch"):
    pytest.importorskip(_module, reason=f"gpucg.onnx's tests need {_module} "
                                        "(pip install 'gpucg[test]' torch)")

import onnx  # noqa: E402
import onnxruntime  # noqa: E402

import gpucg.onnx  # noqa: E402
import onnx_models  # noqa: E402

#: (batch, sequence length) of the two calls; the CNN's image side stays fixed
SIZES = ((1, 5), (3, 11))


@pytest.fixture(scope="module")
def models():
    """name -> (ModelProto, feeds, onnxruntime session), built once for the module."""
    out = {}
    for name, build in onnx_models.BUILDERS.items():
        model, feeds = build(image=16) if name == "resnet" else build()
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
    for batch, seq in SIZES:
        inputs = feeds(batch, seq, seed=batch)
        want = session.run(None, inputs)
        got = m.run(None, inputs)
        assert [g.shape for g in got] == [w.shape for w in want]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4 * max(1.0, np.abs(w).max()))
        assert m.compiles == count, "a new size compiled an operator again"
    one = m(**feeds(*SIZES[0]))  # the call form: one output, as an array
    np.testing.assert_array_equal(one, m.run(None, feeds(*SIZES[0]))[0])


def test_explain_shows_the_bert_layers_fusions(models, compiled):
    text = _compiled(compiled, models, "bert_layer", "numpy").explain()
    assert "gpucg.ops.dense(activation='gelu')" in text and "gelu (5 node(s))" in text
    assert "gpucg.ops.attention(" in text and "attention pattern: MatMul(Q, K^T)" in text
    assert "additive mask" in text
    assert text.count("Add (residual, after the activation)") == 2
    assert text.count("fused: Add (bias)") == 6
    causal = _compiled(compiled, models, "gpt2_block", "numpy").explain()
    assert "causal=True" in causal and "causal Where(-inf)" in causal
    assert "activation='gelu_tanh'" in causal and "gpucg.ops.take(axis=0)" in causal
    cnn = _compiled(compiled, models, "resnet", "numpy").explain()
    assert cnn.count("BatchNormalization folded") == 6
    assert cnn.count("Add (residual, before the activation)") == 2


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
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("Hardmax", ["a"], ["b"], name="hm"),
             helper.make_node("Frobnicate", ["b"], ["y"], name="custom", domain="com.example")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid("com.example", 1)])
    gpucg.stats(reset=True)
    with pytest.raises(gpucg.onnx.UnsupportedError) as info:
        gpucg.onnx.compile(model, target="numpy")
    text = str(info.value)
    assert "2 node(s) have no gpucg operator" in text
    assert "hm (Hardmax) domain 'ai.onnx'" in text
    assert "custom (Frobnicate) domain 'com.example'" in text
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
