"""A data worker: the process in which the server runs one data request at a time (``isolation``).

A worker is a fork of the template (``forking``), which has already imported what ``load``
imports. ``main`` caps its own memory first (``RLIMIT_DATA``: a larger allocation fails, and
pylance, which cannot recover from a failed allocation, ends this process, not the server), then
reads requests from its stdin and writes
answers to its stdout, one message each (``write_message``). Everything else it prints, its
logging and Lance's own, goes to stderr, which the server relays to its log.

A request names the operation, the recipe of the namespace to run it on (its key and the bridge's
properties, sent down the pipe, never on a command line or in the environment) and the caller's bearer token
when the server forwards it; it carries the request as JSON and the Arrow IPC body. The answer is
the HTTP answer itself (status, media type, bytes), rendered here as the server renders a result
(``responses.render_result``), or the Lance error to raise.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any

_LENGTHS = struct.Struct("<IQ")  # header bytes, payload bytes
WORKER_MODULE = __name__
READY = "ready"
DECLARED = "declared"  # a note before the answer: the table a create declared, and its place
TAKE_BACK = "take_back_declared"  # a request of the server's own: remove a table declared, if untouched
OOM_SCORE_ADJUSTMENT = 500
RETIRE_AT = 0.5  # of its ceiling: a worker whose data grew by more since it was ready is retired after its request


# --- the wire: one message is a JSON header and a payload of bytes ------------------------------------


WHOLE_MESSAGE_BYTES = 1 << 20  # at most: written at once, so that a reader woken by it finds it whole in the pipe


def write_message(stream: IO[bytes], header: dict[str, Any], *payload: bytes | bytearray | memoryview) -> None:
    """One message: the lengths, the header as JSON, then the payload's parts back to back; in one
    write when it takes at most ``WHOLE_MESSAGE_BYTES`` (a pipe that size, empty, takes it whole)."""
    encoded = json.dumps(header, separators=(",", ":")).encode()
    size = sum(len(part) for part in payload)
    parts: tuple[bytes | bytearray | memoryview, ...] = (_LENGTHS.pack(len(encoded), size) + encoded, *payload)
    if size + len(parts[0]) <= WHOLE_MESSAGE_BYTES:
        parts = (b"".join(parts),)
    for part in parts:
        view = memoryview(part)
        while view:  # a pipe may take part of a large write
            view = view[stream.write(view) or 0 :]


def read_message(stream: IO[bytes]) -> tuple[dict[str, Any], bytearray] | None:
    """The next message (header, payload), or None when the stream ended between messages.
    EOFError when it ends inside one. The payload is read into one buffer, never copied."""
    head = read_head(stream)
    if head is None:
        return None
    header, payload_size = head
    return header, read_payload(stream, payload_size)


def read_head(stream: IO[bytes]) -> tuple[dict[str, Any], int] | None:
    """The next message's header and the size of its payload (``read_payload`` reads it), or None
    when the stream ended between messages."""
    lengths = _read_exactly(stream, _LENGTHS.size, at_start=True)
    if lengths is None:
        return None
    header_size, payload_size = _LENGTHS.unpack(lengths)
    return json.loads(_read_exactly(stream, header_size) or b""), payload_size


def read_payload(stream: IO[bytes], size: int) -> bytearray:
    """A message's payload of ``size`` bytes, after its head."""
    return _read_exactly(stream, size) or bytearray()


def _read_exactly(stream: IO[bytes], size: int, at_start: bool = False) -> bytearray | None:
    buffer = bytearray(size)
    view, read = memoryview(buffer), 0
    while read < size:
        count = stream.readinto(view[read:])  # type: ignore[attr-defined]
        if not count:
            if at_start and read == 0:
                return None
            raise EOFError("the stream ended inside a message")
        read += count
    return buffer


# --- the worker ---------------------------------------------------------------------------------


