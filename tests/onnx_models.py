"""Small ONNX models built in the test process (nothing downloaded): torch modules exported with
torch.onnx.export, their batch and sequence axes dynamic (ONNX dim_params). Shared by
tests/test_onnx.py and the models benchmark (``gpucg bench models``).

Each builder returns (onnx.ModelProto, feeds), where ``feeds(batch, size, seed)`` makes the
inputs of one call as a dict of NumPy arrays (``size`` is the sequence length, or the image
side for the CNN). ``width`` scales the channels (small in CI, ResNet-18's own in a benchmark).
"""

from __future__ import annotations

import io
import math
import warnings

import numpy as np


def graph_model(nodes, inputs, outputs, consts, opset: int = 18):
    """An onnx.ModelProto of ``nodes`` (onnx.helper): ``inputs`` as (name, element type,
    dims), ``outputs`` as (name, element type), ``consts`` as initializers {name: array}."""
    from onnx import helper, numpy_helper

    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, t, dims) for k, t, dims in inputs],
        [helper.make_tensor_value_info(k, t, None) for k, t in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    # IR 10 (onnx 1.16): onnx >= 1.23 writes IR 14 by default, which onnxruntime < 1.31 refuses
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=10)


def check_graph(memo: dict, name: str, build, target, feeds, sizes, atol: float):
    """The graph ``build()`` compiled once per (name, target) (kept in ``memo``), run at each
    (batch, size) of ``sizes`` with ``feeds(b, s)`` against onnxruntime, with no compile after
    the first; returns the compiled model."""
    import gpucg.onnx
    import onnxruntime

    if (name, target) not in memo:
        proto = build()
        memo[name, target] = (gpucg.onnx.compile(proto, target=target),
                              onnxruntime.InferenceSession(
                                  proto.SerializeToString(), providers=["CPUExecutionProvider"]))
    m, session = memo[name, target]
    count = m.compiles
    for b, s in sizes:
        inputs = feeds(b, s)
        for got, want in zip(m.run(None, inputs), session.run(None, inputs)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=atol)
    assert m.compiles == count, "a new size compiled an operator again"
    return m


def export(module, args, input_names, output_names, dynamic_axes, opset=17, keep_norms=False):
    """``module`` exported to ONNX (TorchScript exporter, constants folded), as a ModelProto.
    ``keep_norms``: batch norms stay BatchNormalization nodes (the exporter would fold them
    into the convolutions itself: gpucg.onnx's folding is what the test is about)."""
    import onnx
    import torch

    module.eval()
    buf = io.BytesIO()
    extra = {"training": torch.onnx.TrainingMode.PRESERVE} if keep_norms else {}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notices
        torch.onnx.export(module, args, buf, input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic_axes, opset_version=opset, dynamo=False, **extra)
    return onnx.load_from_string(buf.getvalue())


def randomize_norms(module, seed: int = 0) -> None:
    """Batch norms with running statistics and affine terms that are not the identity, so
    that folding them into the convolutions is tested on real numbers."""
    import torch

    g = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(c, generator=g) * 0.1)


