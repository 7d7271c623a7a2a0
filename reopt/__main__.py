"""``python -m reopt``: the same command line as ``reopt``."""

import sys

from .cli import main

sys.exit(main())
