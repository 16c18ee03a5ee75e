"""Lance tables in the Iceberg catalog from Spark, through PySpark (extra ``spark``).

The work is done by the executors: every task writes its partition as Lance fragments
(``writes``) or reads its fragments with the projection and the filter pushed into Lance
(``reads``); the driver plans and commits. ``views`` registers temporary views over a namespace's
tables, and ``source`` is ``format("lance")``, the Python data source of Spark 4.
"""

from lance_iceberg_ns.jobs.planned_writes import TableWrite, WriteResult
from lance_iceberg_ns.spark.catalog import lance_catalog_conf
from lance_iceberg_ns.spark.reads import (
    MAX_READ_BATCH_ROWS,
    MAX_TASK_BYTES,
    READ_BATCH_BYTES,
    TableRead,
    read_batch_rows,
    read_lance,
    read_tasks,
)
from lance_iceberg_ns.spark.views import register_lance_views
from lance_iceberg_ns.spark.writes import LOOPBACK, local_spark_session, write_lance, write_lance_together

__all__ = [
    "LOOPBACK",
    "MAX_READ_BATCH_ROWS",
    "MAX_TASK_BYTES",
    "READ_BATCH_BYTES",
    "TableRead",
    "TableWrite",
    "WriteResult",
    "lance_catalog_conf",
    "local_spark_session",
    "read_batch_rows",
    "read_lance",
    "read_tasks",
    "register_lance_views",
    "write_lance",
    "write_lance_together",
]
