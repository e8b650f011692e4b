"""The package version (one place; the kernel cache keys include it)."""

__version__ = "0.1.0"
