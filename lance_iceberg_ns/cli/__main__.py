"""``python -m lance_iceberg_ns.cli``: the ``lance-iceberg-ns`` command."""

import sys

from lance_iceberg_ns.cli import main

sys.exit(main())
