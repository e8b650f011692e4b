"""Shared-memory bank conflicts, counted from the addresses one warp request touches.

The model (NVIDIA GPUs since Maxwell, sm_50 to sm_90):

- shared memory is 32 banks of 4-byte words; byte address a is in bank (a // 4) % 32, and one
  wavefront serves at most one word per bank (128 bytes);
- a 4-byte access of the 32 lanes is one phase; 8-byte accesses (LDS.64/STS.64) run as two
  phases of 16 lanes (half-warps), 16-byte ones (LDS.128/STS.128) as four phases of 8 lanes
  (quarter-warps): a phase moves at most 128 bytes, so W-byte accesses need at least W / 4
  wavefronts, the ideal;
- within a phase, lanes reading the same word share it (broadcast: free); distinct words in
  one bank serialize, so a phase needs as many wavefronts as the most distinct words any
  bank holds (an n-way conflict costs n);
- ``ldmatrix`` (LDSM) .x1/.x2/.x4 reads one, two or four 8x8 matrices of 16-bit elements; each
  matrix is one phase of 8 rows of 16 bytes, whose addresses lanes 8i..8i+7 give for matrix i.

Sources: the CUDA C++ Programming Guide, "Shared Memory" of the compute capability 5.x and
later sections (32 banks, 32-bit words, broadcast, 64-bit accesses split so that a bank
conflict only occurs between lanes of the same half-warp); Nsight Compute's Profiling Guide
("wavefronts", shared-memory requests) and NVIDIA's developer forum (thread 77228: "the return
bandwidth of L1 and shared memory is 128 bytes/cycle ... LDS.128 requires 4 requests per
instruction"). Not modelled: the sm_70+ packing that lets 128-bit loads whose lane pairs share
addresses finish in fewer than four wavefronts (the model then reports the ideal of four, an
upper bound), and inactive lanes beyond giving None as their address.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..codegen.tile_layout import phase_wavefronts  # noqa: F401 (strategies choose layouts with it)
from ..errors import InputError

WARP = 32
BANKS = 32
WORD = 4


def _check(addresses, width: int) -> None:
    if width not in (4, 8, 16):
        raise InputError(f"width={width!r}: shared-memory accesses are 4, 8 or 16 bytes")
    if len(addresses) != WARP:
        raise InputError(f"addresses: {len(addresses)} given, one per lane of a warp ({WARP}) "
                         "allowed (None for an inactive lane)")
    for a in addresses:
        if a is not None and (a < 0 or a % width):
            raise InputError(f"address {a!r} is not a non-negative multiple of the access "
                             f"width {width}")




def wavefronts(addresses, width: int = 4) -> int:
    """Wavefronts one warp request needs: 32 lanes' byte addresses (None: inactive) of
    ``width``-byte accesses (4, 8 or 16)."""
    _check(addresses, width)
    lanes = WARP * WORD // width  # lanes a phase: 32, 16 or 8
    total = 0
    for p in range(0, WARP, lanes):
        words = [a // WORD + j for a in addresses[p:p + lanes] if a is not None
                 for j in range(width // WORD)]
        total += phase_wavefronts(words)
    return total


def ideal(addresses, width: int = 4) -> int:
    """The fewest wavefronts the request could take: one per phase with an active lane."""
    lanes = WARP * WORD // width
    return sum(1 for p in range(0, WARP, lanes) if any(a is not None for a in addresses[p:p + lanes]))


def ldmatrix_wavefronts(row_addresses, count: int = 4) -> int:
    """Wavefronts of ``ldmatrix.x{count}``: ``8 * count`` row addresses (lane 8i+r gives row r
    of matrix i), each row 16 bytes; one phase per matrix."""
    if count not in (1, 2, 4):
        raise InputError(f"count={count!r}: ldmatrix loads 1, 2 or 4 matrices (.x1/.x2/.x4)")
    rows = list(row_addresses)
    if len(rows) < 8 * count:
        raise InputError(f"row_addresses: {len(rows)} given, {8 * count} needed for .x{count}")
    total = 0
    for i in range(count):
        words = []
        for a in rows[8 * i: 8 * i + 8]:
            if a < 0 or a % 16:
                raise InputError(f"ldmatrix row address {a!r} must be a multiple of 16")
            words += [a // WORD + j for j in range(4)]
        total += phase_wavefronts(words)
    return total


@dataclass(frozen=True)
class RequestReport:
    """One kind of request: its worst wavefront count and the ideal (one per phase)."""

    name: str
    width: int
    wavefronts: int
    ideal: int

    @property
    def conflict_free(self) -> bool:
        return self.wavefronts == self.ideal

    def line(self) -> str:
        how = "conflict-free" if self.conflict_free else \
            f"{self.wavefronts / self.ideal:g}-way conflict"
        return (f"{self.name:<34} {self.width:>2} B  {self.wavefronts:>2} wavefronts "
                f"(ideal {self.ideal})  {how}")


def _fields(req):
    if isinstance(req, tuple):
        name, addresses, width = req[:3]
        kind = req[3] if len(req) > 3 else "lds"
    else:  # an object with name, addresses, width (and optionally kind, count)
        name, addresses, width = req.name, req.addresses, req.width
        kind = getattr(req, "kind", "lds")
    return name, list(addresses), int(width), kind


def report(requests) -> list[RequestReport]:
    """One report per request name (the worst of the requests sharing it). A request is
    (name, addresses, width) or (name, row addresses, 16, "ldmatrix"), or an object with those
    attributes (``name``, ``addresses``, ``width``, optional ``kind``): what a GEMM core's
    ``smem_requests(config)`` returns."""
    worst: dict[str, RequestReport] = {}
    for req in requests:
        name, addr, width, kind = _fields(req)
        if kind == "ldmatrix":
            count = len(addr) // 8
            got, best = ldmatrix_wavefronts(addr, count), count
        else:
            got, best = wavefronts(addr, width), ideal(addr, width)
        r = RequestReport(name, width, got, best)
        old = worst.get(name)
        if old is None or r.wavefronts - r.ideal > old.wavefronts - old.ideal:
            worst[name] = r
    return list(worst.values())


def simt_report(config, a_k_major: bool, b_k_major: bool, acc_bytes: int = 4,
                before: bool = False) -> list[RequestReport]:
    """The SIMT GEMM tile's requests for one config (gpucg.codegen.tile_layout, the layouts
    the template renders; ``before``: the tile before it had layouts, for comparison)."""
    from ..codegen import tile_layout as tl

    c = dict(config)
    tile = None
    if before:
        plain = (tl.TileLayout(c["bk"], c["bm"]), tl.TileLayout(c["bk"], c["bn"]))
        tile = tl.SimtTile(*plain, 1, 1)
    return report(tl.requests(c, a_k_major, b_k_major, acc_bytes, tile=tile))


def kernel_reports(compiled) -> list[tuple[str, str, list[RequestReport]]]:
    """(implementation, kernel, reports) for each kernel of a compiled call's implementations
    whose shared-memory requests are known: those its Kernel declares (``smem_requests``: the
    tensor-core kernels on the tile layer, flash attention, the fused Winograd kernel, each
    evaluated from its own address definitions), and the SIMT GEMM tile's (any kernel
    rendered with its bm/tm/a_k_major parameters)."""
    out = []
    for choice in compiled.selection.choices:
        impl = choice.impl
        for key, kernel in impl.kernels.items():
            params = impl.template_params(key, choice.config)
            if kernel.smem_requests is not None:
                out.append((impl.name, key, report(kernel.smem_requests(params))))
            elif {"bm", "bn", "bk", "tm", "tn", "a_k_major", "b_k_major"} <= set(params):
                acc = 8 if params.get("acc_t") == "double" else 4
                cfg = {k: params[k] for k in ("bm", "bn", "bk", "tm", "tn", "vw", "conflict_free")
                       if k in params}
                out.append((impl.name, key, simt_report(cfg, params["a_k_major"],
                                                        params["b_k_major"], acc)))
    return out