def main(memory_bytes: int, template: int) -> None:
    """Serve requests from stdin until it closes (the server stopped, or let this worker go). The
    worker ends with the ``template`` that forked it, which ends with the server: the kernel kills it
    then, whatever it is running (a request stuck in C code would keep a thread of its own that
    watched for the end from ever running)."""
    import resource
    import signal

    from lance_iceberg_ns.server.lifetime import end_with_parent

    if not end_with_parent(template, signal.SIGKILL):
        raise OSError("a data worker needs Linux's parent-death signal (prctl) to end with its server")
    resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as adjust:
        adjust.write(str(OOM_SCORE_ADJUSTMENT))  # the system's OOM killer takes a worker before the server
    answers = os.fdopen(os.dup(1), "wb", buffering=0)  # stdout is the server's alone:
    os.dup2(2, 1)  # a library's print goes to stderr
    requests = os.fdopen(0, "rb", buffering=0)

    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    load()  # already loaded in the template it was forked from
    runner = _Runner(tell=lambda note: write_message(answers, note))
    write_message(answers, {"kind": READY})  # ready means ready: the first request pays no import
    statm = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)  # this worker's own, not the template's
    data_when_ready = _data_bytes(statm)  # mostly the template's pages, shared
    while (message := read_message(requests)) is not None:
        header, payload = message
        answer_header, content = runner.answer(header, payload)
        del header, payload, message
        grown = _data_bytes(statm) - data_when_ready - len(content)
        if answer_header.pop("memory_failed", False) or grown > memory_bytes * RETIRE_AT:
            answer_header["retire"] = True  # the next request gets a fresh fork's memory, not what this one left
        write_message(answers, answer_header, content)


