"""``python -m infra.servers``: fetch, start, stop and query the real servers (see ``cli``)."""

import sys

from infra.servers.cli import main

sys.exit(main())
