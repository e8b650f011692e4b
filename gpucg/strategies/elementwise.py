"""Strategies of the small elementwise family: the shared schedules of gpucg.strategies.generic."""

from __future__ import annotations

from .generic import schedule_strategies

STRATEGIES = {"relu": schedule_strategies("relu", "injective"),
              "add": schedule_strategies("add", "broadcast")}
