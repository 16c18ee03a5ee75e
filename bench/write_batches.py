"""What Lance's writer spends on the batches it is handed, with and without the bridge joining
small batches first (``datasets.in_write_batches``, batches of ``WRITE_BATCH_BYTES``). For
information: no target.

Rows: 10 million of (int64, float64, short string), the data of ``bench/spark_pipeline.py``. Three
ways of handing them over, each written as fragments of at most 1M rows, as a Spark task does:
- batches of 10,000 rows with buffers of their own (as Spark's Python workers read them from an
  Arrow stream);
- the same batches joined by the bridge;
- slices of one table (``Table.to_batches(max_chunksize=10_000)``, as a user's ``write_together``
  may pass them), which Lance counts as the whole buffer they share.
Each is written ``--repeat`` times; the figures are the medians of the process CPU seconds spent
(Lance's threads included), the wall seconds, the pages per column of the first data file, and one
full read of the written rows.

    .venv/bin/python bench/write_batches.py [--rows 10000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import resource
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance.file import LanceFileReader

from lance_iceberg_ns.data import datasets

BATCH_ROWS = 10_000


def rows(count: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(count), pa.int64()),
            "value": pc.multiply(pa.array(range(count), pa.float64()), 0.5),
            "key": pa.array([f"k{i % 1000}" for i in range(count)]),
        }
    )


def as_streamed(table: pa.Table) -> list[pa.RecordBatch]:
    """The table in batches of ``BATCH_ROWS``, each with buffers of its own (read from a stream)."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=BATCH_ROWS):
            writer.write_batch(batch)
    return list(pa.ipc.open_stream(sink.getvalue()))


def cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def write(schema: pa.Schema, batches: Callable[[], Iterator[pa.RecordBatch]]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as place:
        started_cpu, started = cpu_seconds(), time.perf_counter()
        lance.fragment.write_fragments(
            pa.RecordBatchReader.from_batches(schema, batches()),
            place,
            schema=schema,
            mode="create",
            max_rows_per_file=1024 * 1024,
        )
        figures = {"CPU s": cpu_seconds() - started_cpu, "wall s": time.perf_counter() - started}
        first = sorted((Path(place) / "data").glob("*.lance"))[0]
        figures["pages"] = max(len(column.pages) for column in LanceFileReader(str(first)).metadata().columns)
        started = time.perf_counter()
        for data_file in sorted((Path(place) / "data").glob("*.lance")):
            LanceFileReader(str(data_file)).read_all().to_table()
        figures["read s"] = time.perf_counter() - started
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    table = rows(args.rows)
    streamed = as_streamed(table)
    paths: dict[str, Callable[[], Iterator[pa.RecordBatch]]] = {
        "10,000-row batches": lambda: iter(streamed),
        "10,000-row batches, joined": lambda: datasets.in_write_batches(streamed),
        "10,000-row slices of a table": lambda: iter(table.to_batches(max_chunksize=BATCH_ROWS)),
        "10,000-row slices, joined": lambda: datasets.in_write_batches(table.to_batches(max_chunksize=BATCH_ROWS)),
    }
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in paths}
    for _ in range(args.repeat):  # the paths take turns
        for name, batches in paths.items():
            samples[name].append(write(table.schema, batches))
    print(f"{args.rows:,} rows (int64, float64, short string) written as fragments; median of {args.repeat}")
    print(f"{'handed to Lance':<32}{'CPU s':>8}{'wall s':>8}{'pages':>7}{'read s':>8}")
    medians = {
        name: {key: statistics.median(run[key] for run in runs) for key in runs[0]} for name, runs in samples.items()
    }
    for name, figures in medians.items():
        print(
            f"{name:<32}{figures['CPU s']:>8.2f}{figures['wall s']:>8.2f}"
            f"{figures['pages']:>7.0f}{figures['read s']:>8.2f}"
        )
    names = list(paths)
    for joined, given in ((names[1], names[0]), (names[3], names[2])):
        ratio = medians[joined]["CPU s"] / medians[given]["CPU s"]
        print(f"CPU, {joined} / as given: {ratio:.2f}x (information)")


if __name__ == "__main__":
    main()
