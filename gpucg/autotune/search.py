"""Search methods over the candidates of one workload: grid, random, anneal, model.

A search method proposes candidate indices (``ask``) and learns their costs (``tell``), a cost of
``inf`` meaning the candidate failed. Each is deterministic: the same seed, candidates and
costs give the same proposals, so a replayed log reproduces a run exactly (and the test suite
checks every method that way, with no device).

- grid: every candidate, implementations interleaved (so a truncated grid covers them all),
  configs in their space's order.
- random: a seeded permutation.
- anneal: simulated annealing over neighbouring configs (one knob one step away), with a
  random restart when every neighbour is measured.
- model: Optuna's TPE sampler (the ``tune`` extra) over the implementation and its knobs.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ..errors import InputError

SEARCHES = ("grid", "random", "anneal", "model")


class Candidates:
    """The (implementation, config) pairs of one workload, in a fixed order."""

    def __init__(self, impls):
        """``impls``: [(implementation name, knobs {name: values}, [Config, ...])]."""
        self.impls = [name for name, _, _ in impls]
        self.knobs = {name: dict(knobs) for name, knobs, _ in impls}
        self.items: list[tuple[str, object]] = []
        for name, _, configs in impls:
            self.items += [(name, c) for c in configs]
        self.index = {(name, self.key(c)): i for i, (name, c) in enumerate(self.items)}
        self._neighbours: dict = {}

    @staticmethod
    def key(config) -> tuple:
        return tuple(sorted(dict(config).items()))

    def find(self, impl: str, config) -> int | None:
        return self.index.get((impl, self.key(config)))

    def __len__(self) -> int:
        return len(self.items)

    def neighbours(self, i: int) -> list[int]:
        """Candidates of the same implementation one knob one step away."""
        if i not in self._neighbours:
            name, cfg = self.items[i]
            out = []
            for knob, values in self.knobs[name].items():
                pos = values.index(cfg[knob])
                for step in (-1, 1):
                    if 0 <= pos + step < len(values):
                        j = self.find(name, dict(cfg, **{knob: values[pos + step]}))
                        if j is not None:
                            out.append(j)
            self._neighbours[i] = out
        return self._neighbours[i]


class Search:
    """Base: remembers what was told; subclasses choose what to ask."""

    name = ""

    def __init__(self, cands: Candidates, seed: int = 0):
        self.cands = cands
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.costs: dict[int, float] = {}
        self.asked: set[int] = set()

    def untold(self, i: int) -> bool:
        return i not in self.costs and i not in self.asked

    def ask(self, n: int = 1) -> list[int]:
        out = []
        for _ in range(n):
            i = self._next()
            if i is None:
                break
            self.asked.add(i)
            out.append(i)
        return out

    def tell(self, i: int, cost: float) -> None:
        self.asked.discard(i)
        self.costs[i] = cost if cost is not None and math.isfinite(cost) else math.inf
        self._learn(i, self.costs[i])

    def _learn(self, i: int, cost: float) -> None:
        pass

    def _random_untold(self) -> int | None:
        left = [i for i in range(len(self.cands)) if self.untold(i)]
        return left[int(self.rng.integers(len(left)))] if left else None


class Grid(Search):
    name = "grid"

    def __init__(self, cands, seed=0):
        super().__init__(cands, seed)
        per = {name: [i for i, (n, _) in enumerate(cands.items) if n == name]
               for name in cands.impls}
        self.order = [lst[k] for k in range(max(map(len, per.values()), default=0))
                      for lst in per.values() if k < len(lst)]

    def _next(self):
        return next((i for i in self.order if self.untold(i)), None)


class Random(Search):
    name = "random"

    def __init__(self, cands, seed=0):
        super().__init__(cands, seed)
        self.order = [int(i) for i in self.rng.permutation(len(cands))]

    def _next(self):
        return next((i for i in self.order if self.untold(i)), None)


class Anneal(Search):
    """Simulated annealing on log cost: a worse neighbour is accepted with probability
    exp(-(log c_new - log c_cur) / T); T starts at ``t0`` and cools by ``cooling`` a step."""

    name = "anneal"

    def __init__(self, cands, seed=0, t0: float = 0.3, cooling: float = 0.92):
        super().__init__(cands, seed)
        self.current: int | None = None
        self.temperature = t0
        self.cooling = cooling

    def _next(self):
        if self.current is not None:
            near = [j for j in self.cands.neighbours(self.current) if self.untold(j)]
            if near:
                return near[int(self.rng.integers(len(near)))]
        return self._random_untold()

    def _learn(self, i, cost):
        cur = self.costs.get(self.current, math.inf) if self.current is not None else math.inf
        if cost < cur:
            self.current = i
        elif math.isfinite(cost) and math.isfinite(cur):
            if self.rng.random() < math.exp(-(math.log(cost) - math.log(cur)) / self.temperature):
                self.current = i
        self.temperature *= self.cooling


def _ordered(values) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


class Model(Search):
    """Optuna's TPE sampler over (implementation, its knobs); failed candidates and configs
    outside the space are told a cost worse than any seen, so it learns to avoid them.

    A knob of numbers is sampled as the position of its value (an ordered integer: TPE then
    learns that 32 lies between 16 and 64), any other knob as a category. On a recorded conv2d
    space this reaches the grid's best within 5% in 8-41 trials over eight seeds, where
    categorical knobs miss it half the time."""

    name = "model"
    ATTEMPTS = 16

    def __init__(self, cands, seed=0):
        super().__init__(cands, seed)
        try:
            import optuna
        except ImportError:
            raise InputError("search='model' needs Optuna (Optuna's TPE sampler): "
                             "pip install 'gpucg[tune]'") from None
        self.optuna = optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampler = optuna.samplers.TPESampler(
                seed=seed, multivariate=True, group=True,
                n_startup_trials=5)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self.pending: dict[int, object] = {}
        self.dists = {"impl": optuna.distributions.CategoricalDistribution(cands.impls)} \
            if cands.impls else {}
        for name, knobs in cands.knobs.items():
            for knob, values in knobs.items():
                self.dists[f"{name}:{knob}"] = (
                    optuna.distributions.IntDistribution(0, len(values) - 1)
                    if _ordered(values) else optuna.distributions.CategoricalDistribution(values))

    def _penalty(self) -> float:
        seen = [math.log(c) for c in self.costs.values() if math.isfinite(c) and c > 0]
        return (max(seen) + 1.0) if seen else 10.0

    def _value(self, cost: float) -> float:
        return math.log(cost) if math.isfinite(cost) and cost > 0 else self._penalty()

    def _params(self, i: int) -> dict:
        name, cfg = self.cands.items[i]
        knobs = self.cands.knobs[name]
        return {"impl": name, **{f"{name}:{k}": knobs[k].index(v) if _ordered(knobs[k]) else v
                                 for k, v in cfg.items()}}

    def _suggest(self, trial, name: str) -> dict:
        cfg = {}
        for k, values in self.cands.knobs[name].items():
            if _ordered(values):
                cfg[k] = values[trial.suggest_int(f"{name}:{k}", 0, len(values) - 1)]
            else:
                cfg[k] = trial.suggest_categorical(f"{name}:{k}", list(values))
        return cfg

    def _next(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(self.ATTEMPTS):
                trial = self.study.ask()
                name = trial.suggest_categorical("impl", self.cands.impls)
                cfg = self._suggest(trial, name)
                i = self.cands.find(name, cfg)
                if i is None:
                    self.study.tell(trial, self._penalty())  # not in the space
                elif i in self.costs:
                    self.study.tell(trial, self._value(self.costs[i]))
                elif i in self.asked:
                    self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
                else:
                    self.pending[i] = trial
                    return i
        return self._random_untold()

    def _learn(self, i, cost):
        trial = self.pending.pop(i, None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if trial is not None:
                self.study.tell(trial, self._value(cost))
            else:  # told without being asked (the default config, a replayed record)
                params = self._params(i)
                self.study.add_trial(self.optuna.trial.create_trial(
                    params=params, distributions={k: self.dists[k] for k in params},
                    value=self._value(cost)))


def check_search(name: str) -> None:
    """InputError unless ``name`` is a search method that can run here."""
    if name not in SEARCHES:
        raise InputError(f"search={name!r} is not a search method; allowed: "
                         f"{', '.join(SEARCHES)}")
    if name == "model":
        Model(Candidates([]), 0)  # Optuna is installed


def make_search(name: str, cands: Candidates, seed: int = 0) -> Search:
    """A search method by name (InputError naming the allowed ones)."""
    check_search(name)
    return {"grid": Grid, "random": Random, "anneal": Anneal, "model": Model}[name](cands, seed)
