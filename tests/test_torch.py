"""torch.compile(model, backend="gpucg"): transformers' BERT, GPT-2, LLaMA and ViT and
torchvision's ResNet (tests/model_zoo.py: their classes, tiny configs of one layer or one
block a stage, random weights, nothing downloaded) equal eager torch on numpy and opencl at
three batch and sequence sizes through one gpucg compile; a node gpucg lacks runs in torch and
explain says so; a training step of a two-layer transformer gives eager torch's gradients;
``gpucg bench models --torch``; the options, the registration and the entry point."""

from __future__ import annotations

import copy
import importlib.util
import os
import re

import numpy as np
import pytest

for _module in ("torch", "torchvision", "transformers"):
    if importlib.util.find_spec(_module) is None:
        pytest.skip(f"the torch back end's tests need {_module} (pip install 'gpucg[test]')",
                    allow_module_level=True)

os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch._dynamo import mark_dynamic  # noqa: E402  (torch's documented API)

import gpucg  # noqa: E402
import gpucg.torch  # noqa: E402
from gpucg import settings  # noqa: E402
from gpucg.runtime import backend_status  # noqa: E402
import model_zoo  # noqa: E402
from conftest import backend_or_skip  # noqa: E402

#: (batch, sequence) of the three calls (never 1: dynamo specializes a size of 1)
SIZES = ((2, 5), (3, 7), (4, 6))
MODELS = ("bert", "gpt2", "llama", "vit", "resnet18")


def _compiled(module, target, **options):
    gpucg.torch.reset()
    return torch.compile(module, backend="gpucg", dynamic=True,
                         options={"target": target, **options})


def _usable_targets() -> list:
    """numpy and every other usable gpucg target (a GPUCG_REQUIRE'd one that is not fails)."""
    out = ["numpy"]
    for name in ("opencl", "cuda"):
        ok, _, reason = backend_status(name)
        if ok:
            out.append(name)
        elif name in settings.required_backends():
            pytest.fail(f"{name} is required (GPUCG_REQUIRE) but not usable: {reason}")
    return out


def _on_every_target(targets, outputs: dict):
    """A torch.compile back end handing dynamo's graph to gpucg's back end once for each
    target: one trace (dynamo's, the slow part) serves them all; each call runs every target,
    keeps its outputs in ``outputs`` and returns the first's."""
    def backend(gm, example_inputs):
        fns = {t: gpucg.torch.backend(gm, example_inputs, options={"target": t})
               for t in targets}

        def run(*args):
            for t, fn in fns.items():
                outputs[t] = fn(*args)
            return outputs[targets[0]]
        return run
    return backend


@pytest.mark.parametrize("name", MODELS)
def test_model_equals_eager_torch_at_three_sizes_through_one_compile(name):
    """Each model on every usable target (numpy, opencl) from one dynamo trace, the batch and
    sequence dimensions dynamic (dynamo's mark_dynamic: a dynamic=True trace of the image
    models also makes their sides symbolic, three times the tracing work): the three sizes
    through one gpucg build a target, no dynamo recompile."""
    targets = _usable_targets()
    spec = model_zoo.BUILDERS[name]("tiny", layers=1)
    gpucg.torch.reset()
    outputs: dict = {}
    fast = torch.compile(spec.module, backend=_on_every_target(targets, outputs))
    side = spec.inputs.get("x")
    compiles = None
    for batch, seq in SIZES:
        feeds = spec.feeds(batch, int(side.shape[-1]) if side is not None else seq, seed=batch)
        args = [torch.from_numpy(v) for v in feeds.values()]
        for a in args:
            for axis in range(1 if side is not None else 2):
                mark_dynamic(a, axis)
        with torch.no_grad():
            fast(*args)
            want = spec.module(*args)
        for t in targets:
            (got,) = outputs[t]
            assert isinstance(got, torch.Tensor) and got.shape == want.shape, t
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-4,
                                       atol=2e-4 * float(want.abs().max()),
                                       err_msg=f"{name} on {t} at {batch}x{seq}")
        c = gpucg.torch.counters()
        compiles = compiles or c
        assert c == compiles, f"a new size compiled again: {c} after {compiles}"
    assert c["dynamo_recompiles"] == 0 and c["gpucg_builds"] == len(targets), c
    text = gpucg.torch.explain()
    assert "run by torch" not in text, text
    for t in targets:
        assert f"on {t}:" in text, text


