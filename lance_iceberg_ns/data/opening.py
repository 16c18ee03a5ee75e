"""Datasets kept open for the data operations (opened through ``data.datasets``).

The reference implementation reopens a dataset on every call, so each call sees the latest
committed version. Here an open dataset is kept per place and, on each use, its latest version
is read (one small read of ``_versions/``) and checked out only when it moved: every operation
still sees the latest committed version, without paying a full reopen.

A read does not wait for the catalog before it starts (``read``): it runs on the dataset kept for
the place the catalog named last time, while the catalog is asked again and the latest version is
read. Its answer is kept only when the catalog names the same place and the version has not
moved; otherwise it runs again where the catalog now says, at the latest version. Every read is
still checked against the catalog and the latest version during the call, at the cost of the
longer of the two rather than their sum. A dataset is kept for a place: a location and the
catalog's id of the table there, since an explicit location can be used again by a new table after
a hard drop.

Reads of a table that arrive together share those checks (``SharedAnswers``): a read takes the
answer to a question asked after it arrived (through ``serve``, when its request came in, before it
waited for a thread), which tells it as much as its own question would. Reads one after another
each ask; under load most reads find such an answer, and the catalog is asked far less often.

With ``read_consistency_interval`` (lancedb's name and meaning: seconds) a read may skip both checks
for that long after a read of the same table id that made them: it runs on the dataset kept for the
place the catalog named then, at the version seen then (or the version it asks for), and makes no
request to the catalog. It is only ever a dataset this bridge opened for that id, its location's
ownership proved, so it never reads a location the bridge did not prove owned; but it may be up to
that long out of date, and after a rename made elsewhere the dataset the name led to may by then
be another name's table (a swap of two names elsewhere reads each name's old table until the
interval runs out). A read that fails on it is made again with both checks. Whatever this bridge
does to a name (drop, rename from or into it, register, declare, create, undrop) is seen at once
(``forget_table``); what is done elsewhere, once the interval has run out. Every worker of
``serve --workers N`` is a bridge of its own: a change through the server is made elsewhere for
the other workers. Writes and managed tables always ask the catalog. Unset (the default) or 0:
every read makes both checks.

A table whose versions the catalog manages is opened through the namespace, so that the catalog
says which version is the latest and every commit goes through its compare-and-swap; so are its
writes (``write``): a managed table is never written by its location, which would commit outside
the catalog. A read opens it through a namespace that always asks the catalog (``reads_through``),
never answering from a commit this process made a moment ago: another process may have committed
since.
"""

from __future__ import annotations

import copy
import fcntl
import functools
import hashlib
import logging
import os
import re
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager, suppress
from typing import Generic, NoReturn, Protocol, TypeVar

import lance
import pyarrow as pa
from lance_namespace import LanceNamespace
from lance_namespace.errors import (
    ConcurrentModificationError,
    InvalidTableStateError,
    LanceNamespaceError,
    PermissionDeniedError,
    ServiceUnavailableError,
)

from lance_iceberg_ns.cache import RecentlyUsed
from lance_iceberg_ns.data import ResolvedTable, datasets, request_arrived
from lance_iceberg_ns.errors.pylance import state_refused
from lance_iceberg_ns.storage import files
from lance_iceberg_ns.storage.ownership import Entry

logger = logging.getLogger(__name__)
K = TypeVar("K")
T = TypeVar("T")


