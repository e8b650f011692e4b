"""Real architectures from torchvision's and transformers' classes, with random weights (nothing
downloaded: configs are built here, HF_HUB_OFFLINE is set), exported by torch's two exporters:
``dynamo=False`` (TorchScript) with dynamic axes, and ``dynamo=True`` with named dims. Shared by
tests/test_onnx_models.py (``size="tiny"``: 1-2 layers, small widths) and the model table
benchmark (``gpucg bench models --onnx``, ``size="bench"``: the architectures' own widths).

Each builder returns a :class:`Spec`: the module (outputs: tensors), example inputs, the
dynamic axes {input: {axis: dim name}}, and ``feeds(batch, seq, seed)`` making NumPy inputs.
"""

from __future__ import annotations

import dataclasses
import io
import os
import warnings

import numpy as np
from onnx_models import randomize_norms

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

#: torchvision's C++ operators that its Python side registers fake kernels for at import; PyPI's
#: torchvision wheel links them against CUDA torch, so beside torch's CPU build its extension
#: does not load and ``import torchvision`` fails ("operator torchvision::nms does not exist").
#: The models use none of them: declaring their schemas (no kernel) lets torchvision import.
TV_SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
              "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_TV_LIB = []


def torchvision():
    """torchvision, importable beside torch's CPU build (see :data:`TV_SCHEMAS`)."""
    import importlib

    import torch

    try:
        return importlib.import_module("torchvision")
    except RuntimeError as exc:
        if "torchvision::nms" not in str(exc):
            raise
    import sys

    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    lib = torch.library.Library("torchvision", "DEF")
    for schema in TV_SCHEMAS:
        lib.define(schema)
    _TV_LIB.append(lib)  # the library's definitions live as long as it does
    return importlib.import_module("torchvision")


@dataclasses.dataclass
class Spec:
    """A model to export: ``module`` (eval mode) called on ``inputs`` (name -> tensor) in
    order; ``dynamic``: input -> {axis: dim name}; ``feeds(batch, seq, seed)``: NumPy inputs
    (``seq``: the sequence length, or the image side)."""

    module: object
    inputs: dict
    dynamic: dict
    feeds: object
    outputs: tuple = ("y",)


def export(spec: Spec, dynamo: bool, opset: int = 18):
    """``spec.module`` exported to an onnx.ModelProto by torch's TorchScript exporter
    (``dynamo=False``: dynamic_axes) or its dynamo exporter (``dynamo=True``: dynamic_shapes
    with the same names)."""
    import onnx
    import torch

    names = list(spec.inputs)
    args = tuple(spec.inputs.values())
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            shapes = _signature_shapes(spec.module, [
                {a: torch.export.Dim.DYNAMIC for a in spec.dynamic.get(n, {})} for n in names])
            prog = torch.onnx.export(spec.module, args, input_names=names,
                                     output_names=list(spec.outputs), dynamo=True,
                                     dynamic_shapes=shapes, opset_version=opset, verbose=False,
                                     optimize=True)
            model = prog.model_proto
            _name_dims(model, spec)
            return model
        buf = io.BytesIO()
        dyn = {n: dict(d) for n, d in spec.dynamic.items()}
        torch.onnx.export(spec.module, args, buf, input_names=names,
                          output_names=list(spec.outputs), dynamic_axes=dyn,
                          opset_version=min(opset, 17), dynamo=False)
        return onnx.load_from_string(buf.getvalue())


def _signature_shapes(module, per_input: list) -> tuple:
    """torch.export's dynamic_shapes mirror forward's signature: one entry a parameter, the
    inputs a ``*args`` takes as one tuple."""
    import inspect

    out, rest = [], list(per_input)
    for p in inspect.signature(module.forward).parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            out.append(tuple(rest))
            rest = []
        elif rest:
            out.append(rest.pop(0))
    return tuple(out)


def _name_dims(model, spec: Spec) -> None:
    """The dynamo exporter names dims s0, s1, ...: renamed to the spec's names (batch, seq)
    wherever they stand, so both exports of a model take the same sizes."""
    rename = {}
    for vi in model.graph.input:
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            want = spec.dynamic.get(vi.name, {}).get(axis)
            if want and d.HasField("dim_param"):
                rename.setdefault(d.dim_param, want)
    for vi in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in rename:
                d.dim_param = rename[d.dim_param]


