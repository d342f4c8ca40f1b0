"""``python -m tether.adapters.cli``: the ``tether`` command."""

import sys

from tether.adapters.cli import main

sys.exit(main())
