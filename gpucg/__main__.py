"""``python -m gpucg``: the ``gpucg`` command."""

import sys

from .cli import main

sys.exit(main())
