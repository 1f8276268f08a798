"""``python -m pyoffload``: the ``pyoffload`` command."""

import sys

from .cli import main

sys.exit(main())