def _data_bytes(statm: int) -> int:
    """The memory the ceiling counts: everything private and writable, touched or only reserved
    (an allocator's arena counts in full from the moment it is mapped). Read after every request,
    before its answer goes, from this process's ``/proc/self/statm`` kept open (``statm``: opening
    it costs more than reading it)."""
    return int(os.pread(statm, 256, 0).split()[5]) * _PAGE_BYTES


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _caused_by_memory(error: BaseException) -> bool:
    """Whether ``error`` came of an allocation that failed (Arrow's, Python's), however translated."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, MemoryError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def load() -> None:
    """Import what answering a request takes (pylance, pyiceberg, the bridge: a second or more on a
    loaded host), so that a worker that says it is ready is."""
    # Before Arrow's first allocation: its default allocator (mimalloc) maps a 1 GiB arena as soon as
    # a worker's ceiling lets it, and the ceiling counts all of it from then on, used or not: a
    # 7-row insert failed on memory that no request had asked for. The system allocator maps what
    # it is asked for and gives large blocks back.
    os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "system"
    import lance  # noqa: F401
    import lance_namespace  # noqa: F401
    import pyiceberg.catalog.rest  # noqa: F401

    import lance_iceberg_ns.jobs.adoption  # noqa: F401
    import lance_iceberg_ns.server.responses  # noqa: F401
    from lance_iceberg_ns import IcebergLanceNamespace  # noqa: F401


class _Runner:
    """Runs requests on the namespaces their recipes describe, kept by recipe and token."""

    def __init__(self, tell: Callable[[dict[str, Any]], None]) -> None:
        from lance_iceberg_ns.cache import RecentlyUsed
        from lance_iceberg_ns.server.routes import ROUTES

        self._tell = tell  # a note to the server before the answer: a table declared (``DECLARED``)
        self._routes = {route.operation: route for route in ROUTES}
        self._namespaces: RecentlyUsed[tuple[str, str | None], Any] = RecentlyUsed(16, on_evict=_close)

    def answer(self, header: dict[str, Any], payload: bytearray) -> tuple[dict[str, Any], bytes | memoryview]:
        from lance_namespace.errors import ErrorCode, LanceNamespaceError
        from pydantic import ValidationError

        from lance_iceberg_ns.data import request_arrived
        from lance_iceberg_ns.errors.translation import is_panic
        from lance_iceberg_ns.limits import data_bytes_allowed
        from lance_iceberg_ns.tables.lifecycle import told_of_declared

        arrived = request_arrived.set(float(header["arrived"]))
        telling = told_of_declared.set(self._tell_declared)
        try:
            with data_bytes_allowed(int(header["max_data_bytes"])):
                if header["operation"] == TAKE_BACK:
                    return self._take_back(header)
                return self._run(header, payload)
        except LanceNamespaceError as exc:
            status = getattr(exc, "http_status", None)
            answer = {"kind": "error", "code": int(exc.code), "message": str(exc), "status": status}
            return {**answer, "memory_failed": _caused_by_memory(exc)}, b""
        except ValidationError as exc:  # a value the server's parser took and the request model does not
            message = f"Invalid request: {exc.error_count()} field(s) refused"
            return {"kind": "error", "code": int(ErrorCode.INVALID_INPUT), "message": message, "status": None}, b""
        except MemoryError:  # an allocation over the ceiling that Python, not pylance, made
            message = "The request needs more memory than a data worker may use"
            answer = {"kind": "error", "code": int(ErrorCode.INVALID_INPUT), "message": message, "status": None}
            return {**answer, "memory_failed": True}, b""
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # a panic inside pylance is the input's doing; anything else is ours
            panic = is_panic(exc)
            if not panic:
                import logging

                logging.getLogger(WORKER_MODULE).error(
                    "Unexpected failure in %s", header.get("operation"), exc_info=exc
                )
            code = ErrorCode.INVALID_INPUT if panic else ErrorCode.INTERNAL
            message = "pylance could not process the request" if panic else "Internal error"
            answer = {"kind": "error", "code": int(code), "message": message, "status": None}
            return {**answer, "memory_failed": panic or _caused_by_memory(exc)}, b""
        finally:
            told_of_declared.reset(telling)
            request_arrived.reset(arrived)

    def _tell_declared(
        self, table: Sequence[str], place: tuple[str, Any] | None, restored_after: float | None, create_id: str | None
    ) -> None:
        note: dict[str, Any] = {"kind": DECLARED, "table": list(table), "create_id": create_id}
        if place is not None:
            location, entry = place
            note.update(location=location, name=list(entry.name), table_uuid=entry.table_uuid, claim=entry.claim)
        restored = {"restored": restored_after is not None, "restored_after": restored_after}
        self._tell({**note, **restored})

    def _take_back(self, header: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """Undo what a create did before its worker ended (``DECLARED``), while that very entry
        holds the name: a table it declared is removed if nothing was written there, one it
        brought back from the trash is soft-deleted again."""
        from lance_iceberg_ns.storage.ownership import Entry

        namespace = self._namespace(header["recipe"], header["properties"], header.get("token"))
        note = header["declared"]
        if "location" not in note:  # cut off before its table was made, or as it was: the one its create marked
            removed = namespace.remove_declared_table(note["table"], None, note["create_id"])
            return {"kind": "taken_back", "removed": bool(removed)}, b""
        place = (note["location"], Entry(tuple(note["name"]), note["table_uuid"], note["claim"]))
        if note.get("restored"):
            removed = namespace.drop_restored_table(note["table"], place, float(note["restored_after"]))
        else:
            removed = namespace.remove_declared_table(note["table"], place)
        return {"kind": "taken_back", "removed": bool(removed)}, b""

    def _run(self, header: dict[str, Any], payload: bytearray) -> tuple[dict[str, Any], bytes | memoryview]:
        import lance_namespace
        from pydantic import BaseModel

        from lance_iceberg_ns.jobs.adoption import answer_after_adopting
        from lance_iceberg_ns.limits import DataTooLargeError
        from lance_iceberg_ns.operation import as_operated
        from lance_iceberg_ns.server.responses import render_result

        route = self._routes[header["operation"]]
        namespace = self._namespace(header["recipe"], header["properties"], header.get("token"))
        request_size = int(header["request_bytes"])
        model = getattr(lance_namespace, route.model)
        parts = memoryview(payload)
        request = model.model_validate_json(bytes(parts[:request_size]))
        method = getattr(namespace, route.operation)
        run = lambda: method(request, parts[request_size:]) if route.arrow_body else method(request)  # noqa: E731
        # what a writer by location did through this server is seen first
        result = (
            answer_after_adopting(
                namespace, as_operated(namespace, route.operation, request).id, run, route.answers_again
            )
            if route.names_one_table
            else run()
        )
        if route.response_field and isinstance(result, BaseModel):
            result = getattr(result, route.response_field)
        response = render_result(result)
        if len(response.body) > int(header["max_data_bytes"]):  # the server holds it until its client reads it
            raise DataTooLargeError(
                f"{route.operation}: the answer takes {len(response.body)} bytes, more than the server's "
                f"{header['max_data_bytes']}: ask for fewer rows (k) or columns"
            )
        return {"kind": "answer", "status": response.status_code, "media_type": response.media_type}, response.body

    def _namespace(self, recipe: str, properties: dict[str, str], token: str | None) -> Any:
        """The bridge of ``recipe`` (for the caller's ``token`` when the server forwards it),
        built on first use and kept while it is among the 16 most recently used."""
        namespace = self._namespaces.get((recipe, token))
        if namespace is None:
            from lance_iceberg_ns import IcebergLanceNamespace

            namespace = IcebergLanceNamespace(**(properties if token is None else {**properties, "auth_token": token}))
            self._namespaces.keep((recipe, token), namespace)
        return namespace


def _close(namespace: Any) -> None:
    namespace.close()
