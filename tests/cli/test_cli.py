"""The ``lance-iceberg-ns`` command against the local catalog: its output, its ``--json``, its exit
codes, and import from directory namespaces (V1 and V2). Commands run in process (the ``cli``
fixture); one test runs a real process, for what only a process shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import lance
import lance.namespace
import pyarrow as pa
import pytest
from lance_namespace import CreateNamespaceRequest, DeclareTableRequest

from lance_iceberg_ns import IcebergLanceNamespace

from ..helpers import CommandLine
from ..stores import Store


class Cli(CommandLine):
    """The command run as a real process (``python -m lance_iceberg_ns.cli``): the exit status a
    shell sees, and all that reaches its stderr, native code's writes included."""

    def __call__(self, *arguments: str, **environ: str) -> subprocess.CompletedProcess[str]:  # type: ignore[override]
        return subprocess.run(
            [sys.executable, "-m", "lance_iceberg_ns.cli", *arguments],
            env={**self.environ, **environ},
            capture_output=True,
            text=True,
            timeout=120,
        )


def test_a_failing_command_run_as_a_process_exits_with_its_code_and_one_line(
    endpoint: str, lance_root: Path, tmp_path: Path, db: list[str]
) -> None:
    missing = Cli(endpoint, lance_root, tmp_path)("tables", "describe", ".".join([*db, "missing"]))
    assert (missing.returncode, missing.stdout) == (3, "")
    assert missing.stderr.startswith("error: TableNotFound (4):") and missing.stderr.count("\n") == 1


def test_namespace_commands_human_and_json(cli: CommandLine, warehouse: str) -> None:
    namespace = f"{warehouse}.cli_ns"
    created = cli("namespaces", "create", namespace, "--set", "owner=data-eng")
    assert (created.returncode, created.stdout) == (0, f"created {namespace}\n")
    assert "cli_ns" in cli.json("namespaces", "list", warehouse)["namespaces"]
    listed = cli("namespaces", "list", warehouse)
    assert listed.returncode == 0 and namespace in listed.stdout and "namespace" in listed.stdout.splitlines()[0]
    assert cli.json("namespaces", "describe", namespace)["properties"]["owner"] == "data-eng"
    assert "owner" in cli("namespaces", "describe", namespace).stdout
    assert cli("namespaces", "create", namespace, "--exist-ok").returncode == 0
    assert cli("namespaces", "drop", namespace).stdout == f"dropped {namespace}\n"
    assert "cli_ns" not in cli.json("namespaces", "list", warehouse)["namespaces"]


def test_table_commands_and_versions(
    cli: CommandLine, ns: IcebergLanceNamespace, db: list[str], tmp_path: Path
) -> None:
    table = ".".join([*db, "events"])
    for i, mode in enumerate(("create", "append", "append")):
        lance.write_dataset(pa.table({"id": [i]}), namespace_client=ns, table_id=[*db, "events"], mode=mode)

    assert cli.json("tables", "list", ".".join(db))["tables"] == ["events"]
    described = cli.json("tables", "describe", table)
    assert described["version"] == 3 and described["properties"]["table_type"] == "lance"
    human = cli("tables", "describe", table).stdout
    assert "location" in human and "id: int64" in human

    versions = cli.json("tables", "versions", table)["versions"]
    assert [v["version"] for v in versions] == [3, 2, 1]
    assert [v["version"] for v in cli.json("tables", "versions", table, "--limit", "1", "--ascending")["versions"]] == [
        1
    ]
    assert cli("tables", "versions", table).stdout.splitlines()[0].split()[:3] == ["version", "committed", "rows"]
    restored = cli.json("tables", "restore", table, "1")
    assert (restored["restored"], restored["version"], restored["dropped_indices"]) == (1, 4, [])
    assert lance.dataset(namespace_client=ns, table_id=[*db, "events"]).to_table()["id"].to_pylist() == [0]

    declared = cli.json("tables", "declare", ".".join([*db, "later"]))
    assert declared["location"].rsplit("/", 1)[1].startswith("later-")
    other = Path(ns.settings.root) / "ext" / "elsewhere.lance"
    lance.write_dataset(pa.table({"x": [1]}), str(other))
    assert cli("tables", "register", ".".join([*db, "outside"]), str(other)).returncode == 0
    assert cli("tables", "rename", ".".join([*db, "outside"]), "moved").stdout.startswith("renamed")
    assert cli.json("tables", "deregister", ".".join([*db, "moved"]))["location"] == str(other)
    assert other.exists()
    assert cli("tables", "drop", table).returncode == 0
    assert cli.json("tables", "status", table)["state"] == "soft_deleted"
    [purgable] = cli.json("tables", "purgable", ".".join(db))
    assert (purgable["id"], purgable["foreign"], purgable["unreadable"]) == ([*db, "events"], None, None)
    assert "not purged, because" in cli("tables", "purgable", ".".join(db)).stdout
    assert cli("tables", "undrop", table).stdout == f"restored {table}\n"
    assert cli.json("tables", "remove-orphans", table, "--older-than", "0s", "--dry-run")["files"] == []


