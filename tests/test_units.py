"""The pure pieces: settings, identifiers, locations and paging."""

from __future__ import annotations

from pathlib import Path

import pytest
from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns.catalog.listing import is_lance_table, shared_table_types
from lance_iceberg_ns.config.settings import Settings, looks_secret
from lance_iceberg_ns.errors.translation import public_message
from lance_iceberg_ns.identifiers import parse_namespace_id, parse_table_id
from lance_iceberg_ns.limits import check_page_limit, check_properties
from lance_iceberg_ns.paging import page_after, take_page


def test_settings_split_storage_and_iceberg_prefixes() -> None:
    settings = Settings.from_properties(
        {
            "endpoint": "http://catalog:8181/",
            "storage.region": "us-east-1",
            "iceberg.header.X-Tenant": "t1",
            "connect_timeout": "500",
            "max_retries": "0",
        }
    )
    assert settings.endpoint == "http://catalog:8181"
    assert settings.storage_options == {"region": "us-east-1"}
    assert settings.catalog_properties == {"header.X-Tenant": "t1"}
    assert (settings.connect_timeout_ms, settings.read_timeout_ms, settings.max_retries) == (500, 30_000, 0)


def test_object_store_root_is_kept_as_given() -> None:
    assert Settings.from_properties({"endpoint": "https://c", "root": "s3://bucket/lance/"}).root == "s3://bucket/lance"


@pytest.mark.parametrize(
    "key", ["auth_token", "aws_secret_access_key", "aws_access_key_id", "adls.sas-token", "password"]
)
def test_secret_looking_keys(key: str) -> None:
    assert looks_secret(key)


@pytest.mark.parametrize("key", ["primary_key", "owner", "table_type", "region"])
def test_ordinary_keys_are_not_secret(key: str) -> None:
    assert not looks_secret(key)


def test_identifiers_parse_into_value_objects() -> None:
    table = parse_table_id(["wh", "a", "b", "t"])
    assert (table.warehouse, table.namespace.path, table.name) == ("wh", ("a", "b"), "t")
    assert table.iceberg_identifier == ("a", "b", "t")
    assert str(table) == "wh.a.b.t"
    assert parse_namespace_id([]) is None
    assert parse_namespace_id(["wh"]).path == ()  # type: ignore[union-attr]


@pytest.mark.parametrize("part", ["", ".", "..", "a/b", "a\\b", "tab\tbed", "x\x7f", " x"])
def test_unsafe_identifier_parts_are_invalid_input(part: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_table_id(["wh", "db", part])


def test_identifier_parts_are_nfc_and_dots_stay_in_warehouses_and_table_names() -> None:
    table = parse_table_id(["wh.eu", "cafe\u0301", "t.v1"])
    assert (table.warehouse, table.namespace.path, table.name) == ("wh.eu", ("caf\u00e9",), "t.v1")
    assert parse_namespace_id(["wh", "a\u030a"]).path == ("\u00e5",)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "raw",
    [
        ["wh", "a.b"],  # a namespace level with a dot
        ["wh", "db", "a.b", "t"],
        ["wh", "db", "__lance_trash__"],
        ["wh", "__LANCE_TRASH__", "t"],
        ["__Lance_Trash__", "db", "t"],
        ["wh", "db", "t\u200b"],
        ["wh", "db\u202e", "t"],
        ["wh", "db", "\ufefft"],
    ],
)
def test_aliasing_reserved_or_invisible_parts_are_invalid_input(raw: list[str]) -> None:
    with pytest.raises(InvalidInputError):
        parse_table_id(raw) if len(raw) > 2 else parse_namespace_id(raw)


@pytest.mark.parametrize("limit", [0, -1, 10_001, True, "5"])
def test_page_limits_out_of_bounds_are_invalid_input(limit: object) -> None:
    with pytest.raises(InvalidInputError):
        check_page_limit(limit)  # type: ignore[arg-type]


def test_page_limits_and_properties_within_bounds_pass() -> None:
    assert [check_page_limit(n) for n in (None, 1, 10_000)] == [None, 1, 10_000]
    properties = {f"k{i}": "v" * 8192 for i in range(100)}
    assert check_properties(properties) is properties
    with pytest.raises(InvalidInputError, match="k7"):
        check_properties({"k7": "v" * 8193})


