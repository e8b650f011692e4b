"""Warp shuffles, warp reductions and scans, and the block reduce and scan built on them.

A template writes ``{{ d.block_reduce("acc", "sum", "float", 256, "part") }}`` and never tests
the backend. CUDA spells the shuffles ``__shfl_*_sync`` with the full mask; OpenCL emulates
them for "warps" of :data:`WARP` consecutive work-items through the warp's local scratch
(``gpucg_ws``, from :meth:`~gpucg.codegen.warp.OpenCLWarp.setup` with :data:`SHFL_WORDS` words;
PoCL 3.1 and Oclgrind 21.10 have no sub-group functions), so that the twin runs the same
rounds, in the same order, with the same lanes' values. The emulation holds barriers: every
work-item of the work-group must execute every warp operation (work-group uniform control
flow), and so must CUDA's, as they name all 32 lanes in their mask.

The emulation, per CUDA intrinsic (PTX ISA "shfl.sync"; lane = work-item id % 32, width W a
power of two <= 32 splitting the warp into segments of W lanes; where the source is out of
range the caller keeps its own value; the offsets and masks are taken mod 32):

=====================================  ===========================================================
CUDA                                   OpenCL: ws[lane] = v; barrier; read ws[src]; barrier
=====================================  ===========================================================
``__shfl_xor_sync(~0, v, m, W)``       src = lane ^ m if it is below the caller's segment's end
``__shfl_up_sync(~0, v, d, W)``        src = lane - d if lane % W >= d, else lane
``__shfl_down_sync(~0, v, d, W)``      src = lane + d if lane % W + d < W, else lane
``__shfl_sync(~0, v, s, W)``           src = lane - lane % W + s % W
=====================================  ===========================================================

The warp reduce is the xor butterfly (offsets W/2, ..., 1: every lane ends with the result)
and the warp scan Hillis and Steele's inclusive scan with shfl_up (offsets 1, ..., W/2). Their
emulation does one round a barrier: round k writes half k % 2 of the scratch and reads it
after the barrier, so the next round's writes never meet this round's reads; one barrier
after the last round frees the scratch. A reduce may move two values a lane (a pair, folded
by a statement); :data:`SHFL_WORDS` holds two halves of two 8-byte values of 32 lanes.
"""

from __future__ import annotations

import re

from ..errors import DTypeError

#: lanes a warp (CUDA); the emulation's warps are this many consecutive work-items
WARP = 32
#: 32-bit words of local scratch a warp's emulated shuffles use: two halves (rounds) of two
#: values (a pair reduction) of 32 lanes, 8 bytes each
SHFL_WORDS = 8 * WARP
#: the value types a shuffle moves (each at most 8 bytes)
SHFL_TYPES = ("float", "double", "int", "uint", "unsigned", "unsigned int", "long", "ulong",
              "long long", "unsigned long long", "char", "signed char", "uchar", "unsigned char",
              "short", "ushort", "unsigned short")
#: types CUDA's shuffles do not take: moved as an int and cast back
_NARROW = ("char", "signed char", "uchar", "unsigned char", "short", "ushort", "unsigned short")
SHFL_MODES = ("xor", "up", "down", "idx")
#: named combines; any other combine is an expression in {a} and {b} (a: the earlier value)
COMBINES = {"sum": "{a} + {b}", "max": "({a} > {b} ? {a} : {b})", "min": "({a} < {b} ? {a} : {b})"}
_LVALUE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\[\]]+\]){0,3}$")


def _ctype(ctype: str) -> str:
    if ctype not in SHFL_TYPES:
        raise DTypeError(f"shuffle type {ctype!r} is not supported; allowed: {', '.join(SHFL_TYPES)}")
    return ctype


def _width(width) -> int:
    if not isinstance(width, int) or width < 1 or width > WARP or width & (width - 1):
        raise DTypeError(f"warp width {width!r}: a power of two from 1 to {WARP}")
    return width


