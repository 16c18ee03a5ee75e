"""Temporary Spark views over the Lance tables of a namespace (``register_lance_views``)."""

from __future__ import annotations

import hashlib
import json
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lance_namespace import ListNamespacesRequest, ListTablesRequest
from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns.identifiers import parse_namespace_id
from lance_iceberg_ns.namespace import IcebergLanceNamespace, as_namespace
from lance_iceberg_ns.spark.reads import TableRead, read_lance

# The views register_lance_views made, per Spark session: view name -> the registration that made
# it, and the view's definition as made (``_temp_view``): a view the user put under the name since
# is not dropped with the table.
_REGISTERED_VIEWS: weakref.WeakKeyDictionary[Any, dict[str, tuple[tuple[Any, ...], Any]]] = weakref.WeakKeyDictionary()


def register_lance_views(
    spark: Any,
    namespace: IcebergLanceNamespace | Mapping[str, str],
    namespace_id: str | Sequence[str],
    *,
    recursive: bool = False,
) -> list[str]:
    """A temporary view for every Lance table of a namespace (``"wh.db"`` or ``["wh", "db"]``), so
    that ``spark.sql("SELECT ... FROM orders")`` reads it; the view names, sorted.

    A view is named after its table; with ``recursive``, tables of the namespaces beneath too, named
    by their path below ``namespace_id`` joined by ``_`` (``sales_orders``). Names that are not plain
    identifiers are written in backquotes. On Spark 4 a view is the ``lance`` data source, and
    ``INSERT INTO`` appends. Where Spark reloads a view's table on every query (Spark 4.3 with its
    built-in in-memory session catalog), the view reads through a placeholder table of the session
    catalog (``spark_catalog.default.lance_view_...``: schema and provider only, no options, no
    files), so every query reads the table's latest version, and the scans of one query one
    version; elsewhere (Hive catalog, a custom ``spark_catalog``, Spark Connect, older Spark 4)
    Spark keeps the source's read plan, so the view reads the version its first query read. Filters
    are not pushed into Lance: Spark 4.3 keeps a pushed-down read plan on the source and hands it to
    every scan of the view in the query, which would give wrong rows. On Spark 3.5 a view is
    ``read_lance``'s DataFrame, at the version read here. Registering again refreshes the views, and
    drops those this function made for the namespace whose tables are gone.
    """
    ns = as_namespace(namespace)
    parent = _namespace_parts(namespace_id)
    views = _view_names(parent, _lance_tables(ns, parent, recursive))
    source = _lance_source(spark)
    placeholders = source and _reloads_view_tables(spark)
    for name, table_id in views.items():
        options = {**ns.properties, "table_id": json.dumps(table_id), "existing_table": "true"}
        if placeholders:
            frame = spark.read.options(**options).table(_placeholder_table(spark, ns, name, table_id))
        elif source:
            frame = spark.read.format("lance").options(**options).load()
        else:
            frame = read_lance(spark, ns, table_id)
        frame.createOrReplaceTempView(_quoted(name))
    registration = (ns.properties.get("endpoint"), tuple(parent), recursive)
    made = _REGISTERED_VIEWS.setdefault(spark, {})
    current = {name.lower() for name in views}  # Spark's view names ignore case
    for name in [name for name, (owner, _) in made.items() if owner == registration and name not in views]:
        if name.lower() not in current and _temp_view(spark, name) == made[name][1]:  # else replaced since
            spark.catalog.dropTempView(name)  # the name as it is: this one is not parsed
        if placeholders:
            spark.sql(f"DROP TABLE IF EXISTS {placeholder_name(spark, name)}")
        del made[name]
    made.update({name: (registration, _temp_view(spark, name)) for name in views})
    return sorted(views)


def _temp_view(spark: Any, name: str) -> Any:
    """The session's definition of the temporary view ``name`` (a JVM object, equal only to the
    same definition), None when there is none; where it cannot be read (Spark Connect), a stand-in
    equal to every other, so that only the name tells a view this module made."""
    try:
        found = spark._jsparkSession.sessionState().catalog().getRawTempView(name)
    except Exception:  # Spark Connect: no JVM session
        return _UNREADABLE
    return found.get() if found.isDefined() else None


_UNREADABLE = object()


# Per Spark session, a token naming its placeholder tables (the session catalog is shared by the
# sessions of one application; temporary views are not).
_SESSION_TOKENS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_V2_TABLE_REFERENCE = "org.apache.spark.sql.catalyst.analysis.V2TableReference"


