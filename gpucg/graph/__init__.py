"""gpucg's graph layer: what the front ends (gpucg.onnx, gpucg.torch) lower a model into, and
what they share from there on.

- :mod:`~gpucg.graph.ir`: the graph's values (constants, size vectors, size-dependent values,
  tensors with gpucg TensorTypes over symbolic sizes) and :class:`~gpucg.graph.ir.Call`, one
  gpucg operator call with its attributes;
- :mod:`~gpucg.graph.build`: the :class:`~gpucg.graph.build.Builder` a front end's node
  handlers emit calls with;
- :mod:`~gpucg.graph.sizes`: size folding (gpucg's operators on SymPy sizes);
  :mod:`~gpucg.graph.host`: size-dependent values, made once per binding of the sizes;
- :mod:`~gpucg.graph.fuse` (with :mod:`~gpucg.graph.attention`): batch-norm folding, dense and
  conv2d epilogues, scaled dot-product attention, elementwise chains;
- :mod:`~gpucg.graph.program`: the calls compiled for a target and run;
  :mod:`~gpucg.graph.dump`: their kernels and dispatchers written out.

Neither front end imports the other; both import this layer (tests/test_house.py checks it).
"""

from .ir import Call, Graph, GraphError, HostNode

__all__ = ["Call", "Graph", "GraphError", "HostNode"]