def resnet(width: int = 8, blocks=(1, 1), classes: int = 10, image: int = 32, seed: int = 0,
           symbolic_image: bool = False):
    """A ResNet-18-shaped CNN: conv-bn-relu stem, 3x3 max pool, basic blocks (two 3x3 convs
    with batch norm, a residual add, relu; a strided 1x1 conv on the shortcut where the
    shape changes), global average pool, flatten, a fully connected layer (Gemm).
    ``blocks=(2, 2, 2, 2)`` and ``width=64`` is ResNet-18 itself. Input "x": (batch, 3,
    image, image), the batch dynamic, and with ``symbolic_image`` the height and width too
    (the strided layers' sizes are then floor(height/2 - 1/2) + 1 and so on, which the
    dispatchers read back as derived sizes). ``feeds(batch, size)``: ``size`` an int (a
    square image) or (height, width); the image side of the export when left out."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False),
                                      nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            layers, cin = [], width
            for i, n in enumerate(blocks):
                cout = width * 2 ** i
                for j in range(n):
                    layers.append(Block(cin, cout, 2 if (j == 0 and i > 0) else 1))
                    cin = cout
            self.layers = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))

    torch.manual_seed(seed)
    net = Net()
    randomize_norms(net, seed)
    axes = {0: "batch", 2: "height", 3: "width"} if symbolic_image else {0: "batch"}
    model = export(net, (torch.randn(2, 3, image, image),), ["x"], ["logits"],
                   {"x": axes, "logits": {0: "batch"}}, keep_norms=True)

    def feeds(batch: int, size=image, seed: int = 0):
        rng = np.random.default_rng(seed)
        side = (size, size) if isinstance(size, int) else tuple(size)
        side = side if symbolic_image else (image, image)
        return {"x": rng.standard_normal((batch, 3, *side)).astype(np.float32)}
    return model, feeds


def _attention_scores(q, k, heads_dim):
    return q @ k.transpose(-2, -1) / math.sqrt(heads_dim)


def bert_layer(hidden: int = 32, heads: int = 4, ffn: int = 64, seed: int = 0):
    """A BERT encoder layer (post-norm): q, k, v projections, heads split by reshape and
    transpose, scores = q k^T / sqrt(d) + the additive mask made from the attention mask,
    softmax, context, output projection + residual, layer norm, feed-forward with exact (erf)
    GELU + residual, layer norm. Inputs "x": (batch, seq, hidden) float32 and "mask":
    (batch, seq) float32 (1 keeps a token)."""
    import torch
    from torch import nn

    d = hidden // heads

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
            self.o = nn.Linear(hidden, hidden)
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.up, self.down = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

        def split(self, t):
            b, s = t.shape[0], t.shape[1]
            return t.reshape(b, s, heads, d).transpose(1, 2)

        def forward(self, x, mask):
            b, s = x.shape[0], x.shape[1]
            q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
            ext = (1.0 - mask[:, None, None, :]) * -10000.0
            p = torch.softmax(_attention_scores(q, k, d) + ext, dim=-1)
            ctx = (p @ v).transpose(1, 2).reshape(b, s, hidden)
            h = self.ln1(self.o(ctx) + x)
            f = self.down(nn.functional.gelu(self.up(h)))
            return self.ln2(f + h)

    torch.manual_seed(seed)
    model = export(Layer(), (torch.randn(2, 8, hidden), torch.ones(2, 8)), ["x", "mask"],
                   ["y"], {"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"},
                           "y": {0: "batch", 1: "seq"}})

    def feeds(batch: int, size: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        mask = np.ones((batch, size), np.float32)
        mask[0, size // 2:] = 0  # padding in the first sequence
        return {"x": rng.standard_normal((batch, size, hidden)).astype(np.float32),
                "mask": mask}
    return model, feeds


def gpt2_block(vocab: int = 50, context: int = 32, hidden: int = 32, heads: int = 4,
               seed: int = 0):
    """A GPT-2-style decoder: token and position embeddings (Gather), a pre-norm block with
    causal attention (the lower-triangular buffer sliced to the sequence, masked_fill with
    -inf, as nanoGPT), a tanh-GELU MLP, residuals, the final layer norm and the tied LM head.
    Input "ids": (batch, seq) int64; output "logits": (batch, seq, vocab)."""
    import torch
    from torch import nn

    d = hidden // heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(context, hidden)
            self.ln1, self.ln2, self.lnf = (nn.LayerNorm(hidden) for _ in range(3))
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.fc, self.out = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
            self.register_buffer("bias", torch.tril(torch.ones(context, context))
                                 .view(1, 1, context, context))

        def forward(self, ids):
            b, s = ids.shape[0], ids.shape[1]
            x = self.wte(ids) + self.wpe(torch.arange(s))
            q, k, v = self.qkv(self.ln1(x)).split(hidden, dim=2)
            q, k, v = (t.reshape(b, s, heads, d).transpose(1, 2) for t in (q, k, v))
            att = _attention_scores(q, k, d)
            att = att.masked_fill(self.bias[:, :, :s, :s] == 0, float("-inf"))
            y = (torch.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, s, hidden)
            x = x + self.proj(y)
            x = x + self.out(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))
            return self.lnf(x) @ self.wte.weight.t()

    torch.manual_seed(seed)
    model = export(Block(), (torch.zeros(2, 8, dtype=torch.int64),), ["ids"], ["logits"],
                   {"ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}})

    def feeds(batch: int, size: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        return {"ids": rng.integers(0, vocab, (batch, size)).astype(np.int64)}
    return model, feeds


BUILDERS = {"resnet": resnet, "bert_layer": bert_layer, "gpt2_block": gpt2_block}
