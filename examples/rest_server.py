"""Any Lance client through ``lance-iceberg-ns serve``: pylance's native REST client creates a
namespace, writes a table, lists, describes, appends and reads it back, while the table lives in
the Iceberg catalog behind the server.

    .venv/bin/pip install -e ".[demo]"
    .venv/bin/python examples/rest_server.py                               # a local catalog and a server of its own
    .venv/bin/python examples/rest_server.py --uri http://127.0.0.1:2333   # a running lance-iceberg-ns serve
    LANCE_REST_TOKEN=... .venv/bin/python examples/rest_server.py --uri https://lance.example.com

A server started with ``--auth-token-file`` wants a bearer token: give it in ``LANCE_REST_TOKEN``.
"""

from __future__ import annotations

import os

import lance
import lance.namespace
import pyarrow as pa
from lance_namespace import CreateNamespaceRequest, DescribeTableRequest, ListTablesRequest

from lance_iceberg_ns.demo import example_arguments, lance_rest_server


def events(start: int, count: int) -> pa.Table:
    ids = pa.array(range(start, start + count), pa.int64())
    return pa.table({"id": ids, "kind": [("click", "view", "buy")[i % 3] for i in range(start, start + count)]})


def main() -> None:
    parser = example_arguments(__doc__)
    args = parser.parse_args()
    namespace = args.namespace.split(".")
    table_id = [*namespace, "events"]
    token = os.environ.get("LANCE_REST_TOKEN")
    headers = {"header.Authorization": f"Bearer {token}"} if token else {}

    with lance_rest_server(args.uri, args.endpoint, args.root) as uri:
        client = lance.namespace.RestNamespace(uri=uri, **headers)
        client.create_namespace(CreateNamespaceRequest(id=namespace, mode="exist_ok"))
        mode = "overwrite" if table_id[-1] in client.list_tables(ListTablesRequest(id=namespace)).tables else "create"
        lance.write_dataset(events(0, 300), namespace_client=client, table_id=table_id, mode=mode)
        lance.write_dataset(events(300, 100), namespace_client=client, table_id=table_id, mode="append")
        print(f"tables in {args.namespace}:", client.list_tables(ListTablesRequest(id=namespace)).tables)

        described = client.describe_table(DescribeTableRequest(id=table_id, load_detailed_metadata=True))
        print(f"{'.'.join(table_id)}: version {described.version} at {described.location}")
        print("its companion in the Iceberg catalog:", described.properties)
        dataset = lance.dataset(namespace_client=client, table_id=table_id)
        buys = dataset.to_table(filter="kind = 'buy'", columns=["id"]).num_rows
        print(f"{dataset.count_rows()} events, {buys} of them buys")


if __name__ == "__main__":
    main()
