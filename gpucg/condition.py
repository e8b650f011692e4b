"""Specialized conditions: boolean formulas over shape symbols, kept in CNF."""

from __future__ import annotations

import sympy
from sympy.logic.boolalg import BooleanAtom, BooleanFunction

from .errors import ConditionError
from .shape import is_shape_symbol, pyexpr


def _check_boolean(expr) -> None:
    if isinstance(expr, (BooleanAtom, sympy.core.relational.Relational)):
        return
    if isinstance(expr, BooleanFunction):
        for arg in expr.args:
            _check_boolean(arg)
        return
    raise ConditionError(
        f"condition part {expr} ({type(expr).__name__}) is not a comparison or a boolean "
        "combination (&, |, ~) of comparisons over shape symbols"
    )


class SpecializedCondition:
    """A condition under which an implementation may run, stored in conjunctive normal form.

    Args:
        expr: a SymPy boolean over symbols made by :func:`gpucg.var` (``m <= 1024``,
            ``(n >= 8) & Eq(k, 1)``...). Anything else in it is an error.
        allowed: if given, the symbols the condition may mention (those of the input shapes).
    """

    __slots__ = ("expr", "cnf")

    def __init__(self, expr, allowed=None):
        if isinstance(expr, SpecializedCondition):
            expr = expr.expr
        if isinstance(expr, bool):
            expr = sympy.true if expr else sympy.false
        try:
            expr = sympy.sympify(expr)
        except (sympy.SympifyError, TypeError) as exc:
            raise ConditionError(f"condition {expr!r} is not a SymPy expression: {exc}") from None
        _check_boolean(expr)
        bad = sorted(str(s) for s in expr.free_symbols if not is_shape_symbol(s))
        if bad:
            raise ConditionError(
                f"condition {expr} mentions {', '.join(bad)}, which are not shape symbols; "
                "only symbols made by gpucg.var (positive integers) are allowed"
            )
        if allowed is not None:
            extra = sorted(str(s) for s in expr.free_symbols - set(allowed))
            if extra:
                raise ConditionError(
                    f"condition {expr} mentions {', '.join(extra)}, which appear in no input "
                    f"shape; allowed: {', '.join(sorted(map(str, allowed))) or 'none'}"
                )
        self.expr = expr
        self.cnf = sympy.to_cnf(expr, simplify=False)

    @property
    def clauses(self) -> list[list]:
        """The CNF as a list of clauses, each a list of literals (ORed), clauses ANDed."""
        if self.cnf is sympy.true:
            return []
        conj = self.cnf.args if isinstance(self.cnf, sympy.And) else (self.cnf,)
        return [list(c.args) if isinstance(c, sympy.Or) else [c] for c in conj]

    @property
    def symbols(self) -> set:
        return set(self.expr.free_symbols)

    def decide(self, bindings: dict | None = None):
        """True or False when the shapes decide the condition, else None."""
        value = self.cnf.subs(bindings) if bindings else self.cnf
        if value is sympy.true or value is True:
            return True
        if value is sympy.false or value is False:
            return False
        return None

    def evaluate(self, bindings: dict) -> bool:
        """The condition's value for concrete sizes (every symbol bound)."""
        env = {s.name: int(v) for s, v in bindings.items()}
        return bool(eval(self.to_python(), {"__builtins__": {"max": max, "min": min}}, env))

    def to_python(self, names: dict | None = None) -> str:
        """Python source that evaluates the CNF, one parenthesized clause per conjunct."""
        clauses = self.clauses
        if not clauses:
            return "True"
        parts = []
        for clause in clauses:
            lits = [pyexpr(lit, names) for lit in clause]
            parts.append(lits[0] if len(lits) == 1 else "(" + " or ".join(lits) + ")")
        return " and ".join(parts)

    def __and__(self, other) -> "SpecializedCondition":
        other = other.expr if isinstance(other, SpecializedCondition) else other
        return SpecializedCondition(sympy.And(self.expr, other))

    def __eq__(self, other) -> bool:
        return isinstance(other, SpecializedCondition) and self.cnf == other.cnf

    def __hash__(self) -> int:
        return hash(self.cnf)

    def __str__(self) -> str:
        return str(self.cnf)

    def __repr__(self) -> str:
        return f"SpecializedCondition({self.cnf})"