class _Turns:
    """One lock per key while anyone holds or waits for it, so that first writes of one table take
    turns without holding up another table's: among the threads of this process (every bridge of
    it: a server holds one per caller's token), and among the processes of this machine (a
    server's data workers, its other workers, the command line) through a file lock, which the
    system lets go of when its process ends, however it ends."""

    def __init__(self, directory: str | None = None) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}
        self._directory = directory

    @contextmanager
    def turn(self, key: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock, self._among_processes(key):
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    @contextmanager
    def _among_processes(self, key: str) -> Iterator[None]:
        """The machine-wide turn of ``key``: one of ``TURN_FILES`` lock files, by the key's hash
        (two tables sharing one take turns too), in a directory of this user's alone. Waits at most
        ``TURN_SECONDS`` (ServiceUnavailableError: another process has held the turn that long).
        Without such a directory (another user made it, the temporary directory is read-only), turns
        are taken in this process only, and the log says why."""
        handle = self._lock_file(key)
        if handle is None:
            yield
            return
        try:
            deadline = time.monotonic() + TURN_SECONDS
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise ServiceUnavailableError(
                            f"Another process has been writing this table's first version for {TURN_SECONDS:g} s: "
                            f"retry later"
                        ) from None
                    time.sleep(TURN_LOOK_SECONDS)
            yield
        finally:
            os.close(handle)  # lets go of the lock

    def _lock_file(self, key: str) -> int | None:
        directory = self._directory or os.path.join(tempfile.gettempdir(), f"lance-iceberg-ns-{os.getuid()}")
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            found = os.lstat(directory)
            if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
                raise PermissionError(f"{directory} is not a directory of this user's alone")
            bucket = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % TURN_FILES
            path = os.path.join(directory, f"first-write-{bucket}.lock")
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            logger.warning("First writes take turns in this process only: %s", exc)
            return None


TURN_FILES = 1_024
TURN_SECONDS = 60.0  # the longest a first write waits for another process's
TURN_LOOK_SECONDS = 0.02
_FIRST_WRITES = _Turns()
# How long a first write waits for one under way in another process, and how often it looks
FIRST_WRITE_ELSEWHERE_SECONDS = 10.0
FIRST_WRITE_LOOK_SECONDS = 0.05


# How long a read waits for another read's question before it asks itself: far longer than the
# catalog takes to answer, so that one question stuck on a lost connection holds up no other read.
WAIT_FOR_ANOTHERS_QUESTION_SECONDS = 0.5


class _Question(Generic[T]):
    """A question to the catalog, when it was asked, and its answer or failure once given."""

    def __init__(self, asked_at: float) -> None:
        self.asked_at = asked_at
        self.given = threading.Event()
        self.answered = False
        self.answer: T | None = None
        self.failure: Exception | None = None


class SharedAnswers(Generic[K, T]):
    """The catalog's answers about a table, shared by the reads that arrive together.

    A read may take the answer to any question asked after it arrived: that answer describes the
    catalog as it was at a moment during the read, as the read's own question would. So a read
    takes the last answer when it was asked late enough, else waits for a question out that was,
    else asks. Reads one after another each ask; reads that queue behind others for a thread
    mostly find an answer asked while they waited. A failure reaches the reads waiting for that
    question (each raises a copy of its own), and is never kept; a read whose question is slow
    (``WAIT_FOR_ANOTHERS_QUESTION_SECONDS``) or whose asker gave up asks anew."""

    def __init__(self, capacity: int) -> None:
        self._lock = threading.Lock()
        self._last: RecentlyUsed[K, tuple[float, T]] = RecentlyUsed(capacity)  # (asked at, answer)
        self._out: dict[K, list[_Question[T]]] = {}

    def ask(self, key: K, arrived: float, asking: Callable[[], T]) -> tuple[T, float]:
        """An answer to ``asking()`` asked after ``arrived`` (``time.monotonic()``), and when."""
        while True:
            with self._lock:
                last = self._last.get(key)
                if last is not None and last[0] > arrived:
                    return last[1], last[0]
                question = next((out for out in self._out.get(key, ()) if out.asked_at > arrived), None)
                if question is None:
                    question = _Question(time.monotonic())
                    self._out.setdefault(key, []).append(question)
                    break  # this read asks
            if question.given.wait(WAIT_FOR_ANOTHERS_QUESTION_SECONDS) and question.answered:
                if question.failure is not None:
                    raise _own_copy(question.failure) from question.failure
                return question.answer, question.asked_at  # type: ignore[return-value]  # answered
            arrived = time.monotonic()  # slow, or its asker gave up: ask anew
        answered = False
        try:
            question.answer = asking()
            answered = True
        except Exception as exc:
            question.failure, answered = exc, True
            raise
        finally:  # an interrupt (no Exception) leaves it unanswered: the reads waiting for it ask anew
            question.answered = answered
            self._answered(key, question)
        return question.answer, question.asked_at  # type: ignore[return-value]  # answered

    def _answered(self, key: K, question: _Question[T]) -> None:
        with self._lock:
            out = self._out[key]
            out.remove(question)
            if not out:
                del self._out[key]
            last = self._last.get(key)
            if question.answered and question.failure is None and (last is None or last[0] < question.asked_at):
                self._last.keep(key, (question.asked_at, question.answer))  # type: ignore[arg-type]
        question.given.set()


def _own_copy(failure: Exception) -> Exception:
    """The failure for one more read to raise: each raise adds to an exception's traceback, and the
    reads that share a failure raise it on threads of their own."""
    try:
        return copy.copy(failure)
    except Exception:  # an exception that cannot be made again from its arguments
        return failure


class Consistency(Protocol):
    """How fresh reads must be (the bridge's ``Settings``)."""

    @property
    def read_consistency_interval(self) -> float | None: ...


class OpenDatasets:
    """Datasets kept open for reuse (the least recently used are let go beyond ``capacity``)."""

    def __init__(
        self,
        writes_through: Callable[[], LanceNamespace],
        reads_through: Callable[[], LanceNamespace],
        prove: Callable[[str, Entry, dict[str, str]], None],
        consistency: Consistency | None = None,
        capacity: int = 64,
    ) -> None:
        self._writes_through = writes_through
        self._reads_through = reads_through
        self._prove_place = prove  # raises PermissionDeniedError for a place the entry cannot show is its own
        self._open: RecentlyUsed[tuple[str, Entry], lance.LanceDataset] = RecentlyUsed(capacity)  # by place
        self._places: RecentlyUsed[tuple[str, ...], ResolvedTable] = RecentlyUsed(capacity)  # as last resolved
        self._interval = consistency.read_consistency_interval if consistency else None  # 0 or None: always ask
        self._confirmed: RecentlyUsed[tuple[str, ...], tuple[str, Entry]] = RecentlyUsed(capacity)  # by a read
        self._written: RecentlyUsed[tuple[str, Entry], bool] = RecentlyUsed(capacity)  # places with a version
        self._keeping = threading.Lock()  # a dataset is kept only over an older one
        # the catalog's answer and the latest version, by table id and the place read from
        self._answers: SharedAnswers[tuple[tuple[str, ...], tuple[str, Entry]], tuple[ResolvedTable, int | None]]
        self._answers = SharedAnswers(capacity)

    def read(
        self,
        table_id: tuple[str, ...],
        resolve: Callable[[], ResolvedTable],
        start: Callable[[lance.LanceDataset], Callable[[], T]],
        version: datasets.Version,
        executor: Executor | None,
    ) -> T:
        """A read on the table's dataset (at ``version``): ``start`` begins it and returns the call
        that finishes it. The catalog's answer (``resolve``) and the dataset's latest version are
        asked meanwhile: on ``executor`` while this thread finishes the read, or, with none, on this
        thread while the read runs on pylance's own (a query, from ``to_reader`` on). The answer
        is the one read where the catalog says the table is, at its latest version (or
        ``version``); the catalog's errors (a table gone) win over the read's. Within
        ``read_consistency_interval`` of the last read that asked, the kept dataset answers alone
        (see the module's docstring)."""
        known = self._places.get(table_id)
        kept = self._open.get(known.place) if known is not None and not known.managed else None
        if known is not None and kept is not None and self._confirmed_lately(table_id, known):
            with suppress(Exception):  # any failure is looked at again with both checks, below
                return start(kept if version is None else _checkout(kept, table_id, version))()
        if known is None or kept is None:
            asked_at = self._confirmed.now()
            table = resolve()
            self._confirmed.keep(table_id, table.place, asked_at)
            return start(self.open(table, version, reading=True))()

        arrived = request_arrived.get() or time.monotonic()

        def ask() -> tuple[tuple[ResolvedTable, int | None], float]:  # shared by reads that arrive together
            return self._answers.ask((table_id, known.place), arrived, lambda: (resolve(), _latest_version(kept)))

        try:
            finish = start(kept if version is None else _checkout(kept, table_id, version))
        except Exception as exc:  # kept until the catalog says whether it read the right table
            finish = functools.partial(_raise, exc)
        if executor is None:  # the read runs on pylance's own threads meanwhile
            (current, latest), asked_at = ask()
            answer, failure = _outcome(finish)
        else:
            asked = executor.submit(ask)
            answer, failure = _outcome(finish)
            (current, latest), asked_at = asked.result()
        self._confirmed.keep(table_id, current.place, asked_at)
        moved = (current.place, current.managed) != (known.place, known.managed)
        if moved or (version is None and latest != kept.version):
            return start(self.open(current, version, reading=True))()
        if failure is not None:
            raise failure
        return answer  # type: ignore[return-value]  # set whenever failure is not

    def open(self, table: ResolvedTable, version: datasets.Version = None, reading: bool = False) -> lance.LanceDataset:
        """The table's dataset at its latest version, or at ``version`` (a number or a tag);
        ``reading`` when it will only be read, never committed to. Raises TableVersionNotFoundError
        for a version or tag it does not have, TableNotFoundError for a table declared but not
        written yet, PermissionDeniedError for a place the entry cannot show is its own (checked
        when a place is first opened)."""
        if table.managed:
            self._prove(table)
            namespace = self._reads_through() if reading else self._writes_through()
            dataset = _first_open(table, lambda: datasets.open_through_namespace(namespace, table.id))
        else:
            dataset = self._latest(table)
        self._places.keep(table.id, table)
        return _checkout(dataset, table.id, version)

    def restore(self, table: ResolvedTable, version: int | str) -> None:
        """Make ``version`` (a number or a tag) the table's latest; the restored dataset is the one
        kept, so that this bridge's next read sees it even within ``read_consistency_interval``."""
        dataset = self.open(table, version)
        dataset.restore()
        if not table.managed:
            self._keep_newer(table, dataset)

    @contextmanager
    def writing(self, table: ResolvedTable) -> Iterator[lance.LanceDataset]:
        """The table's dataset at its latest version, for one operation that commits to it (as
        ``open``): an object of its own. pylance swaps an object's state in place when a write
        through it commits, and refuses ("Already borrowed"), or panics, while another thread is
        inside a call on that object: a read, another write, the look for the latest version. Once
        the operation has committed, its dataset is kept for the reads that follow."""
        dataset = self.open(table)
        if table.managed:  # opened anew for each operation, never kept
            yield dataset
            return
        own = copy.copy(dataset)  # shares the kept dataset's caches, not its state
        yield own
        self._keep_newer(table, own)

    def write(self, table: ResolvedTable, data: pa.Table, mode: str) -> lance.LanceDataset:
        """Write ``data`` as the table's next version (``mode`` append, or overwrite); for a table
        declared but not yet written, its first version (``write_first``)."""
        return self.write_first(table, data, mode) or self._write_next(table, data, mode)

    def write_first(self, table: ResolvedTable, data: pa.Table, mode: str) -> lance.LanceDataset | None:
        """Write ``data`` as the table's first version, or None when the table has one (made
        meanwhile by another process, perhaps): the caller then writes on it as it would have.
        Appending to a dataset whose manifests are gone while its data is not is InvalidTableStateError.

        Lance makes a first version as an overwrite, which a concurrent first write replaces
        without a conflict: two first inserts would both be answered while one's rows are lost.
        So first writes of a table take turns on this machine, and a later one finds the version;
        one that finds another process's first write under way (its data there, no version yet)
        waits for it (``_made_elsewhere``). The next read of the name goes where the write went, as after ``open``."""
        self._places.keep(table.id, table)
        if self._written.get(table.place) or self._open.get(table.place) is not None:
            return None
        if datasets.dataset_exists(table.location, table.storage_options):
            return None
        with _FIRST_WRITES.turn(table.location):
            if datasets.dataset_exists(table.location, table.storage_options):
                return None
            missing = _missing(table)
            if mode != "overwrite" and isinstance(missing, InvalidTableStateError):
                if not _made_elsewhere(table):
                    raise missing
                return None
            try:  # Lance refuses "create" once another process has made the first version
                if table.managed:  # pylance's namespace write would declare the table for "create"
                    return self._write_next(table, data, mode)
                return self._write_by_location(table, data, "create")
            except OSError as exc:
                if not str(exc).startswith("Dataset already exists"):
                    raise
                return None

    def _write_next(self, table: ResolvedTable, data: pa.Table, mode: str) -> lance.LanceDataset:
        if not table.managed:
            return self._write_by_location(table, data, mode)
        rows = datasets.write_reader(data)
        dataset = lance.write_dataset(rows, namespace_client=self._writes_through(), table_id=list(table.id), mode=mode)
        self._written.keep(table.place, True)
        return dataset

    def _write_by_location(self, table: ResolvedTable, data: pa.Table, mode: str) -> lance.LanceDataset:
        # The kept dataset's session (caches) is reused, at the latest version: pylance rebases an
        # append on versions it missed, but not on a restore, which conflicts with anything older.
        target = self._latest(table) if self._open.get(table.place) is not None else table.location
        rows = datasets.write_reader(data)
        try:
            dataset = lance.write_dataset(rows, target, mode=mode, storage_options=table.storage_options or None)
        except (OSError, ValueError) as exc:
            if not _MANIFEST_REMOVED.search(str(exc)) or not datasets.dataset_exists(
                table.location, table.storage_options
            ):
                raise
            self.forget(table.location)
            raise ConcurrentModificationError(
                f"A version of {'.'.join(table.id)} that this write read as it committed was removed meanwhile (a "
                "cleanup by a writer that went by its location); nothing was committed: retry"
            ) from None
        if mode == "append" and _left_behind(dataset):
            raise ConcurrentModificationError(
                f"Version {dataset.version} of {'.'.join(table.id)} was committed after a writer that went by its "
                "location had committed on top of an earlier version of that number and removed it "
                "(cleanup_old_versions with a retention shorter than this write): the rows are not in the "
                "table: retry"
            )
        self._keep_newer(table, dataset)
        self._written.keep(table.place, True)
        return dataset

    def _latest(self, table: ResolvedTable) -> lance.LanceDataset:
        dataset = self._open.get(table.place)
        if dataset is None:
            self._prove(table)
            dataset = _first_open(table, lambda: datasets.lance_dataset(table.location, table.storage_options))
        else:
            try:
                latest = dataset.latest_version  # one listing of _versions/
                if latest == dataset.version:
                    return dataset
                dataset = dataset.checkout_version(latest)
            except (OSError, ValueError):  # its files went away, or the version listed (a cleanup by location)
                self.forget(table.location)
                dataset = _first_open(table, lambda: datasets.lance_dataset(table.location, table.storage_options))
        self._open.keep(table.place, dataset)
        return dataset

    def _keep_newer(self, table: ResolvedTable, dataset: lance.LanceDataset) -> None:
        """Keep ``dataset`` for the table's place unless the one kept is as new: writes that
        commit together return in any order."""
        with self._keeping:
            kept = self._open.get(table.place)
            if kept is None or kept.version < dataset.version:
                self._open.keep(table.place, dataset)

    def _prove(self, table: ResolvedTable) -> None:
        """Only the entry that owns a place reads or writes through it: an entry made in the
        catalog at another table's location, or a catalog copy of its entry, must not reach that
        table's data. A place with nothing left at it (its directory deleted) is TableNotFoundError."""
        try:
            self._prove_place(table.location, table.entry, table.storage_options)
        except PermissionDeniedError:
            if files.is_empty_directory(table.location, table.storage_options):
                raise _missing(table) from None
            raise

    def _confirmed_lately(self, table_id: tuple[str, ...], known: ResolvedTable) -> bool:
        """A read of ``table_id`` asked the catalog, which named ``known``'s place, less than
        ``read_consistency_interval`` ago."""
        return bool(self._interval) and self._confirmed.get(table_id, self._interval) == known.place

    def forget(self, location: str) -> None:
        """Let go of a dataset whose table was dropped, moved or replaced."""
        self._open.forget_where(lambda place, _: place[0] == location)
        self._written.forget_where(lambda place, _: place[0] == location)
        self._places.forget_where(lambda _, table: table.location == location)
        self._confirmed.forget_where(lambda _, place: place[0] == location)

    def forget_table(self, table_id: Sequence[str]) -> None:
        """Forget where a name's table was: this bridge dropped, renamed, replaced or (re)made the
        table under the name, and its next read must ask the catalog."""
        self._places.forget(tuple(table_id))
        self._confirmed.forget(tuple(table_id))


def _raise(failure: Exception) -> NoReturn:
    raise failure


def _outcome(finish: Callable[[], T]) -> tuple[T | None, Exception | None]:
    """What finishing a read gave: its answer, or its failure (kept until the catalog has said
    whether it read the right table)."""
    try:
        return finish(), None
    except Exception as exc:
        return None, exc


def _checkout(dataset: lance.LanceDataset, table_id: tuple[str, ...], version: datasets.Version) -> lance.LanceDataset:
    return datasets.checkout(dataset, version, f"table {'.'.join(table_id)}")


def _made_elsewhere(table: ResolvedTable) -> bool:
    """Whether a first version of the table's dataset lands within ``FIRST_WRITE_ELSEWHERE_SECONDS``:
    data there with no version yet is another process's first write under way (a server's other
    data worker, another server), or files a write left behind when it failed."""
    deadline = time.monotonic() + FIRST_WRITE_ELSEWHERE_SECONDS
    while not datasets.dataset_exists(table.location, table.storage_options):
        if time.monotonic() > deadline:
            return False
        time.sleep(FIRST_WRITE_LOOK_SECONDS)
    return True


def _missing(table: ResolvedTable) -> LanceNamespaceError:
    return datasets.missing_dataset_error(table.location, table.storage_options, f"Table {'.'.join(table.id)}")


def _first_open(table: ResolvedTable, opening: Callable[[], lance.LanceDataset]) -> lance.LanceDataset:
    """The table's dataset, opened by ``opening``. A table declared but not written yet has no
    dataset: TableNotFoundError, as the reference answers, rather than pylance's internal error;
    so has a table whose files are gone, and one whose files are half gone is
    InvalidTableStateError. A dataset whose first version lands as it is opened (a create in flight
    elsewhere) is opened again; one that is there and still cannot be opened is InvalidTableStateError."""
    try:
        return opening()
    except (ValueError, OSError) as exc:
        if not datasets.dataset_exists(table.location, table.storage_options):
            raise _missing(table) from exc
    try:
        return opening()
    except (ValueError, OSError) as exc:
        why = state_refused(exc) or "its dataset is there but cannot be opened"
        raise InvalidTableStateError(f"Table {'.'.join(table.id)}: {why}") from exc


# pylance's words for a manifest it was reading that is no longer there
_MANIFEST_REMOVED = re.compile(r"Not found: \S*_versions/\S+\.manifest|Dataset at path \S*\.manifest was not found")


def _left_behind(appended: lance.LanceDataset) -> bool:
    """Whether an append committed as ``appended`` is in no later version's history. Lance commits
    version N when no manifest of that number is there; a cleanup by location that removed an N
    another writer had already built N+1 on lets a writer still on N-1 commit an N that no later
    version descends from (lance-format/lance#3718). The latest version then holds, under the ids
    of the fragments this append added (those holding the files its transaction wrote), other
    data files: those of the N it descends from (Lance never gives a fragment id twice in one
    history). A later version that rewrote them (a compaction) gives them new ids; one that added
    columns keeps the files this append wrote."""
    try:
        latest = appended.latest_version
        if latest <= appended.version:
            return False
        transaction = appended.read_transaction(appended.version)
        written = {
            file.path
            for fragment in getattr(transaction.operation if transaction else None, "fragments", None) or ()
            for file in fragment.files
        }
        added = {
            fragment.fragment_id: {file.path for file in fragment.metadata.files}
            for fragment in appended.get_fragments()
            if written & {file.path for file in fragment.metadata.files}
        }
        if not added:
            return False
        for fragment in appended.checkout_version(latest).get_fragments():
            ours = added.get(fragment.fragment_id)
            if ours is not None and not ours <= {file.path for file in fragment.metadata.files}:
                return True
    except (OSError, ValueError):  # the latest, or this version's transaction, is gone already
        return False
    return False


def _latest_version(dataset: lance.LanceDataset) -> int | None:
    """The latest version at the dataset's place; None when it cannot be read (the place is gone)."""
    try:
        return dataset.latest_version
    except (OSError, ValueError):
        return None
