"""The GEMM tile every GEMM kernel shares (templates/gemm/_tile.j2): its config space and
launch geometry. conv2d's direct and Winograd products and the dense family use it."""

from __future__ import annotations

import sympy

from ..arch import PORTABLE_LOCAL_BYTES
from ..shape import alignment
from ..space import ConfigSpace

#: local memory a work-group may use for its tiles (CUDA's static shared-memory limit)
LOCAL_BYTES = PORTABLE_LOCAL_BYTES


def work_group(config) -> int:
    """Work-items per work-group of a tile config: (bm / tm) * (bn / tn)."""
    return (config["bm"] // config["tm"]) * (config["bn"] // config["tn"])


def local_bytes(config, acc_bytes: int = 4) -> int:
    """Local memory of the tiles: one or two (double buffering) bk x (bm + bn) tiles."""
    return (2 if config.get("double_buffer") else 1) * config["bk"] * (config["bm"] + config["bn"]) \
        * acc_bytes

def sm_count(target) -> int:
    """Multiprocessors of the target's GPU (its capability record's: an H100's where the
    target names no arch). The default tile of a GPU target shrinks until the grid fills one
    wave of them (:func:`fill_device`)."""
    return target.capabilities.sm_count

#: the tile's template parameters for a space without the vw and double_buffer knobs (conv2d's)
PLAIN = {"vw": 1, "double_buffer": False, "conflict_free": True}


def gemm_space(m_rows, on_cpu: bool, vector: bool = False, acc_bytes: int = 4,
               default: dict | None = None, loads: bool = True,
               added: dict | None = None, output: tuple | None = None) -> ConfigSpace:
    """Tiles of the GEMM: bm x bn outputs a work-group, tm x tn a work-item, bk of K a step,
    and with ``loads`` vw consecutive elements a load (vector loads where the kernel has them:
    ``vector``), double_buffer double buffering of the local tiles and conflict_free the conflict-free local layouts
    with 128-bit fragment reads (gpucg.codegen.tile_layout; off: the plain tile); ``acc_bytes``: the size of the
    sums (float or double). Without ``loads`` the kernel passes :data:`PLAIN` as parameters
    (conv2d: its recorded tuning data name the five tile knobs only).

    The default is wider than tall when the product has few rows (``m_rows``, an int or None
    when unknown); ``default`` overrides it. ``added``: the knob values configs recorded
    before the knob existed stand for (ConfigSpace). ``output``: (m, n), known, of a product
    whose every output fits a few tiles (split-K): the default's bm, then bn, halve while the
    half still covers m (n) and the tile stays in the space (bm >= 16, bn >= 32), so that
    less of each K slice is spent on padding.
    """
    def ok(c):
        wg, vw = work_group(c), c.get("vw", 1)
        return (c["tm"] <= c["bm"] and c["tn"] <= c["bn"] and 16 <= wg <= 256
                and (c["bm"] * c["bk"]) % (wg * vw) == 0
                and (c["bn"] * c["bk"]) % (wg * vw) == 0
                and local_bytes(c, acc_bytes) <= LOCAL_BYTES)
    if default is not None:
        default = dict(default)
    elif on_cpu:  # measured on PoCL (64->64, 56x56): 113 ms against 213 ms for 32x64 tiles
        default = {"bm": 64, "bn": 128, "bk": 8, "tm": 8, "tn": 8, "vw": 1, "double_buffer": False,
                   "conflict_free": True}
    else:
        default = {"bm": 64, "bn": 64, "bk": 16, "tm": 4, "tn": 4, "vw": 1, "double_buffer": False,
                   "conflict_free": True}
    while isinstance(m_rows, int) and default["bm"] > 16 and default["bm"] // 2 >= m_rows \
            and default["bn"] < 256:
        # few rows: a thinner, wider tile (while the tile stays in the space)
        thinner = dict(default, bm=default["bm"] // 2, bn=default["bn"] * 2)
        if not ok(thinner):
            break
        default = thinner
    for dim, extent in zip(("bm", "bn"), output or ()):
        while default[dim] // 2 >= extent:
            smaller = dict(default, **{dim: default[dim] // 2})
            if smaller[dim] < (16 if dim == "bm" else 32) or not ok(smaller):
                break
            default = smaller
    knobs = {"bm": (16, 32, 64, 128), "bn": (32, 64, 128, 256), "bk": (8, 16, 32),
             "tm": (1, 2, 4, 8), "tn": (2, 4, 8)}
    if loads:
        knobs.update(vw=(1, 2, 4) if vector else (1,), double_buffer=(False, True), conflict_free=(False, True))
    else:
        default = {k: v for k, v in default.items() if k in knobs}
    return ConfigSpace(knobs, default, constraint=ok, added=added)


def vector_needs(vec_inputs: dict, acc_bytes: int = 4):
    """Implementation.needs of a tile whose vw > 1 loads read inputs ``vec_inputs`` (input
    index -> True, or a function config -> whether that operand's loads are vectors) vw elements of
    ``acc_bytes`` at a time: their addresses aligned to a vector, else vw = 1."""
    def needs(config):
        vw = config.get("vw", 1)
        if vw == 1:
            return None
        need = [alignment(i) >= vw * acc_bytes for i, used in vec_inputs.items() if used is True or used(config)]
        return (sympy.And(*need), {"vw": 1}) if need else None
    return needs


#: smaller float32 tiles a GPU default falls back to, largest first, while the grid of output
#: tiles is under one wave of the device (a 1024^3 product: 64 tiles of 128 x 128 on 132 SMs)
SMALLER_TILES = ({"bm": 64, "bn": 128, "bk": 8, "tm": 8, "tn": 8},
                 {"bm": 64, "bn": 64, "bk": 16, "tm": 4, "tn": 4})


def fill_device(default: dict, rows: int, n: int, sms: int) -> dict:
    """The default tile, or a smaller one when its grid (batches x rows by n outputs) would
    leave multiprocessors of the GPU idle: the largest of SMALLER_TILES that makes one wave
    of ``sms`` work-groups, else the smallest."""
    def grid(t):
        return -(-rows // t["bm"]) * -(-n // t["bn"])
    if default["bm"] * default["bn"] <= SMALLER_TILES[0]["bm"] * SMALLER_TILES[0]["bn"] \
            or grid(default) >= sms:
        return default
    for t in SMALLER_TILES:
        if grid(t) >= sms:
            break
    return dict(default, **t)