def test_soft_delete_lifecycle_commands(cli: CommandLine, ns: IcebergLanceNamespace, db: list[str]) -> None:
    for name in ("kept", "gone"):
        lance.write_dataset(pa.table({"x": [1]}), namespace_client=ns, table_id=[*db, name])
        ns.drop_table({"id": [*db, name]})
    table, namespace = ".".join([*db, "kept"]), ".".join(db)
    assert cli("tables", "status", table).stdout.startswith("soft_deleted ")
    assert cli("tables", "purgable", namespace, "--older-than", "1h", "--json").stdout.strip() == "[]"
    assert cli("tables", "undrop", table).returncode == 0
    assert cli("tables", "status", table).stdout == "exists\n"
    purged = cli("tables", "purge", db[0], "--older-than", "0s")  # the whole warehouse
    assert purged.returncode == 0
    assert purged.stdout == f"purged {'.'.join([*db, 'gone'])}\n1 purged, 0 kept (not due), 0 skipped\n"
    refused = cli("tables", "purge", table)  # a live table is never purged
    assert refused.returncode == 4 and refused.stderr.startswith("error: InvalidTableState (19):")
    assert cli("tables", "status", ".".join([*db, "gone"])).stdout == "not_found\n"


def test_exit_codes_and_one_line_errors(cli: CommandLine, db: list[str]) -> None:
    missing = cli("tables", "describe", ".".join([*db, "missing"]))
    assert missing.returncode == 3 and missing.stderr.count("\n") == 1
    assert missing.stderr.startswith("error: TableNotFound (4):") and "Traceback" not in missing.stderr
    conflict = cli("namespaces", "create", ".".join(db))
    assert conflict.returncode == 4 and "NamespaceAlreadyExists (2)" in conflict.stderr
    invalid = cli("tables", "describe", f"{db[0]}..x")
    assert invalid.returncode == 2 and "InvalidInput (13)" in invalid.stderr
    unavailable = cli(
        "tables",
        "list",
        ".".join(db),
        "--endpoint",
        "http://127.0.0.1:9",
        "-p",
        "max_retries=0",
        "-p",
        "connect_timeout=500",
    )
    assert unavailable.returncode == 5 and "ServiceUnavailable (17)" in unavailable.stderr
    usage = cli("tables", "versions")
    assert usage.returncode == 2 and "Missing argument" in usage.stderr
    no_catalog = cli("tables", "list", "wh.db", LANCE_ICEBERG_ENDPOINT="")
    assert no_catalog.returncode == 2 and "No catalog" in no_catalog.stderr
    debug = cli("--debug", "tables", "describe", ".".join([*db, "missing"]))
    assert debug.returncode == 3 and "Traceback" in debug.stderr


def test_secrets_stay_out_of_cli_output(cli: CommandLine, db: list[str]) -> None:
    secret = "cli-SECRET-7f3e"
    result = cli("tables", "describe", ".".join([*db, "missing"]), "-p", f"auth_token={secret}", "--debug")
    assert result.returncode == 3
    assert secret not in result.stdout + result.stderr


