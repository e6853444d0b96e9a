"""``python -m framescope`` runs the command line."""

import sys

from framescope.cli import main

sys.exit(main())
