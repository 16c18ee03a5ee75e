"""What ``lance_iceberg_ns.ray.write_lance`` removes when the Ray job fails, without a Ray cluster:
``lance_ray.write_lance`` is replaced by a stand-in that does what happens meanwhile, then fails
as a Ray job failing for any reason would. (tests/engines/test_ray.py runs the real thing.)"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lance_namespace.errors import InvalidInputError, TableNotFoundError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.ray import RayWriteError, write_lance


def _failing_job(
    monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], None], failure: BaseException | None = None
) -> None:
    def stand_in(ds: object, table_id: list[str], mode: str, **options: Any) -> None:
        meanwhile()
        raise failure or RuntimeError("a Ray worker died")

    monkeypatch.setitem(sys.modules, "lance_ray", types.SimpleNamespace(write_lance=stand_in))


def _files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


def test_a_failed_write_removes_the_table_it_declared_and_its_files(
    ns: IcebergLanceNamespace, db: list[str], lance_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = [*db, "t"]

    def write_a_fragment() -> None:
        location = ns.describe_table({"id": table}).location
        os.makedirs(f"{location}/data")
        Path(f"{location}/data/half.lance").write_bytes(b"half a fragment")

    _failing_job(monkeypatch, write_a_fragment)
    with pytest.raises(RayWriteError, match=r"a Ray worker died\); the table it declared was removed$"):
        write_lance(object(), ns, table)
    with pytest.raises(TableNotFoundError):
        ns.describe_table({"id": table})
    assert _files(lance_root) == []


def test_a_failed_write_leaves_alone_a_table_another_client_put_under_the_name(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, lance_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = [*db, "t"]
    other = IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root))
    theirs: dict[str, str] = {}

    def drop_and_declare_their_own() -> None:
        other.drop_table({"id": table})
        theirs["location"] = location = other.declare_table({"id": table}).location or ""
        os.makedirs(f"{location}/data")
        Path(f"{location}/data/in-flight.lance").write_bytes(b"their uncommitted fragment")

    _failing_job(monkeypatch, drop_and_declare_their_own)
    with pytest.raises(RayWriteError, match="replaced meanwhile, and nothing of it was removed$"):
        write_lance(object(), ns, table)
    assert other.describe_table({"id": table}).location == theirs["location"]
    assert Path(theirs["location"], "data", "in-flight.lance").read_bytes() == b"their uncommitted fragment"


def test_an_interrupted_write_removes_the_table_it_declared(
    ns: IcebergLanceNamespace, db: list[str], lance_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the job runs: the interrupt goes on, and the table declared for it goes."""
    table = [*db, "t"]
    _failing_job(monkeypatch, lambda: None, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        write_lance(object(), ns, table)
    with pytest.raises(TableNotFoundError):
        ns.describe_table({"id": table})
    assert _files(lance_root) == []


def test_a_table_id_given_as_one_string_is_refused_before_anything_is_declared(
    ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``list("xso")`` would be the table ``o`` of the namespace ``x.s``."""
    ns.create_namespace({"id": [db[0], "s"]})
    _failing_job(monkeypatch, lambda: None)
    with pytest.raises(InvalidInputError, match="list of strings"):
        write_lance(object(), ns, f"{db[0]}so")  # type: ignore[arg-type]
    assert ns.list_tables({"id": [db[0], "s"]}).tables == []
