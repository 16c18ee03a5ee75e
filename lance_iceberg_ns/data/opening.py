"""The one place that opens Lance datasets for the data operations.

The reference implementation reopens a dataset on every call, so each call sees the latest
committed version. Here an open dataset is kept per location and, on each use, its latest version
is read (one small read of ``_versions/``) and checked out only when it moved: every operation
still sees the latest committed version, without paying a full reopen. A table whose versions the
catalog manages is opened through the namespace, so that the catalog says which version is the
latest and every commit goes through its compare-and-swap; so are its writes (``write``): a
managed table is never written by its location, which would commit outside the catalog.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import lance
import pyarrow as pa
from lance_namespace import LanceNamespace
from lance_namespace.errors import TableVersionNotFoundError

from lance_iceberg_ns.data import ResolvedTable


class OpenDatasets:
    """Datasets kept open for reuse (the least recently used are let go beyond ``capacity``)."""

    def __init__(self, namespace: LanceNamespace, capacity: int = 64) -> None:
        self._namespace = namespace
        self._capacity = capacity
        self._open: OrderedDict[str, lance.LanceDataset] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, table: ResolvedTable, version: int | str | None = None) -> lance.LanceDataset:
        """The table's dataset at its latest version, or at ``version`` (a number or a tag).
        Raises TableVersionNotFoundError for a version or tag it does not have."""
        if table.managed:
            dataset = lance.dataset(namespace_client=self._namespace, table_id=list(table.id))
        else:
            dataset = self._latest(table)
        if version is None:
            return dataset
        try:
            return dataset.checkout_version(version)
        except (ValueError, OSError, KeyError) as exc:
            raise TableVersionNotFoundError(f"Version {version!r} not found for table {'.'.join(table.id)}") from exc

    def write(self, table: ResolvedTable, data: pa.Table, mode: str) -> lance.LanceDataset:
        """Write ``data`` as the table's next version (``mode`` append, or overwrite: also the
        first version of a table declared but not yet written); the dataset written."""
        if table.managed:
            return lance.write_dataset(data, namespace_client=self._namespace, table_id=list(table.id), mode=mode)
        dataset = lance.write_dataset(data, table.location, mode=mode, storage_options=table.storage_options or None)
        self._keep(table.location, dataset)
        return dataset

    def _latest(self, table: ResolvedTable) -> lance.LanceDataset:
        with self._lock:
            dataset = self._open.pop(table.location, None)
        if dataset is None:
            dataset = lance.dataset(table.location, storage_options=table.storage_options or None)
        elif dataset.latest_version != dataset.version:
            dataset = dataset.checkout_version(dataset.latest_version)
        self._keep(table.location, dataset)
        return dataset

    def _keep(self, location: str, dataset: lance.LanceDataset) -> None:
        with self._lock:
            self._open[location] = dataset
            self._open.move_to_end(location)
            while len(self._open) > self._capacity:
                self._open.popitem(last=False)

    def forget(self, location: str) -> None:
        """Let go of a dataset whose table was dropped, moved or replaced."""
        with self._lock:
            self._open.pop(location, None)
