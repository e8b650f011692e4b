"""The stage and phase arithmetic of an mbarrier pipeline (Hopper: TMA copies completing on
mbarriers), one definition that the kernel generator and the protocol's model checker
(gpucg/verify/pipeline_model.py) both call.

The ring: ``stages`` shared-memory stages, each with two mbarriers (PTX ISA, "Parallel
Synchronization and Communication Instructions: mbarrier"):

- ``full[s]``: expects ``full_arrivals`` arrivals (the producer's one
  ``mbarrier.arrive.expect_tx``) and ``tx_bytes`` transaction bytes (the copies of one tile,
  each ``cp.async.bulk.tensor ... .mbarrier::complete_tx::bytes`` on it). Consumers wait on it.
- ``empty[s]``: expects ``empty_arrivals`` arrivals, one per consumer (an elected thread of
  each consumer warp or warpgroup) when it has finished reading the stage. The producer waits
  on it before refilling the stage.

Tile ``t`` (0, 1, 2, ... in the order the producer loads and every consumer reads them) goes
to stage ``t % stages``; it is that stage's fill number ``t // stages``. An mbarrier's phase
completes when its pending arrivals and its transaction count both reach zero; then its phase
number advances and its arrivals are re-armed. ``mbarrier.try_wait.parity p`` returns true
once the phase of parity ``p`` has completed, that is, while the current phase's parity is not
``p``; a fresh barrier (phase 0) counts the phase before it, of parity 1, as complete. Hence:

- a consumer waits on ``full[stage(t)]`` with parity ``full_parity(t) = (t // stages) & 1``;
- the producer waits on ``empty[stage(t)]`` with ``empty_parity(t) = full_parity(t) ^ 1``,
  which passes at once for the first fill (t < stages) and otherwise waits for the consumers'
  release of tile ``t - stages``.

A parity names a phase only modulo 2: no waiter may fall two phases behind its barrier, which
the ring guarantees (the producer cannot refill a stage its consumers have not released). The
model checker proves these properties over every interleaving for small rings.

Every function takes ints (the model, tests) or C expressions as strings (the kernel), like
gpucg.codegen.warp.swizzle.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError

#: the range of an mbarrier's pending arrival count and of its transaction count (PTX ISA:
#: "mbarrier: contents of the mbarrier object", 20-bit counts)
MAX_ARRIVALS = (1 << 20) - 1
MAX_TX_BYTES = (1 << 20) - 1
#: bytes of one mbarrier object in shared memory (it must be 8-byte aligned)
MBARRIER_BYTES = 8


def _p(expr) -> str:
    text = str(expr)
    return text if text.replace("_", "a").isalnum() else f"({text})"


@dataclass(frozen=True)
class Pipeline:
    """A producer/consumer ring of ``stages`` stages.

    Attributes:
        stages: shared-memory stages (each holds one tile's operands).
        consumers: arrivals that release a stage: one per consumer warp or warpgroup.
        tx_bytes: bytes the producer's copies of one tile deliver into a stage (the sum of its
            TMA boxes: :func:`box_bytes`).
        producers: arrivals that arm a stage (the producer's arrive.expect_tx): 1.
    """

    stages: int
    consumers: int
    tx_bytes: int
    producers: int = 1

    def __post_init__(self):
        for name, lo, hi in (("stages", 1, 64), ("consumers", 1, MAX_ARRIVALS),
                             ("producers", 1, MAX_ARRIVALS), ("tx_bytes", 16, MAX_TX_BYTES)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise InputError(f"Pipeline {name}={v!r} must be an int in [{lo}, {hi}]"
                                 + (" (an mbarrier's transaction count is 20 bits)"
                                    if name == "tx_bytes" else ""))
        if self.tx_bytes % 16:
            raise InputError(f"Pipeline tx_bytes={self.tx_bytes} must be a multiple of 16 "
                             "(bulk tensor copies move 16-byte units)")

    # -- where tile t goes, and which phase its waits name ----------------------------------

    def stage(self, t):
        """The stage tile ``t`` fills."""
        return t % self.stages if isinstance(t, int) else f"({_p(t)} % {self.stages})"

    def fill(self, t):
        """How many times the stage was filled before tile ``t``: the phase index of
        ``full[stage(t)]`` that tile ``t`` completes."""
        return t // self.stages if isinstance(t, int) else f"({_p(t)} / {self.stages})"

    def full_parity(self, t):
        """The parity a consumer waits on ``full[stage(t)]`` with, before reading tile ``t``."""
        f = self.fill(t)
        return f & 1 if isinstance(f, int) else f"({f} & 1)"

    def empty_parity(self, t):
        """The parity the producer waits on ``empty[stage(t)]`` with, before filling tile ``t``
        (1 for the first fill: passes on a fresh barrier)."""
        p = self.full_parity(t)
        return p ^ 1 if isinstance(p, int) else f"({p} ^ 1)"

    @property
    def full_arrivals(self) -> int:
        """The arrival count ``full[s]`` is initialized with."""
        return self.producers

    @property
    def empty_arrivals(self) -> int:
        """The arrival count ``empty[s]`` is initialized with."""
        return self.consumers

    @property
    def expect_tx(self) -> int:
        """The transaction bytes the producer's arrive.expect_tx announces for one tile."""
        return self.tx_bytes

    def advance(self, stage, phase):
        """The (stage, phase) after one tile, for a kernel that keeps them as running values
        instead of dividing: ints give ints; C names give two statements updating them."""
        if isinstance(stage, int) and isinstance(phase, int):
            wrap = stage + 1 == self.stages
            return (0 if wrap else stage + 1), phase ^ int(wrap)
        return (f"if (++{stage} == {self.stages}) {{ {stage} = 0; {phase} ^= 1; }}")

    @property
    def smem_bytes(self) -> int:
        """Shared memory of the ring's barriers: two a stage."""
        return 2 * self.stages * MBARRIER_BYTES


def box_bytes(box, itemsize: int) -> int:
    """Bytes one TMA box copy delivers: the product of its extents times the element size."""
    n = itemsize
    for extent in box:
        n *= int(extent)
    return n
