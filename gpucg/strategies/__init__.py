"""Strategies: for each operator family in gpucg/ops, its implementations on every target.

Each module defines ``STRATEGIES = {operator: {target key: strategy function}}``; gpucg.builtin
registers them. ``generic`` holds the shared schedules of simple operators.
"""
