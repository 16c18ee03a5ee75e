"""The command line as an operator first meets it: --version, a --help that loads no data library,
Ctrl-C, one-line (or JSON) errors, a busy port, and import-directory into a namespace that does
not exist yet, whose tables a plain CLI with the same root then reads."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import lance
import pyarrow as pa
import pytest
import requests
from lance_namespace import CreateNamespaceRequest

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.jobs.directory_import import copy_location
from tests.cli.test_cli import Cli
from tests.helpers import CommandLine, run_cli
from tests.stores import Store

HEAVY = ("pyarrow", "lance", "pyiceberg", "fastapi", "uvicorn", "pyspark", "lance_namespace", "rich")
MIGRATION = Path(__file__).resolve().parents[2] / "docs" / "migration.md"


@pytest.fixture
def process_cli(endpoint: str, lance_root: Path, tmp_path: Path) -> Cli:
    """The command as a real process: what a shell sees, native code's writes to stderr included."""
    return Cli(endpoint, lance_root, tmp_path)


def _run(*arguments: str, **options: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        **options,  # type: ignore[call-overload]
    )


def _imported(importtime_log: str) -> set[str]:
    """The top-level packages a ``-X importtime`` log shows as imported."""
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)$", importtime_log, re.MULTILINE)
    return {name.split(".")[0] for name in names}


# --- --version and a light --help ----------------------------------------------------------------


def test_version_is_the_installed_package_version() -> None:
    shown = _run("-m", "lance_iceberg_ns.cli", "--version")
    assert (shown.returncode, shown.stdout) == (
        0,
        f"lance-iceberg-ns {importlib.metadata.version('lance-iceberg-ns')}\n",
    )


@pytest.mark.parametrize("arguments", [["--help"], ["tables", "--help"], ["namespaces", "list", "--help"]])
def test_help_imports_no_data_library(arguments: list[str]) -> None:
    """--help is read before any command runs: pyarrow, pylance, pyiceberg, the server and Spark
    (and lance_namespace, most of a second on its own) load only when a command runs."""
    shown = _run("-X", "importtime", "-m", "lance_iceberg_ns.cli", *arguments)
    assert shown.returncode == 0 and "Usage: lance-iceberg-ns" in shown.stdout
    imported = _imported(shown.stderr)
    assert "click" in imported and "lance_iceberg_ns" in imported  # the log is read right
    assert not imported & set(HEAVY), f"--help imported {sorted(imported & set(HEAVY))}"


def test_the_package_registers_when_lance_namespace_is_imported_after_it() -> None:
    """Importing the package no longer imports lance_namespace, yet the registration still happens
    on import: when lance_namespace arrives (tests/test_registry.py covers connect in both orders)."""
    script = (
        "import sys, lance_iceberg_ns\n"
        "assert 'lance_namespace' not in sys.modules and 'pyarrow' not in sys.modules\n"
        "import lance_namespace\n"
        "print(lance_namespace._REGISTERED_IMPLS['iceberg'])\n"
        "print(lance_iceberg_ns.IcebergLanceNamespace.__module__, lance_iceberg_ns.__version__)\n"
    )
    shown = _run("-c", script)
    assert shown.returncode == 0, shown.stderr
    version = importlib.metadata.version("lance-iceberg-ns")
    assert shown.stdout.split("\n")[:2] == [
        "lance_iceberg_ns.IcebergLanceNamespace",
        f"lance_iceberg_ns.namespace {version}",
    ]


# --- Ctrl-C and a busy port -----------------------------------------------------------------------


