"""lance-ray through the catalog: distributed write, read and index build on a local Ray, with
``namespace_impl="iceberg"`` in every worker; a failed write leaves no half-made table.

One Ray session for the module (two CPUs), started with the bridge's worker setup hook.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from lance_namespace import DescribeTableRequest, ListTableIndicesRequest, ListTablesRequest
from lance_namespace.errors import (
    InvalidInputError,
    TableAlreadyExistsError,
    TableNotFoundError,
    UnsupportedOperationError,
)

from lance_iceberg_ns import IcebergLanceNamespace

ray = pytest.importorskip("ray", reason="the Ray tests need the 'ray' extra")
lance_ray = pytest.importorskip("lance_ray", reason="the Ray tests need the 'ray' extra")

from lance_iceberg_ns.ray import RayWriteError, runtime_env, write_lance  # noqa: E402  (needs the extra)


@pytest.fixture(scope="module", autouse=True)
def ray_session() -> Iterator[None]:
    """Ray on this machine: two CPUs, workers registering the bridge, quiet unless something fails
    (worker output stays in Ray's log files; task errors still reach the driver as exceptions)."""
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
        runtime_env=runtime_env(),
    )
    ray_data = logging.getLogger("ray.data")  # its progress lines, at INFO
    level = ray_data.level
    ray_data.setLevel(logging.WARNING)
    yield
    ray.shutdown()
    ray_data.setLevel(level)


def rows(start: int, count: int, blocks: int = 2) -> Any:
    """A Ray Dataset of ``count`` rows (``id`` from ``start``, ``label``) in ``blocks`` blocks."""
    size = count // blocks
    tables = [
        pa.table({"id": list(range(begin, begin + size)), "label": [f"row {i}" for i in range(begin, begin + size)]})
        for begin in range(start, start + count, size)
    ]
    return ray.data.from_arrow(tables)


def through_iceberg(ns: IcebergLanceNamespace, table: list[str]) -> dict[str, Any]:
    return {"namespace_impl": "iceberg", "namespace_properties": ns.properties, "table_id": table}


