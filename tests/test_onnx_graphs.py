"""gpucg.onnx on graphs built here with onnx.helper, as exporters write them: torch's dynamo
exporter's scaled-dot-product attention (Q and K^T each scaled by the square root of the
scale), Expand to sizes a Shape subgraph computes from symbolic dimensions, and SiLU and
HardSwish after convolutions and a Gemm (fused into their epilogues), and ConvNeXt's layer
scale (a Mul per channel after a dense and a transpose: folded into the weights). Each compiled
once per target and run at two sizes against onnxruntime."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

for _module in ("onnx", "onnxruntime"):
    if importlib.util.find_spec(_module) is None:
        pytest.skip(f"gpucg.onnx's tests need {_module} (pip install 'gpucg[test]')",
                    allow_module_level=True)

from onnx import TensorProto, helper  # noqa: E402

import gpucg.onnx  # noqa: E402
import onnx_models  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64
N = helper.make_node


_model = onnx_models.graph_model


def _sdpa(form: str):
    """softmax(Q K^T * 0.25 [+ mask]) V over (b, 4, s, 16) heads. "dynamo" is what
    torch.onnx.export(dynamo=True) of torch 2.13 writes for F.scaled_dot_product_attention:
    K^T by Reshape to (-1, s, 16), Transpose, Reshape back (sizes from Shape and Slices),
    then Mul(Q, 0.5) and Mul(K^T, 0.5). "transposed": Transpose(K), Q times 0.5, K^T divided
    by 2, and an additive mask."""
    heads = [(k, F, ["b", 4, "s", 16]) for k in "qkv"]
    consts = {"half": np.float32([0.5]), "two": np.float32(2.0)}
    if form == "dynamo":
        consts.update(last=np.int64([-1]), big=np.int64([2**63 - 1]), pen=np.int64([-2]),
                      small=np.int64([-2**63]))
        nodes = [N("Shape", ["k"], ["shp"], start=0),
                 N("Slice", ["shp", "last", "big"], ["d"]),
                 N("Slice", ["shp", "pen", "last"], ["sl"]),
                 N("Slice", ["shp", "small", "pen"], ["bh"]),
                 N("Concat", ["last", "sl", "d"], ["s3"], axis=0),
                 N("Reshape", ["k", "s3"], ["k3"], allowzero=0),
                 N("Transpose", ["k3"], ["k3t"], perm=[0, 2, 1]),
                 N("Concat", ["bh", "d", "sl"], ["s4"], axis=0),
                 N("Reshape", ["k3t", "s4"], ["kt"], allowzero=0),
                 N("Mul", ["q", "half"], ["qs"]), N("Mul", ["kt", "half"], ["ks"]),
                 N("MatMul", ["qs", "ks"], ["scores"])]
        extra = []
    else:
        nodes = [N("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
                 N("Mul", ["half", "q"], ["qs"]), N("Div", ["kt", "two"], ["ks"]),
                 N("MatMul", ["qs", "ks"], ["raw"]), N("Add", ["raw", "mask"], ["scores"])]
        extra = [("mask", F, ["b", 1, 1, "s"])]
    nodes += [N("Softmax", ["scores"], ["p"], axis=-1), N("MatMul", ["p", "v"], ["y"])]
    return _model(nodes, heads + extra, [("y", F)], consts)


def _expand():
    """A (b, s, 8) input; a mask (b, s) unsqueezed to (b, 1, 1, s) and expanded to
    (b, 4, s, s), both sizes read by Shape and Gather; a per-feature mean (8,) expanded to the
    input's own shape (a rank grown, symbols the expanded value does not have)."""
    consts = {"i0": np.int64([0]), "i1": np.int64([1]), "four": np.int64([4]),
              "ax": np.int64([1, 2]), "ax01": np.int64([0, 1])}
    nodes = [N("Shape", ["x"], ["shp"]), N("Gather", ["shp", "i0"], ["b"], axis=0),
             N("Gather", ["shp", "i1"], ["s"], axis=0),
             N("Concat", ["b", "four", "s", "s"], ["target"], axis=0),
             N("Unsqueeze", ["mask", "ax"], ["m4"]), N("Expand", ["m4", "target"], ["big"]),
             N("ReduceMean", ["x", "ax01"], ["mean"], keepdims=0),
             N("Expand", ["mean", "shp"], ["means"]), N("Sub", ["x", "means"], ["centred"])]
    return _model(nodes, [("x", F, ["b", "s", 8]), ("mask", F, ["b", "s"])],
                  [("big", F), ("centred", F)], consts)


