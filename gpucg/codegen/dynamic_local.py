"""A kernel's dynamic local (shared) memory, as data: one buffer whose size the launch gives,
not the source, so a kernel may use more than the 48 KiB CUDA allows static __shared__ arrays
(up to the architecture's opt-in limit; gpucg.verify.occupancy).

CUDA declares it in the body (``extern __shared__``) and takes the bytes at launch
(``shared_mem=``, with the kernel's max-dynamic-shared-memory attribute raised above 48 KiB);
OpenCL takes it as the kernel's last parameter, a ``__local`` pointer the launch sets to
``cl.LocalMemory(bytes)``. Each Dialect holds its language's spellings as ``d.dynamic``, so a
template writes ``{{ d.dynamic.param("float", "Xs") }}`` at the end of its parameter list and
``{{ d.dynamic.decl("float", "Xs") }}`` in its body. The bytes are the kernel declaration's
(gpucg.implementation.Kernel's ``dynamic_local``), one definition the launches read.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DynamicLocal:
    """One language's spellings (``{ctype}``, ``{name}``) of the buffer's parameter (with its
    leading comma) and its declaration in the kernel's body; "" where the language has none."""

    param_fmt: str
    decl_fmt: str

    def param(self, ctype: str, name: str) -> str:
        return self.param_fmt.format(ctype=ctype, name=name)

    def decl(self, ctype: str, name: str) -> str:
        return self.decl_fmt.format(ctype=ctype, name=name)


#: 16-byte aligned, as the widest access a template may make of it
CUDA_DYNAMIC = DynamicLocal("", "extern __shared__ __align__(16) {ctype} {name}[];")
OPENCL_DYNAMIC = DynamicLocal(",\n    __local {ctype}* restrict {name}", "")
