"""Run the scan benchmark: python benchmarks/scan.py [--json] (same as `gpucg bench scan`)."""

import sys

from gpucg.benchmarks.scan import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