def test_ctrl_c_stops_the_local_catalog_with_exit_130_and_one_line(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "lance_iceberg_ns.cli", "local-catalog", "--port", "0", "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = process.stdout.readline()  # type: ignore[union-attr]
        endpoint = re.search(r"at (http://\S+)", first)
        assert endpoint, first + process.stderr.read()  # type: ignore[union-attr]
        assert "Press Ctrl-C to stop." in process.stdout.readline()  # type: ignore[union-attr]
        assert requests.get(f"{endpoint[1]}/v1/config", timeout=10).status_code == 200
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130
    assert stderr.strip() == "interrupted" and "Traceback" not in stderr
    with pytest.raises(requests.ConnectionError):  # the catalog stopped with the command
        requests.get(f"{endpoint[1]}/v1/config", timeout=5)


def test_local_catalog_on_a_busy_port_says_so_in_one_line(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        shown = _run("-m", "lance_iceberg_ns.cli", "local-catalog", "--port", str(port), "--data-dir", str(tmp_path))
        as_json = _run("-m", "lance_iceberg_ns.cli", "--json", "local-catalog", "--port", str(port))
    assert shown.returncode == 5 and shown.stdout == ""
    assert shown.stderr == f"error: Port {port} on 127.0.0.1 is busy: stop what listens there or give --port\n"
    error = json.loads(as_json.stderr)["error"]
    assert (as_json.returncode, error["type"], error["exit_code"]) == (5, "Unavailable", 5)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_on_a_busy_port_says_so_in_one_line_before_starting_anything(tmp_path: Path, workers: str) -> None:
    """The port is bound before the app and its data workers start: one line, exit 5, nothing
    else said (no worker that ended with the process, no uvicorn log line)."""
    environ = {**os.environ, "LANCE_ICEBERG_ENDPOINT": "http://127.0.0.1:9", "LANCE_ICEBERG_ROOT": str(tmp_path)}
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        started = time.monotonic()
        shown = _run(  # a catalog that never answers is not waited for: the port is bound first
            "-m", "lance_iceberg_ns.cli", "serve", "--catalog-wait", "60", "--port", str(port), "--workers", workers,
            env=environ,
        )  # fmt: skip
    assert (shown.returncode, shown.stdout) == (5, "") and time.monotonic() - started < 30
    assert shown.stderr == f"error: Port {port} on 127.0.0.1 is busy: stop what listens there or give --port\n"


# An unreachable catalog, waited for briefly: a serve that got past its flags exits 5, not serving
UNREACHABLE = {"LANCE_ICEBERG_ENDPOINT": "http://127.0.0.1:9", "LANCE_ICEBERG_ROOT": "/nonexistent/lance"}


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        (["--port", "99999"], "99999 is not in the range 0<=x<=65535."),
        (["--port", "65536"], "65536 is not in the range 0<=x<=65535."),
        (["--port", "-1"], "-1 is not in the range 0<=x<=65535."),
        (["--data-threads", "100000"], "100000 is not in the range 1<=x<=256."),
        (["--data-threads", "257"], "257 is not in the range 1<=x<=256."),
    ],
)
def test_serve_refuses_a_port_or_data_threads_out_of_range_as_a_usage_error(flags: list[str], why: str) -> None:
    """A port past 65535 failed binding with an unexpected OverflowError (exit 1); 100,000 data
    threads were taken, each of which may keep a data worker process."""
    refused = run_cli(["serve", "--catalog-wait", "0.1", *flags], {**UNREACHABLE, "PATH": "/usr/bin:/bin"})
    assert refused.returncode == 2, refused.stderr
    assert why in refused.stderr and "OverflowError" not in refused.stderr


@pytest.mark.parametrize("given", ["relative/lance", "file:relative/lance"])
def test_serve_warns_that_a_relative_root_is_taken_from_the_working_directory(tmp_path: Path, given: str) -> None:
    """A server restarted from another directory would look for every table elsewhere."""
    environ = {**UNREACHABLE, "PATH": "/usr/bin:/bin", "LANCE_ICEBERG_ROOT": given}
    stopped = run_cli(["serve", "--catalog-wait", "0.1"], environ)
    assert stopped.returncode == 5, stopped.stderr  # the catalog never answered: not serving
    taken = os.path.abspath("relative/lance")
    assert f"the storage root 'relative/lance' is a relative path, taken as {taken} from the working" in stopped.stderr
    for absolute in (str(tmp_path), "s3://bucket/lance"):
        quiet = run_cli(["serve", "--catalog-wait", "0.1"], {**environ, "LANCE_ICEBERG_ROOT": absolute})
        assert quiet.returncode == 5 and "relative" not in quiet.stderr, quiet.stderr


