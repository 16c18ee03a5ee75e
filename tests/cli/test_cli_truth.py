"""The command line never reports false success: purges and orphan runs say what they skipped and
why (exit 1), drops and creates say what happened, a root and property keys are checked, ids are
read as the user meant them, long work reports its time, index parameters are checked, tags stand
for versions, and a restore names the indices it drops before it does anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.cli.data_commands import INDEX_PARAMETERS, SCALAR_INDEX_TYPES
from lance_iceberg_ns.data.indices import SCALAR_TYPES, TOKENIZER_FIELDS, VECTOR_FIELDS, VECTOR_TYPES
from lance_iceberg_ns.tables.tombstones import Tombstone
from lance_iceberg_ns.testing import local_catalog

from ..helpers import CliResult, CommandLine, other_client, run_cli


def _write(ns: IcebergLanceNamespace, table_id: list[str], rows: int = 3) -> None:
    lance.write_dataset(pa.table({"x": list(range(rows))}), namespace_client=ns, table_id=table_id)


def test_purge_says_what_it_purged_and_skipped_and_why_and_exits_1(
    cli: CommandLine, ns: IcebergLanceNamespace, db: list[str], endpoint: str
) -> None:
    warehouse, namespace = db
    for name in ("old", "young"):
        _write(ns, [*db, name])
        ns.drop_table({"id": [*db, name]})
    _write(ns, [*db, "victim"])  # a tombstone copied from a live entry: foreign, never purged
    planted = Tombstone((namespace, "victim"), 1, "planted0000")
    catalog = other_client(endpoint, warehouse)
    catalog.register_table(planted.identifier, catalog.load_table((namespace, "victim")).metadata_location)
    target = ".".join(db)

    too_young = cli("tables", "purge", target, "--older-than", "1h")
    assert too_young.returncode == 1, too_young.stderr  # the foreign entry was due and left whole
    lines = too_young.stdout.splitlines()
    assert f"kept {target}.old: too young: soft-deleted at " in too_young.stdout
    assert any(
        line.startswith(f"skipped {target}.victim: foreign tombstone: its location is not its own") for line in lines
    )
    assert lines[-1] == "0 purged, 2 kept (not due), 1 skipped"
    assert too_young.stderr.splitlines()[-1].startswith("done in ") and too_young.stderr.endswith(" s\n")
    assert ns.table_status([*db, "old"]).state == "soft_deleted"  # nothing was taken

    answer = cli.json("tables", "purge", target, "--older-than", "0s", code=1)
    assert sorted(answer["purged"]) == [f"{target}.old", f"{target}.young"]
    assert [(s["table"], s["reason"].split(":")[0]) for s in answer["skipped"]] == [
        (f"{target}.victim", "foreign tombstone")
    ]
    assert isinstance(answer["elapsed_seconds"], float)

    _write(ns, [*db, "last"])
    ns.drop_table({"id": [*db, "last"]})
    one = cli("tables", "purge", f"{target}.last")
    assert (one.returncode, one.stdout) == (
        0,
        f"purged {target}.last (1 soft-deleted version(s))\n1 purged, 0 kept (not due), 0 skipped\n",
    )
    nothing = cli("tables", "purge", f"{warehouse}.{namespace}", "--older-than", "0s", "--json")
    assert nothing.returncode == 1 and json.loads(nothing.stdout)["purged"] == []  # the foreign entry stays


def test_remove_orphans_says_what_it_kept_as_too_young(
    cli: CommandLine, ns: IcebergLanceNamespace, db: list[str]
) -> None:
    _write(ns, [*db, "t"])
    table = ".".join([*db, "t"])
    stray = Path(ns.describe_table({"id": [*db, "t"]}).location) / "data" / "stray.lance"
    stray.write_bytes(b"left by a failed task")
    kept = cli("tables", "remove-orphans", table, "--older-than", "1h")
    assert kept.returncode == 0 and "kept data/stray.lance: too young: written within the last 1h" in kept.stdout
    assert stray.exists()
    removed = cli.json("tables", "remove-orphans", table, "--older-than", "0s")
    assert (removed["files"], removed["kept"]) == (["data/stray.lance"], []) and not stray.exists()


def test_drops_and_creates_say_what_happened(cli: CommandLine, ns: IcebergLanceNamespace, db: list[str]) -> None:
    warehouse = db[0]
    missing = cli("namespaces", "drop", f"{warehouse}.typo")
    assert missing.returncode == 3 and "NamespaceNotFound" in missing.stderr and missing.stdout == ""
    allowed = cli("namespaces", "drop", f"{warehouse}.typo", "--if-exists")
    assert (allowed.returncode, allowed.stdout) == (0, f"{warehouse}.typo did not exist: nothing dropped\n")
    assert cli.json("namespaces", "drop", f"{warehouse}.typo", "--if-exists") == {
        "namespace": f"{warehouse}.typo",
        "dropped": False,
    }
    existing = cli("namespaces", "create", ".".join(db), "--exist-ok", "--set", "k=v")
    assert existing.stdout == f"{'.'.join(db)} already existed (its properties left as they were)\n"
    assert cli.json("namespaces", "create", ".".join(db), "--exist-ok")["created"] is False

    _write(ns, [*db, "t"])
    table = ".".join([*db, "t"])
    dropped = cli("tables", "drop", table)
    assert dropped.returncode == 0 and dropped.stdout.startswith(f"soft-deleted {table}: its data stays at ")
    assert f"undo: `lance-iceberg-ns tables undrop {table}`" in dropped.stdout
    assert cli("tables", "undrop", table).returncode == 0
    hard = cli.json("tables", "drop", table, "-p", "soft_delete=false")
    assert (hard["soft_deleted"], hard["undo"]) == (False, None)


def test_root_is_required_to_place_data_and_property_keys_are_checked(
    endpoint: str, lance_root: Path, tmp_path: Path, db: list[str]
) -> None:
    rootless = CommandLine(endpoint, None, tmp_path)
    table = ".".join([*db, "later"])
    refused = rootless("tables", "declare", table)
    assert refused.returncode == 2 and "give --root DIR" in refused.stderr
    declared = rootless("tables", "declare", table, "--root", str(lance_root))
    assert declared.returncode == 0 and declared.stdout.rstrip().endswith(f"(under root {lance_root})")
    typo = rootless("tables", "declare", table, "-p", f"rot={lance_root}")
    assert typo.returncode == 2 and "Unknown property 'rot'" in typo.stderr and "did you mean 'root'?" in typo.stderr
    assert typo.stderr.count("\n") == 1
    assert rootless("namespaces", "list", db[0], "-p", "storage.region=x", "-p", "iceberg.header.x=1").returncode == 0
    source = tmp_path / "old-lance"
    lance.write_dataset(pa.table({"x": [1]}), str(source / "t.lance"))
    before = sorted(tmp_path.rglob("*"))
    for command in (("import-directory", str(source), "--into", ".".join(db)), ("serve", "--port", "0")):
        placing = rootless(*command)
        assert placing.returncode == 2 and f"{command[0]} places data under the storage root" in placing.stderr
    assert sorted(tmp_path.rglob("*")) == before and ns_tables(endpoint, db) == ["later"]  # nothing copied


def ns_tables(endpoint: str, db: list[str]) -> list[str]:
    return IcebergLanceNamespace(endpoint=endpoint).list_tables({"id": db}).tables


def test_serve_says_where_it_places_tables(endpoint: str, lance_root: Path) -> None:
    command = [sys.executable, "-m", "lance_iceberg_ns.cli", "serve", "--endpoint", endpoint, "--root", str(lance_root)]
    serving = subprocess.Popen([*command, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert serving.stdout is not None
        first_line = serving.stdout.readline()
    finally:
        serving.terminate()
        serving.wait(timeout=30)
    assert first_line.startswith("Lance REST Namespace on http://127.0.0.1:")
    assert first_line.rstrip().endswith(f"over the Iceberg catalog at {endpoint}, tables under {lance_root}")


def test_ids_are_read_as_meant_one_part_namespaces_and_dotted_new_names(
    cli: CommandLine, ns: IcebergLanceNamespace, db: list[str]
) -> None:
    one_part = cli("namespaces", "create", "sales")
    assert one_part.returncode == 2 and "give WAREHOUSE.NAMESPACE (e.g. wh.sales)" in one_part.stderr
    assert cli("tables", "list", db[0]).returncode == 2
    warehouse, namespace = db
    ns.create_namespace({"id": [warehouse, "other"]})
    for name in ("a", "c"):
        _write(ns, [*db, name])
    same = cli("tables", "rename", f"{warehouse}.{namespace}.a", f"{warehouse}.{namespace}.b")
    assert same.stdout == f"renamed {warehouse}.{namespace}.a to {warehouse}.{namespace}.b\n"
    assert sorted(ns.list_tables({"id": db}).tables) == ["b", "c"]  # not a table named "wh.ns.b"
    moved = cli.json("tables", "rename", f"{warehouse}.{namespace}.c", f"{warehouse}.other.c")
    assert moved["to"] == f"{warehouse}.other.c" and ns.list_tables({"id": [warehouse, "other"]}).tables == ["c"]
    for bad, says in (("ops.b", "must be the full id"), (f"elsewhere.{namespace}.b", "stays in its warehouse")):
        refused = cli("tables", "rename", f"{warehouse}.{namespace}.b", bad)
        assert refused.returncode == 2 and says in refused.stderr
    assert sorted(ns.list_tables({"id": db}).tables) == ["b"]


def test_a_catalog_without_a_prefix_gets_a_hint_and_one_with_none(
    cli: CommandLine, tmp_path: Path, db: list[str], lance_root: Path
) -> None:
    assert "hint:" not in cli("namespaces", "list", db[0]).stderr
    with local_catalog(tmp_path / "unprefixed", prefix_style="none") as server:
        plain = CommandLine(server.endpoint, lance_root, tmp_path)
        created = plain("namespaces", "create", "any_wh.sales", "--json")
        assert created.returncode == 0 and json.loads(created.stdout)["created"] is True
        assert created.stderr.count("\n") == 1 and "has no warehouse prefix: 'any_wh' is only a label" in created.stderr


def test_long_work_reports_its_time_and_index_parameters_are_checked(
    cli: CommandLine, ns: IcebergLanceNamespace, db: list[str]
) -> None:
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(np.random.default_rng(2).random(256 * 8, dtype=np.float32)), 8)
    lance.write_dataset(pa.table({"id": range(256), "vec": vectors}), namespace_client=ns, table_id=[*db, "v"])
    table = ".".join([*db, "v"])
    wrong = cli(
        "tables", "indices", "create", table, "--column", "vec", "--type", "IVF_FLAT", "--set", "num_sub_vectors=2"
    )
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1
    assert "unknown parameter(s) num_sub_vectors; valid: distance_type, max_iterations, num_partitions" in wrong.stderr
    scalar = cli("tables", "indices", "create", table, "--column", "id", "--type", "btree", "--set", "m=4")
    assert scalar.returncode == 2 and "BTREE index: unknown parameter(s) m; it takes none" in scalar.stderr
    unknown = cli("tables", "indices", "create", table, "--column", "id", "--type", "HASH")
    assert unknown.returncode == 2 and "one of: " in unknown.stderr and "IVF_PQ" in unknown.stderr
    assert ns.list_table_indices({"id": [*db, "v"]}).indexes == []  # nothing was built

    built = cli.json(
        "tables", "indices", "create", table, "--column", "vec", "--type", "IVF_FLAT", "--set", "num_partitions=2"
    )
    assert built["index_type"] == "IVF_FLAT" and built["elapsed_seconds"] >= 0
    human = cli("tables", "indices", "create", table, "--column", "id", "--type", "BTREE")
    assert human.stdout == f"created a BTREE index on id of {table}\n"
    assert human.stderr.startswith("done in ") and "\x1b" not in human.stderr  # no spinner off a terminal
    assert cli("tables", "indices", "drop", table, "id_idx").returncode == 0
    spinning, on_terminal = _on_a_terminal(
        cli, "tables", "indices", "create", table, "--column", "id", "--type", "BTREE"
    )
    assert spinning.returncode == 0 and "building a BTREE index on id" in on_terminal and "done in " in on_terminal
    protect = cli("tables", "protect", db[0])
    assert protect.returncode == 0 and protect.stderr.startswith("done in ")
    quiet, on_terminal = _on_a_terminal(cli, "tables", "restore", table, "1", "--json")
    assert json.loads(quiet.stdout)["dropped_indices"] == ["id_idx", "vec_idx"] and on_terminal == ""


def _on_a_terminal(cli: CommandLine, *arguments: str) -> tuple[CliResult, str]:
    """Run the command with its stderr on a terminal (a pseudo-terminal): what it showed there."""
    import pty

    reader, writer = pty.openpty()
    try:
        with open(writer, "w", encoding="utf-8", closefd=False) as terminal:
            done = run_cli(arguments, {**cli.environ, "TERM": "xterm"}, stderr=terminal)
    finally:
        os.close(writer)
    shown = b""
    while True:
        try:
            chunk = os.read(reader, 65536)
        except OSError:  # the terminal's other end is closed: all was read
            break
        if not chunk:
            break
        shown += chunk
    os.close(reader)
    return done, shown.decode(errors="replace")


def test_tags_stand_for_versions_and_restore_names_the_indices_it_drops(
    cli: CommandLine, ns: IcebergLanceNamespace, db: list[str]
) -> None:
    table_id = [*db, "t"]
    table = ".".join(table_id)
    _write(ns, table_id, rows=100)
    lance.write_dataset(pa.table({"x": [7]}), namespace_client=ns, table_id=table_id, mode="append")
    assert cli("tables", "tags", "create", table, "v1-tag", "1").returncode == 0
    assert cli.json("tables", "describe", table, "--version", "v1-tag")["version"] == 1
    assert cli.json("tables", "count", table, "--version", "v1-tag")["rows"] == 100
    assert cli("tables", "count", table, "--version", "no-such-tag").returncode == 3
    assert [v["tags"] for v in cli.json("tables", "versions", table, "--ascending")["versions"]] == [["v1-tag"], []]
    cli.json("tables", "indices", "create", table, "--column", "x", "--type", "BTREE", "--name", "by_x")

    dry = cli("tables", "restore", table, "v1-tag", "--dry-run")
    assert dry.returncode == 0
    assert dry.stdout == f"restoring {table} to version 1 would drop the indices built since: by_x\n"
    assert ns.describe_table_version({"id": table_id}).version.version == 3  # nothing changed
    done = cli.json("tables", "restore", table, "v1-tag")
    assert (done["restored"], done["version"], done["dropped_indices"]) == (1, 4, ["by_x"])
    assert ns.list_table_indices({"id": table_id}).indexes == []
    human = cli("tables", "restore", table, "2")
    assert human.stdout.startswith(f"restoring {table} to version 2 drops no index\nrestored {table} to version 2")


def test_the_cli_index_tables_follow_the_library() -> None:
    assert set(SCALAR_INDEX_TYPES) == set(SCALAR_TYPES)
    assert set(INDEX_PARAMETERS) == set(VECTOR_TYPES.values()) | {"INVERTED"}
    assert set(VECTOR_FIELDS) | {"distance_type"} == set().union(*(INDEX_PARAMETERS[t] for t in VECTOR_TYPES.values()))
    assert INDEX_PARAMETERS["INVERTED"] == set(TOKENIZER_FIELDS)
