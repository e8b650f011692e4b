"""The models `gpucg bench models` runs, built in process (nothing downloaded): torch modules
with the real ResNet-18 layer sizes and a BERT-base encoder layer, exported to ONNX, and the
same models written with gpucg's operators called one by one (the path the benchmark times
where ``gpucg.onnx`` is not there).

The per-operator versions fuse what an ONNX front end fuses: batch norm folded into the conv
before it, bias, relu and the residual add in conv2d's and dense's epilogues, gelu in dense's.
"""

from __future__ import annotations

import io

import numpy as np

BERT_HIDDEN, BERT_HEADS, BERT_FFN = 768, 12, 3072


def _nn():
    import torch

    return torch, torch.nn


def resnet18(seed: int = 0):
    """ResNet-18 (torchvision's layer sizes: 64-128-256-512, two basic blocks a stage, 1000
    classes) in eval mode, with random weights and batch-norm statistics."""
    torch, nn = _nn()
    torch.manual_seed(seed)

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

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.pool = nn.MaxPool2d(3, 2, 1)
            blocks, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                blocks += [Block(cin, cout, stride), Block(cout, cout, 1)]
                cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(512, 1000)

        def forward(self, x):
            x = self.pool(torch.relu(self.bn1(self.conv1(x))))
            x = self.blocks(x)
            return self.fc(torch.flatten(torch.mean(x, dim=(2, 3), keepdim=True), 1))

    m = ResNet18()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.1, 0.1)
    return m.eval()


def bert_layer(seed: int = 0):
    """One BERT-base encoder layer (hidden 768, 12 heads, FFN 3072, post-norm, gelu by erf) in
    eval mode, written out (q, k, v projections, reshape, transpose, softmax attention)."""
    torch, nn = _nn()
    torch.manual_seed(seed)
    h, nh = BERT_HIDDEN, BERT_HEADS

    class BertLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(h, eps=1e-12), nn.LayerNorm(h, eps=1e-12)
            self.up, self.down = nn.Linear(h, BERT_FFN), nn.Linear(BERT_FFN, h)

        def forward(self, x):
            b, s, _ = x.shape

            def heads(t):
                return t.reshape(b, s, nh, h // nh).transpose(1, 2)

            q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
            p = torch.softmax(q @ k.transpose(-1, -2) / float(np.sqrt(h // nh)), dim=-1)
            a = (p @ v).transpose(1, 2).reshape(b, s, h)
            x = self.ln1(x + self.o(a))
            return self.ln2(x + self.down(nn.functional.gelu(self.up(x))))

    return BertLayer().eval()


def to_onnx(module, example, input_name: str, dynamic: dict) -> bytes:
    """The module exported to ONNX (opset 17, TorchScript exporter: eval-mode batch norm is
    folded into the conv before it), as serialized bytes."""
    torch, _ = _nn()
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(module, (torch.from_numpy(example),), buf, input_names=[input_name],
                          output_names=["y"], dynamic_axes={input_name: dynamic, "y": {0: "n"}},
                          opset_version=17, dynamo=False)
    return buf.getvalue()


def _np(t) -> np.ndarray:
    return t.detach().numpy().astype(np.float32)


# -- the same models with gpucg's operators called one by one --------------------------------

def resnet18_ops(module, target: str):
    """A function x -> logits running ``module`` with gpucg.ops on ``target`` (weights held as
    that target's arrays; batch norm folded into each conv)."""
    import gpucg
    from gpucg.runtime import get_backend

    ops = gpucg.ops
    put = _putter(target, get_backend)

    def conv_bn(conv, bn):
        w, b = ops.fold_batch_norm(_np(conv.weight), None, _np(bn.weight), _np(bn.bias),
                                   _np(bn.running_mean), _np(bn.running_var), eps=bn.eps)
        return put(w), put(b), dict(strides=conv.stride, padding=conv.padding)

    stem = conv_bn(module.conv1, module.bn1)
    blocks = []
    for blk in module.blocks:
        blocks.append((conv_bn(blk.conv1, blk.bn1), conv_bn(blk.conv2, blk.bn2),
                       None if blk.down is None else conv_bn(blk.down[0], blk.down[1])))
    fc_w, fc_b = put(_np(module.fc.weight)), put(_np(module.fc.bias))

    def conv(x, p, **kw):
        w, b, geo = p
        return ops.conv2d(x, w, bias=b, target=target, **geo, **kw)

    def run(x):
        x = ops.max_pool2d(conv(x, stem, activation="relu"), 3, 2, 1, target=target)
        for c1, c2, down in blocks:
            skip = x if down is None else conv(x, down)
            x = conv(conv(x, c1, activation="relu"), c2, residual=skip,
                     residual_position="before", activation="relu")
        x = ops.flatten(ops.global_avg_pool2d(x, target=target), target=target)
        return ops.dense(x, fc_w, fc_b, target=target)

    return run


def bert_ops(module, target: str):
    """A function x -> y running the BERT layer with gpucg.ops on ``target``."""
    import gpucg
    from gpucg.runtime import get_backend

    ops = gpucg.ops
    put = _putter(target, get_backend)
    h, nh = BERT_HIDDEN, BERT_HEADS
    w = {name: (put(_np(lin.weight)), put(_np(lin.bias)))
         for name, lin in (("q", module.q), ("k", module.k), ("v", module.v), ("o", module.o),
                           ("up", module.up), ("down", module.down))}
    ln = [(put(_np(m.weight)), put(_np(m.bias)), m.eps) for m in (module.ln1, module.ln2)]

    def run(x):
        b, s, _ = x.shape

        def heads(t):
            return ops.transpose(ops.reshape(t, (b, s, nh, h // nh), target=target),
                                 (0, 2, 1, 3), target=target)

        q, k, v = (heads(ops.dense(x, *w[n], target=target)) for n in "qkv")
        p = ops.softmax(ops.batch_matmul(q, k, transpose_b=True, alpha=1 / np.sqrt(h // nh),
                                         target=target), target=target)
        a = ops.reshape(ops.transpose(ops.batch_matmul(p, v, target=target), (0, 2, 1, 3),
                                      target=target), (b, s, h), target=target)
        x = ops.layer_norm(ops.dense(a, *w["o"], residual=x, target=target), *ln[0][:2],
                           eps=ln[0][2], target=target)
        f = ops.dense(ops.dense(x, *w["up"], activation="gelu", target=target), *w["down"],
                      residual=x, target=target)
        return ops.layer_norm(f, *ln[1][:2], eps=ln[1][2], target=target)

    return run


def _putter(target: str, get_backend):
    if target == "numpy":
        return lambda a: np.ascontiguousarray(a, np.float32)
    be = get_backend(target)
    return lambda a: be.to_device(np.ascontiguousarray(a, np.float32))
