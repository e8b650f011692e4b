"""The GEMM tile every GEMM kernel shares (templates/gemm/_tile.j2): its config space and
launch geometry. conv2d's direct and Winograd products use it."""

from __future__ import annotations

from ..autotune.space import ConfigSpace


def work_group(config) -> int:
    """Work-items per work-group of a tile config: (BM / TM) * (BN / TN)."""
    return (config["BM"] // config["TM"]) * (config["BN"] // config["TN"])


def gemm_space(m_rows: int, on_cpu: bool) -> ConfigSpace:
    """Tiles of the GEMM: BM x BN outputs a work-group, TM x TN a work-item, BK of K a step.

    The default is wider than tall when the product has few rows (``m_rows``).
    """
    def ok(c):
        wg = work_group(c)
        return (c["TM"] <= c["BM"] and c["TN"] <= c["BN"] and 16 <= wg <= 256
                and (c["BM"] * c["BK"]) % wg == 0 and (c["BN"] * c["BK"]) % wg == 0)
    if on_cpu:  # measured on PoCL (64->64, 56x56): 113 ms against 213 ms for 32x64 tiles
        default = {"BM": 64, "BN": 128, "BK": 8, "TM": 8, "TN": 8}
    else:
        default = {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4}
    while default["BM"] > 16 and default["BM"] // 2 >= m_rows and default["BN"] < 256:
        # few rows: a thinner, wider tile
        default["BM"] //= 2
        default["BN"] *= 2
    return ConfigSpace({"BM": (16, 32, 64, 128), "BN": (32, 64, 128, 256), "BK": (8, 16, 32),
                        "TM": (1, 2, 4, 8), "TN": (2, 4, 8)}, default, constraint=ok)
