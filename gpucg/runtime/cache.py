"""On-disk kernel cache: keyed by everything that changes the binary, verified on load.

Each entry is ``sha256(payload) + payload``; a short or mismatching file is treated as missing
and rebuilt. Writes go to a temp file in the same directory and are renamed into place, so
concurrent writers and crashes never leave a half-written entry behind.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

from .. import settings
from ..version import __version__

log = logging.getLogger("gpucg.cache")
_DIGEST = 32


def cache_key(*parts) -> str:
    """A hex key from the source, options, device, compiler version (and gpucg's version)."""
    h = hashlib.sha256()
    for part in (__version__,) + parts:
        data = part if isinstance(part, bytes) else repr(part).encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def keeps_own_binaries(platform: str) -> bool:
    """Whether an OpenCL platform keeps its own binaries, so that gpucg's cache keeps none of
    its: PoCL, while its cache (by source) is on. Asking PoCL for a binary would compile each
    kernel once more, for an open work-group size (2446 kernels of 0.15-0.5 s of LLVM each in
    the test suite's cold cache)."""
    pocl = "portable computing language" in platform.lower()
    return pocl and os.environ.get("POCL_KERNEL_CACHE", "1") != "0"


class DiskCache:
    """A directory of verified binary entries."""

    def __init__(self, directory=None, namespace: str = "kernels"):
        self._directory = directory
        self.namespace = namespace

    @property
    def directory(self) -> Path:
        base = Path(self._directory) if self._directory else settings.cache_dir()
        return base / self.namespace

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / key

    def get(self, key: str) -> bytes | None:
        if not settings.disk_cache():
            return None
        path = self._path(key)
        try:
            blob = path.read_bytes()
        except OSError:
            return None
        payload = blob[_DIGEST:]
        if len(blob) < _DIGEST or hashlib.sha256(payload).digest() != blob[:_DIGEST]:
            log.warning("kernel cache entry %s is corrupted; rebuilding it", path)
            try:
                path.unlink()
            except OSError:
                pass
            return None
        return payload

    def put(self, key: str, payload: bytes) -> None:
        if not settings.disk_cache():
            return
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, path)
        except OSError as exc:  # a read-only or full disk must not break compilation
            log.warning("could not write kernel cache entry %s: %s", path, exc)
