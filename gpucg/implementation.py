"""What an implementation is: a declaration (kernels and the function that launches them, or
host code), and its offer for one call (plevel, condition, config space, fixed parameters).

An implementation is declared once, at import, by :func:`kernel_impl` or :func:`host_impl`.
The declaration is checked then: the launch function takes one parameter per kernel, named by
its key, and every template exists; a mistake fails when the module defining it is imported,
not when a user calls the operator.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Callable, Mapping

import sympy

from .space import Config, ConfigSpace
from .condition import SpecializedCondition
from .errors import StrategyError

@dataclass(frozen=True, init=False)
class Kernel:
    """One kernel of an implementation.

    Its template parameters are the implementation's fixed parameters, then the config's
    knobs, then ``fixed``, then ``derive(those so far)``: later ones win (a kernel may run
    with its own work-group size, say, where the implementation's knob sets the others').

    Attributes:
        template: the template path under gpucg/templates ("scan/scan_rows.j2").
        fixed: fixed template parameters of this kernel.
        derive: ``template parameters -> dict`` of template parameters computed from the
            others (a scan of partial sums reads the output dtype as its input dtype, say).
        doc: what the kernel does, for the header of the dumped source (one line).
        spills: why ptxas may spill this kernel's registers to local memory, or a function
            of its template parameters giving that reason ("" where it must not spill). The
            resource check (tests/test_resources.py) fails on undeclared spills.
        low_occupancy: the same for an occupancy below 25% on sm_80/sm_90.
        dynamic_local: ``template parameters -> bytes`` of the kernel's dynamic local
            (shared) buffer (gpucg/codegen/dynamic_local.py), which every launch of it gets;
            None: it has none.
        smem_requests: ``template parameters -> requests``: one warp's shared-memory
            requests, evaluated from the kernel's own address definitions, for the bank-conflict
            check (gpucg.verify.banks.report); None: not modelled.
    """

    template: str
    fixed: Mapping = field(default_factory=dict)
    derive: Callable | None = None
    doc: str = ""
    spills: str | Callable = ""
    low_occupancy: str | Callable = ""
    dynamic_local: Callable | None = None
    smem_requests: Callable | None = None

    def __init__(self, template: str, fixed: Mapping | None = None, derive: Callable | None = None,
                 doc: str = "", spills: str | Callable = "", low_occupancy: str | Callable = "",
                 *, params: Mapping | None = None, dynamic_local: Callable | None = None,
                 smem_requests: Callable | None = None):
        if params is not None:
            fixed = _deprecated_params("Kernel", fixed, params)
        for name, value in (("template", template), ("fixed", MappingProxyType(dict(fixed or {}))),
                            ("derive", derive), ("doc", doc), ("spills", spills),
                            ("low_occupancy", low_occupancy), ("dynamic_local", dynamic_local),
                            ("smem_requests", smem_requests)):
            object.__setattr__(self, name, value)

    @property
    def params(self) -> Mapping:
        """Deprecated name of :attr:`fixed`."""
        warnings.warn("Kernel.params is deprecated; use Kernel.fixed", DeprecationWarning,
                      stacklevel=2)
        return self.fixed

    def expected(self, template_params: Mapping) -> tuple[str, str]:
        """(why it may spill, why its occupancy may be low) for these template parameters;
        "" for what is not declared."""
        return tuple(v(template_params) if callable(v) else v  # type: ignore[return-value]
                     for v in (self.spills, self.low_occupancy))


def _deprecated_params(where: str, fixed, params):
    """The fixed parameters given under their old keyword ``params`` (a DeprecationWarning)."""
    if fixed:
        raise StrategyError(f"{where}: give fixed= only (params= is its deprecated name)")
    warnings.warn(f"{where}(params=...) is deprecated; use fixed=...", DeprecationWarning,
                  stacklevel=3)
    return params


def _launch_parameters(run: Callable) -> list[str]:
    params = list(inspect.signature(run).parameters.values())
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY,
                                            params[0].POSITIONAL_OR_KEYWORD):
        raise StrategyError(f"{run.__qualname__} must take the run context as its first parameter")
    bad = [p.name for p in params[1:] if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if bad:
        raise StrategyError(f"{run.__qualname__}: name each kernel it launches as a parameter, "
                            f"not *{bad[0]}")
    return [p.name for p in params[1:]]


def _check_templates(name: str, kernels: Mapping) -> None:
    from .codegen import template_exists

    for key, k in kernels.items():
        if not template_exists(k.template):
            raise StrategyError(f"{name}: kernel {key!r} names template {k.template!r}, which "
                                "does not exist under gpucg/templates")


@dataclass(frozen=True)
class ImplDecl:
    """How an implementation computes, declared once: its name, run function and kernels.

    Made by :func:`kernel_impl` or :func:`host_impl`; offered per call by :meth:`Strategy.add`.
    """

    name: str
    run: Callable
    kernels: Mapping = field(default_factory=dict)
    strided: bool = False
    views: bool = False
    #: where its results differ from the operator's reference by construction (see
    #: :func:`with_numerics`); "" where they do not
    numerics: str = ""

    def __post_init__(self):
        if not self.name.isidentifier():
            raise StrategyError(f"implementation name {self.name!r} must be an identifier")
        object.__setattr__(self, "kernels", MappingProxyType(dict(self.kernels)))
        for key, k in self.kernels.items():
            if not key.isidentifier() or not isinstance(k, Kernel):
                raise StrategyError(f"{self.name}: kernel {key!r} must be an identifier mapped "
                                    f"to a gpucg.strategy.Kernel, got {k!r}")
        launched = _launch_parameters(self.run)
        if self.kernels and sorted(launched) != sorted(self.kernels):
            raise StrategyError(
                f"{self.name}: {self.run.__qualname__} launches {sorted(launched)} but the "
                f"declared kernels are {sorted(self.kernels)}; they must be the same names")
        if not self.kernels and launched:
            raise StrategyError(f"{self.name}: host function {self.run.__qualname__} takes "
                                f"kernels {launched} but none are declared")


def kernel_impl(name: str, run: Callable, **kernels: Kernel) -> ImplDecl:
    """Declare a kernel implementation: ``run(ctx, <one parameter per kernel key>)`` launches.

    Example:
        >>> ROWS = kernel_impl("scan_rows", _run, scan=Kernel("scan/scan_rows.j2"))
        >>> def _run(ctx, scan):  # every argument by its name in the template
        ...     scan(x=ctx.inputs[0], y=ctx.outputs[0], n=ctx.size(n), grid=..., block=...)
    """
    if not kernels:
        raise StrategyError(f"{name}: a kernel implementation needs at least one Kernel")
    decl = ImplDecl(name, run, kernels)
    _check_templates(name, decl.kernels)
    return decl


def host_impl(name: str, run: Callable, strided: bool = False) -> ImplDecl:
    """Declare a host implementation: ``run(ctx)`` returns the output array(s) (NumPy).

    ``strided``: run reads its inputs through their strides (np.matmul does), so they come
    as they are (a transposed view stays a view) instead of made contiguous first."""
    return ImplDecl(name, run, strided=strided)


def reads_strides(decl: ImplDecl) -> ImplDecl:
    """``decl``, declared to read its inputs through their strides: its run function gets the
    arrays as they are (strided views, offsets) and passes their layout to its kernels."""
    return replace(decl, strided=True)


def with_numerics(decl: ImplDecl, text: str) -> ImplDecl:
    """``decl``, declared to differ from the operator's reference by construction where
    ``text`` says (Winograd's transforms turn an infinity into NaN, say): explain shows it
    beside the implementation wherever it may run."""
    return replace(decl, numerics=text)


def view_impl(name: str, run: Callable, strided: bool = False) -> ImplDecl:
    """Declare a view implementation: ``run(ctx)`` returns the output(s) as arrays of the
    target's backend that share memory with the inputs (NumPy views, pyopencl arrays over the
    same buffer, CuPy views): no kernel and no copy. ``strided`` as :func:`host_impl`'s."""
    return ImplDecl(name, run, strided=strided, views=True)


