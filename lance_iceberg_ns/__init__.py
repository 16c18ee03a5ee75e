"""Lance tables registered in an Apache Iceberg REST catalog.

Importing this package registers ``IcebergLanceNamespace`` as the Lance namespace
implementation ``"iceberg"`` (whichever other package claims the name, see ``registry``) and
``"lance-iceberg-ns"``, so ``lance_namespace.connect("iceberg", properties)`` and
``lancedb.connect_namespace("iceberg", properties)`` find it.
"""

from lance_iceberg_ns import registry
from lance_iceberg_ns.config import Settings
from lance_iceberg_ns.namespace import IcebergLanceNamespace, companion_table_schema

__version__ = "0.1.0"
__all__ = ["IcebergLanceNamespace", "Settings", "companion_table_schema", "__version__"]

registry.register()
