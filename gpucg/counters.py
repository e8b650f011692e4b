"""Process-wide counters: compiles, cache hits, launches, renders, runs; device arrays a backend
makes: buffers (every device allocation), uploads and downloads (host-device copies),
device_copies (a strided or offset view made contiguous on the device), borrowed and mapped
(host memory used in place of a copy); eager calls served by the fast path (fast_calls); calls
whose launches were replayed (replays: gpucg.run_context.Replay)."""

from __future__ import annotations

import threading
from collections import Counter

_lock = threading.Lock()
_counts: Counter = Counter()

KEYS = ("compiles", "memory_hits", "disk_hits", "launches", "renders", "runs", "buffers")
KEYS += ("uploads", "downloads", "device_copies", "borrowed", "mapped", "fast_calls", "replays")


def bump(key: str, n: int = 1) -> None:
    with _lock:
        _counts[key] += n


def bump_each(keys) -> None:
    """Each of ``keys`` by one, under one lock (a call's several counts)."""
    with _lock:
        for key in keys:
            _counts[key] += 1


def snapshot(reset: bool = False) -> dict:
    """The counters as a dict (every known key present); ``reset`` zeroes them."""
    with _lock:
        out = {k: _counts.get(k, 0) for k in KEYS}
        out.update({k: v for k, v in _counts.items() if k not in out})
        if reset:
            _counts.clear()
    return out
