"""``python -m hiddenstate ...`` runs the command line (:func:`hiddenstate.cli.main`)."""

import sys

from .cli import main

sys.exit(main())
