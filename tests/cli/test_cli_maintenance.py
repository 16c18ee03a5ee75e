"""Table maintenance from a terminal: count, stats, indices and tags, each with --json."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa

from lance_iceberg_ns import IcebergLanceNamespace

from ..helpers import CommandLine


def test_count_stats_indices_and_tags(ns: IcebergLanceNamespace, db: list[str], cli: CommandLine) -> None:
    table_id = [*db, "items"]
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(np.random.default_rng(1).random(512 * 8, dtype=np.float32)), 8)
    data = pa.table({"id": list(range(512)), "vec": vectors, "kind": ["a", "b"] * 256})
    lance.write_dataset(data, namespace_client=ns, table_id=table_id)
    lance.write_dataset(data.slice(0, 10), namespace_client=ns, table_id=table_id, mode="append")
    table = ".".join(table_id)

    assert cli.json("tables", "count", table)["rows"] == 522
    assert cli.json("tables", "count", table, "--where", "kind = 'a'", "--version", "1")["rows"] == 256
    assert cli.json("tables", "stats", table)["num_rows"] == 522
    cli.json("tables", "indices", "create", table, "--column", "kind", "--type", "btree")
    cli.json(
        "tables",
        "indices",
        "create",
        table,
        "--column",
        "vec",
        "--type",
        "IVF_PQ",
        "--name",
        "by_vec",
        "--set",
        "num_partitions=2",
        "--set",
        "num_sub_vectors=2",
    )
    listed = {index["index_name"]: index for index in cli.json("tables", "indices", "list", table)["indices"]}
    assert set(listed) == {"kind_idx", "by_vec"} and listed["by_vec"]["columns"] == ["vec"]
    cli.json("tables", "indices", "drop", table, "kind_idx")
    assert [index["index_name"] for index in cli.json("tables", "indices", "list", table)["indices"]] == ["by_vec"]
    cli.json("tables", "tags", "create", table, "first", "1")
    assert cli.json("tables", "tags", "list", table)["tags"]["first"]["version"] == 1
    assert lance.dataset(namespace_client=ns, table_id=table_id, version="first").count_rows() == 512
    cli.json("tables", "tags", "delete", table, "first")
    assert cli.json("tables", "tags", "list", table)["tags"] == {}
