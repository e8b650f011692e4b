"""The mbarrier pipeline protocol, checked by exploring every interleaving of a small model.

A warp-specialized Hopper kernel runs a producer (issuing TMA copies into a ring of
shared-memory stages) beside consumers (reading the stages), synchronized only by mbarriers.
The OpenCL twin cannot run those roles concurrently (work-group barriers give no independent
forward progress), so it runs one legal order; this module proves the protocol itself, for
every order, with the stage and phase arithmetic the kernel generator uses
(gpucg/codegen/mbarrier.py: :class:`~gpucg.codegen.mbarrier.Pipeline`).

The model (one producer, ``consumers`` consumers, ``tiles`` tiles, each delivered by the copies
of ``copies``, their byte counts):

- producer, per tile t: wait ``empty[stage(t)]`` with ``empty_parity(t)``; then (one step:
  what follows the wait is local to the producer's thread) arrive.expect_tx(full[s],
  expect_tx) and issue the copies. Each copy completes later, at any point: it writes its
  bytes into the stage and completes its transaction bytes on ``full[s]``.
- consumer, per tile t: wait ``full[stage(t)]`` with ``full_parity(t)`` and start reading;
  later release: arrive on ``empty[s]``.
- an mbarrier: (phase, pending arrivals, transaction count); its phase completes when both
  counts are zero, then its arrivals are re-armed (``full_arrivals``, ``empty_arrivals``);
  ``try_wait.parity p`` passes while the phase's parity is not p.

It checks, in every reachable state: no deadlock (a state where nobody can move before the
end), no consumer passing its wait before every byte of its tile landed, no copy issued into a
stage a consumer still reads, and no waiter whose barrier ran two or more phases past the one
it waits for (a parity would alias). States are memoized; the producer's steps after its wait
are fused into one (they touch nothing another role reads before the copies complete), and
the copies of one tile land in issue order (no consumer may look before all of them have: the
order among them shows only where a wrong transaction count lets one look early, and then the
first of them is as early as any). Planted bugs (tests/test_pipeline_model.py) are Pipeline subclasses with wrong
arithmetic, or ``skip_release``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..codegen.mbarrier import Pipeline
from ..errors import InputError

#: violation kinds, as reported
DEADLOCK, EARLY_READ, EARLY_REFILL, ALIAS = ("deadlock", "read before its bytes arrived",
                                             "refill before every consumer released",
                                             "phase parity aliased")


@dataclass(frozen=True)
class Violation:
    """One kind of violation, first seen after ``trace`` (the actions from the start)."""

    kind: str
    detail: str
    trace: tuple = field(default=())

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail} (after: {'; '.join(self.trace) or 'nothing'})"


@dataclass(frozen=True)
class Result:
    """What the exploration found: the states it visited, and one Violation of each kind
    reached (a bad state is not explored further)."""

    states: int
    violations: tuple = ()

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def kinds(self) -> set:
        return {v.kind for v in self.violations}


def _complete(bar, init):
    """A barrier (phase, pending, tx) after a change: a phase completes at zero counts."""
    phase, pending, tx = bar
    if pending == 0 and tx == 0:
        return (phase + 1, init, 0)
    return bar


def check(pipe: Pipeline, tiles: int, copies=None, skip_release=frozenset()) -> Result:
    """Explore every interleaving of ``pipe``'s producer and consumers over ``tiles`` tiles.

    Args:
        pipe: the arithmetic under test (a Pipeline, or a subclass with a planted bug).
        tiles: tiles the producer loads and every consumer reads.
        copies: byte counts of the copies of one tile (default: one copy of pipe.tx_bytes).
        skip_release: (consumer, tile) pairs whose release arrive is left out (a planted bug).
    """
    copies = tuple(copies or (pipe.tx_bytes,))
    if not isinstance(tiles, int) or tiles < 0:
        raise InputError(f"check: tiles={tiles!r} must be an int >= 0")
    total, S, C = sum(copies), pipe.stages, pipe.consumers
    stages = [pipe.stage(t) for t in range(tiles)]
    bars0 = tuple((0, pipe.full_arrivals, 0) for _ in range(S))
    empty0 = tuple((0, pipe.empty_arrivals, 0) for _ in range(S))
    start = (0, (0,) * C, bars0, empty0, ((-1, 0),) * S, ())
    parent = {start: None}
    stack = [start]
    found: dict = {}

    def fail(state, kind, detail, action=None):
        if kind in found:
            return
        trace = [action] if action else []
        while parent.get(state):
            state, act = parent[state]
            trace.append(act)
        found[kind] = Violation(kind, detail, tuple(reversed(trace)))

    while stack:
        state = stack.pop()
        prod, cons, full, empty, data, flight = state
        moves, bad = [], False
        # the producer
        if prod < tiles:
            t, s = prod, stages[prod]
            phase = empty[s][0]
            if phase > t // S:  # waits for phase t // S - 1 to complete; phase past it + 1
                bad = fail(state, ALIAS, f"producer at tile {t}: empty[{s}] is in phase "
                                         f"{phase}, the wait names phase {t // S - 1}") or True
            elif (phase & 1) != pipe.empty_parity(t):
                late = [c for c in range(C) if t >= S and cons[c] < 2 * (t - S) + 2]
                if late:
                    bad = fail(state, EARLY_REFILL, f"producer fills stage {s} with tile {t} "
                               f"before consumer {late[0]} released tile {t - S} (it is at tile "
                               f"{cons[late[0]] >> 1})", f"produce {t}") or True
                ph, pend, tx = full[s]
                bar = _complete((ph, pend - 1, tx + pipe.expect_tx), pipe.full_arrivals)
                nfull = full[:s] + (bar,) + full[s + 1:]
                ndata = data[:s] + ((t, 0),) + data[s + 1:]
                nflight = tuple(sorted(flight + tuple((s, t, i) for i in range(len(copies)))))
                moves.append((f"produce {t}", (prod + 1, cons, nfull, empty, ndata, nflight)))
        # copies completing: tiles in any order, one tile's copies in issue order
        for k, (s, t, i) in enumerate(flight):
            if k and flight[k - 1][:2] == (s, t):
                continue
            tile, landed = data[s]
            ndata = data[:s] + ((tile, landed + copies[i] if tile == t else landed),) + data[s + 1:]
            ph, pend, tx = full[s]
            nfull = full[:s] + (_complete((ph, pend, tx - copies[i]), pipe.full_arrivals),) \
                + full[s + 1:]
            moves.append((f"copy {i} of tile {t} lands",
                          (prod, cons, nfull, empty, ndata, flight[:k] + flight[k + 1:])))
        # the consumers
        for c in range(C):
            t, reading = cons[c] >> 1, cons[c] & 1
            if t >= tiles:
                continue
            s = stages[t]
            ncons = cons[:c] + (cons[c] + 1,) + cons[c + 1:]
            if not reading:
                phase = full[s][0]
                if phase > t // S + 1:
                    bad = fail(state, ALIAS, f"consumer {c} at tile {t}: full[{s}] is in phase "
                                             f"{phase}, the wait names phase {t // S}") or True
                elif (phase & 1) != pipe.full_parity(t):
                    if data[s] != (t, total):
                        bad = fail(state, EARLY_READ, f"consumer {c} reads tile {t} from stage "
                                   f"{s} holding tile {data[s][0]} with {data[s][1]} of "
                                   f"{total} bytes", f"consumer {c} waits tile {t}") or True
                    moves.append((f"consumer {c} waits tile {t}",
                                  (prod, ncons, full, empty, data, flight)))
            else:
                nempty, act = empty, f"consumer {c} leaves tile {t} without its release arrive"
                if (c, t) not in skip_release:
                    ph, pend, tx = empty[s]
                    nempty = empty[:s] + (_complete((ph, pend - 1, tx), pipe.empty_arrivals),) \
                        + empty[s + 1:]
                    act = f"consumer {c} releases tile {t}"
                moves.append((act, (prod, ncons, full, nempty, data, flight)))
        if not moves and not (prod == tiles and not flight
                              and all(x >> 1 == tiles for x in cons)):
            where = ", ".join(f"consumer {c} at tile {cons[c] >> 1}" for c in range(C))
            fail(state, DEADLOCK, f"producer at tile {prod}, {where}: nobody can move")
        if bad:
            continue
        for action, nxt in moves:
            if nxt not in parent:
                parent[nxt] = (state, action)
                stack.append(nxt)
    return Result(len(parent), tuple(found[k] for k in sorted(found)))


def sweep(max_stages: int = 5, max_tiles: int = 8, max_consumers: int = 2,
          copies=(8192, 4096)) -> list[tuple[tuple, Result]]:
    """check() for every ring of 1..max_stages stages, 0..max_tiles tiles and
    1..max_consumers consumers: [((stages, tiles, consumers), Result)]."""
    out = []
    for stages in range(1, max_stages + 1):
        for consumers in range(1, max_consumers + 1):
            pipe = Pipeline(stages, consumers, sum(copies))
            for tiles in range(max_tiles + 1):
                out.append(((stages, tiles, consumers), check(pipe, tiles, copies)))
    return out
