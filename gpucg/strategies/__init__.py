"""Strategies: for each operator, its implementations on every target."""

from . import generic, scan, topk  # noqa: F401

__all__ = ["generic", "scan", "topk"]
