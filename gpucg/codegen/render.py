"""The Jinja2 environment and the one place where kernel source is rendered.

Templates fold constants while rendering: ``{{ mul("oh", SH) }}`` is ``oh`` when SH is 1,
``add("x", 0)`` is ``x``, and products or sums of numbers are computed, so dumped kernels read
as a person would write them for these sizes.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import jinja2

from .. import counters as stats
from ..errors import InputError
from ..shape import DTYPES
from . import literals
from .dialect import Dialect
from .smem import swizzle

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Code(str):
    """A piece of C written by gpucg itself (never by a user); passes validation as is."""


@dataclass(frozen=True)
class KernelSpec:
    """One kernel of an implementation: its template, entry name and parameters.

    Parameters are validated before rendering: bools, ints, floats, whitelisted dtype names,
    identifiers, and :class:`Code` only.
    """

    template: str
    entry: str
    template_params: tuple = ()
    #: bytes of its dynamic local buffer, which each launch gets (gpucg/codegen/dynamic_local.py)
    dynamic_local: int = 0

    @staticmethod
    def make(template: str, entry: str, dynamic_local: int = 0,
             **template_params) -> "KernelSpec":
        if not _IDENT.fullmatch(entry):
            raise InputError(f"kernel entry name {entry!r} must be a C identifier")
        for k, v in template_params.items():
            _validate_param(k, v)
        return KernelSpec(template, entry, tuple(sorted(template_params.items())), dynamic_local)


def _validate_param(name: str, value) -> None:
    if isinstance(value, (bool, int, float, Code)):
        return
    if isinstance(value, str) and (value in DTYPES or _IDENT.fullmatch(value)):
        return
    if isinstance(value, tuple):
        for v in value:
            _validate_param(name, v)
        return
    raise InputError(f"template parameter {name}={value!r} is not a safe value for kernel source")


# -- constant folding -------------------------------------------------------------------------

def _is_num(term) -> bool:
    return isinstance(term, int) and not isinstance(term, bool)


def _top_level_ops(term: str) -> set:
    """The operator characters of ``term`` outside parentheses and brackets (a leading unary
    minus is not one)."""
    ops, depth = set(), 0
    for i, ch in enumerate(term):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and ch in "+-*/%?:<>=&|^!~" and not (ch == "-" and i == 0):
            ops.add(ch)
    return ops


def _operand(term, allowed: str) -> str:
    """``term`` as an operand of an operator: parenthesized unless its own top-level
    operators are all in ``allowed`` (a product inside a product needs none)."""
    term = str(term).strip()
    return term if _top_level_ops(term) <= set(allowed) else f"({term})"


def _split_top(term: str, seps: str) -> list:
    """``term`` cut at its top-level characters in ``seps``: [(sep before, piece), ...]; the
    first piece has sep ''."""
    out, depth, start, sep = [], 0, 0, ""
    for i, ch in enumerate(term):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and ch in seps and i > 0:
            out.append((sep, term[start:i].strip()))
            sep, start = ch, i + 1
    out.append((sep, term[start:].strip()))
    return out


def _int_literal(text: str):
    return int(text) if re.fullmatch(r"-?\d+", text) else None


def mul(*terms) -> str:
    """The product of terms (C expressions or ints): ints are multiplied, 1 dropped, 0 wins.
    A term that is itself a product contributes its number factors to the one number
    (``mul("(a + b) * 3", 3)`` is ``(a + b) * 9``), which stands where the first number did
    (``mul("n * 16", "H")`` is ``n * 16 * H``)."""
    const, parts, at = 1, [], None
    for t in terms:
        factors = [t] if _is_num(t) else \
            [str(t).strip()] if _top_level_ops(str(t).strip()) - {"*"} else \
            [f for _, f in _split_top(str(t).strip(), "*")]
        for f in factors:
            v = f if _is_num(f) else _int_literal(f)
            if v is None:
                parts.append(_operand(f, "*"))
            else:
                const *= v
                at = len(parts) if at is None else at
    if const == 0:
        return "0"
    if const != 1 and len(parts) == 1:
        spread = _spread(parts[0], const)
        if spread:
            return spread
    if const != 1 or not parts:
        parts.insert(len(parts) if at is None else at, str(const))
    return " * ".join(parts)


def _spread(term: str, const: int):
    """``(A + c) * const`` as ``A * const + c * const`` when A is a product with a number (so
    the numbers merge: ``((x * 3 + 1) * 3`` is ``x * 9 + 3``); else None."""
    if not (term.startswith("(") and term.endswith(")")):
        return None
    inner = term[1:-1]
    if _operand(inner, "") != term or inner.startswith("-"):
        return None  # not one parenthesized expression
    pieces = _split_top(inner, "+-")
    if len(pieces) != 2 or _int_literal(pieces[1][1]) is None:
        return None
    head = pieces[0][1]
    if _top_level_ops(head) - {"*"} or not any(_int_literal(f) is not None
                                                for _, f in _split_top(head, "*")):
        return None
    c = _int_literal(pieces[1][1]) * (-1 if pieces[1][0] == "-" else 1)
    return add(mul(head, const), c * const)


def add(*terms) -> str:
    """The sum of terms (C expressions or ints): ints are added, 0 dropped. A term that is
    itself a sum contributes its numbers to the one number (``add("w0 + 1", 1)`` is
    ``w0 + 2``)."""
    const, parts = 0, []
    for t in terms:
        if _is_num(t):
            const += t
            continue
        t = str(t).strip()
        if t in ("", "0"):
            continue
        pieces = _split_top(t, "+-")
        whole = not all(p and p[-1] not in "+-*/%" for _, p in pieces)  # a unary minus inside
        if _top_level_ops(t) - set("+-*/%") or t.startswith("-") or whole:
            parts.append(("+", _operand(t, "+-*/%")))
            continue
        for sign, piece in pieces:
            v = _int_literal(piece)
            if v is None:
                parts.append((sign or "+", piece))
            else:
                const += -v if sign == "-" else v
    if not parts:
        return str(const)
    text = parts[0][1] if parts[0][0] == "+" else f"-{parts[0][1]}"
    for sign, piece in parts[1:]:
        text += f" {sign} {piece}"
    if const > 0:
        text += f" + {const}"
    elif const < 0:
        text += f" - {-const}"
    return text


def div(a, b) -> str:
    """``a / b`` (integer division) with b == 1 folded away."""
    if _is_num(b) and b == 1:
        return str(a)
    if _is_num(a) and _is_num(b):
        return str(a // b)
    return f"{_operand(a, '*/%')} / {_operand(b, '')}"


def mod(a, b) -> str:
    """``a % b`` with b == 1 folded to 0."""
    if _is_num(b) and b == 1:
        return "0"
    if _is_num(a) and _is_num(b):
        return str(a % b)
    return f"{_operand(a, '*/%')} % {_operand(b, '')}"


@jinja2.pass_context
def as_int(ctx, expr) -> str:
    """``expr`` (of the index type) as an int: a cast only with 64-bit indexing."""
    return f"(int){_operand(expr, '')}" if ctx["wide"] else str(expr)


@jinja2.pass_context
def as_idx(ctx, expr) -> str:
    """``expr`` (an int) as the index type: a cast only with 64-bit indexing, where a
    product with it must not overflow 32 bits."""
    return f"({ctx['idx']}){_operand(expr, '')}" if ctx["wide"] else str(expr)


def guard(conds, body) -> str:
    """``body`` (statements) under ``if (conds...)``: no ``if`` when there is no condition,
    one line for one statement, else braces."""
    body = str(body).strip("\n")
    conds = [str(c) for c in conds if c is not True]
    if not conds:
        return body
    test = " && ".join(conds)
    if "\n" not in body:
        return f"if ({test}) {body.strip()}"
    return f"if ({test}) {{\n{block(body, 4)}\n}}"


def block(text, width: int = 0) -> str:
    """Statements from a macro, placed in a template on a line of their own: the macro's
    last newline dropped and every non-blank line indented by ``width`` more spaces."""
    pad = " " * width
    return "\n".join(pad + ln if ln.strip() else "" for ln in str(text).strip("\n").split("\n"))


@jinja2.pass_context
def _literal(ctx, value, dtype) -> str:
    return literals.literal(value, dtype, ctx["d"])


@jinja2.pass_context
def _inf(ctx, dtype) -> str:
    return literals.inf_of(dtype, ctx["d"])


@jinja2.pass_context
def _nan(ctx, dtype) -> str:
    return literals.nan_of(dtype, ctx["d"])


@jinja2.pass_context
def _lowest(ctx, dtype) -> str:
    return literals.lowest_of(dtype, ctx["d"])


@jinja2.pass_context
def _highest(ctx, dtype) -> str:
    return literals.highest_of(dtype, ctx["d"])


#: name -> fn(*args) of a kernel family's geometry (its tiles, plan, fragment addresses): the
#: one definition its template (``geometry(name, ...)``) and its strategy both call
_GEOMETRIES: dict = {}


def register_geometry(name: str, fn) -> None:
    """Let templates call ``geometry(name, *args)``: ``fn(*args)``, the object a kernel
    family's strategy also builds (an implementation's shared memory and registers are sized
    from the same object the template renders)."""
    _GEOMETRIES[name] = fn


def _geometry(name: str, *args):
    try:
        fn = _GEOMETRIES[name]
    except KeyError:
        raise InputError(f"no kernel geometry {name!r} is registered; known: "
                         f"{', '.join(sorted(_GEOMETRIES))}") from None
    return fn(*args)


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpucg", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.globals.update(mul=mul, add=add, div=div, mod=mod, as_int=as_int, as_idx=as_idx,
                       guard=guard, literal=_literal, inf_of=_inf,
                       nan_of=_nan, lowest_of=_lowest, highest_of=_highest,
                       swizzle=swizzle)
    env.filters["block"] = block
    from .gemm_core import gemm_core
    from .ix import Ix
    from .tile_layout import simt_tile

    from .hopper_layouts import swizzle_address
    from .mma_atom import atom, permuted_row, scores_as_a
    from .wgmma_core import wgmma_gemm

    env.globals.update(simt_tile=simt_tile, gemm_core=gemm_core, Ix=Ix, mma_atom=atom,
                       scores_as_a=scores_as_a, permuted_row=permuted_row,
                       geometry=_geometry, wgmma_core=wgmma_gemm,
                       swizzle_address=swizzle_address)
    return env


def template_exists(name: str) -> bool:
    """True if gpucg/templates holds the template ``name`` (found, not compiled: compiling
    is left to the first render, so that ``import gpucg`` stays quick)."""
    env = environment()
    try:
        env.loader.get_source(env, name)
    except jinja2.TemplateNotFound:
        return False
    return True


def comment(text: str) -> str:
    """``text`` as a C block comment, one ``*`` line per line."""
    lines = [ln.rstrip() for ln in text.strip("\n").splitlines()]
    if len(lines) == 1:
        return f"/* {lines[0]} */\n"
    return "/*\n" + "".join(f" * {ln}".rstrip() + "\n" for ln in lines) + " */\n"


def _tidy(source: str) -> str:
    """Blank-line runs to one, trailing spaces gone, one newline at the end."""
    source = re.sub(r"[ \t]+\n", "\n", source)
    source = re.sub(r"\n{3,}", "\n\n", source)
    return source.strip() + "\n"


@functools.lru_cache(maxsize=4096)
def render(spec: KernelSpec, dialect: Dialect, wide: bool = False, header: str = "") -> str:
    """Render one kernel for a dialect; ``wide`` selects 64-bit indexing.

    ``header`` (plain text) becomes the C comment at the top of the source.
    """
    stats.bump("renders")
    template = environment().get_template(spec.template)
    params = dict(spec.template_params)
    dtypes = [v for v in params.values() if isinstance(v, str) and v in DTYPES]
    source = template.render(
        d=dialect,
        T=dialect.type,
        idx=dialect.index_type(wide),
        wide=wide,
        entry=spec.entry,
        preamble=dialect.preamble(dtypes),
        gptr=dialect.global_ptr + " " if dialect.global_ptr else "",
        **params,
    )
    return _tidy((comment(header) + "\n" if header else "") + source)
