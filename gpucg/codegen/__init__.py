"""Code generation: dialects (the spellings that differ) and the Jinja2 environment."""

from .dialect import CUDA, OPENCL, Dialect, dialect_for
from .render import Code, KernelSpec, render

__all__ = ["CUDA", "OPENCL", "Code", "Dialect", "KernelSpec", "dialect_for", "render"]
