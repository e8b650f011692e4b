"""Generates the run-time dispatcher: readable Python source that is what runs."""

from __future__ import annotations

import ast
import keyword
from typing import NamedTuple

import sympy

from .errors import InputError, SignatureError
from .shape import INT_MAX, alignment_index, pyexpr
from .strategy import Selection


# -- what the generated dispatcher calls (CompiledOp's namespace names them _bad_dim, _bad_input,
# _plan) ------------------------------------------------------------------------------------

def bad_dim(name, axis, actual, expected):
    raise SignatureError(f"{name}.shape[{axis}] is {actual}, but the compiled signature needs {expected}")


def bad_input(message):
    raise InputError(message)


class Plan(NamedTuple):
    """What the dispatcher decided for one call's arrays: the choice to run, the output
    shapes, 64-bit indexing, and whether NumPy inputs go to the device (and results back)."""

    index: int
    out_shapes: tuple
    wide: bool
    host: bool


def make_plan(index, inputs, out_shapes, wide, host) -> Plan:  # the dispatcher's last step
    return Plan(index, out_shapes, wide, host)


def _param_names(input_names, symbols) -> list[str]:
    taken = {s.name for s in symbols}
    out = []
    for name in input_names:
        while name in taken or keyword.iskeyword(name):
            name += "_"
        taken.add(name)
        out.append(name)
    return out


def _bare(src: str) -> str:
    """A Python expression as a person writes it: only the parentheses precedence needs
    ("((n >= 300) and (m <= 8))" -> "n >= 300 and m <= 8", "1 + ((-1 + h) // 2)" ->
    "1 + (-1 + h) // 2")."""
    return ast.unparse(ast.parse(src, mode="eval"))


_INVERSE = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq}


def _negated(src: str) -> str:
    """``not (src)`` as a person writes it: one comparison turned around ("m >= 300" ->
    "m < 300"), else ``not (...)``."""
    tree = ast.parse(src, mode="eval").body
    if isinstance(tree, ast.Compare) and len(tree.ops) == 1 and type(tree.ops[0]) in _INVERSE:
        tree.ops = [_INVERSE[type(tree.ops[0])]()]
        return ast.unparse(tree)
    return _bare(f"not ({src})")


