"""``python -m adapters.cli``: the ``tether`` command."""

import sys

from adapters.cli import main

sys.exit(main())
