"""Checks of generated kernels that need no GPU: NVRTC compilation (nvrtc), ptxas registers,
shared memory, spills and occupancy (resources, occupancy), the CUDA launch path against a
recording stand-in for CuPy (cupy_standin), Oclgrind's race, bounds and traffic checks
(oclgrind, oclgrind_worker), and the baseline file tests compare against (baseline).
They stand above the operators: each compiles operators to check them.
"""
