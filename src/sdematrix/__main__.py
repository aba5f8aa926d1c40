"""``python -m sdematrix``: the same as the ``sdematrix`` console script."""

import sys

from .cli import main

sys.exit(main())
