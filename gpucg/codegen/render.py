"""The Jinja2 environment and the one place where kernel source is rendered."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import jinja2

from ..errors import InputError
from ..shape import DTYPES
from .dialect import Dialect

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
    params: tuple = ()

    @staticmethod
    def make(template: str, entry: str, **params) -> "KernelSpec":
        if not _IDENT.fullmatch(entry):
            raise InputError(f"kernel entry name {entry!r} must be a C identifier")
        for k, v in params.items():
            _validate_param(k, v)
        return KernelSpec(template, entry, tuple(sorted(params.items())))


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
    return env


@functools.lru_cache(maxsize=4096)
def render(spec: KernelSpec, dialect: Dialect, wide: bool = False, header: str = "") -> str:
    """Render one kernel for a dialect; ``wide`` selects 64-bit indexing."""
    from ..runtime import stats

    stats.bump("renders")
    template = environment().get_template(spec.template)
    params = dict(spec.params)
    dtypes = [v for v in params.values() if isinstance(v, str) and v in DTYPES]
    source = template.render(
        d=dialect,
        T=dialect.type,
        idx=dialect.index_type(wide),
        wide=wide,
        entry=spec.entry,
        preamble=dialect.preamble(dtypes),
        **params,
    )
    source = re.sub(r"\n{3,}", "\n\n", source).strip() + "\n"
    return (header + source) if header else source