def _ids(vocab, names=("input_ids", "attention_mask")):
    def feeds(batch, seq, seed=0):
        rng = np.random.default_rng(seed)
        out = {names[0]: rng.integers(0, vocab, (batch, seq)).astype(np.int64)}
        if len(names) > 1:
            mask = np.ones((batch, seq), np.int64)
            mask[0, : seq // 3] = 0 if batch > 1 else 1  # left padding in one row
            out[names[1]] = mask
        return out
    return feeds


def _images(channels=3):
    def feeds(batch, side, seed=0):
        rng = np.random.default_rng(seed)
        return {"x": rng.standard_normal((batch, channels, side, side)).astype(np.float32)}
    return feeds


def _tensor_inputs(feeds, batch, seq):
    import torch

    return {k: torch.from_numpy(v) for k, v in feeds(batch, seq).items()}


def _wrap(model, keys, field="logits"):
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(**dict(zip(keys, args)))
            return getattr(out, field) if hasattr(out, field) else out[0]

    return Wrapped().eval()


def _seed():
    """Seed torch; torchvision made importable first (transformers imports it when present)."""
    import torch

    torchvision()
    torch.manual_seed(0)


# -- torchvision -------------------------------------------------------------------------------

def _vision(build, side):
    _seed()
    module = build().eval()
    randomize_norms(module)
    feeds = _images()
    return Spec(module, _tensor_inputs(feeds, 2, side), {"x": {0: "batch"}}, feeds)


def resnet50(size="tiny"):
    m = torchvision().models
    return _vision(lambda: m.resnet50(weights=None, num_classes=10 if size == "tiny" else 1000),
                   32 if size == "tiny" else 224)


def resnet18(size="tiny", layers=None):
    """torchvision's ResNet-18 (``layers``: basic blocks a stage, 2 in ResNet-18's own)."""
    torchvision()
    from torchvision.models.resnet import BasicBlock, ResNet

    return _vision(lambda: ResNet(BasicBlock, [layers or 2] * 4,
                                  num_classes=10 if size == "tiny" else 1000),
                   32 if size == "tiny" else 224)


def efficientnet_b0(size="tiny"):
    m = torchvision().models
    return _vision(lambda: m.efficientnet_b0(weights=None), 32 if size == "tiny" else 224)


def convnext_tiny(size="tiny"):
    m = torchvision().models
    return _vision(lambda: m.convnext_tiny(weights=None), 32 if size == "tiny" else 224)


def mobilenet_v3(size="tiny"):
    m = torchvision().models
    return _vision(lambda: m.mobilenet_v3_small(weights=None), 32 if size == "tiny" else 224)


def swin(size="tiny"):
    """A windowed vision transformer (torchvision's SwinTransformer class; tiny: two stages of
    two blocks, the second of each on shifted windows (its attention mask), 4x4 windows on a
    32x32 image in 4x4 patches: 4*batch windows in the first stage, as Swin-T's 64*batch)."""
    tv = torchvision()
    from torchvision.models.swin_transformer import SwinTransformer

    if size == "tiny":
        return _vision(lambda: SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2],
                                               num_heads=[2, 2], window_size=[4, 4],
                                               num_classes=10), 32)
    return _vision(lambda: tv.models.swin_t(weights=None), 224)


# -- transformers ------------------------------------------------------------------------------

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            vocab_size=100, max_position_embeddings=64)


def _text(model, vocab, seq):
    feeds = _ids(vocab)
    return Spec(_wrap(model.eval(), ("input_ids", "attention_mask")),
                _tensor_inputs(feeds, 2, seq),
                {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}},
                feeds)


def _layers(config, layers):
    """``config`` with ``layers`` layers where given (the torch back end's tests take one:
    tracing time grows with the layers, and a second layer adds no new operator)."""
    if layers is not None:
        for name in ("num_hidden_layers", "n_layer"):
            if hasattr(config, name):
                setattr(config, name, layers)
    return config


def bert(size="tiny", layers=None):
    import transformers as tf

    _seed()
    cfg = _layers(tf.BertConfig(**TINY) if size == "tiny" else
                  tf.BertConfig(num_hidden_layers=2), layers)
    model = tf.BertModel(cfg, add_pooling_layer=False).eval()
    feeds = _ids(cfg.vocab_size)
    return Spec(_wrap(model, ("input_ids", "attention_mask"), "last_hidden_state"),
                _tensor_inputs(feeds, 2, 8 if size == "tiny" else 128),
                {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}},
                feeds)


def gpt2(size="tiny", layers=None):
    import transformers as tf

    _seed()
    cfg = _layers(tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=64)
                  if size == "tiny" else tf.GPT2Config(n_layer=2), layers)
    return _text(tf.GPT2LMHeadModel(cfg), cfg.vocab_size, 8 if size == "tiny" else 128)


