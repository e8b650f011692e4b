"""Strategies of the reductions: the shared reduce schedule of gpucg.strategies.generic."""

from __future__ import annotations

from .generic import schedule_strategies

STRATEGIES = {"sum": schedule_strategies("sum", "reduce")}