@pytest.mark.parametrize("inductor", ["missing", pytest.param("gcc", marks=pytest.mark.exhaustive)])
def test_bench_models_torch_prints_the_back_ends_side_by_side(capsys, monkeypatch, inductor):
    """``gpucg bench models --torch`` on one tiny model: eager, inductor (or why not: in the
    default tier as on a machine without a C++ compiler; gcc's with -m exhaustive), gpucg on
    numpy (and opencl with -m exhaustive), equal outputs, ratios, CUDA rows not measured."""
    import torch._inductor.config as inductor_config

    from gpucg.benchmarks.lowp import NOT_MEASURED, gpu_present
    from gpucg.cli import main

    if inductor == "missing":
        monkeypatch.setattr(inductor_config.cpp, "cxx", ("gpucg-test-no-such-c++",))
    targets = ("numpy",) if inductor == "missing" else ("numpy", "opencl")
    code = main(["bench", "models", "--torch", "--models", "resnet18", "--size", "tiny",
                 "--layers", "1", "--repeat", "1", "--targets", ",".join(targets)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "resnet18 (the tests' tiny config, 1 blocks a stage) (3x3x32x32)" in out, out
    assert re.search(r"eager torch +[\d.]+ ms CPU", out), out
    if inductor == "missing":
        assert "torch.compile inductor not measured: inductor needs a C++ compiler on the CPU " \
               "(No working C++ compiler found in torch._inductor.config.cpp.cxx: " \
               "('gpucg-test-no-such-c++',))" in out, out
    else:
        assert re.search(r"torch.compile inductor +[\d.]+ ms CPU +[\d.]+x eager  rel err "
                         r"\S+ \(equal\)", out), out
    for t in targets:
        assert re.search(rf"backend=gpucg {t} +[\d.]+ ms CPU +[\d.]+x eager  rel err \S+ "
                         r"\(equal\); first call [\d.]+ s; \d+ gpucg operators, 0 node\(s\) "
                         "run by torch", out), out
    if not gpu_present():
        assert out.count(NOT_MEASURED) == 3, out


class Sines(torch.nn.Module):
    """A layer, sin (no gpucg operator), a layer."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.sin(self.a(x)) * 2)


def test_a_node_gpucg_lacks_runs_in_torch_and_explain_says_so(target):
    torch.manual_seed(0)
    model = Sines().eval()
    fast = _compiled(model, target)
    for rows in (3, 5):
        x = torch.randn(rows, 8)
        with torch.no_grad():
            np.testing.assert_allclose(fast(x).numpy(), model(x).numpy(), rtol=2e-5, atol=1e-6)
    (graph,) = gpucg.torch.graphs()
    assert [label for label, _ in graph.fallbacks] == ["sin (aten.sin.default)"]
    text = gpucg.torch.explain()
    assert "run by torch (1 node(s), no gpucg operator):\n  sin (aten.sin.default): gpucg " \
           "has no operator for aten.sin.default" in text
    assert "gpucg.ops.dense()" in text and "gpucg.ops.fused(expr='multiply(x0, 2)')" in text


class Block(torch.nn.Module):
    """Pre-norm transformer layer: causal attention (4 heads) and a GELU MLP, residuals."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(d, dim=-1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TwoLayers(torch.nn.Module):
    def __init__(self, vocab=50, d=32):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.Sequential(Block(d), Block(d))
        self.ln, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab)

    def forward(self, ids):
        return self.head(self.ln(self.blocks(self.emb(ids))))


@pytest.mark.parametrize("target", ["numpy", pytest.param("opencl", marks=pytest.mark.exhaustive),
                                    pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_training_step_matches_eager_gradients(target):
    """numpy in the default tier; opencl with -m exhaustive, cuda with -m gpu."""
    backend_or_skip(target)
    torch.manual_seed(0)
    model = TwoLayers()
    eager = copy.deepcopy(model)
    fast = _compiled(model, target)
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, eager)]
    for step, (batch, seq) in enumerate(SIZES):
        ids, labels = torch.randint(0, 50, (batch, seq)), torch.randint(0, 50, (batch, seq))
        for m, net in ((model, fast), (eager, eager)):
            F.cross_entropy(net(ids).flatten(0, 1), labels.flatten()).backward()
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=2e-4,
                                       atol=2e-4 * float(q.grad.abs().max()),
                                       err_msg=f"step {step}: {name}")
        for opt in opts:
            opt.step()
            opt.zero_grad()
    c = gpucg.torch.counters()
    assert c["gpucg_graphs"] == 2 and c["gpucg_builds"] == 2, c  # forward and backward, once
    text = gpucg.torch.explain()
    assert "(forward)" in text and "(backward)" in text
    assert "gpucg's registered gradient of attention (gpucg.grad)" in text
    assert "embedding_dense_backward" in text  # the one node torch runs