def test_catalog_from_pyiceberg_configuration(cli: CommandLine, endpoint: str, warehouse: str, tmp_path: Path) -> None:
    (tmp_path / ".pyiceberg.yaml").write_text(f"catalog:\n  lake:\n    uri: {endpoint}\n")
    listed = cli("--catalog", "lake", "namespaces", "list", warehouse, "--json", LANCE_ICEBERG_ENDPOINT="")
    assert listed.returncode == 0, listed.stderr
    wrong = cli("namespaces", "list", warehouse, "--catalog", "nope", LANCE_ICEBERG_ENDPOINT="")
    assert wrong.returncode == 2 and "No pyiceberg catalog named 'nope'" in wrong.stderr
    # an explicit --endpoint wins over the configured catalog
    explicit = cli(
        "--catalog", "lake", "namespaces", "list", warehouse, "--endpoint", "http://127.0.0.1:9", "-p", "max_retries=0"
    )
    assert explicit.returncode == 5


def _directory_with_tables(store: Store, root: str) -> None:
    """V1 tables (one deregistered), and V2 tables in child namespaces, one only declared."""
    options = store.storage_options
    store.write_lance(f"{root}/plain.lance", rows=1)
    store.write_lance(f"{root}/gone.lance", rows=1)
    store.write(f"{root}/gone.lance/.lance-deregistered", b"")
    directory = lance.namespace.DirectoryNamespace(root=root, **store.properties)
    directory.create_namespace(CreateNamespaceRequest(id=["prod"]))
    directory.create_namespace(CreateNamespaceRequest(id=["prod", "analytics"]))
    lance.write_dataset(
        pa.table({"a": [1, 2]}), namespace_client=directory, table_id=["prod", "users"], storage_options=options
    )
    lance.write_dataset(
        pa.table({"a": [1, 2, 3]}),
        namespace_client=directory,
        table_id=["prod", "analytics", "events"],
        storage_options=options,
    )
    directory.declare_table(DeclareTableRequest(id=["prod", "later"]))


@pytest.mark.usefixtures("store")  # on a local disk and on S3
def test_import_directory_v1_and_v2_dry_run_rerun_and_conflict(
    cli: CommandLine, ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    source = store.beside("directory")
    _directory_with_tables(store, source)
    into = ".".join(db)
    reach = [argument for key, value in store.storage_options.items() for argument in ("--storage", f"{key}={value}")]

    dry = cli.json("import-directory", source, "--into", into, "--dry-run", *reach)
    outcomes = {".".join(t["source"]): (t["outcome"], t["reason"]) for t in dry["tables"]}
    assert outcomes == {
        "plain": ("would copy", ""),
        "gone": ("skipped", "deregistered in the directory namespace"),
        "prod.users": ("would copy", ""),
        "prod.analytics.events": ("would copy", ""),
        "prod.later": ("skipped", "declared only: no Lance data yet"),
    }
    assert ns.list_tables({"id": db}).tables == []  # a dry run registers nothing

    first = cli("import-directory", source, "--into", into, *reach)
    assert first.returncode == 0 and first.stdout.strip().endswith("3 copied, 2 skipped")
    assert ns.list_tables({"id": db}).tables == ["plain"]
    assert lance.dataset(namespace_client=ns, table_id=[*db, "prod", "analytics", "events"]).count_rows() == 3
    assert lance.dataset(namespace_client=ns, table_id=[*db, "prod", "users"]).count_rows() == 2

    again = cli.json("import-directory", source, "--into", into, *reach)
    assert again["summary"] == {"already registered": 3, "skipped": 2}

    ns.deregister_table({"id": [*db, "plain"]})
    other = store.at("ext", "other.lance")
    store.write_lance(other, rows=1)
    ns.register_table({"id": [*db, "plain"], "location": other})
    conflict = cli("import-directory", source, "--into", into, *reach)
    assert conflict.returncode == 4 and "the name is taken by the table at" in conflict.stdout
    assert ns.describe_table({"id": [*db, "plain"]}).location == other
    made = cli("import-directory", source, "--into", f"{db[0]}.made_for_it", *reach)  # a namespace made on the way
    assert made.returncode == 0 and ns.list_tables({"id": [db[0], "made_for_it"]}).tables == ["plain"]
