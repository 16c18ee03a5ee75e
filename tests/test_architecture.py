"""The package's layout holds: rooms by concern, arrows that only run down, the two halves apart, no
circle, and a picture drawn from the imports (``scripts/architecture.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import script_module

ROOT = Path(__file__).resolve().parent.parent
architecture = script_module(ROOT / "scripts" / "architecture.py")


def test_no_module_of_the_package_imports_itself_back_through_others() -> None:
    assert architecture.cycles(architecture.module_imports()) == []


def test_every_import_of_the_package_is_absolute() -> None:
    """The graph reads absolute imports: a relative one would go unseen."""
    import ast

    relative = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "lance_iceberg_ns").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level
    ]
    assert relative == []


def test_the_cycle_finder_finds_a_circle() -> None:
    """The check itself: a loop of three, and one of two beside a tree, are found; a tree is not."""
    assert architecture.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert architecture.cycles({"a": {"b", "d"}, "b": {"a"}, "d": set()}) == [["a", "b"]]
    assert architecture.cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_every_room_stands_in_one_layer_and_imports_only_downwards() -> None:
    rooms = set(architecture.rooms()) - {architecture.LOCAL_CATALOG}
    placed = [room for _, _, members in architecture.LAYERS for room in members]
    assert sorted(placed) == sorted(set(placed)), "a room in two layers"
    assert rooms <= set(placed), f"rooms in no layer: {sorted(rooms - set(placed))}"
    assert architecture.upward_imports() == []


def test_the_root_holds_at_most_a_dozen_modules() -> None:
    modules = [path.name for path in (ROOT / "lance_iceberg_ns").glob("*.py")]
    assert len(modules) <= 12, sorted(modules)


def test_no_room_imports_the_local_catalog() -> None:
    """The local catalog is a product beside the bridge (``local-catalog``, the demo), not part of it."""
    importers = {
        room
        for room, targets in architecture.room_imports().items()
        if architecture.LOCAL_CATALOG in targets and room not in ("cli", "demo")
    }
    assert importers == set()


@pytest.mark.parametrize("source, target, why", architecture.NEVER)
def test_what_must_never_be(source: str, target: str, why: str) -> None:
    assert not architecture.reaches(source, target), why


@pytest.mark.parametrize("room", ["catalog"])
def test_the_catalog_half_never_imports_lance(room: str) -> None:
    assert not {"lance", "lancedb"} & architecture.libraries_reached(room)


@pytest.mark.parametrize("room", ["storage", "data"])
def test_storage_and_the_data_plane_never_import_pyiceberg(room: str) -> None:
    assert "pyiceberg" not in architecture.libraries_reached(room)


def test_the_boundary_check_sees_indirect_imports() -> None:
    """The check itself: the namespace reaches both libraries, through the rooms it imports."""
    assert {"lance", "pyiceberg"} <= architecture.libraries_reached("namespace")
    assert architecture.reaches("namespace", "catalog") and architecture.reaches("jobs", "storage")


def test_the_layout_picture_is_drawn_from_the_imports() -> None:
    source = (ROOT / "docs" / "images" / "architecture.dot").read_text()
    assert source == architecture.dot_source(), "run: .venv/bin/python scripts/render_diagrams.py"
    for room in architecture.rooms():
        if room != architecture.LOCAL_CATALOG:
            assert f'"{room}" [label=' in source


@pytest.mark.parametrize("old, new", sorted(__import__("lance_iceberg_ns").MOVED_MODULES.items()))
def test_a_moved_module_is_importable_by_its_old_name_as_the_same_module(old: str, new: str) -> None:
    import importlib

    moved = importlib.import_module(old)
    assert moved is importlib.import_module(new)
    # its own spec, not the old name's: importlib.reload (and an editor's autoreload) goes by it
    assert moved.__spec__ is not None and moved.__spec__.name == new and moved.__spec__.origin


def test_the_public_faces_keep_what_users_import() -> None:
    from lance_iceberg_ns import errors, jobs, spark

    assert {"write_lance", "read_lance", "register_lance_views", "TableWrite", "WriteResult"} <= set(dir(spark))
    assert {"write_together", "remove_orphan_files", "import_directory", "adopt_versions_written_by_location"} <= set(
        dir(jobs)
    )
    assert errors.http_status_for(4) == 404
