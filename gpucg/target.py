"""Targets: what to generate code for, its ordered keys, and which targets run here."""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import settings
from .arch import ARCHS, DEFAULT_ARCH, HOST, OPENCL_CPU, OPENCL_GPU, Capabilities, limits
from .errors import InputError, TargetError, TargetUnavailableError, describe


@dataclass(frozen=True)
class TargetKind:
    """A kind of target: its strategy keys in lookup order and the backend that runs it."""

    name: str
    keys: tuple[str, ...]
    backend: str
    attrs: tuple[str, ...] = ()
    #: "gpu" or "cpu"; "device" when the ``-device=`` option or the backend's device decides
    device_type: str = "gpu"


_KINDS: dict[str, TargetKind] = {}
_ALIASES = {"cpu": "numpy"}


def register_target_kind(name: str, keys, backend: str, attrs=(), override: bool = False,
                         device_type: str = "gpu"):
    """Register a new kind of target (from outside the package too).

    Args:
        name: the kind's name as written in target strings.
        keys: strategy keys in lookup order, most specific first.
        backend: the runtime backend that runs it ("numpy", "opencl", "cuda").
        attrs: the ``-name=value`` attributes the kind accepts.
        device_type: "gpu", "cpu", or "device": decided by the ``-device=`` option, else by the
            device the backend runs on.
    """
    if device_type not in ("gpu", "cpu", "device"):
        raise TargetError(f"device_type={describe(device_type)} must be 'gpu', 'cpu' or 'device'")
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise TargetError(f"target kind name={describe(name)} must match [a-z][a-z0-9_]*")
    if name in _KINDS and not override:
        raise TargetError(f"target kind {name!r} is already registered; pass override=True")
    _KINDS[name] = TargetKind(name, tuple(keys), backend, tuple(attrs), device_type)
    return _KINDS[name]


register_target_kind("cuda", ("cuda", "gpu"), "cuda", attrs=("arch",))
register_target_kind("opencl", ("opencl", "gpu"), "opencl", attrs=("device",), device_type="device")
register_target_kind("numpy", ("cpu",), "numpy", device_type="cpu")

_ATTR_CHECKS = {
    "arch": (re.compile(r"sm_\d{2,3}[a-z]?"), "sm_XY such as sm_80 or sm_90"),
    "device": (re.compile(r"cpu|gpu"), "cpu or gpu"),
}


class Target:
    """A target such as ``"cuda"``, ``"cuda -arch=sm_90"``, ``"opencl"`` or ``"numpy"``.

    Attributes:
        kind: the kind name ("cuda", "opencl", "numpy" or a registered one).
        attrs: the ``-name=value`` options.
        keys: strategy keys, most specific first (cuda: cuda, gpu).
    """

    __slots__ = ("kind", "attrs")

    def __init__(self, spec):
        if isinstance(spec, Target):
            self.kind, self.attrs = spec.kind, dict(spec.attrs)
            return
        if not isinstance(spec, str) or not spec.strip():
            raise TargetError(
                f"target={describe(spec)} must be a string such as "
                f"{', '.join(repr(k) for k in _KINDS)}"
            )
        words = spec.split()
        kind = _ALIASES.get(words[0], words[0])
        if kind not in _KINDS:
            known = sorted(set(_KINDS) | set(_ALIASES))
            raise TargetError(f"target={spec!r}: unknown kind {words[0]!r}; known: {', '.join(known)}")
        attrs = {}
        for word in words[1:]:
            m = re.fullmatch(r"-([a-z_]+)=(\S+)", word)
            if not m:
                raise TargetError(f"target={spec!r}: option {word!r} must look like -name=value")
            name, value = m.groups()
            if name not in _KINDS[kind].attrs:
                allowed = ", ".join(_KINDS[kind].attrs) or "none"
                raise TargetError(f"target={spec!r}: {kind} takes no option {name!r}; allowed: {allowed}")
            check = _ATTR_CHECKS.get(name)
            if check and not check[0].fullmatch(value):
                raise TargetError(f"target={spec!r}: -{name}={value!r} must be {check[1]}")
            attrs[name] = value
        self.kind, self.attrs = kind, attrs

    @property
    def keys(self) -> tuple[str, ...]:
        return _KINDS[self.kind].keys

    @property
    def backend(self) -> str:
        return _KINDS[self.kind].backend

    @property
    def device_type(self) -> str:
        """"gpu" or "cpu": the kind of device the kernels are chosen and tuned for.

        An explicit ``-device=`` wins; an OpenCL target without one takes the type of the device
        gpucg runs it on here, and "gpu" where none is usable (code generated for a GPU).
        """
        if "device" in self.attrs:
            return self.attrs["device"]
        kind = _KINDS[self.kind].device_type
        if kind != "device":
            return kind
        from .runtime import backend_status, get_backend

        return get_backend(self.backend).device_type if backend_status(self.backend)[0] else "gpu"

    @property
    def on_cpu(self) -> bool:
        """True when the kernels run on a CPU device (PoCL): strategies prefer other kernels."""
        return self.device_type == "cpu"

    @property
    def capabilities(self) -> Capabilities:
        """What the target's hardware can do and its limits (gpucg.arch.Capabilities): every
        capability test and shared-memory budget of the strategies reads it."""
        return capabilities(self)

    def with_attrs(self, **attrs) -> "Target":
        t = Target(self)
        t.attrs.update({k: v for k, v in attrs.items() if v is not None})
        return t

    def __str__(self) -> str:
        return " ".join([self.kind] + [f"-{k}={v}" for k, v in sorted(self.attrs.items())])

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Target) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


