"""SQL on Lance tables of the Iceberg catalog with DuckDB's Lance extension, through the Lance REST
server: tables written by any Lance client, then aggregated, joined and searched by vector in SQL.

DuckDB loads the extension from the ``duckdb-extension-lance`` wheel (pinned to DuckDB's version,
unsigned: ``allow_unsigned_extensions``) and reaches the tables through ``lance-iceberg-ns serve``.

    .venv/bin/pip install -e ".[demo]"
    .venv/bin/python examples/duckdb_sql.py                               # a local catalog and a server of its own
    .venv/bin/python examples/duckdb_sql.py --uri http://127.0.0.1:2333   # a running lance-iceberg-ns serve
"""

from __future__ import annotations

import lance
import lance.namespace
import numpy as np
import pyarrow as pa
from lance_namespace import CreateNamespaceRequest, ListTablesRequest

from lance_iceberg_ns.demo import duckdb_with_lance, example_arguments, lance_rest_server

ZONES = ("north", "south", "east", "west", "centre")


def trips(count: int) -> pa.Table:
    ids = np.arange(count)
    zones = ids % len(ZONES)
    embeddings = np.random.default_rng(0).random((count, 8), dtype=np.float32)
    return pa.table(
        {
            "id": ids,
            "zone": zones,
            "fare": np.round(2 + ids % 17 * 0.75 + zones * 1.5, 2),
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(embeddings.ravel()), 8),
        }
    )


def main() -> None:
    parser = example_arguments(__doc__)
    args = parser.parse_args()
    namespace = args.namespace.split(".")

    with lance_rest_server(args.uri, args.endpoint, args.root) as uri:
        # 1. the tables, written through the server by pylance (Spark, lancedb... would do as well)
        client = lance.namespace.RestNamespace(uri=uri)
        client.create_namespace(CreateNamespaceRequest(id=namespace, mode="exist_ok"))
        existing = client.list_tables(ListTablesRequest(id=namespace)).tables
        zones = pa.table({"zone": range(len(ZONES)), "name": ZONES})
        trip_rows = trips(10_000)
        for name, data in (("trips", trip_rows), ("zones", zones)):
            mode = "overwrite" if name in existing else "create"
            lance.write_dataset(data, namespace_client=client, table_id=[*namespace, name], mode=mode)

        # 2. DuckDB attaches the namespace and queries its tables by name
        duck = duckdb_with_lance()
        duck.execute(f"ATTACH '{'$'.join(namespace)}' AS lake (TYPE LANCE, ENDPOINT '{uri}')")
        tables = duck.execute("SELECT table_name FROM information_schema.tables WHERE table_catalog = 'lake'")
        print("tables:", sorted(name for (name,) in tables.fetchall()))
        by_zone = duck.execute("""
            SELECT z.name, count(*) AS trips, round(avg(t.fare), 2) AS average_fare
            FROM lake.main.trips t JOIN lake.main.zones z USING (zone)
            GROUP BY z.name ORDER BY z.name
        """)
        for name, count, fare in by_zone.fetchall():
            print(f"{name}: {count} trips, average fare {fare}")
        probe = trip_rows["embedding"][42].as_py()  # trip 42's embedding
        nearest = duck.execute(f"""
            SELECT id, _distance FROM lance_vector_search('lake.main.trips', 'embedding', {probe}::FLOAT[8], k := 3)
            ORDER BY _distance
        """)
        print(
            "trips nearest to trip 42:", ", ".join(f"{trip} ({distance:.3f})" for trip, distance in nearest.fetchall())
        )
        duck.close()


if __name__ == "__main__":
    main()