def test_options_are_checked():
    with pytest.raises(gpucg.InputError, match=r"unknown keys \['targte'\]; allowed: target"):
        gpucg.torch.backend(None, [], options={"targte": "numpy"})
    with pytest.raises(gpucg.InputError, match=r"options\['dynamic'\]=.* must be True"):
        gpucg.torch.backend(None, [], options={"dynamic": "yes"})


def test_dynamic_false_compiles_a_size_at_a_time():
    torch.manual_seed(0)
    model = Sines().eval()
    fast = _compiled(model, "numpy", dynamic=False)
    for rows in (3, 5, 3):
        x = torch.randn(rows, 8)
        with torch.no_grad():
            np.testing.assert_allclose(fast(x).numpy(), model(x).numpy(), rtol=2e-5, atol=1e-6)
    assert gpucg.torch.counters()["gpucg_builds"] == 2
    assert "for the symbolic sizes none" in gpucg.torch.explain()


def test_a_weight_changed_in_place_builds_the_graph_again():
    """Inference graphs hold the weights as constants; a change behind them (its version
    counter moves) is seen, and the graph built again."""
    torch.manual_seed(0)
    model = Sines().eval()
    fast = _compiled(model, "numpy")
    x = torch.randn(3, 8)
    with torch.no_grad():
        fast(x)
        model.a.weight.mul_(2)
        np.testing.assert_allclose(fast(x).numpy(), model(x).numpy(), rtol=2e-5, atol=1e-6)
    assert gpucg.torch.counters()["gpucg_builds"] == 2


def test_the_backend_is_registered_by_name_and_by_entry_point():
    from importlib.metadata import EntryPoint
    from pathlib import Path

    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("gpucg") is gpucg.torch.backend
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    (line,) = re.findall(r'(?m)^gpucg = "gpucg\.torch:backend"$', text)
    section = text[:text.index(line)].rpartition("[")[2]
    assert section.startswith("project.entry-points.torch_dynamo_backends]")
    ep = EntryPoint("gpucg", "gpucg.torch:backend", "torch_dynamo_backends")
    assert ep.load() is gpucg.torch.backend


def test_dump_writes_the_kernels_of_every_call(tmp_path):
    torch.manual_seed(0)
    fast = _compiled(Sines().eval(), "opencl")
    with torch.no_grad():
        fast(torch.randn(3, 8))
    (graph,) = gpucg.torch.graphs()
    paths = graph.dump(tmp_path)
    index = (tmp_path / "index.txt").read_text()
    assert "run by the front end (host): sin (aten.sin.default)" in index
    dense = [p for p in paths if "_dense_" in p.name]
    assert dense and any(f.suffix == ".cl" for f in dense[0].iterdir())