def _activations():
    """EfficientNet's and MobileNetV3's activations as torch exports them: Conv, then Sigmoid
    and Mul (SiLU); a depthwise Conv, then HardSwish; pooled, a Gemm, then Sigmoid and Mul.
    Each activation runs in its producer's epilogue."""
    rng = np.random.default_rng(2)
    consts = {"w1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) / 4,
              "b1": rng.standard_normal(8).astype(np.float32),
              "w2": rng.standard_normal((8, 1, 5, 5)).astype(np.float32) / 4,
              "b2": rng.standard_normal(8).astype(np.float32),
              "wg": rng.standard_normal((6, 8)).astype(np.float32),
              "bg": rng.standard_normal(6).astype(np.float32)}
    nodes = [N("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             N("Sigmoid", ["c1"], ["s1"]), N("Mul", ["c1", "s1"], ["a1"]),
             N("Conv", ["a1", "w2", "b2"], ["c2"], pads=[2, 2, 2, 2], strides=[2, 2], group=8),
             N("HardSwish", ["c2"], ["y"]), N("GlobalAveragePool", ["y"], ["p"]),
             N("Flatten", ["p"], ["f"]), N("Gemm", ["f", "wg", "bg"], ["g"], transB=1),
             N("Sigmoid", ["g"], ["sg"]), N("Mul", ["sg", "g"], ["z"])]
    return _model(nodes, [("x", F, ["b", 3, "s", "s"])], [("y", F), ("z", F)], consts)


def _layer_scale():
    """ConvNeXt's block tail: to NHWC, MatMul and Add (a dense), back to NCHW, Mul by a
    (C, 1, 1) layer scale, Add the block's input; and a Conv times one number. Both Muls
    fold into the weights."""
    rng = np.random.default_rng(3)
    consts = {"w": rng.standard_normal((8, 8)).astype(np.float32),
              "b": rng.standard_normal(8).astype(np.float32),
              "gamma": rng.standard_normal((8, 1, 1)).astype(np.float32),
              "wc": rng.standard_normal((4, 8, 1, 1)).astype(np.float32),
              "half": np.float32(0.5)}
    nodes = [N("Transpose", ["x"], ["xt"], perm=[0, 2, 3, 1]), N("MatMul", ["xt", "w"], ["m"]),
             N("Add", ["m", "b"], ["mb"]), N("Transpose", ["mb"], ["mt"], perm=[0, 3, 1, 2]),
             N("Mul", ["mt", "gamma"], ["ms"]), N("Add", ["ms", "x"], ["y"]),
             N("Conv", ["x", "wc"], ["c"]), N("Mul", ["half", "c"], ["z"])]
    return _model(nodes, [("x", F, ["b", 8, "s", "s"])], [("y", F), ("z", F)], consts)


GRAPHS = {"sdpa_dynamo": lambda: _sdpa("dynamo"), "sdpa_transposed": lambda: _sdpa("transposed"),
          "expand": _expand, "activations": _activations, "layer_scale": _layer_scale}


def _feeds(name: str, b: int, s: int, rng) -> dict:
    if name == "activations":
        return {"x": rng.standard_normal((b, 3, s, s)).astype(np.float32) * 3}
    if name == "layer_scale":
        return {"x": rng.standard_normal((b, 8, s, s)).astype(np.float32)}
    if name == "expand":
        return {"x": rng.standard_normal((b, s, 8)).astype(np.float32),
                "mask": rng.standard_normal((b, s)).astype(np.float32)}
    feeds = {k: rng.standard_normal((b, 4, s, 16)).astype(np.float32) for k in "qkv"}
    if name == "sdpa_transposed":
        feeds["mask"] = np.where(rng.random((b, 1, 1, s)) < 0.3, -1e4, 0).astype(np.float32)
    return feeds


@pytest.fixture(scope="module")
def compiled():
    """(graph, target) -> (compiled model, onnxruntime session), one compile each."""
    return {}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_equals_onnxruntime_at_two_sizes(name, target, compiled):
    rng = np.random.default_rng(1)
    m = onnx_models.check_graph(compiled, name, GRAPHS[name], target,
                                lambda b, s: _feeds(name, b, s, rng), ((1, 5), (3, 11)), 2e-6)
    text = m.explain()
    if name.startswith("sdpa"):  # the scales and the MatMul, Softmax, MatMul: one attention
        assert text.count("-> gpucg.ops.attention(causal=False, scale=0.25") == 1
        assert "attention pattern: MatMul(Q, K^T) -> scale 0.25 -> " in text
        assert "gpucg.ops.fused" not in text and "Mul" in text.split("attention(")[0]
    elif name == "activations":  # SiLU and HardSwish in the conv2d and dense epilogues
        assert text.count("activation='silu'") == 2 and "activation='hardswish'" in text
        assert "gpucg.ops.fused" not in text
    elif name == "layer_scale":  # no Mul left: the layer scale and the 0.5 are in the weights
        assert text.count("Mul by a per-channel constant folded") == 2
        assert "multiply" not in text and "gpucg.ops.fused(expr='add(x0, x1)')" in text
    else:
        assert text.count("(Expand)") == 2 and "broadcast_to" not in text
    if name == "sdpa_dynamo":  # K^T's Reshape, Transpose, Reshape: K read as it is
        assert "8 of them run as 1 gpucg calls" in text and "K read as it is" in text


def test_torch_dynamo_export_of_sdpa_is_one_attention():
    """The real exporter's graph (about 3 s), against torch itself: the mirror above holds."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")  # the dynamo exporter's own dependency
    import warnings

    class Sdpa(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    b, s = torch.export.Dim("b"), torch.export.Dim("s")
    args = tuple(torch.randn(2, 4, 8, 16) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proto = torch.onnx.export(Sdpa(), args, dynamo=True, opset_version=18,
                                  dynamic_shapes={n: {0: b, 2: s} for n in "qkv"}).model_proto
    m = gpucg.onnx.compile(proto, target="numpy")
    assert "run as 1 gpucg calls" in m.explain() and "scale=0.25" in m.explain()
    for size in (5, 11):
        feeds = {n: np.random.default_rng(size).standard_normal((3, 4, size, 16)).astype(
            np.float32) for n in "qkv"}
        want = Sdpa()(*(torch.from_numpy(feeds[n]) for n in "qkv")).numpy()
        np.testing.assert_allclose(m(**feeds), want, rtol=2e-5, atol=2e-6)
