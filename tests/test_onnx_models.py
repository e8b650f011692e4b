"""Real architectures through gpucg.onnx: transformers' BERT, GPT-2 with past key values,
LLaMA (grouped-query attention, RoPE, RMSNorm, SwiGLU) and ViT, torchvision's MobileNetV3 and a
Swin transformer (shifted windows: 4*batch windows, sizes equal for every batch the dispatcher
admits), and (exhaustive) ResNet-50, EfficientNet-B0, ConvNeXt-T, a Whisper encoder
(1-D convolutions) and GPT-2 without the cache: built from their classes with random weights
(tests/model_zoo.py: tiny configs, nothing downloaded), exported by both of torch's exporters,
each compiled once and checked against onnxruntime at two batch and sequence sizes on numpy and
opencl. Every export is made once per session (exports are slow)."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

for _module in ("onnx", "onnxruntime", "torch", "torchvision", "transformers"):
    if importlib.util.find_spec(_module) is None:
        pytest.skip(f"the model tests need {_module} (pip install 'gpucg[test]')",
                    allow_module_level=True)

os.environ["HF_HUB_OFFLINE"] = "1"

import onnxruntime  # noqa: E402

import gpucg.onnx  # noqa: E402
import model_zoo  # noqa: E402

#: the issue's models, in the default tier; the rest of model_zoo.BUILDERS is exhaustive
REQUIRED = ("bert", "gpt2_past", "llama", "vit", "mobilenet_v3", "swin")
WAYS = ("torchscript", "dynamo")
#: default-tier models exported one way only (the other way runs with -m exhaustive)
ONE_WAY = {"swin": "torchscript"}
#: (batch, sequence length) of the two calls; an image model takes its side as exported
SIZES = ((1, 5), (3, 7))


@pytest.fixture(scope="session")
def exported():
    """(name, way) -> (ModelProto, Spec, onnxruntime session), each export made once."""
    memo: dict = {}

    def get(name, way):
        if (name, way) not in memo:
            spec = memo.get(name) or model_zoo.BUILDERS[name]("tiny")
            memo[name] = spec
            model = model_zoo.export(spec, dynamo=way == "dynamo")
            session = onnxruntime.InferenceSession(model.SerializeToString(),
                                                   providers=["CPUExecutionProvider"])
            memo[name, way] = (model, spec, session)
        return memo[name, way]
    return get


def _side(spec):
    """The image side (or frames) an image or audio model was exported with, else None."""
    x = spec.inputs.get("x")
    return None if x is None else int(x.shape[-1])


def check(exported, name, way, target):
    model, spec, session = exported(name, way)
    m = gpucg.onnx.compile(model, target=target)
    count = m.compiles
    for batch, seq in SIZES:
        feeds = spec.feeds(batch, _side(spec) or seq, seed=batch)
        want = session.run(None, feeds)
        got = m.run(None, feeds)
        assert [g.shape for g in got] == [w.shape for w in want]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4 * max(1.0, np.abs(w).max()))
    assert m.compiles == count, "a new size compiled an operator again"
    return m


def exhaustive_case(params) -> bool:
    """The cases of the default-tier test that run with -m exhaustive only (conftest): a
    one-way model's other export, and the dynamo exports on opencl (the torchscript exports
    run the same operators there in the default tier)."""
    if "name" not in params:
        return False
    name, way = params["name"], params["way"]
    return ONE_WAY.get(name, way) != way or (params.get("target") == "opencl"
                                             and way == "dynamo")


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("name", REQUIRED)
def test_model_equals_onnxruntime_at_two_sizes_through_one_compile(name, way, target,
                                                                    exported):
    check(exported, name, way, target)



@pytest.mark.exhaustive
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("name", sorted(set(model_zoo.BUILDERS) - set(REQUIRED)))
def test_more_models_equal_onnxruntime(name, way, target, exported):
    check(exported, name, way, target)