def _reloads_view_tables(spark: Any) -> bool:
    """Whether a temporary view made from a session catalog table loads the table again on every
    query (Spark 4.3's V2TableReference), in a session whose catalog is Spark's own in-memory one,
    where a placeholder table lives as long as the application and writes no files."""
    try:
        jvm = spark._jvm  # none on Spark Connect
        if jvm is None or spark.conf.get("spark.sql.catalogImplementation") != "in-memory":
            return False
        if spark.conf.get("spark.sql.catalog.spark_catalog", None):  # a catalog of its own
            return False
        jvm.java.lang.Class.forName(_V2_TABLE_REFERENCE)
    except Exception:  # Spark Connect, a Spark 4 without the class, a conf that cannot be read
        return False
    return True


def placeholder_name(spark: Any, view: str) -> str:
    token = _SESSION_TOKENS.setdefault(spark, uuid.uuid4().hex[:12])
    return f"spark_catalog.default.lance_view_{token}_{hashlib.sha256(view.encode()).hexdigest()[:16]}"


def _placeholder_table(spark: Any, ns: IcebergLanceNamespace, view: str, table_id: Sequence[str]) -> str:
    """A table of the session catalog standing for the Lance table: the ``lance`` provider and the
    table's schema, external at the table's location (so that nothing is written), no options (the
    view passes them); its name."""
    plan = TableRead.plan(ns, table_id, parallelism=1)
    name = placeholder_name(spark, view)
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.catalog.createTable(name, path=plan.location, source="lance", schema=plan.spark_schema())
    return name


def _namespace_parts(namespace_id: str | Sequence[str]) -> list[str]:
    """``"wh.db"`` or ``["wh", "db"]`` as its parts; ``""`` is the root (every configured warehouse)."""
    if isinstance(namespace_id, str):
        return namespace_id.split(".") if namespace_id else []
    return list(namespace_id)


def _lance_tables(ns: IcebergLanceNamespace, parent: list[str], recursive: bool) -> list[list[str]]:
    """The Lance tables with data (no declared-only ones) of ``parent``, or beneath it, each id as
    its parts (a name may hold ``$``, which joins the ids ``list_all_tables`` answers)."""
    if not recursive:
        return [[*parent, name] for name in _table_names(ns, parent)]
    pending = [parent] if parent else [[warehouse] for warehouse in ns.settings.warehouses]
    if not pending:
        raise InvalidInputError("Give the warehouse to register, or configure the property 'warehouses'")
    found = []
    while pending:
        namespace = pending.pop()
        if len(namespace) > 1:  # a warehouse holds namespaces, not tables
            found += [[*namespace, name] for name in _table_names(ns, namespace)]
        children = ([*namespace, child] for child in _child_namespaces(ns, namespace))
        pending += [child for child in children if _addressable(child)]
    return found


def _addressable(namespace_id: list[str]) -> bool:
    """Whether the bridge can name a namespace: an Iceberg engine may make one under a name it
    refuses (``"scratch "``), which then holds no Lance table to make a view of."""
    try:
        parse_namespace_id(namespace_id)
    except InvalidInputError:
        return False
    return True


def _table_names(ns: IcebergLanceNamespace, namespace: list[str]) -> list[str]:
    return _every_page(
        lambda token: ns.list_tables(ListTablesRequest(id=namespace, include_declared=False, page_token=token))
    )


def _child_namespaces(ns: IcebergLanceNamespace, namespace: list[str]) -> list[str]:
    return _every_page(lambda token: ns.list_namespaces(ListNamespacesRequest(id=namespace, page_token=token)))


def _every_page(page: Callable[[str | None], Any]) -> list[str]:
    """Every name of a paged listing; ``page`` answers the page after a token."""
    names: list[str] = []
    token = None
    while True:
        answer = page(token)
        names += getattr(answer, "tables", None) or getattr(answer, "namespaces", None) or []
        token = answer.page_token
        if not token:
            return names


def _view_names(parent: list[str], tables: list[list[str]]) -> dict[str, list[str]]:
    """View name -> table id. Spark's names ignore case: two tables with one name are refused."""
    views: dict[str, list[str]] = {}
    for table_id in tables:
        name = "_".join(table_id[len(parent) :])
        clash = next((other for other in views if other.lower() == name.lower()), None)
        if clash is not None:
            raise InvalidInputError(
                f"Tables {'.'.join(views[clash])} and {'.'.join(table_id)} would both be the view {name!r}: "
                "register their namespaces one at a time"
            )
        views[name] = table_id
    return views


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _lance_source(spark: Any) -> bool:
    """Whether ``format("lance")`` is available (Spark 4), registering it."""
    try:
        from lance_iceberg_ns.spark.source import register_lance_data_source
    except ImportError:  # PySpark 3.5
        return False
    register_lance_data_source(spark)
    return True
