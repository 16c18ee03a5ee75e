"""Spark writes and reads of a Lance table through the catalog, against Spark's own Parquet and
against a single-process pylance write/read of the same data, from one run.

10 million rows (int64, float64, a short string) on local[2] by default. Each figure is the median
wall time of ``--repeat`` full writes or ``--read-repeat`` full reads (a read is a count over every
column, so every value is decoded; reads take about a second, where one slow round among three
moved the read ratio by a third, so they take more rounds), the paths taking turns round by round
so that a slow stretch of the machine falls on all of them alike; every Lance write makes a table
of its own. Every path is taken once on a small slice first, unmeasured. The first figure is the
floor under any Python writer: Spark handing the rows to Python workers as Arrow through
``mapInArrow`` with nothing written, measured in the same run. Spark's Parquet writer, in the JVM,
never pays it, so the Lance write is held to the floor (at most 1.05x) and its ratio to Parquet is
shown for information; a JVM writer (lance-spark against ``lance-iceberg-ns serve``) is what closes
the rest. Also for information, the same hand-off into pylance's fragment writer and nothing else
(no catalog, no schema check, no commit; each round a directory of its own): what Lance's own
encoding and writing add to the floor on this machine, which the bridge's write cannot go below.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/spark_pipeline.py [--rows 10000000]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import uuid
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F
from rest_server import timed

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.spark import local_spark_session, read_lance, write_lance
from lance_iceberg_ns.testing import local_catalog


def spark_arguments(description: str | None, rows: int, read_repeat: int) -> argparse.Namespace:
    """The Spark benchmarks' command line: rows, partitions, write and read rounds."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=rows)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5, help="write rounds; each figure is their median")
    parser.add_argument("--read-repeat", type=int, default=read_repeat, help="read rounds; each figure is their median")
    return parser.parse_args()


def main() -> None:
    args = spark_arguments(__doc__, rows=10_000_000, read_repeat=7)
    spark = local_spark_session("lance-iceberg-ns benchmark", config={"spark.driver.memory": "4g"})
    source = spark.range(0, args.rows, numPartitions=args.partitions).select(
        F.col("id"), (F.col("id") * 0.5).alias("value"), F.concat(F.lit("k"), F.col("id") % 1000).alias("key")
    )
    source.cache().count()  # generate once; every write below starts from the same cached rows

    with (
        tempfile.TemporaryDirectory() as work,
        local_catalog(Path(work) / "catalog", prefix_style="defaults") as catalog,
    ):
        properties = {"endpoint": catalog.endpoint, "root": str(Path(work) / "lance")}
        ns = IcebergLanceNamespace(**properties)
        ns.create_namespace({"id": ["bench_wh", "db"]})
        parquet_path = str(Path(work) / "parquet")
        single_path = str(Path(work) / "single_{}.lance")  # a dataset of its own each round, as Lance's

        def rows_seen(batches):  # type: ignore[no-untyped-def]
            yield pa.RecordBatch.from_pydict({"rows": [sum(batch.num_rows for batch in batches)]})

        def bare_fragments(directory: str):  # type: ignore[no-untyped-def]
            def write(batches):  # type: ignore[no-untyped-def]
                batches = iter(batches)
                first = next(batches)
                rows = pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], batches))
                written = lance.fragment.write_fragments(
                    rows, f"{directory}/{uuid.uuid4().hex}", schema=first.schema, max_rows_per_file=1024 * 1024
                )
                yield pa.RecordBatch.from_pydict({"fragments": [len(written)]})

            return write

        def count_all(df) -> None:  # type: ignore[no-untyped-def]
            df.select(F.sum("id"), F.sum("value"), F.max(F.length("key"))).collect()

        # Start the Python workers, and take every path once on a small slice, so that no figure
        # pays for starting workers or for compiling its code path the first time.
        spark.range(0, 16, numPartitions=8).mapInArrow(rows_seen, "rows long").collect()
        warm_up = source.limit(100_000)
        write_lance(warm_up, properties, ["bench_wh", "db", "warm_up"])
        warm_up.mapInArrow(bare_fragments(str(Path(work) / "bare_warm_up")), "fragments long").collect()
        warm_up.write.mode("overwrite").parquet(str(Path(work) / "warm_up"))
        count_all(read_lance(spark, properties, ["bench_wh", "db", "warm_up"]))
        count_all(spark.read.parquet(str(Path(work) / "warm_up")))
        arrow_table = pa.table(
            {
                "id": pa.array(range(args.rows), pa.int64()),
                "value": pc.multiply(pa.array(range(args.rows), pa.float64()), 0.5),
                "key": pa.array([f"k{i % 1000}" for i in range(args.rows)]),
            }
        )
        samples: dict[str, list[float]] = {}

        def sample(name: str, action) -> None:  # type: ignore[no-untyped-def]
            samples.setdefault(name, []).append(timed(action))

        for round_ in range(args.repeat):
            table = ["bench_wh", "db", f"events_{round_}"]
            # The floor under any Python writer: Spark handing the rows to Python as Arrow, nothing written.
            sample("floor: Spark -> Python, no write", lambda: source.mapInArrow(rows_seen, "rows long").collect())
            sample("write: Spark -> Lance (catalog)", lambda table=table: write_lance(source, properties, table))
            sample(
                "write: Spark -> bare fragments",
                lambda round_=round_: source.mapInArrow(
                    bare_fragments(str(Path(work) / f"bare_{round_}")), "fragments long"
                ).collect(),
            )
            sample("write: Spark -> Parquet", lambda: source.write.mode("overwrite").parquet(parquet_path))
            sample(
                "write: pylance, one process",
                lambda round_=round_: lance.write_dataset(arrow_table, single_path.format(round_), mode="create"),
            )
        for _ in range(args.read_repeat):
            sample("read: Lance (catalog) -> Spark", lambda: count_all(read_lance(spark, properties, table)))
            sample("read: Parquet -> Spark", lambda: count_all(spark.read.parquet(parquet_path)))
            sample("read: pylance, one process", lambda: lance.dataset(single_path.format(0)).to_table())
        figures = {name: statistics.median(taken) for name, taken in samples.items()}
        assert read_lance(spark, properties, table).count() == args.rows

    spark.stop()
    print(
        f"{args.rows:,} rows (int64, float64, short string), local[2], {args.partitions} partitions; "
        f"seconds, median of {args.repeat} writes and {args.read_repeat} reads"
    )
    for name, seconds in figures.items():
        taken = ", ".join(f"{one:.2f}" for one in samples[name])
        print(f"{name:<36}{seconds:>8.2f}   ({taken})")
    write = figures["write: Spark -> Lance (catalog)"]
    floor_ratio = write / figures["floor: Spark -> Python, no write"]
    bare_ratio = figures["write: Spark -> bare fragments"] / figures["floor: Spark -> Python, no write"]
    write_ratio = write / figures["write: Spark -> Parquet"]
    read_ratio = figures["read: Lance (catalog) -> Spark"] / figures["read: Parquet -> Spark"]
    print(f"Lance write / Python hand-off floor: {floor_ratio:.2f} (target <= 1.05)")
    print(f"bare pylance fragments / hand-off floor: {bare_ratio:.2f} (information: Lance's own share)")
    print(f"Lance write / Parquet write: {write_ratio:.2f} (information: Parquet never leaves the JVM)")
    print(f"Lance read / Parquet read:   {read_ratio:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
