"""Lance tables registered in an Apache Iceberg REST catalog.

Importing this package registers ``IcebergLanceNamespace`` as the Lance namespace
implementation ``"iceberg"``, so ``lance_namespace.connect("iceberg", properties)`` and
``lancedb.connect_namespace("iceberg", properties)`` find it.
"""

from lance_namespace import register_namespace_impl

from lance_iceberg_ns.config import Settings
from lance_iceberg_ns.namespace import IcebergLanceNamespace, companion_table_schema

__version__ = "0.1.0"
__all__ = ["IcebergLanceNamespace", "Settings", "companion_table_schema", "__version__"]

register_namespace_impl("iceberg", "lance_iceberg_ns.IcebergLanceNamespace")