@dataclass(frozen=True, eq=False)
class Implementation:
    """One way to compute an operator, offered for one call signature.

    Attributes:
        name: "<impl>.<target kind>", e.g. "scan_rows.cuda".
        plevel: priority; the highest applicable one wins when no tuning record decides.
        run: ``run(ctx, **kernels)``: launches the kernels, or (host code, no kernels)
            returns the outputs.
        kernels: kernel key -> :class:`Kernel`.
        condition: a :class:`SpecializedCondition`, or None for "always applies".
        space: the config space of tuning knobs; its default is the default config.
        fixed: fixed template parameters every kernel of this call gets (no knob may have
            the same name).
        info: host-side facts the run function reads as ``ctx.info`` (sizes, geometry).
        options: compiler options.
        needs: None, or ``config -> None | (condition, knobs)``: what a config needs of the
            call's arguments beyond ``condition`` (a SymPy condition over shape symbols and
            the arguments' alignments, gpucg.shape.alignment: vector loads need aligned
            addresses), and the knob values of the config that needs nothing (the scalar
            path). Selection gives the dispatcher both: the config where the condition holds,
            the other where it does not.
        strided: the inputs come as they are, strided views included (else contiguous).
        views: run returns the outputs as views of the inputs, on the backend.
        numerics: where its results differ from the reference by construction (ImplDecl's).
    """

    name: str
    plevel: int
    run: Callable
    kernels: Mapping = field(default_factory=dict)
    condition: SpecializedCondition | None = None
    space: ConfigSpace = field(default_factory=ConfigSpace)
    fixed: Mapping = field(default_factory=dict)
    info: object = None
    options: tuple = ()
    needs: Callable | None = None
    strided: bool = False
    views: bool = False
    numerics: str = ""

    def __post_init__(self):
        if not isinstance(self.plevel, int) or isinstance(self.plevel, bool):
            raise StrategyError(f"{self.name}: plevel={self.plevel!r} must be an int")
        if self.condition is not None and not isinstance(self.condition, SpecializedCondition):
            object.__setattr__(self, "condition", SpecializedCondition(self.condition))
        object.__setattr__(self, "fixed", MappingProxyType(dict(self.fixed)))
        object.__setattr__(self, "kernels", MappingProxyType(dict(self.kernels)))
        ImplDecl(self.name.split(".")[0], self.run, self.kernels, self.strided,
                 self.views)  # the same checks
        clash = sorted(set(self.fixed) & set(self.space.knobs))
        if clash:
            name = clash[0]
            raise StrategyError(
                f"{self.name}: {name!r} is both a tuning knob (candidates "
                f"{self.space.knobs[name]}, default {self.space.default[name]!r}) and a fixed "
                f"parameter ({name}={self.fixed[name]!r}); a name has one role: drop it from "
                "fixed= or from the space")

    @property
    def params(self) -> Mapping:
        """Deprecated name of :attr:`fixed`."""
        warnings.warn("Implementation.params is deprecated; use Implementation.fixed",
                      DeprecationWarning, stacklevel=2)
        return self.fixed

    @property
    def short_name(self) -> str:
        """The name without the target kind ("scan_rows")."""
        return self.name.rsplit(".", 1)[0]

    def template_params(self, key: str, config: Config) -> dict:
        """The template parameters of one kernel for a config."""
        k = self.kernels[key]
        out = {**self.fixed, **config, **k.fixed}
        if k.derive is not None:
            out.update(k.derive(out))
        return out

    def dynamic_local(self, key: str, config: Config) -> int:
        """Bytes of one kernel's dynamic local buffer for a config (0: none)."""
        fn = self.kernels[key].dynamic_local
        if fn is None:
            return 0
        nbytes = fn(self.template_params(key, config))
        if not isinstance(nbytes, int) or nbytes < 0:
            raise StrategyError(f"{self.name}: kernel {key!r}'s dynamic_local gave "
                                f"{nbytes!r}; it must give a number of bytes (an int >= 0)")
        return nbytes

    def describe_condition(self) -> str:
        """The condition as the reports print it, with its verdict when the shapes decide it."""
        if self.condition is None:
            return "always"
        if self.condition.expr is sympy.true:
            return "always (for these shapes)"
        if self.condition.expr is sympy.false:
            return "never (for these shapes)"
        decided = self.condition.decide()
        text = str(self.condition.expr)
        return text + (" (true here)" if decided is True else " (false here)" if decided is False else "")


@dataclass(frozen=True)
class Excluded:
    """An implementation that cannot run this call at all, and why ("needs a 3x3 kernel")."""

    name: str
    plevel: int
    reason: str

    def describe_condition(self) -> str:
        return f"never: {self.reason}"
