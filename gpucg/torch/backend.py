"""The torch.compile back end: dynamo's FX graph through AOTAutograd (functionalized aten IR,
the forward and backward graphs apart when training) into gpucg, one
:class:`~gpucg.torch.graph.CompiledGraph` per graph.

Decompositions: inference keeps torch's composite operators that gpucg has whole
(scaled dot-product attention, layer norm, softmax, GELU), and decomposes the backward operators
gpucg has no counterpart of (softmax's, layer norm's, batch norm's, pools') into aten operators
gpucg runs. The backward of attention and of the activations (GELU, SiLU, relu's threshold)
runs gpucg's registered gradients (gpucg.grad's).
"""

from __future__ import annotations

import torch

from ..errors import InputError, describe
from .graph import CompiledGraph

#: options={...} of torch.compile(backend="gpucg") and their defaults
OPTIONS = {"target": None, "dynamic": True}

#: every graph compiled since the last reset (gpucg.torch.graphs())
GRAPHS: list = []


def parse_options(options) -> dict:
    """``options`` (a dict or None) checked, defaults filled in."""
    if options is None:
        return dict(OPTIONS)
    if not isinstance(options, dict):
        raise InputError(f"options={describe(options)} must be a dict with keys "
                         f"{', '.join(OPTIONS)}")
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise InputError(f"options has unknown keys {unknown}; allowed: "
                         f"{', '.join(f'{k} (default {v!r})' for k, v in OPTIONS.items())}")
    out = dict(OPTIONS, **options)
    if not isinstance(out["dynamic"], bool):
        raise InputError(f"options['dynamic']={describe(out['dynamic'])} must be True (one "
                         "compile for every size dynamo leaves symbolic) or False (a compile "
                         "a size)")
    return out


def _decompositions(training: bool) -> dict:
    from torch._decomp import get_decompositions

    aten = torch.ops.aten
    ops = [aten._softmax_backward_data, aten._log_softmax_backward_data,
           aten.native_layer_norm_backward, aten.native_batch_norm_backward,
           aten.max_pool2d_with_indices_backward, aten.avg_pool2d_backward,
           aten.hardtanh_backward, aten.leaky_relu_backward, aten.mse_loss_backward]
    if training:
        ops += [aten._native_batch_norm_legit_functional]
    return get_decompositions(ops)


def _context():
    ctx = torch._guards.TracingContext.try_get()
    return getattr(ctx, "fw_metadata", None)


def _compiler(kind: str, opts: dict):
    def compile_graph(gm, example_inputs):
        meta = _context() if kind != "backward" else None
        static = list(getattr(meta, "static_input_indices", None) or [])
        if kind == "inference":
            frozen = static
        elif kind == "forward":
            info = getattr(meta, "input_info", None) or []
            frozen = [k for k in static if k < len(info) and not info[k].requires_grad]
        else:
            frozen = []
        from torch._functorch.aot_autograd import make_boxed_func

        graph = CompiledGraph(gm, kind, len(GRAPHS) + 1, opts["target"], opts["dynamic"],
                              frozen, static)
        GRAPHS.append(graph)
        return make_boxed_func(graph)  # AOTAutograd's calling convention: a list of args
    return compile_graph


def backend(gm, example_inputs, options=None):
    """torch.compile's back end "gpucg": ``torch.compile(model, backend="gpucg",
    options={"target": "opencl", "dynamic": True})``.

    Options:
        target: the gpucg target ("numpy", "opencl", "cuda", a Target; None: the default).
        dynamic: True (default): the sizes dynamo leaves symbolic stay symbolic, one gpucg
            compile serves them all; False: a compile for each new size.
    """
    from torch._dynamo.backends.common import aot_autograd

    opts = parse_options(options)
    training = torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)
    return aot_autograd(fw_compiler=_compiler("forward", opts),
                        bw_compiler=_compiler("backward", opts),
                        inference_compiler=_compiler("inference", opts),
                        decompositions=_decompositions(training))(gm, example_inputs)