def llama(size="tiny", layers=None):
    """LLaMA with grouped-query attention (4 heads, 2 key/value heads), RoPE, RMSNorm, SwiGLU."""
    import transformers as tf

    _seed()
    cfg = _layers(tf.LlamaConfig(**TINY, num_key_value_heads=2) if size == "tiny" else
                  tf.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=2,
                                 num_attention_heads=16, num_key_value_heads=4,
                                 vocab_size=32000), layers)
    return _text(tf.LlamaForCausalLM(cfg), cfg.vocab_size, 8 if size == "tiny" else 128)


def vit(size="tiny", layers=None):
    import transformers as tf

    _seed()
    cfg = _layers(tf.ViTConfig(**{k: v for k, v in TINY.items()
                                  if k not in ("vocab_size", "max_position_embeddings")},
                               image_size=32, patch_size=8) if size == "tiny" else
                  tf.ViTConfig(num_hidden_layers=2), layers)
    feeds = _images()
    side = cfg.image_size
    return Spec(_wrap(tf.ViTModel(cfg, add_pooling_layer=False).eval(), ("pixel_values",),
                      "last_hidden_state"), _tensor_inputs(feeds, 2, side), {"x": {0: "batch"}},
                feeds)


def gpt2_past(size="tiny"):
    """GPT-2 decoding with past key values: inputs the new tokens, the attention mask over past
    and new tokens, and each layer's past keys and values (batch, heads, past, head dim);
    outputs the logits and the present keys and values."""
    import torch
    import transformers as tf

    _seed()
    cfg = tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=64) \
        if size == "tiny" else tf.GPT2Config(n_layer=2)
    model = tf.GPT2LMHeadModel(cfg).eval()
    layers, heads, hd = cfg.n_layer, cfg.n_head, cfg.n_embd // cfg.n_head
    names = [f"past_{i}_{kv}" for i in range(layers) for kv in "kv"]

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, *past):
            cache = tf.DynamicCache(ddp_cache_data=[(past[2 * i], past[2 * i + 1])
                                                    for i in range(layers)], config=cfg)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             past_key_values=cache, use_cache=True)
            present = out.past_key_values
            flat = [t for i in range(layers) for t in (present.layers[i].keys,
                                                       present.layers[i].values)]
            return (out.logits, *flat)

    def feeds(batch, seq, seed=0):
        rng = np.random.default_rng(seed)
        past = seq + 1
        out = {"input_ids": rng.integers(0, cfg.vocab_size, (batch, seq)).astype(np.int64),
               "attention_mask": np.ones((batch, past + seq), np.int64)}
        for n in names:
            out[n] = rng.standard_normal((batch, heads, past, hd)).astype(np.float32)
        return out

    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
           **{n: {0: "batch", 2: "past"} for n in names}}
    return Spec(Step().eval(), _tensor_inputs(feeds, 2, 4 if size == "tiny" else 32), dyn,
                feeds, ("logits",) + tuple(n.replace("past", "present") for n in names))


def whisper_encoder(size="tiny"):
    """An audio encoder with a 1-D convolutional front end (transformers' Whisper encoder:
    two Conv1d with GELU, then transformer layers) on log-mel frames (batch, mels, frames)."""
    import transformers as tf

    _seed()
    cfg = tf.WhisperConfig(d_model=32, encoder_layers=1, encoder_attention_heads=4,
                           encoder_ffn_dim=64, num_mel_bins=16, max_source_positions=32,
                           decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=64,
                           vocab_size=100, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           decoder_start_token_id=1) if size == "tiny" else \
        tf.WhisperConfig(encoder_layers=2, max_source_positions=1500)
    enc = tf.WhisperModel(cfg).get_encoder().eval()
    frames = 2 * cfg.max_source_positions

    def feeds(batch, seq, seed=0):
        rng = np.random.default_rng(seed)
        return {"x": rng.standard_normal((batch, cfg.num_mel_bins, frames)).astype(np.float32)}

    return Spec(_wrap(enc, ("input_features",), "last_hidden_state"),
                _tensor_inputs(feeds, 2, frames), {"x": {0: "batch"}}, feeds)


BUILDERS = {"resnet50": resnet50, "resnet18": resnet18, "efficientnet_b0": efficientnet_b0,
            "convnext_tiny": convnext_tiny, "mobilenet_v3": mobilenet_v3, "swin": swin,
            "bert": bert, "gpt2": gpt2, "gpt2_past": gpt2_past, "llama": llama, "vit": vit,
            "whisper_encoder": whisper_encoder}
