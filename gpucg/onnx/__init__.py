"""gpucg.onnx: run an ONNX model on gpucg's operators, compiled once for every batch and
sequence size.

    import gpucg.onnx
    model = gpucg.onnx.compile("model.onnx", target="opencl")
    logits = model(x=x)                          # or model.run(None, {"x": x}), as onnxruntime
    print(model.explain())                       # each node's operator, implementation, fusion

The model is read with the ``onnx`` package (``pip install gpucg[onnx]``); ``import gpucg``
works without it. See docs/onnx.md for what is fused and the operator coverage.
"""

from __future__ import annotations

from .graph import Graph, OnnxError, UnsupportedError, load, require_onnx
from .model import Model

__all__ = ["Model", "OnnxError", "UnsupportedError", "compile"]


def compile(model, target=None, *, dims=None) -> Model:  # noqa: A001
    """Compile an ONNX model for gpucg.

    Args:
        model: a path to a .onnx file, its bytes, or an onnx.ModelProto.
        target: "numpy", "opencl", "cuda" (with options), a Target, or None for the default.
        dims: optional {dim_param: int}: sizes to fix instead of keeping them symbolic
            (a model compiled for one batch size, say).

    Returns:
        A :class:`Model`. ONNX dim_params stay gpucg vars: one compiled model serves every
        size they take (``model.compiles`` counts the operators compiled; it never grows).

    Raises:
        OnnxError: onnx is not installed, the model cannot be read, or a shape cannot be
            followed. UnsupportedError (an OnnxError) lists every node without a gpucg
            operator, with its op type and domain, before anything runs.
    """
    from ..graph.fuse import fuse
    from .lower import Lowering

    require_onnx()
    g = Graph(load(model), dims or {})
    return Model(g, fuse(g, Lowering(g).run()), target)