def _tuple(items) -> str:
    items = list(items)
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def generate(sel: Selection, input_names, checks=(), wide: bool | None = None,
             derivation=None) -> str:
    """Python source of ``dispatch(*inputs)`` for a selection.

    ``checks`` are :class:`gpucg.op.Constraint` objects the sizes must satisfy; each becomes an
    ``if`` that raises InputError with its message filled in from the actual sizes. ``wide``
    forces 64-bit (True) or 32-bit (False) indexing; None decides it from the sizes.
    ``derivation``: the :class:`gpucg.derived.Derivation` whose types the selection is for
    (each derived size a symbol of its own, bound from its dimension, shown in comments).
    """
    from .condition import SpecializedCondition

    symbols = set()
    for t in sel.input_types:
        symbols |= t.symbols
    params = _param_names(input_names, symbols)
    derived = derivation.sizes if derivation is not None else {}
    shown = derivation.shown_types if derivation is not None else tuple
    ins = ", ".join(map(str, shown(sel.input_types)))
    outs = ", ".join(map(str, shown(sel.output_types)))
    lines = [
        f"# gpucg dispatcher: {sel.op} on {sel.target}",
        f"# attrs: {', '.join(f'{k}={v!r}' for k, v in sel.attrs.items()) or 'none'}",
        f"def dispatch({', '.join(params)}):",
        f'    """{ins} -> {outs}"""',
        f"    {_tuple(params)}, _host = _inputs({', '.join(params)})",
    ]
    bound: dict = {}
    for name, t in zip(params, sel.input_types):
        for axis, dim in enumerate(t.shape):
            actual = f"{name}.shape[{axis}]"
            if isinstance(dim, int):
                lines.append(f"    if {actual} != {dim}:")
                lines.append(f"        _bad_dim({name!r}, {axis}, {actual}, '{dim}')")
            elif dim.is_Symbol and dim not in bound:
                bound[dim] = actual
                size = derived.get(dim)
                lines.append(f"    {dim.name} = {actual}" + (f"  # {size.dim}" if size else ""))
                if size is not None and abs(size.a) != 1:  # a*u + b: u read back exactly
                    rest = f"{dim.name} - ({pyexpr(size.b)})" if size.b != 0 else dim.name
                    lines.append(f"    if {_bare(f'({rest}) % {size.a}')}:")
                    k = size.a * sympy.Symbol("k") + size.b
                    lines.append(f"        _bad_dim({name!r}, {axis}, {actual}, "
                                 f"'{size.dim}, {k} for an integer k')")
            elif dim.is_Symbol:
                said = derived[dim].dim if dim in derived else dim.name
                lines.append(f"    if {actual} != {dim.name}:")
                lines.append(f"        _bad_dim({name!r}, {axis}, {actual}, '{said} = %d' % {dim.name})")
    for name, t in zip(params, sel.input_types):
        for axis, dim in enumerate(t.shape):
            if not isinstance(dim, int) and not dim.is_Symbol:
                missing = [s for s in dim.free_symbols if s not in bound]
                if missing:
                    raise InputError(
                        f"symbol {missing[0]} appears only inside {dim}: each symbol must also be a "
                        "whole dimension of some input so the dispatcher can read its value")
                lines.append(f"    if {_bare(f'{name}.shape[{axis}] != {pyexpr(dim)}')}:")
                lines.append(f"        _bad_dim({name!r}, {axis}, {name}.shape[{axis}], "
                             f"{_bare(repr(f'{dim} = %d') + ' % ' + pyexpr(dim))})")
    aligns = sorted({alignment_index(s) for c in sel.choices if c.condition is not None
                     for s in c.condition.symbols} - {None})
    for i in aligns:  # the byte alignment of an argument's address (vector loads need it)
        lines.append(f"    _align{i} = _align({params[i]})")
    for c in checks:
        cond = _negated(SpecializedCondition(c.ok).to_python())
        lines.append(f"    if {cond}:")
        if c.values:
            values = ", ".join(_bare(pyexpr(v)) for v in c.values)
            lines.append(f"        _bad_input({c.message!r}.format({values}))")
        else:
            lines.append(f"        _bad_input({c.message.format()!r})")
    out_shapes = [_tuple(_bare(pyexpr(d)) if not isinstance(d, int) else str(d) for d in t.shape)
                  for t in sel.output_types]
    lines.append(f"    _outs = {_tuple(out_shapes)}")
    sizes = []
    for t in list(sel.input_types) + list(sel.output_types):
        n = sympy.sympify(t.numel)
        if not n.is_Integer:
            src = pyexpr(n)
            if src not in sizes:
                sizes.append(src)
    static_max = max([int(sympy.sympify(t.numel)) for t in list(sel.input_types)
                      + list(sel.output_types) if sympy.sympify(t.numel).is_Integer] or [0])
    sizes = [_bare(s) for s in sizes]
    if wide is not None:
        lines.append(f"    _wide = {wide}  # {'64' if wide else '32'}-bit indexing, as compiled")
    elif static_max > INT_MAX or not sizes:
        lines.append(f"    _wide = {static_max > INT_MAX}")
    elif len(sizes) == 1:
        lines.append(f"    _wide = {_bare(f'{sizes[0]} > {INT_MAX}')}")
    else:
        lines.append(f"    _wide = max({', '.join(sizes)}) > {INT_MAX}")
    args = _tuple(params)
    for i, choice in enumerate(sel.choices):
        impl = choice.impl
        if choice.note:  # a tuned branch: the record it comes from
            lines.append(f"    # tuned: {choice.note}")
        if choice.condition is not None:
            lines.append(f"    # {impl.name} (plevel {impl.plevel}, config {choice.config.short()})")
            lines.append(f"    if {_bare(choice.condition.to_python())}:")
            lines.append(f"        return _plan({i}, {args}, _outs, _wide, _host)")
        else:
            tag = "every other size" if choice.note else "the fallback" if i else "always"
            lines.append(f"    # {impl.name} (plevel {impl.plevel}, config {choice.config.short()}), {tag}")
            lines.append(f"    return _plan({i}, {args}, _outs, _wide, _host)")
    return "\n".join(lines) + "\n"
