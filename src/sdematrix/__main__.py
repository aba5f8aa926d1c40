"""``python -m sdematrix``: the same as the ``sdematrix`` console script."""

import sys

from .cli.main import main

sys.exit(main())
