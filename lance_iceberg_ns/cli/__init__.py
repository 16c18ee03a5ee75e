"""The ``lance-iceberg-ns`` command: namespaces, tables, versions, the soft-delete lifecycle,
import from a directory namespace, the REST server and the local catalog.

Connection options (``--catalog``, ``--endpoint``, ``--root``, ``-p key=value``) and output options
(``--json``, ``--debug``, ``--delimiter``) go before or after the command; a command's own win.
Settings also come from ``LANCE_ICEBERG_*`` variables and, with ``--catalog NAME`` (or
``LANCE_ICEBERG_CATALOG``), from a pyiceberg catalog configuration.

Exit codes: 0 success, 1 unexpected failure, 2 invalid input or usage, 3 not found, 4 conflict,
5 unavailable (or throttled, or a busy port), 6 not authenticated or not allowed, 7 unsupported,
130 interrupted (Ctrl-C). An error is one line on stderr (with ``--json`` a JSON object there).

The package: ``base`` (state, options, helpers, the groups), ``catalog_commands``, ``data_commands``,
``engine_commands`` (``tables protect``), ``serve`` (``serve``, ``demo``), ``local_catalog`` and
``running`` (``main``: errors and interruptions to exit codes); importing it registers every
command. It imports only click: pyarrow, pylance, pyiceberg and the server load when a command runs.
"""

from __future__ import annotations

from lance_iceberg_ns.cli import (  # noqa: F401  (they register their commands)
    catalog_commands,
    data_commands,
    engine_commands,
    local_catalog,
    serve,
)
from lance_iceberg_ns.cli.base import (
    EXIT_UNEXPECTED,
    EXIT_USAGE,
    CliState,
    cli,
    common_options,
    exit_code_for,
    namespaces,
    tables,
)
from lance_iceberg_ns.cli.data_commands import SCALAR_INDEX_TYPES, indices, tags
from lance_iceberg_ns.cli.running import EXIT_INTERRUPTED, main

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_UNEXPECTED",
    "EXIT_USAGE",
    "SCALAR_INDEX_TYPES",
    "CliState",
    "cli",
    "common_options",
    "exit_code_for",
    "indices",
    "main",
    "namespaces",
    "tables",
    "tags",
]