def test_serve_refuses_data_threads_out_of_range_from_its_variable() -> None:
    environ = {**UNREACHABLE, "PATH": "/usr/bin:/bin", "LANCE_ICEBERG_NS_DATA_THREADS": "100000"}
    refused = run_cli(["serve", "--catalog-wait", "0.1"], environ)
    assert refused.returncode == 2 and "100000 is not in the range 1<=x<=256." in refused.stderr


def test_serve_takes_the_ends_of_the_port_and_data_threads_ranges() -> None:
    """Past the flags, at each end of both ranges: the catalog is what it stops at (exit 5)."""
    for flags in (["--port", "0", "--data-threads", "1"], ["--port", "65535", "--data-threads", "256"]):
        stopped = run_cli(["serve", "--catalog-wait", "0.1", *flags], {**UNREACHABLE, "PATH": "/usr/bin:/bin"})
        assert stopped.returncode == 5, stopped.stderr


# --- errors: one line, or one JSON object ----------------------------------------------------------


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr and ".rs:" not in result.stderr
    return result.stderr.strip()


def test_errors_are_one_line_or_one_json_object_on_stderr(
    process_cli: Cli, ns: IcebergLanceNamespace, db: list[str], tmp_path: Path
) -> None:
    cli = process_cli
    table = ".".join([*db, "events"])
    lance.write_dataset(pa.table({"id": [1, 2]}), namespace_client=ns, table_id=[*db, "events"])

    missing = cli("tables", "describe", f"{table}_missing")
    assert missing.returncode == 3
    assert _one_error_line(missing).startswith("error: TableNotFound (4): ")
    as_json = cli("tables", "describe", f"{table}_missing", "--json")
    assert as_json.returncode == 3 and as_json.stdout == ""
    error = json.loads(as_json.stderr)["error"]
    assert (error["type"], error["code"], error["exit_code"]) == ("TableNotFound", 4, 3) and error["message"]

    outside = tmp_path / "outside" / "t.lance"
    lance.write_dataset(pa.table({"id": [1]}), str(outside))
    denied = cli("tables", "register", f"{table}_outside", str(outside))
    assert denied.returncode == 6
    refused = "error: PermissionDenied (15): Absolute paths are not allowed outside the storage root"
    assert _one_error_line(denied).startswith(refused)
    denied_json = json.loads(cli("--json", "tables", "register", f"{table}_outside", str(outside)).stderr)["error"]
    assert (denied_json["type"], denied_json["code"], denied_json["exit_code"]) == ("PermissionDenied", 15, 6)

    # pylance words a bad filter with the Rust source file and line that raised it
    debug = cli("tables", "count", table, "--where", "no_such_column > 1", "--debug")
    assert re.search(r"\.rs:\d+", debug.stderr), debug.stderr  # it is there, and --debug shows it
    bad_filter = cli("tables", "count", table, "--where", "no_such_column > 1")
    assert bad_filter.returncode == 2
    line = _one_error_line(bad_filter)
    assert line.startswith("error: InvalidInput (13): ") and "no_such_column" in line
    assert not re.search(r"\w\.rs\b", line)
    bad_json = json.loads(cli("tables", "count", table, "--where", "no_such_column > 1", "--json").stderr)["error"]
    assert bad_json["code"] == 13 and not re.search(r"\w\.rs\b", bad_json["message"])

    usage = cli("tables", "count", "--json")
    assert usage.returncode == 2 and json.loads(usage.stderr)["error"]["type"] == "Usage"


# --- import-directory: the namespace made, the tables readable by a plain CLI ----------------------


def _directory(source: Path | str, storage_options: Mapping[str, str] | None = None) -> None:
    """A directory namespace at ``source``: a V1 table of two versions, a V2 table in a child namespace."""
    options = dict(storage_options or {})
    orders = f"{source}/orders.lance"
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), orders, storage_options=options)
    lance.write_dataset(pa.table({"id": [4]}), orders, mode="append", storage_options=options)
    properties = {f"storage.{key}": value for key, value in options.items()}
    directory = lance.namespace.DirectoryNamespace(root=str(source), **properties)
    directory.create_namespace(CreateNamespaceRequest(id=["eu"]))
    lance.write_dataset(
        pa.table({"id": [1]}), namespace_client=directory, table_id=["eu", "customers"], storage_options=options
    )


