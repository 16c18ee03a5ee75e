"""Moving Lance tables from a directory namespace into the Iceberg catalog, without copying data:
``import_directory`` registers every table of the directory as a companion table at its
location (a dry run first), then readers and writers go through the catalog.

    .venv/bin/pip install -e ".[local]"
    .venv/bin/python examples/migration.py       # a small directory namespace, into the local catalog
    .venv/bin/python examples/migration.py --source /data/old-lance --into wh.imported \\
        --endpoint https://catalog.example.com --root s3://lake/lance

The same from the command line: ``lance-iceberg-ns import-directory SOURCE --into WH.NS [--dry-run]``.
The directory is added to ``allowed_locations``, so that its tables are registered where they are
(without it, each is copied into the root: see docs/migration.md).
"""

from __future__ import annotations

import argparse
import tempfile

import lance
import pyarrow as pa

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.demo import catalog_endpoint
from lance_iceberg_ns.jobs.directory_import import import_directory


def example_directory() -> str:
    """A directory namespace of two tables, as a team writing Lance by path has one."""
    directory = tempfile.mkdtemp(prefix="old-lance-")
    lance.write_dataset(
        pa.table({"id": range(1000), "amount": [i * 0.5 for i in range(1000)]}), f"{directory}/orders.lance"
    )
    lance.write_dataset(
        pa.table({"id": range(10), "name": [f"c{i}" for i in range(10)]}), f"{directory}/customers.lance"
    )
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", help="the directory namespace's root (default: make a small one)")
    parser.add_argument("--into", default="demo_wh.imported", help="warehouse.namespace to import into")
    parser.add_argument("--endpoint", help="an Iceberg REST catalog (default: start the local one)")
    parser.add_argument("--root", help="the bridge's storage root (default: a temporary directory)")
    args = parser.parse_args()
    source = args.source or example_directory()
    into = args.into.split(".")

    with catalog_endpoint(args.endpoint) as endpoint:
        root = args.root or tempfile.mkdtemp(prefix="lance-example-")
        with IcebergLanceNamespace(endpoint=endpoint, root=root, allowed_locations=source) as ns:
            # what would happen; the import; the import again, which changes nothing
            for label, dry_run in (("dry run", True), ("import", False), ("again", False)):
                summary = import_directory(ns, source, into, dry_run=dry_run)
                outcomes = ", ".join(f"{'.'.join(table.source)}: {table.outcome}" for table in summary.tables)
                print(f"{label}: {outcomes}")

            for name in sorted(ns.list_tables({"id": into}).tables):
                dataset = lance.dataset(namespace_client=ns, table_id=[*into, name])
                print(f"{args.into}.{name}: {dataset.count_rows()} rows at {dataset.uri}")


if __name__ == "__main__":
    main()
