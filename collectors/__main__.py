"""``python -m ddprof.collectors RUN_DIR``: wait for the ranks' files and ingest (what rank 0 runs at exit)."""

import sys

from ddprof.collectors.finish import main

sys.exit(main())