def _lanes(lanes) -> int:
    if not isinstance(lanes, int) or lanes < 1 or lanes & (lanes - 1) or lanes > 1024:
        raise DTypeError(f"block lanes {lanes!r}: a power of two from 1 to 1024")
    return lanes


def _var(name: str, what: str = "variable") -> str:
    if not isinstance(name, str) or not _LVALUE.match(name):
        raise DTypeError(f"warp operation {what} {name!r}: a C name, optionally indexed")
    return name


def combine_fn(op: str):
    """``op`` (sum, max, min, or an expression in {a} and {b}) as a function of two C
    expressions."""
    expr = COMBINES.get(op, op)
    if not isinstance(expr, str) or "{a}" not in expr or "{b}" not in expr:
        raise DTypeError(f"warp combine {op!r}: one of {', '.join(COMBINES)} or an expression "
                         "in {a} and {b}")
    return lambda a, b: expr.replace("{a}", a).replace("{b}", b)


def folding(var, op: str):
    """(names, fold) for a reduce of ``var``: one name with ``op`` a combine (see
    :func:`combine_fn`), or a list of names with ``op`` a C statement folding the other lane's
    values ``{b0}``, ``{b1}``, ... into them (a pair reduction: softmax's maximum and sum).
    fold(others) is the statement for the other lane's values named ``others``."""
    if isinstance(var, str):
        comb, name = combine_fn(op), _var(var)
        return [name], lambda others: f"{name} = {comb(name, others[0])};"
    names = [_var(v) for v in var]
    if not names or not isinstance(op, str) or any(f"{{b{i}}}" not in op for i in range(len(names))):
        raise DTypeError(f"warp reduce of {names}: a fold statement in "
                         f"{', '.join('{b%d}' % i for i in range(len(names)))}, got {op!r}")

    def fold(others):
        out = op
        for i, o in enumerate(others):
            out = out.replace(f"{{b{i}}}", o)
        return out
    return names, fold


def _indent(text: str) -> str:
    return "\n".join("    " + ln if ln else ln for ln in text.splitlines())


def _ctypes(ctype, names) -> list:
    """One value type a name: ``ctype`` itself or a list of them (a value and its index)."""
    types = [ctype] * len(names) if isinstance(ctype, str) else list(ctype)
    if len(types) != len(names):
        raise DTypeError(f"warp reduce of {names}: one type each, got {ctype!r}")
    return [_ctype(t) for t in types]


def _mode(mode: str) -> str:
    if mode not in SHFL_MODES:
        raise DTypeError(f"shuffle mode {mode!r}; allowed: {', '.join(SHFL_MODES)}")
    return mode


