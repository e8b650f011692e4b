"""gpucg's own arrays on OpenCL: a buffer and what launch code reads of an array."""

from __future__ import annotations


class DeviceArray:
    """A device buffer with the array attributes kernels' launch code reads (shape, dtype,
    size, nbytes). gpucg's own arrays on OpenCL: a tenth of the cost of a
    pyopencl.array.Array to make, which matters for small calls. Users get pyopencl arrays
    (``OpenCLBackend.export``)."""

    __slots__ = ("data", "shape", "dtype", "size", "nbytes", "fresh", "host")
    gpucg_backend = "opencl"

    def __init__(self, data, shape, dtype, fresh: bool = False, host=None):
        self.data = data
        self.shape = shape
        self.dtype = dtype
        #: made by OpenCLBackend.empty: its buffer is no one else's (the result may be mapped)
        self.fresh = fresh
        #: the NumPy array whose memory ``data`` uses in place (OpenCLBackend.borrow), or None
        self.host = host
        size = 1
        for d in shape:
            size *= d
        self.size = size
        self.nbytes = size * dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)
