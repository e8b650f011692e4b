"""Strategies: for each operator, its implementations on every target."""

from . import conv2d, generic, scan, topk  # noqa: F401

__all__ = ["conv2d", "generic", "scan", "topk"]
