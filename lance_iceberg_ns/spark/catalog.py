"""Spark SQL on the catalog's Lance tables through lance-spark, Lance's own Spark connector
(``lance_catalog_conf``).

lance-spark is a JVM catalog (``LanceNamespaceSparkCatalog``) that speaks the Lance REST Namespace
protocol; pointed at ``lance-iceberg-ns serve``, Spark SQL creates, writes, reads and drops the Lance
tables of the Iceberg catalog by name, with filters and projections pushed into Lance. The settings
name the connector built for the running Spark (fetched by Spark's own Ivy from Maven Central into
this package's cache directory, once) and the catalog's options; nothing here logs them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from lance_namespace.errors import InvalidInputError, UnsupportedOperationError

LANCE_SPARK_VERSION = "0.4.0"
# The connector for each Spark release line, as Maven Central serves it: for lance-spark 0.4.0
# that is the build for Spark 3.5 on Scala 2.12 (PySpark's own Scala) alone.
CONNECTORS: Mapping[tuple[int, int], str] = {(3, 5): f"org.lance:lance-spark-3.5_2.12:{LANCE_SPARK_VERSION}"}
CATALOG_CLASS = "org.lance.spark.LanceNamespaceSparkCatalog"
# Spark's default redaction pattern, widened to what carries the secrets here: HTTP headers (a
# bearer token, an API key) and storage keys spelled with an underscore.
REDACTION_REGEX = r"(?i)secret|password|token|access[._]?key|authorization|\.headers?\."
_REDACTED = re.compile(REDACTION_REGEX)
# Set by this function; an option may not replace them.
_OWN_OPTIONS = ("impl", "uri")
_CATALOG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPTION_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")


class SparkSettings(dict[str, str]):
    """Spark settings, a plain ``dict``; its ``repr`` hides the values Spark's redaction hides."""

    def __repr__(self) -> str:
        shown = {key: "*********(redacted)" if _REDACTED.search(key) else value for key, value in self.items()}
        return f"{type(self).__name__}({shown!r})"

    __str__ = __repr__


def lance_catalog_conf(
    name: str,
    uri: str,
    /,
    *,
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
    spark_version: str | None = None,
    ivy_dir: str | os.PathLike[str] | None = None,
    **options: str,
) -> SparkSettings:
    """The Spark settings that make catalog ``name`` lance-spark's namespace catalog over
    ``lance-iceberg-ns serve`` at ``uri``: give them to ``SparkSession.builder.config`` (or
    spark-defaults) before the session starts; ``name.wh.db.table`` is then the Lance table
    ``wh.db.table`` of the bridge.

    ``token`` is sent as ``Authorization: Bearer``, ``headers`` as HTTP headers; ``options`` are
    further catalog options (``storage.*``, ``single_level_ns``, ``parent``...), passed as given.
    ``spark.jars.packages`` names the connector for ``spark_version`` (default: the installed
    PySpark's), fetched once into ``ivy_dir`` (default: ``ivy`` in this package's cache directory,
    ``$LANCE_ICEBERG_NS_CACHE`` or ``$XDG_CACHE_HOME/lance-iceberg-ns``); add packages of your own
    to it with a comma. ``spark.redaction.regex`` is widened so that Spark's UI, event logs and
    ``SET`` hide the headers too.

    Raises UnsupportedOperationError when no connector is published for that Spark version,
    InvalidInputError for a name, URI, header or option Spark could not take (the values are not
    repeated in the message).
    """
    if not _CATALOG_NAME.fullmatch(name) or name.lower() == "spark_catalog":
        raise InvalidInputError(f"A catalog name is a plain SQL identifier other than spark_catalog, not {name!r}")
    parsed = urlsplit(uri)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise InvalidInputError("uri must be the http(s) URL of lance-iceberg-ns serve")
    catalog_options = {"impl": "rest", "uri": uri.rstrip("/")}
    sent_headers = dict(headers or {})
    if token is not None:
        sent_headers["Authorization"] = f"Bearer {token}"
    for header, value in sent_headers.items():
        if not _OPTION_KEY.fullmatch(header) or not isinstance(value, str) or "\r" in value or "\n" in value:
            raise InvalidInputError(f"HTTP header {header!r}: a token-like name and a one-line text value")
        catalog_options[f"header.{header}"] = value
    for key, value in options.items():
        if key in _OWN_OPTIONS or not _OPTION_KEY.fullmatch(key) or not isinstance(value, str):
            raise InvalidInputError(f"Catalog option {key!r}: a text value, and not one of {_OWN_OPTIONS}")
        catalog_options[key] = value
    settings = SparkSettings(
        {
            "spark.jars.packages": connector_package(spark_version),
            "spark.jars.ivy": str(Path(ivy_dir) if ivy_dir is not None else _cache_root() / "ivy"),
            "spark.redaction.regex": REDACTION_REGEX,
            f"spark.sql.catalog.{name}": CATALOG_CLASS,
        }
    )
    settings.update({f"spark.sql.catalog.{name}.{key}": value for key, value in catalog_options.items()})
    return settings


def connector_package(spark_version: str | None = None) -> str:
    """The Maven coordinates of lance-spark for ``spark_version`` (default: the installed PySpark's).
    Raises UnsupportedOperationError when none is published for it, InvalidInputError when there
    is no version to go by."""
    if spark_version is None:
        try:
            import pyspark
        except ImportError:
            raise InvalidInputError("Name spark_version=, or install PySpark (the extra 'spark')") from None
        spark_version = str(pyspark.__version__)
    release = re.match(r"(\d+)\.(\d+)", spark_version)
    if release is None:
        raise InvalidInputError(f"Not a Spark version: {spark_version!r}")
    package = CONNECTORS.get((int(release[1]), int(release[2])))
    if package is None:
        raise UnsupportedOperationError(
            f"No lance-spark connector is published for Spark {spark_version}: lance-spark "
            f"{LANCE_SPARK_VERSION} is on Maven Central for Spark 3.5 (Scala 2.12) only. Without it, "
            "register_lance_views of lance_iceberg_ns.spark (and on Spark 4 format('lance')) gives Spark SQL "
            "the tables."
        )
    return package


def _cache_root() -> Path:
    # the same directory as the local catalog's builds (lance_iceberg_ns.testing.build.cache_root)
    base = os.environ.get("LANCE_ICEBERG_NS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lance-iceberg-ns"
    )
    return Path(base)