def test_write_read_and_index_with_namespace_impl_iceberg(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table = [*db, "events"]
    lance_ray.write_lance(rows(0, 1000, blocks=4), **through_iceberg(ns, table))
    lance_ray.write_lance(rows(1000, 200), mode="append", **through_iceberg(ns, table))

    assert ns.list_tables(ListTablesRequest(id=db)).tables == ["events"]
    read = lance_ray.read_lance(**through_iceberg(ns, table))
    assert read.count() == 1200
    assert lance_ray.read_lance(**through_iceberg(ns, table), filter="id >= 1150").count() == 50

    lance_ray.create_scalar_index(
        column="id", index_type="BTREE", name="id_idx", num_workers=2, **through_iceberg(ns, table)
    )
    indexes = ns.list_table_indices(ListTableIndicesRequest(id=table)).indexes
    assert [index.index_name for index in indexes] == ["id_idx"]
    assert ns.dataset(table).count_rows("id = 1199") == 1


def test_workers_know_iceberg_as_the_bridge_even_after_lance_namespace_impls(ns: IcebergLanceNamespace) -> None:
    @ray.remote
    def connected_class(properties: dict[str, str]) -> str:
        import lance_namespace
        import lance_namespace_impls  # noqa: F401  (registers "iceberg" for its own class)

        namespace = lance_namespace.connect("iceberg", properties)
        return f"{type(namespace).__module__}.{type(namespace).__name__}"

    found = ray.get([connected_class.remote(ns.properties) for _ in range(2)])
    assert found == ["lance_iceberg_ns.namespace.IcebergLanceNamespace"] * 2


FRESH_PROCESS = """
import lance_namespace

def connected():
    try:
        namespace = lance_namespace.connect("iceberg", {"endpoint": "http://127.0.0.1:9", "root": "/tmp"})
    except ValueError:
        return "ValueError"
    return type(namespace).__module__ + "." + type(namespace).__name__

print(connected())
import lance_namespace_impls
print(connected())
from lance_iceberg_ns import registry
registry.register()  # what the setup hook runs
print(connected())
"""


def test_a_fresh_process_knows_iceberg_only_from_the_setup_hook() -> None:
    """Why the hook: a worker process that never imported the bridge does not know the name, or
    knows it as another package's class once lance-namespace-impls is imported there."""
    found = subprocess.run([sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True, check=True)
    assert found.stdout.split() == [
        "ValueError",
        "lance_namespace_impls.iceberg.IcebergNamespace",
        "lance_iceberg_ns.namespace.IcebergLanceNamespace",
    ]


def test_the_bridges_write_creates_appends_and_overwrites(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table = [*db, "by_bridge"]
    write_lance(rows(0, 300), ns, table)
    write_lance(rows(300, 100), dict(ns.properties), table, mode="append")  # properties do as well
    assert lance_ray.read_lance(**through_iceberg(ns, table)).count() == 400
    write_lance(rows(0, 10), ns, table, mode="overwrite")
    assert ns.dataset(table).count_rows() == 10

    with pytest.raises(TableAlreadyExistsError):
        write_lance(rows(0, 10), ns, table)
    assert ns.dataset(table).count_rows() == 10


def test_a_bare_name_is_written_in_the_default_namespace(ns: IcebergLanceNamespace, db: list[str]) -> None:
    with IcebergLanceNamespace(**ns.properties, default_namespace=".".join(db)) as single_level:
        write_lance(rows(0, 100), single_level, ["orders"])
        write_lance(rows(100, 50), single_level, ["orders"], mode="append")
        assert single_level.dataset(["orders"]).count_rows() == 150
        with pytest.raises(TableAlreadyExistsError):
            write_lance(rows(0, 10), single_level, ["orders"])
    assert ns.dataset([*db, "orders"]).count_rows() == 150


def _fail(batch: dict[str, Any]) -> dict[str, Any]:
    raise ValueError("a worker failed on purpose")


def _files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


def test_a_failed_write_leaves_no_declared_table(ns: IcebergLanceNamespace, db: list[str], lance_root: Path) -> None:
    table = [*db, "failed"]
    with pytest.raises(RayWriteError, match=r"failed \(.+\); the table it declared was removed$") as failed:
        write_lance(rows(0, 100).map_batches(_fail), ns, table)
    assert "ValueError: a worker failed on purpose" in str(failed.value.__cause__)  # Ray's, with the worker's trace

    assert ns.list_tables(ListTablesRequest(id=db, include_declared=True)).tables == []
    assert _files(lance_root) == []
    write_lance(rows(0, 100), ns, table)  # the name is free
    assert ns.dataset(table).count_rows() == 100


def test_a_failed_append_keeps_the_table_as_it_was(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table = [*db, "kept"]
    write_lance(rows(0, 100), ns, table)
    with pytest.raises(RayWriteError, match="nothing was committed$"):
        write_lance(rows(100, 100).map_batches(_fail), ns, table, mode="append")
    assert ns.dataset(table).count_rows() == 100


def test_lance_rays_own_failed_create_leaves_a_declared_table_that_overwrite_fills(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    """What the docs tell users of lance_ray.write_lance itself."""
    table = [*db, "left_declared"]
    with pytest.raises(Exception, match="a worker failed on purpose"):
        lance_ray.write_lance(rows(0, 100).map_batches(_fail), **through_iceberg(ns, table))
    assert ns.describe_table(DescribeTableRequest(id=table, check_declared=True)).is_only_declared

    lance_ray.write_lance(rows(0, 100), mode="overwrite", **through_iceberg(ns, table))
    assert lance_ray.read_lance(**through_iceberg(ns, table)).count() == 100


def test_runtime_env_keeps_the_rest_and_refuses_a_second_hook() -> None:
    assert runtime_env({"env_vars": {"A": "1"}}) == {
        "env_vars": {"A": "1"},
        "worker_process_setup_hook": "lance_iceberg_ns.registry.register",
    }
    with pytest.raises(InvalidInputError, match="lance_iceberg_ns.registry.register"):
        runtime_env({"worker_process_setup_hook": "my_jobs.setup"})


def test_a_bad_mode_changes_nothing(ns: IcebergLanceNamespace, db: list[str]) -> None:
    with pytest.raises(InvalidInputError, match="mode must be one of"):
        write_lance(rows(0, 10), ns, [*db, "never"], mode="replace")
    assert ns.list_tables(ListTablesRequest(id=db, include_declared=True)).tables == []


def test_a_missing_table_is_not_appended_to(ns: IcebergLanceNamespace, db: list[str]) -> None:
    with pytest.raises(TableNotFoundError):
        write_lance(rows(0, 10), ns, [*db, "missing"], mode="append")
    assert ns.list_tables(ListTablesRequest(id=db, include_declared=True)).tables == []


def test_tables_whose_versions_the_catalog_manages_are_refused(
    endpoint: str, lance_root: Path, ns: IcebergLanceNamespace, db: list[str]
) -> None:
    """lance-ray commits by location: on a managed table the catalog would refuse the next version."""
    managing = IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root), table_version_management="true")
    with pytest.raises(UnsupportedOperationError, match="commits by location"):
        write_lance(rows(0, 10), managing, [*db, "managed"])
    assert ns.list_tables(ListTablesRequest(id=db, include_declared=True)).tables == []

    managing.create_table({"id": [*db, "managed"]}, _ipc(pa.table({"id": [1]})))
    for mode in ("append", "overwrite"):
        with pytest.raises(UnsupportedOperationError):
            write_lance(rows(0, 10), managing, [*db, "managed"], mode=mode)
    assert managing.dataset([*db, "managed"]).count_rows() == 1


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()
