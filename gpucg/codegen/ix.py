"""Index expressions that are numbers or C: one definition of a layout, evaluated two ways.

A fragment map or a swizzle is written once as a Python function of its indices (``lambda
lane, i: (lane >> 2) + 8 * ((i >> 1) & 1)``). Called with ints it gives the number (the bank
model, the OpenCL emulation's tables, the tests against the PTX ISA); called with :class:`Ix`
values (C names such as ``Ix("lane")``) it gives the C expression the kernel computes, with
the constants folded (``x + 0`` is ``x``, ``8 * 0`` is ``0``, ``(x >> 0)`` is ``x``).

Only non-negative integers are meant: C's and Python's ``>>``, ``//`` and ``%`` agree there.
"""

from __future__ import annotations

import re

_ATOM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\[\]]*\])*|\d+|\([^()]*\)")

#: C's precedence of the operators used (higher binds tighter), to parenthesize only as needed
_PREC = {"*": 5, "/": 5, "%": 5, "+": 4, "-": 4, "<<": 3, ">>": 3, "&": 2, "^": 1, "|": 0}


class Ix:
    """A C integer expression (of type int) under construction."""

    __slots__ = ("text", "prec", "plus")

    def __init__(self, text: str, prec: int | None = None, plus=None):
        self.text = str(text)
        #: (base, n) where this is base + n with n an int (constants fold into n)
        self.plus = plus
        if prec is None:  # a name, an indexed name or a number is atomic; anything else is
            # parenthesized wherever it is an operand
            prec = 9 if _ATOM.fullmatch(self.text) else -1
        self.prec = prec

    def __str__(self) -> str:
        # parenthesized when compound: a template may write it beside any operator
        return self.text if self.prec == 9 else f"({self.text})"

    def __repr__(self) -> str:
        return f"Ix({self.text!r})"

    def _wrap(self, prec: int, right: bool = False) -> str:
        # parentheses around any compound operand of another operator (C's precedence of
        # shifts and bitwise operators surprises readers), and around a right operand of the
        # same one (left-associative)
        if self.prec == 9 or (self.prec == prec and not right and prec >= 0):
            return self.text
        return f"({self.text})"

    # arithmetic with folding; ints on either side
    def __add__(self, o):
        return ix_binop(self, "+", o)

    def __radd__(self, o):
        return ix_binop(o, "+", self)

    def __mul__(self, o):
        return ix_binop(self, "*", o)

    def __rmul__(self, o):
        return ix_binop(o, "*", self)

    def __floordiv__(self, o):
        return ix_binop(self, "/", o)

    def __mod__(self, o):
        return ix_binop(self, "%", o)

    def __rshift__(self, o):
        return ix_binop(self, ">>", o)

    def __lshift__(self, o):
        return ix_binop(self, "<<", o)

    def __and__(self, o):
        return ix_binop(self, "&", o)

    def __rand__(self, o):
        return ix_binop(o, "&", self)

    def __xor__(self, o):
        return ix_binop(self, "^", o)

    def __rxor__(self, o):
        return ix_binop(o, "^", self)

    def __or__(self, o):
        return ix_binop(self, "|", o)

    def __ror__(self, o):
        return ix_binop(o, "|", self)


def _num(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


_PY = {"+": lambda a, b: a + b, "*": lambda a, b: a * b, "/": lambda a, b: a // b,
       "%": lambda a, b: a % b, ">>": lambda a, b: a >> b, "<<": lambda a, b: a << b,
       "&": lambda a, b: a & b, "^": lambda a, b: a ^ b, "|": lambda a, b: a | b}


def ix_binop(a, op: str, b):
    """``a op b`` folded: two ints give an int; identities (x + 0, x * 1, x >> 0, x ^ 0,
    x | 0, x / 1) give x; x * 0 and x & 0 give 0; otherwise an :class:`Ix`."""
    if _num(a) and _num(b):
        return _PY[op](a, b)
    if op == "+" and _num(a):
        a, b = b, a
    if op == "+" and _num(b) and isinstance(a, Ix) and a.plus is not None:
        base, n = a.plus
        return ix_binop(base, "+", n + b)
    if _num(b):
        if (op in ("+", ">>", "<<", "^", "|") and b == 0) or (op in ("*", "/") and b == 1):
            return a
        if op in ("*", "&") and b == 0:
            return 0
        if op == "%" and b == 1:
            return 0
    if _num(a):
        if op in ("+", "^", "|") and a == 0 or op == "*" and a == 1:
            return b
        if op in ("*", "&", "<<", ">>", "/", "%") and a == 0:
            return 0
    prec = _PREC[op]
    left = a._wrap(prec) if isinstance(a, Ix) else str(a)
    right = b._wrap(prec, right=True) if isinstance(b, Ix) else str(b)
    plus = (a, b) if op == "+" and _num(b) else None
    if plus and b < 0:
        return Ix(f"{left} - {-b}", prec, plus)
    return Ix(f"{left} {op} {right}", prec, plus)


def c_expr(value) -> str:
    """An int or an :class:`Ix` as C text."""
    return str(value)


def names(*texts: str):
    """:class:`Ix` for each C name (``lane, i = names("lane", "i")``)."""
    return tuple(Ix(t) for t in texts)
