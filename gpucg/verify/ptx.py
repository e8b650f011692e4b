"""What a kernel's PTX declares, read without a GPU: an entry's parameter types and their
layout, the static shared memory of a module, the thread-block cluster an entry requires,
whether it runs warpgroup instructions. The
launch stand-in (gpucg.verify.cupy_standin) checks launches against them."""

from __future__ import annotations

import re


def ptx_entry_params(ptx: str, entry: str) -> list[str] | None:
    """The PTX types of the parameters of ``.entry entry``, or None if there is no such entry."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\(([^)]*)\)", ptx)
    if m is None:
        return None
    return re.findall(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)", m.group(1))


def ptx_entry_layout(ptx: str, entry: str) -> list[tuple[int, int]]:
    """(alignment, array elements) of each parameter of ``.entry entry`` (0: none declared)."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\(([^)]*)\)", ptx)
    found = re.findall(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.\w+\s+[\w$]+(?:\[(\d+)\])?",
                       m.group(1)) if m else []
    return [(int(a or 0), int(n or 0)) for a, n in found]


def ptx_static_shared(ptx: str) -> int:
    """Bytes of the static ``.shared`` variables a PTX module declares (its kernels'
    __shared__): arrays, and scalars (a ``__shared__ int``, or an array the optimizer split
    into one scalar an element: ``gstat_$_0``); not the ``extern`` dynamic buffer."""
    return sum(int(n or 1) * int(size) // 8 for size, n in re.findall(
        r"\.shared\s+(?:\.align\s+\d+\s+)?\.[bfsu](\d+)\s+[\w$]+(?:\[(\d+)\])?\s*;", ptx))


def ptx_cluster(ptx: str, entry: str) -> tuple:
    """The thread-block cluster an entry's PTX requires (``.reqnctapercluster``; from
    __cluster_dims__), or () for none."""
    m = re.search(rf"\.entry\s+{re.escape(entry)}\s*\((?:[^()]|\([^()]*\))*\)([^{{]*)\{{",
                  ptx)
    got = re.search(r"\.reqnctapercluster\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?",
                    m.group(1)) if m else None
    return tuple(int(v or 1) for v in got.groups()) if got else ()


#: instructions executed by a whole warpgroup (4 warps): a block running them is whole
#: warpgroups
WARPGROUP_PTX = ("wgmma.", "setmaxnreg.")


def ptx_warpgroups(ptx: str, entry: str) -> bool:
    """Whether the body of ``.entry entry`` holds warpgroup instructions (wgmma, setmaxnreg)."""
    m = re.search(rf"\.entry\s+{re.escape(entry)}\s*\(", ptx)
    if m is None:
        return False
    end = ptx.find(".entry", m.end())
    body = ptx[m.end():end if end >= 0 else len(ptx)]
    return any(w in body for w in WARPGROUP_PTX)
