"""The NumPy backend: the fallback that runs everywhere, and the reference."""

from __future__ import annotations

import numpy as np

from .base import Backend, c_contiguous


class NumpyBackend(Backend):
    name = "numpy"
    device_type = "cpu"

    _STATUS = (True, f"host CPU (NumPy {np.__version__})", "")

    def status(self):
        return self._STATUS

    def empty(self, shape, dtype):
        return np.empty(shape, dtype=dtype)

    def to_device(self, array):
        return np.asarray(array)

    def to_host(self, array):
        return np.asarray(array)

    def owns(self, array) -> bool:
        return isinstance(array, np.ndarray)

    def contiguous(self, array):
        return c_contiguous(np.asarray(array))
