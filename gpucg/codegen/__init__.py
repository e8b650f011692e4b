"""Code generation: dialects (the spellings that differ) and the Jinja2 environment."""

from .dialect import CUDA, OPENCL, Dialect, dialect_for
from .render import Code, KernelSpec, comment, register_geometry, render, template_exists

__all__ = ["CUDA", "OPENCL", "Code", "Dialect", "KernelSpec", "comment", "dialect_for",
           "register_geometry", "render", "template_exists"]
