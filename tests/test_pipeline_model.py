"""The mbarrier pipeline protocol (gpucg/codegen/mbarrier.py) proved by exhaustive interleaving
(gpucg/verify/pipeline_model.py): every ring of 1-5 stages, 0-8 tiles and 1-2 consumers holds
(no deadlock, no early read, no early refill, no aliased parity), and each planted bug is found
as the violation it causes."""

import pytest

import gpucg
from gpucg.codegen.mbarrier import MAX_TX_BYTES, Pipeline, box_bytes
from gpucg.verify.pipeline_model import (ALIAS, DEADLOCK, EARLY_READ, EARLY_REFILL, check,
                                         sweep)

COPIES = (8192, 4096)  # one tile: an A box and a B box, each completing on full[s]


def test_the_arithmetic():
    p = Pipeline(stages=3, consumers=2, tx_bytes=box_bytes((64, 64), 2) + box_bytes((32, 64), 2))
    assert p.tx_bytes == 12288 and p.expect_tx == 12288
    assert [p.stage(t) for t in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert [p.full_parity(t) for t in range(7)] == [0, 0, 0, 1, 1, 1, 0]
    assert [p.empty_parity(t) for t in range(7)] == [1, 1, 1, 0, 0, 0, 1]
    assert (p.full_arrivals, p.empty_arrivals, p.smem_bytes) == (1, 2, 48)
    # the running (stage, phase) a kernel keeps equals the closed form, tile after tile
    stage, phase = 0, 0
    for t in range(20):
        assert (stage, phase) == (p.stage(t), p.full_parity(t))
        stage, phase = p.advance(stage, phase)
    # C expressions for the kernel
    assert p.stage("kt") == "(kt % 3)" and p.full_parity("kt + 1") == "(((kt + 1) / 3) & 1)"
    assert p.empty_parity("kt") == "(((kt / 3) & 1) ^ 1)"
    assert p.advance("st", "ph") == "if (++st == 3) { st = 0; ph ^= 1; }"


@pytest.mark.parametrize("kw,msg", [
    (dict(stages=0, consumers=1, tx_bytes=16), "stages=0 must be an int in"),
    (dict(stages=2, consumers=0, tx_bytes=16), "consumers=0"),
    (dict(stages=2, consumers=1, tx_bytes=MAX_TX_BYTES + 1), "transaction count is 20 bits"),
    (dict(stages=2, consumers=1, tx_bytes=24), "tx_bytes=24 must be a multiple of 16"),
    (dict(stages=2.0, consumers=1, tx_bytes=16), "stages=2.0")])
def test_bad_pipelines(kw, msg):
    with pytest.raises(gpucg.InputError, match=msg):
        Pipeline(**kw)


def test_every_small_ring_holds():
    results = sweep(max_stages=5, max_tiles=8, max_consumers=2, copies=COPIES)
    assert len(results) == 5 * 9 * 2
    bad = [(cfg, str(r.violations[0])) for cfg, r in results if not r.ok]
    assert not bad, bad
    # every interleaving was visited: the largest ring's states, counted
    assert dict(results)[(5, 8, 2)].states > 1000


class WrongConsumerParity(Pipeline):
    def full_parity(self, t):
        return super().full_parity(t) ^ 1


class ParityOfTheTile(Pipeline):
    """A classic slip: the tile's parity instead of its fill's."""

    def full_parity(self, t):
        return t & 1


class UnflippedProducerParity(Pipeline):
    def empty_parity(self, t):
        return self.full_parity(t)


class ReleaseCountOneShort(Pipeline):
    @property
    def empty_arrivals(self):
        return self.consumers - 1


class ReleaseCountOneOver(Pipeline):
    @property
    def empty_arrivals(self):
        return self.consumers + 1


class ArmCountOneOver(Pipeline):
    @property
    def full_arrivals(self):
        return self.producers + 1


class ExpectsOneBox(Pipeline):
    """expect_tx announcing the A box alone."""

    @property
    def expect_tx(self):
        return COPIES[0]


@pytest.mark.parametrize("bug,want", [
    (WrongConsumerParity, {EARLY_READ}), (ParityOfTheTile, {EARLY_READ}),
    (UnflippedProducerParity, {DEADLOCK}), (ReleaseCountOneShort, {EARLY_REFILL, ALIAS}),
    (ReleaseCountOneOver, {DEADLOCK}), (ArmCountOneOver, {DEADLOCK}),
    (ExpectsOneBox, {EARLY_READ})], ids=lambda v: getattr(v, "__name__", ""))
def test_planted_bugs_are_found(bug, want):
    result = check(bug(stages=2, consumers=2, tx_bytes=sum(COPIES)), 5, COPIES)
    assert want <= result.kinds, [str(v) for v in result.violations]
    assert all(v.trace or v.kind == DEADLOCK for v in result.violations)


def test_a_consumer_that_skips_its_release_deadlocks_the_producer():
    pipe = Pipeline(stages=2, consumers=2, tx_bytes=sum(COPIES))
    result = check(pipe, 5, COPIES, skip_release={(1, 0)})
    assert result.kinds == {DEADLOCK}
    (v,) = result.violations
    assert "producer at tile 2" in v.detail
    assert "consumer 1 leaves tile 0 without its release arrive" in v.trace
    # one stage and one tile: nothing waits for the release, nothing is wrong
    assert check(Pipeline(1, 1, 16), 1, skip_release={(0, 0)}).ok


def test_bad_tiles():
    with pytest.raises(gpucg.InputError, match="tiles=-1"):
        check(Pipeline(2, 1, 16), -1)