class Shuffles:
    """The block operations, the same on every backend: built on the warp operations of the
    subclass (``shfl``, ``warp_reduce``, ``warp_scan``) and one exchange through ``scratch``,
    a shared array of one value a warp, declared at kernel scope by the template."""

    size = WARP

    def block_reduce(self, var, op: str, ctype: str, lanes: int, scratch="") -> str:
        """Every one of ``lanes`` consecutive work-items (a power of two) ends with the
        combination of their ``var`` (or vars, see :func:`folding`): a warp reduce, then
        (lanes > 32) lane 0 of each warp stores its warp's result in ``scratch`` (one array a
        var), one barrier, every warp reduces the results of its group of lanes / 32 warps,
        one barrier frees ``scratch``."""
        lanes = _lanes(lanes)
        if lanes <= WARP:
            return self.warp_reduce(var, op, ctype, lanes)
        wpr = lanes // WARP
        names, _ = folding(var, op)
        scr = [scratch] if isinstance(scratch, str) else list(scratch)
        if len(scr) != len(names):
            raise DTypeError(f"block reduce of {names}: one scratch array each, got {scratch!r}")
        scr = [_var(x, "scratch") for x in scr]
        at = f"(gpucg_warp & ~{wpr - 1}) + (gpucg_lane & {wpr - 1})"
        return "\n".join([
            self.warp_reduce(var, op, ctype, WARP),
            "if (gpucg_lane == 0) {",
            *[f"    {x}[gpucg_warp] = {n};" for x, n in zip(scr, names)],
            "}",
            self.block_barrier(),
            *[f"{n} = {x}[{at}];" for x, n in zip(scr, names)],
            self.warp_reduce(var, op, ctype, wpr),
            self.block_barrier()])

    def block_scan(self, var: str, op: str, ctype: str, lanes: int, scratch: str = "",
                   total: str = "", exclusive: str = "") -> str:
        """Inclusive scan of ``var`` over ``lanes`` consecutive work-items (a power of two),
        work-item order; ``total`` (a declared variable, optional) gets the combination of
        all of them in every work-item, ``exclusive`` (optional) the previous work-item's
        inclusive result (the first work-item's: its own). A warp scan, then (lanes > 32) the
        last lane of each warp stores its warp's total, one barrier, each warp scans the
        group's totals and takes its prefix by a shuffle, one barrier frees ``scratch``."""
        lanes, comb = _lanes(lanes), combine_fn(op)
        width = min(lanes, WARP)
        out = [self.warp_scan(var, op, ctype, width)]
        if exclusive:
            out.append(self.shfl("up", _var(exclusive, "exclusive"), var, "1", ctype, width))
        if lanes <= WARP:
            if total:
                out.append(self.shfl("idx", _var(total, "total"), var, str(width - 1), ctype, width))
            return "\n".join(out)
        wpr = lanes // WARP
        scratch = _var(scratch, "scratch")
        inner = [f"{ctype} gpucg_s = {scratch}[(gpucg_warp & ~{wpr - 1}) + (gpucg_lane & {wpr - 1})];",
                 self.warp_scan("gpucg_s", op, ctype, wpr),
                 f"{ctype} gpucg_pre;",
                 self.shfl("idx", "gpucg_pre", "gpucg_s", f"(gpucg_warp - 1) & {wpr - 1}", ctype),
                 f"if (gpucg_warp & {wpr - 1}) {{"]
        if exclusive:
            inner.append(f"    {exclusive} = gpucg_lane == 0 ? gpucg_pre : {comb('gpucg_pre', exclusive)};")
        inner.append(f"    {var} = {comb('gpucg_pre', var)};\n}}")
        if total:
            inner.append(self.shfl("idx", _var(total, "total"), "gpucg_s", str(wpr - 1), ctype))
        out += [f"if (gpucg_lane == {WARP - 1}) {scratch}[gpucg_warp] = {var};",
                self.block_barrier(), "{", _indent("\n".join(inner)), "}", self.block_barrier()]
        return "\n".join(out)


def _cuda_shfl(fn: str, value: str, args: str, ctype: str) -> str:
    if ctype in _NARROW:
        return f"({ctype}){fn}(0xffffffffu, (int)({value}), {args})"
    return f"{fn}(0xffffffffu, {value}, {args})"


class CudaShuffles(Shuffles):
    """``__shfl_*_sync`` with the full mask."""

    def block_barrier(self) -> str:
        return "__syncthreads();"

    def shfl(self, mode: str, dst: str, value: str, arg: str, ctype: str = "float",
             width: int = WARP) -> str:
        fn = "__shfl_sync" if _mode(mode) == "idx" else f"__shfl_{mode}_sync"
        _ctype(ctype)
        w = "" if _width(width) == WARP else f", {width}"
        return f"{_var(dst)} = {_cuda_shfl(fn, value, arg + w, ctype)};"

    def warp_reduce(self, var, op: str, ctype: str = "float", width: int = WARP) -> str:
        (names, fold), width = folding(var, op), _width(width)
        if width == 1:
            return ""
        w = "" if width == WARP else f", {width}"
        others = [f"gpucg_b{i}" for i in range(len(names))]
        gets = "".join(f"    const {t} {o} = {_cuda_shfl('__shfl_xor_sync', n, 'gpucg_o' + w, t)};\n"
                       for o, n, t in zip(others, names, _ctypes(ctype, names)))
        return (f"#pragma unroll\nfor (int gpucg_o = {width // 2}; gpucg_o > 0; gpucg_o >>= 1) {{\n"
                f"{gets}{_indent(fold(others))}\n}}")

    def warp_scan(self, var: str, op: str, ctype: str = "float", width: int = WARP) -> str:
        comb, var, width = combine_fn(op), _var(var), _width(width)
        if width == 1:
            return ""
        w = "" if width == WARP else f", {width}"
        return (f"#pragma unroll\nfor (int gpucg_o = 1; gpucg_o < {width}; gpucg_o <<= 1) {{\n"
                f"    const {_ctype(ctype)} gpucg_a = {_cuda_shfl('__shfl_up_sync', var, 'gpucg_o' + w, ctype)};\n"
                f"    if ((gpucg_lane & {width - 1}) >= gpucg_o) {var} = {comb('gpucg_a', var)};\n}}")