def test_public_messages_keep_the_words_without_paths_or_class_names() -> None:
    java = (
        "load wh.db.t: org.apache.iceberg.exceptions.NoSuchTableException: Table does not exist: db.t"
        "\n\tat org.apache.iceberg.rest.CatalogHandlers.loadTable(CatalogHandlers.java:123)"
    )
    assert public_message(java) == "load wh.db.t: Table does not exist: db.t"
    rust = "Not found: t/_versions, /home/runner/work/lance/rust/lance-table/src/io/commit.rs:653:26"
    assert public_message(rust) == "Not found: t/_versions"
    python = "failed at /opt/app/lib/python3.11/site-packages/pyiceberg/io/pyarrow.py:88 in /usr/lib/x"
    assert public_message(python) == "failed at in <path>"
    assert public_message("list wh.db: NoSuchNamespaceException: Namespace does not exist: db") == (
        "list wh.db: Namespace does not exist: db"
    )
    assert public_message("No Lance dataset at /data/lake/wh/db/t") == "No Lance dataset at /data/lake/wh/db/t"
    assert public_message("Table wh.db.ParseError not found") == "Table wh.db.ParseError not found"


def test_lance_table_type_is_case_insensitive() -> None:
    assert is_lance_table({"table_type": "LANCE"}) and is_lance_table({"table_type": "lance"})
    assert not is_lance_table({"table_type": "ICEBERG"}) and not is_lance_table(None)


def test_take_page_walks_batches_until_the_limit() -> None:
    names = page_after([f"n{i}" for i in range(10)], None)
    keep_even = lambda batch: [n for n in batch if int(n[1:]) % 2 == 0]  # noqa: E731
    assert take_page(names, 2, keep_even, batch_size=3) == (["n0", "n2"], "n2")
    assert take_page(page_after(names, "n2"), 10, keep_even, batch_size=3) == (["n4", "n6", "n8"], None)
    assert take_page(names, None, keep_even, batch_size=4) == (["n0", "n2", "n4", "n6", "n8"], None)


def test_table_types_are_remembered_per_endpoint_and_forgotten() -> None:
    types = shared_table_types("http://types.example", "anonymous", ttl_seconds=60)
    assert shared_table_types("http://types.example", "anonymous", ttl_seconds=60) is types
    assert shared_table_types("http://types.example", "client:other", ttl_seconds=60) is not types
    types.keep(("wh", ("db", "t")), False)
    assert types.get(("wh", ("db", "t"))) is False  # a remembered "not Lance" is an answer too
    types.forget(("wh", ("db", "t")))
    assert types.get(("wh", ("db", "t"))) is None
    disabled = shared_table_types("http://types.example", "anonymous", ttl_seconds=0)
    disabled.keep(("wh", ("db", "t")), True)
    assert disabled.get(("wh", ("db", "t"))) is None