@dataclass(frozen=True)
class TargetStatus:
    """Whether a target can run here, on what device, and why not if not."""

    name: str
    usable: bool
    device: str
    reason: str


def targets() -> list[TargetStatus]:
    """Each built-in target and whether it is usable on this machine."""
    from .runtime import backend_status

    out = []
    for name in ("cuda", "opencl", "numpy"):
        ok, device, reason = backend_status(name)
        out.append(TargetStatus(name, ok, device, reason))
    return out


def usable_names() -> list[str]:
    return [t.name for t in targets() if t.usable]


def default_target() -> Target:
    """GPUCG_TARGET if set, else the first usable of cuda, opencl on a GPU, numpy."""
    from .runtime import backend_status, get_backend

    env = settings.target()
    if env:
        return Target(env)
    if backend_status("cuda")[0]:
        return Target("cuda")
    if backend_status("opencl")[0] and get_backend("opencl").device_type == "gpu":
        return Target("opencl")
    return Target("numpy")


def resolve(target) -> Target:
    """A Target from a string, a Target or None (the default)."""
    if target is None:
        return default_target()
    return Target(target)


def require_usable(target: Target) -> None:
    """Raise TargetUnavailableError (listing the usable targets) if target cannot run here."""
    from .runtime import backend_status

    ok, _, reason = backend_status(target.backend)
    if not ok:
        raise TargetUnavailableError(
            f"target {str(target)!r} is not usable here: {reason}; "
            f"usable targets: {', '.join(usable_names())}"
        )


def target_arch(target) -> str:
    """The CUDA arch of a target: its -arch, else the device's it runs on here, else
    DEFAULT_ARCH. A 9.0 device stays sm_90 (mma.sync), not sm_90a: the wgmma kernels are
    proved without a GPU only so far (tests/gpu/test_hopper_cuda.py runs them on one), so
    ``cuda -arch=sm_90a`` asks for them."""
    arch = target.attrs.get("arch")
    if arch:
        return arch
    from .runtime import backend_status, get_backend

    if backend_status("cuda")[0]:
        return getattr(get_backend("cuda"), "arch", DEFAULT_ARCH)
    return DEFAULT_ARCH


# -- capabilities --------------------------------------------------------------------------

#: a backend -> fn(target) -> Capabilities; a registered target kind's backend adds its own
_BY_BACKEND = {
    "cuda": lambda t: ARCHS.get(target_arch(t)) or limits(target_arch(t)),
    "opencl": lambda t: OPENCL_CPU if t.on_cpu else OPENCL_GPU,
    "numpy": lambda t: HOST,
}


def register_capabilities(backend: str, fn) -> None:
    """Have targets run by ``backend`` take their capabilities from ``fn(target)``."""
    _BY_BACKEND[backend] = fn


def capabilities(target) -> Capabilities:
    """The capability record of ``target`` (gpucg.Target: ``target.capabilities``)."""
    fn = _BY_BACKEND.get(target.backend)
    if fn is None:
        raise InputError(f"target {str(target)!r}: backend {target.backend!r} has no "
                         f"capability record; known: {', '.join(_BY_BACKEND)}")
    return fn(target)
