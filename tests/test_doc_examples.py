"""Every Python code block of the docs and the README runs, page by page, against a live catalog.

The convention (docs/contributing.md, "Code blocks in the docs"):

- a page's blocks run in order in one shared set of names, as a reader pasting them one after the
  other into one Python session would: a later block may use what an earlier one made;
- the stand-ins a page writes are replaced by live ones: the catalog URLs ``https://catalog.example.com``
  and ``http://catalog:8181`` by a local Iceberg REST catalog of the page's own (which knows the
  OAuth2 clients ``job:secret`` and ``client:secret``), the roots ``s3://lake/lance``,
  ``s3://bucket/lance`` and ``/data/lance`` by a temporary directory, and the server
  ``http://127.0.0.1:2333`` by ``lance-iceberg-ns serve`` on both (with ``default_namespace=wh.sales``,
  as docs/rest-server.md starts it);
- ``spark`` is predefined, as in the ``pyspark`` shell: a local Spark session; and
  ``LANCE_ICEBERG_ENDPOINT``, ``LANCE_ICEBERG_ROOT`` (and ``LANCE_ICEBERG_CREDENTIAL`` on pages that
  log in) name the live catalog and root, for ``IcebergLanceNamespace.from_environment()``;
- a block right after a line ``<!-- not run: reason -->`` is not run (only where it cannot run here:
  a Docker stack, a cluster).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lance_iceberg_ns.testing import local_catalog

from .doc_blocks import SERVER_STAND_IN, code_blocks, with_live_values

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
OAUTH_CLIENTS = {"job": "secret", "client": "secret"}
USES_SPARK = re.compile(r"\bspark\b(?!\.\w+\s*=)")  # the name `spark`, not a module path or config key


# Pages whose blocks do not run yet, each being rewritten in a change of its own: strict, so that
# the entry must go once the page's blocks run.
UNDER_REWRITE: dict[str, str] = {}

RUNNABLE = [page for page in PAGES if any(block.not_run is None for block in code_blocks(page))]


@pytest.fixture(scope="module")
def spark_session() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="the Spark examples need the 'spark' extra")
    from lance_iceberg_ns.spark import local_spark_session

    session = local_spark_session("lance-iceberg-ns docs", config={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda page: page.name)
def test_every_python_block_of_the_page_runs(
    page: Path, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lance_iceberg_ns.server import serve_in_background

    if page.name in UNDER_REWRITE:
        request.applymarker(pytest.mark.xfail(reason=UNDER_REWRITE[page.name], strict=True))

    blocks = [block for block in code_blocks(page) if block.not_run is None]
    root = tmp_path / "lance"
    root.mkdir()
    names: dict[str, Any] = {"__name__": f"docs_{page.stem}"}
    if any(USES_SPARK.search(block.code) for block in blocks):
        names["spark"] = request.getfixturevalue("spark_session")
    # a catalog that knows OAuth2 clients asks every request for a token: only for pages that log in
    oauth = {"oauth_clients": OAUTH_CLIENTS} if any("credential" in block.code for block in blocks) else {}
    with local_catalog(tmp_path / "catalog", prefix_style="defaults", **oauth) as catalog:
        needs_server = any(SERVER_STAND_IN in block.code for block in blocks)
        properties = {"endpoint": catalog.endpoint, "root": str(root), "default_namespace": "wh.sales"}
        monkeypatch.setenv("LANCE_ICEBERG_ENDPOINT", catalog.endpoint)  # for from_environment()
        monkeypatch.setenv("LANCE_ICEBERG_ROOT", str(root))
        if oauth:
            monkeypatch.setenv("LANCE_ICEBERG_CREDENTIAL", "client:secret")
        with serve_in_background(properties=properties) if needs_server else _nothing() as server:
            for block in blocks:
                code = with_live_values(block.code, catalog.endpoint, root, server.uri if server else None)
                try:
                    exec(compile(code, f"{block.page}:{block.line}", "exec"), names)  # noqa: S102
                except Exception as failure:
                    where = f"{block.page}, the block at line {block.line}"
                    raise AssertionError(f"{where} fails: {failure!r}") from failure


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def test_every_skipped_block_says_why() -> None:
    skipped = [block for page in PAGES for block in code_blocks(page) if block.not_run is not None]
    assert all(len(block.not_run or "") >= 10 for block in skipped), skipped


def test_the_rest_server_page_names_every_option_of_serve() -> None:
    import click

    from lance_iceberg_ns.cli import cli

    def leaves(group: click.Group) -> list[click.Command]:
        commands = list(group.commands.values())
        return [leaf for c in commands for leaf in (leaves(c) if isinstance(c, click.Group) else [c])]

    def options(command: click.Command) -> set[str]:
        return {name for param in command.params for name in param.opts if name.startswith("--")}

    serve = cli.commands["serve"]
    shared = set.union(*(options(command) for command in leaves(cli) if command is not serve))
    page = (ROOT / "docs" / "rest-server.md").read_text()
    missing = sorted(name for name in options(serve) - shared if f"{name} " not in page and f"`{name}`" not in page)
    assert "--max-data-body-mb" in options(serve) and not missing, f"docs/rest-server.md does not name {missing}"


def test_no_page_installs_the_package_from_a_package_index() -> None:
    """The package is not published: pages install it from a checkout or a built wheel."""
    published = re.compile(r"pip install ['\"]?lance-iceberg-ns\b")
    assert not [page.name for page in PAGES if published.search(page.read_text())]
