"""The built-in operator library: each family is ops/NAME.py and strategies/NAME.py.

Loading imports every module of gpucg/ops (which register their operators), then the
strategies module of the same name, and registers its ``STRATEGIES`` table. Nothing is left to
remember: a family without a strategies module, a strategies module without a table, an
operator without a strategy for every target, or a table naming an operator of another family
is an OpError at ``import gpucg``.
"""

from __future__ import annotations

import importlib
import pkgutil

from . import ops
from .errors import OpError
from .op import get_op, list_ops, register_strategies

#: every operator needs a strategy for these keys: the GPU kernels and the host fallback
REQUIRED_KEYS = ("gpu", "cpu")

_LOADED: set[str] = set()


def families() -> list[str]:
    """The operator families: the public modules of gpucg/ops, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(ops.__path__) if not m.name.startswith("_"))


def load() -> None:
    """Check every built-in family and register those not registered yet (importing gpucg
    does it; a second call only checks)."""
    for family in families():
        module = importlib.import_module(f"{ops.__name__}.{family}").__name__
        mine = {name for name in list_ops() if get_op(name).module == module}
        try:
            strategies = importlib.import_module(f"{__package__}.strategies.{family}")
        except ModuleNotFoundError as exc:
            raise OpError(f"operator family {family!r} (gpucg/ops/{family}.py) has no "
                          f"gpucg/strategies/{family}.py ({exc})") from None
        table = getattr(strategies, "STRATEGIES", None)
        if not isinstance(table, dict):
            raise OpError(f"gpucg/strategies/{family}.py must define STRATEGIES = "
                          "{operator: {target key: strategy function}}")
        foreign = sorted(set(table) - mine)
        if foreign:
            raise OpError(f"gpucg/strategies/{family}.py has strategies for {foreign}, which "
                          f"gpucg/ops/{family}.py does not register")
        for name in sorted(mine):
            missing = [k for k in REQUIRED_KEYS if k not in table.get(name, {})]
            if missing:
                raise OpError(f"operator {name!r} (gpucg/ops/{family}.py) has no strategy for "
                              f"target key(s) {missing} in gpucg/strategies/{family}.py")
        if family not in _LOADED:
            register_strategies(table)
            _LOADED.add(family)