def _storage_arguments(store: Store) -> list[str]:
    """``--storage KEY=VALUE`` for each option the store needs to reach a directory on it."""
    return [argument for key, value in store.storage_options.items() for argument in ("--storage", f"{key}={value}")]


on_each_store = pytest.mark.usefixtures("store")  # the test runs on a local disk and on S3


@on_each_store
def test_import_into_a_new_namespace_copies_into_the_root_and_a_plain_cli_reads_it(
    cli: CommandLine, ns: IcebergLanceNamespace, warehouse: str, store: Store
) -> None:
    source = store.beside("old-lance")
    _directory(source, store.storage_options)
    before = store.contents(source)
    into = f"{warehouse}.sales"  # no such namespace yet
    reach = _storage_arguments(store)

    dry = cli.json("import-directory", source, "--into", into, "--dry-run", *reach)
    assert dry["summary"] == {"would copy": 2}
    assert cli("namespaces", "list", warehouse, "--json").returncode == 0  # nothing made by the dry run
    assert "sales" not in cli.json("namespaces", "list", warehouse)["namespaces"]

    first = cli("import-directory", source, "--into", into, *reach)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip().endswith("2 copied")
    for name, rows, versions in (("orders", 4, 2), ("eu.customers", 1, 1)):
        table = f"{into}.{name}"
        location = cli.json("tables", "describe", table)["location"]
        assert location.startswith(store.at(warehouse, "sales") + "/") and location.endswith(".lance")
        assert cli.json("tables", "count", table)["rows"] == rows
        assert len(cli.json("tables", "versions", table)["versions"]) == versions
    orders = cli.json("tables", "describe", f"{into}.orders")["location"]
    assert orders == copy_location(ns, [warehouse, "sales", "orders"], f"{source}/orders.lance")
    assert store.contents(source) == before  # the source untouched

    again = cli.json("import-directory", source, "--into", into, *reach)
    assert again["summary"] == {"already registered": 2}
    # the import widened nothing: the source stays outside what the bridge may touch
    store.write_lance(f"{source}/later.lance", rows=1)
    later = cli("tables", "register", f"{into}.later", f"{source}/later.lance")
    assert later.returncode == 6 and "PermissionDenied" in later.stderr


@on_each_store
def test_import_registers_in_place_what_the_configuration_allows(
    cli: CommandLine, warehouse: str, store: Store
) -> None:
    source = store.beside("old-lance")
    _directory(source, store.storage_options)
    before = store.contents(source)
    allowed = ("-p", f"allowed_locations={source}")
    reach = _storage_arguments(store)
    imported = cli.json("import-directory", source, "--into", f"{warehouse}.sales", *reach, *allowed)
    assert imported["summary"] == {"registered": 2}
    described = cli.json("tables", "describe", f"{warehouse}.sales.orders", *allowed)
    assert described["location"] == f"{source}/orders.lance"
    assert cli.json("tables", "count", f"{warehouse}.sales.orders", *allowed)["rows"] == 4
    assert cli("tables", "count", f"{warehouse}.sales.orders").returncode == 6  # without it: outside
    after = store.contents(source)  # registered where it is: nothing of it rewritten
    assert {name: after.get(name) for name in before} == before


def test_the_migration_page_commands_work_as_written(cli: CommandLine, warehouse: str, tmp_path: Path) -> None:
    """Each command of the page's first block, its directory and warehouse replaced by the test's."""
    page = MIGRATION.read_text()
    block = re.search(r"```bash\n(.*?)```", page, re.DOTALL)
    assert block
    source = tmp_path / "old-lance"
    _directory(source)
    commands = [line for line in block[1].replace("\\\n", " ").splitlines() if line.strip()]
    assert commands and all(line.startswith("lance-iceberg-ns ") for line in commands)
    for line in commands:
        arguments = line.replace("/data/old-lance", str(source)).replace("wh.", f"{warehouse}.").split()[1:]
        result = cli(*arguments)
        assert result.returncode == 0, (line, result.stderr)
    assert cli.json("tables", "count", f"{warehouse}.analytics.orders")["rows"] == 4
