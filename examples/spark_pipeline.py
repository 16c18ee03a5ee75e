"""An example pipeline on Spark: read source data, transform it, write a Lance table registered in
the Iceberg catalog, read it back, aggregate, print.

    .venv/bin/pip install -e ".[local,spark]"
    .venv/bin/python examples/spark_pipeline.py            # on the embedded local catalog
    .venv/bin/python examples/spark_pipeline.py --endpoint https://catalog... --root s3://bucket/lance
"""

from __future__ import annotations

import argparse
import tempfile

from lance_namespace import CreateNamespaceRequest
from pyspark.sql import functions as F

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.demo import catalog_endpoint
from lance_iceberg_ns.spark import local_spark_session, read_lance, write_lance

TABLE = ["demo_wh", "analytics", "page_views"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoint", help="an Iceberg REST catalog (default: start the local one)")
    parser.add_argument("--root", default=None, help="storage root for the table")
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()

    spark = local_spark_session("lance-iceberg-ns example", config={"spark.sql.shuffle.partitions": "4"})
    with catalog_endpoint(args.endpoint) as endpoint:
        properties = {"endpoint": endpoint, "root": args.root or tempfile.mkdtemp(prefix="lance-example-")}
        ns = IcebergLanceNamespace(**properties)
        ns.create_namespace(CreateNamespaceRequest(id=TABLE[:2], mode="exist_ok"))

        # 1. source data (here generated) and a transformation in Spark
        views = (
            spark.range(args.rows)
            .select(
                F.col("id").alias("view_id"),
                (F.col("id") % 97).alias("page"),
                F.expr("array(cast(rand(7) as float), cast(rand(8) as float), cast(rand(9) as float))").alias(
                    "embedding"
                ),
                (F.col("id") % 13 * 1.5).alias("seconds"),
            )
            .where("seconds > 0")
        )

        # 2. write it as a Lance table registered in the Iceberg catalog
        existing = TABLE[-1] in ns.list_tables({"id": TABLE[:2]}).tables
        result = write_lance(
            views, properties, TABLE, mode="overwrite" if existing else "create", vector_columns={"embedding": 3}
        )
        print(f"wrote {result.rows} rows in {result.fragments} fragments, version {result.version}")

        # 3. read it back through the catalog, and aggregate
        back = read_lance(spark, properties, TABLE, columns=["page", "seconds"])
        top = back.groupBy("page").agg(F.sum("seconds").alias("total")).orderBy(F.desc("total")).limit(3)
        for row in top.collect():
            print(f"page {row['page']}: {row['total']:.1f} seconds")
        ns.close()
    spark.stop()


if __name__ == "__main__":
    main()
