"""Process-wide counters: compiles, cache hits, launches, renders, dispatches, and the device
arrays a backend makes: buffers (every device allocation), uploads (host to device), downloads
(device to host), device_copies (a strided or offset view made contiguous on the device)."""

from __future__ import annotations

import threading
from collections import Counter

_lock = threading.Lock()
_counts: Counter = Counter()

KEYS = ("compiles", "memory_hits", "disk_hits", "launches", "renders", "dispatches", "buffers",
        "uploads", "downloads", "device_copies")


def bump(key: str, n: int = 1) -> None:
    with _lock:
        _counts[key] += n


def snapshot(reset: bool = False) -> dict:
    """The counters as a dict (every known key present); ``reset`` zeroes them."""
    with _lock:
        out = {k: _counts.get(k, 0) for k in KEYS}
        out.update({k: v for k, v in _counts.items() if k not in out})
        if reset:
            _counts.clear()
    return out
