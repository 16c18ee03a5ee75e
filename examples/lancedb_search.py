"""Vector search with lancedb on a Lance table of the Iceberg catalog: create a table of product
embeddings, index it, search it with a filter, add rows as a new version and read an older one.

    .venv/bin/pip install -e ".[demo]"
    .venv/bin/python examples/lancedb_search.py                # on the embedded local catalog
    .venv/bin/python examples/lancedb_search.py --endpoint https://catalog.example.com --root s3://lake/lance
    .venv/bin/python examples/lancedb_search.py --uri http://127.0.0.1:2333   # through lance-iceberg-ns serve
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Iterator
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
from lancedb.index import IvfFlat

import lance_iceberg_ns  # noqa: F401  (registers the "iceberg" implementation with lancedb)
from lance_iceberg_ns.demo import catalog_endpoint, example_arguments

DIMENSION = 64
CATEGORIES = ("books", "games", "music")


def products(start: int, count: int) -> pa.Table:
    ids = np.arange(start, start + count)
    vectors = np.random.default_rng(start).random((count, DIMENSION), dtype=np.float32)
    return pa.table(
        {
            "id": ids,
            "category": [CATEGORIES[i % len(CATEGORIES)] for i in ids],
            "price": np.round(5 + ids % 50 * 1.25, 2),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIMENSION),
        }
    )


@contextlib.contextmanager
def connect(args: argparse.Namespace) -> Iterator[Any]:
    """lancedb through the Lance REST server at ``--uri``, or in process through the catalog."""
    if args.uri:
        yield lancedb.connect_namespace("rest", {"uri": args.uri})
        return
    with catalog_endpoint(args.endpoint) as endpoint:
        root = args.root or tempfile.mkdtemp(prefix="lance-example-")
        yield lancedb.connect_namespace("iceberg", {"endpoint": endpoint, "root": root})


def main() -> None:
    parser = example_arguments(__doc__)
    parser.add_argument("--rows", type=int, default=2000)
    args = parser.parse_args()
    namespace = args.namespace.split(".")

    with connect(args) as db:
        db.create_namespace(namespace, mode="exist_ok")
        table = db.create_table("products", products(0, args.rows), namespace_path=namespace, mode="overwrite")
        table.create_index("vector", config=IvfFlat(num_partitions=4))
        print(f"products: {table.count_rows()} rows, indices {[index.name for index in table.list_indices()]}")

        query = table.search().where("id = 7").select(["vector"]).limit(1).to_list()[0]["vector"]
        for label, search in (
            ("nearest to product 7", table.search(query)),
            ("nearest books under 20", table.search(query).where("category = 'books' AND price < 20")),
        ):
            hits = search.select(["id", "_distance"]).limit(3).to_list()
            print(f"{label}: " + ", ".join(f"{hit['id']} ({hit['_distance']:.2f})" for hit in hits))

        before = table.version
        table.add(products(args.rows, 100))
        print(f"version {table.version}: {table.count_rows()} rows; ", end="")
        table.checkout(before)
        print(f"version {before}: {table.count_rows()} rows")


if __name__ == "__main__":
    main()
