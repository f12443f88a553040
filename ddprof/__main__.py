"""``python -m ddprof`` runs the command line."""

import sys

from ddprof.cli import main

sys.exit(main())
