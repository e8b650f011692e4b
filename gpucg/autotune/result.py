"""What a tuning run returns: per size bucket the best candidate, the default, the history."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

from ..errors import InputError


@dataclass
class Trial:
    """One candidate of one bucket: measured now, or read back from an earlier run."""

    number: int
    impl: str
    config: dict
    cost: float | None = None
    spread: float = 0.0
    error: str | None = None
    message: str = ""
    resumed: bool = False
    default: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and self.cost is not None and math.isfinite(self.cost)

    def describe(self) -> str:
        cfg = ",".join(f"{k}={v}" for k, v in sorted(self.config.items())) or "-"
        what = f"{self.cost * 1e3:.4g} ms" if self.ok else f"{self.error}: {self.message}"
        return f"{self.impl} [{cfg}] {what}"


@dataclass
class BucketResult:
    """The outcome for one size bucket ({} for constant shapes)."""

    bucket: dict
    trials: list = field(default_factory=list)
    best: Trial | None = None
    default: Trial | None = None
    candidates: int = 0

    @property
    def speedup(self) -> float | None:
        """The default's cost over the best's (None when either failed)."""
        if self.best is None or self.default is None or not self.default.ok:
            return None
        return self.default.cost / self.best.cost

    def best_so_far(self) -> list[float]:
        """The best cost after each trial (inf until one succeeds)."""
        out, best = [], math.inf
        for t in self.trials:
            if t.ok:
                best = min(best, t.cost)
            out.append(best)
        return out

    def trials_to(self, cost: float) -> int | None:
        """How many trials it took to reach ``cost`` (None if never)."""
        for n, b in enumerate(self.best_so_far(), 1):
            if b <= cost:
                return n
        return None


@dataclass
class TuneResult:
    """A tuning run: per bucket the best implementation and config, the default config's cost
    in the same run, the speedup, and every trial."""

    op: str
    target: str
    device: str
    search: str
    seed: int
    records: str
    buckets: list = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def best(self) -> Trial | None:
        """The best trial of the first bucket (the only one for constant shapes)."""
        return self.buckets[0].best if self.buckets else None

    @property
    def history(self) -> list:
        return [t for b in self.buckets for t in b.trials]

    def __str__(self) -> str:
        lines = [f"tuned {self.op} on {self.target} ({self.device}) with {self.search} search, "
                 f"seed {self.seed}, in {self.wall_s:.1f} s; records: {self.records}"]
        for b in self.buckets:
            where = ", ".join(f"{k}={v}" for k, v in b.bucket.items()) or "constant shapes"
            measured = sum(not t.resumed for t in b.trials)
            dropped = sum(t.error == "dropped" for t in b.trials)
            failed = sum(t.error not in (None, "dropped") for t in b.trials)
            lines.append(f"  {where}: {len(b.trials)} trials of {b.candidates} candidates "
                         f"({measured} measured now, {len(b.trials) - measured} from records, "
                         f"{dropped} dropped, {failed} failed)")
            if b.default is not None:
                lines.append(f"    default: {b.default.describe()}")
            if b.best is not None:
                sp = f" ({b.speedup:.2f}x the default)" if b.speedup else ""
                lines.append(f"    best:    {b.best.describe()}{sp}")
            else:
                lines.append("    best:    none succeeded")
        return "\n".join(lines)

    def to_json(self) -> str:
        d = asdict(self)
        for b, src in zip(d["buckets"], self.buckets):
            b["speedup"] = src.speedup
        return json.dumps(d, default=str, indent=1)

    def plot(self, path) -> None:
        """Save best-so-far against trials, one line per bucket, as a PNG (matplotlib)."""
        try:
            import matplotlib
        except ImportError:
            raise InputError("plotting needs matplotlib: pip install 'gpucg[tune]'") from None
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for b in self.buckets:
            ys = [c * 1e3 if math.isfinite(c) else float("nan") for c in b.best_so_far()]
            label = ", ".join(f"{k}={v}" for k, v in b.bucket.items()) or self.op
            ax.step(range(1, len(ys) + 1), ys, where="post", label=label)
            if b.default is not None and b.default.ok:
                ax.axhline(b.default.cost * 1e3, linestyle=":", linewidth=0.8, color="grey")
        ax.set_xlabel("trials")
        ax.set_ylabel("best cost so far (ms)")
        ax.set_title(f"{self.op} on {self.target}: {self.search} search (dotted: default)")
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
