"""``python -m hiddenstate ...`` runs the command line (:func:`hiddenstate.cli.main`)."""

import sys

from hiddenstate.cli import main

sys.exit(main())