_B = "barrier(CLK_LOCAL_MEM_FENCE);"


class OpenCLShuffles(Shuffles):
    """The emulation through the warp's scratch (the table above)."""

    def block_barrier(self) -> str:
        return _B

    def shfl(self, mode: str, dst: str, value: str, arg: str, ctype: str = "float",
             width: int = WARP) -> str:
        w, m = _width(width), f"({arg})"
        src = {"xor": f"(gpucg_lane ^ {m} & {WARP - 1}) <= (gpucg_lane | {w - 1}) ? "
                      f"gpucg_lane ^ {m} & {WARP - 1} : gpucg_lane",
               "up": f"(gpucg_lane & {w - 1}) >= {m} ? gpucg_lane - {m} : gpucg_lane",
               "down": f"(gpucg_lane & {w - 1}) + {m} < {w} ? gpucg_lane + {m} : gpucg_lane",
               "idx": f"(gpucg_lane & ~{w - 1}) + ({m} & {w - 1})"}[_mode(mode)]
        x = f"((__local {_ctype(ctype)}*)gpucg_ws)"
        return (f"{x}[gpucg_lane] = {value};\n{_B}\n"
                f"{_var(dst)} = {x}[{src}];\n{_B}")

    def warp_reduce(self, var, op: str, ctype: str = "float", width: int = WARP) -> str:
        (names, fold), width = folding(var, op), _width(width)
        if width == 1:
            return ""
        if len(names) > 2:
            raise DTypeError(f"emulated warp reduce of {names}: at most two values")
        # value i in words [128 i, 128 i + 128): two halves of 32 lanes, 8 bytes each
        xs = [f"((__local {t}*)" + (f"(gpucg_ws + {128 * i}))" if i else "gpucg_ws)")
              for i, t in enumerate(_ctypes(ctype, names))]
        others = [f"gpucg_b{i}" for i in range(len(names))]
        puts = "".join(f"    {x}[gpucg_p + gpucg_lane] = {n};\n" for x, n in zip(xs, names))
        gets = "".join(f"    const {t} {o} = {x}[gpucg_p + (gpucg_lane ^ gpucg_o)];\n"
                       for x, o, t in zip(xs, others, _ctypes(ctype, names)))
        return (f"for (int gpucg_o = {width // 2}, gpucg_p = 0; gpucg_o > 0; gpucg_o >>= 1, gpucg_p ^= {WARP}) {{\n"
                f"{puts}    {_B}\n{gets}{_indent(fold(others))}\n}}\n{_B}")

    def warp_scan(self, var: str, op: str, ctype: str = "float", width: int = WARP) -> str:
        comb, var, width = combine_fn(op), _var(var), _width(width)
        if width == 1:
            return ""
        x = f"((__local {_ctype(ctype)}*)gpucg_ws)"
        return (f"for (int gpucg_o = 1, gpucg_p = 0; gpucg_o < {width}; gpucg_o <<= 1, gpucg_p ^= {WARP}) {{\n"
                f"    {x}[gpucg_p + gpucg_lane] = {var};\n    {_B}\n"
                f"    if ((gpucg_lane & {width - 1}) >= gpucg_o)\n"
                f"        {var} = {comb(x + '[gpucg_p + gpucg_lane - gpucg_o]', var)};\n}}\n{_B}")