def test_read_tasks_are_even_sized_for_the_cores_and_capped_in_bytes() -> None:
    from lance_iceberg_ns.spark import MAX_TASK_BYTES, read_tasks

    # the shape a Spark write leaves: per task one 1M-row fragment and one of the remainder
    sizes = {i: (19_000_000 if i % 2 == 0 else 2_400_000) for i in range(16)}
    tasks = read_tasks(sizes, parallelism=2)
    assert sorted(fragment for task in tasks for fragment in task) == list(range(16))
    loads = [sum(sizes[f] for f in task) for task in tasks]
    assert len(tasks) == 2 and max(loads) - min(loads) <= 2_400_000
    assert len(read_tasks(sizes, parallelism=64)) == 16  # never more tasks than fragments
    big = {i: MAX_TASK_BYTES // 2 for i in range(10)}
    assert len(read_tasks(big, parallelism=2)) == 5  # at most MAX_TASK_BYTES a task
    unknown = {0: None, 1: 100, 2: 300}  # an unknown size counts as the average known one
    assert sorted(map(sorted, read_tasks(unknown, parallelism=2))) == [[0, 1], [2]]
    assert read_tasks({}, parallelism=2) == []


def test_read_batches_are_large_but_wide_rows_get_fewer() -> None:
    from lance_iceberg_ns.spark import MAX_READ_BATCH_ROWS, READ_BATCH_BYTES, read_batch_rows

    assert read_batch_rows(175_000_000, 10_000_000) == MAX_READ_BATCH_ROWS  # narrow rows
    assert read_batch_rows(6_144 * 100_000, 100_000) == READ_BATCH_BYTES // 6_144  # 1536-float vectors
    assert read_batch_rows(10**12, 10) == 1024  # never tiny
    assert read_batch_rows(0, 0) == MAX_READ_BATCH_ROWS  # sizes unknown


def test_rows_reach_lances_writer_in_batches_of_a_few_megabytes() -> None:
    import pyarrow as pa

    from lance_iceberg_ns.data.datasets import WRITE_BATCH_BYTES, in_write_batches, write_reader

    small = pa.table({"id": pa.array(range(1_200_000), pa.int64())}).to_batches(max_chunksize=1_000)  # 8 kB each
    joined = list(in_write_batches(small))
    assert WRITE_BATCH_BYTES == 4 * 1024 * 1024
    assert [batch.num_rows for batch in joined] == [525_000, 525_000, 150_000]  # 525 batches reach 4 MiB
    assert pa.Table.from_batches(joined).column("id").to_pylist() == list(range(1_200_000))  # same rows, same order
    (big,) = pa.table({"id": pa.array(range(WRITE_BATCH_BYTES // 8 + 1), pa.int64())}).to_batches()
    assert list(in_write_batches([big]))[0] is big  # already big enough: passed as it is
    after_small = list(in_write_batches([*small[:3], big, *small[:2]]))  # and never joined to others
    assert [batch.num_rows for batch in after_small] == [3_000, big.num_rows, 2_000] and after_small[1] is big
    assert list(in_write_batches([])) == []
    # dictionaries that together outgrow their index type cannot be joined: handed over as they are
    words = [
        pa.DictionaryArray.from_arrays(pa.array(range(5_000), pa.int16()), pa.array([f"{n}-{i}" for i in range(5_000)]))
        for n in range(8)
    ]
    apart = [pa.record_batch({"word": column}) for column in words]
    assert list(in_write_batches(apart)) == apart
    reader = write_reader(pa.Table.from_batches(small))
    assert [batch.num_rows for batch in reader] == [batch.num_rows for batch in joined]


def test_a_file_uri_is_local_and_its_files_are_where_lance_reads_them(tmp_path: Path) -> None:
    from lance_iceberg_ns.storage import files
    from lance_iceberg_ns.storage.locations import is_local, local_path, normalize_location

    assert is_local("/data/t.lance") and is_local("file:///data/t.lance") and is_local("FILE:///data/t.lance")
    assert not is_local("s3://bucket/t.lance") and not is_local("gs://bucket/t.lance")
    assert is_local(normalize_location("file:///data/t.lance")) and is_local("/data/a://b.lance")
    assert local_path("file:///data/a%20b.lance") == "/data/a b.lance"  # decoded, as Lance decodes it
    assert local_path("file://localhost/data/t.lance/") == "/data/t.lance"
    assert local_path("/data/t.lance") == "/data/t.lance"
    with pytest.raises(InvalidInputError):
        local_path("file://elsewhere/data/t.lance")
    place = tmp_path / "a b"
    place.mkdir()
    (place / "marker").write_bytes(b"1")
    assert [found.path for found in files.list_files(place.as_uri(), "", {})] == ["marker"]
    assert files.read_file(place.as_uri(), "marker", {}) == b"1" and files.read_file(str(place), "gone", {}) is None
    assert not files.is_empty_directory(place.as_uri(), {}) and files.entries_at(place.as_uri(), {}) == {"marker"}


def test_a_file_moved_away_while_its_directory_is_listed_is_not_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # another writer finalizing a staged manifest moves it between the listing and the look at it
    import os

    from lance_iceberg_ns.storage import files

    (tmp_path / "1.manifest").write_bytes(b"1")
    (tmp_path / "2.manifest-staged").write_bytes(b"2")
    walk = os.walk

    def walk_then_move(top: str, **kwargs: object):  # type: ignore[no-untyped-def]
        for folder, subfolders, names in walk(top, **kwargs):  # type: ignore[call-overload]
            os.rename(tmp_path / "2.manifest-staged", tmp_path / "2.manifest")
            yield folder, subfolders, names

    monkeypatch.setattr(files.os, "walk", walk_then_move)
    assert sorted(found.path for found in files.list_files(str(tmp_path), "", {})) == ["1.manifest"]
