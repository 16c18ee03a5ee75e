"""A fault-injecting HTTP proxy on loopback, between the bridge and the local catalog.

Each request takes the next fault from a queue (or passes when the queue is empty): answer a
status without asking upstream (with or without ``Retry-After``), hold the answer past the
client's read timeout, reset the connection mid-response, send a truncated body, or forward and
then lose the answer (the upstream did the work; the client never hears). Every connection is
closed after one exchange, so each retry is a new connection the proxy sees.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Fault:
    kind: str  # status | delay | reset | truncate | lose_answer | pass
    status: int = 0
    retry_after: str | None = None
    seconds: float = 0.0


@dataclass
class Seen:
    method: str
    path: str
    fault: str


@dataclass
class FaultProxy:
    upstream: str
    faults: deque[Fault] = field(default_factory=deque)
    seen: list[Seen] = field(default_factory=list)
    only_paths_with: str = ""  # faults apply to requests whose path contains this (others pass)
    only_method: str = ""  # ... and, when set, to this method only

    def __post_init__(self) -> None:
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._running = True
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def inject(self, *faults: Fault) -> None:
        with self._lock:
            self.faults.extend(faults)

    def close(self) -> None:
        self._running = False
        self._server.close()

    def _next_fault(self, method: str, path: str) -> Fault:
        with self._lock:
            if self.faults and self.only_paths_with in path and self.only_method in ("", method):
                return self.faults.popleft()
        return Fault("pass")

    def _accept(self) -> None:
        while self._running:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client, contextlib.suppress(OSError, http.client.HTTPException):  # either side hanging up
            self._exchange(client)

    def _exchange(self, client: socket.socket) -> None:
        try:
            request = _read_request(client)
        except (OSError, ValueError):
            return
        method, path, headers, body = request
        fault = self._next_fault(method, path)
        with self._lock:
            self.seen.append(Seen(method, path, fault.kind))
        if fault.kind == "status":
            extra = f"Retry-After: {fault.retry_after}\r\n" if fault.retry_after else ""
            payload = b'{"error": {"message": "injected", "type": "InjectedFault", "code": %d}}' % fault.status
            client.sendall(
                f"HTTP/1.1 {fault.status} Injected\r\nContent-Type: application/json\r\n{extra}"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )
            return
        if fault.kind == "delay":
            time.sleep(fault.seconds)
        status, reason, answer_headers, answer = self._forward(method, path, headers, body)
        if fault.kind == "lose_answer":  # the upstream did the work; the answer is lost
            _reset(client)
            return
        head = f"HTTP/1.1 {status} {reason}\r\n"
        for key, value in answer_headers:
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                head += f"{key}: {value}\r\n"
        head += f"Content-Length: {len(answer)}\r\nConnection: close\r\n\r\n"
        if fault.kind == "reset":
            client.sendall(head.encode() + answer[: len(answer) // 3])
            _reset(client)
            return
        if fault.kind == "truncate":
            client.sendall(head.encode() + answer[: len(answer) // 2])
            return  # a clean close, short of Content-Length
        with contextlib.suppress(OSError):  # the client may have given up
            client.sendall(head.encode() + answer)

    def _forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        target = urlsplit(self.upstream)
        connection = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
        try:
            forwarded = {k: v for k, v in headers.items() if k.lower() not in ("host", "connection")}
            connection.request(method, path, body=body or None, headers=forwarded)
            response = connection.getresponse()
            return response.status, response.reason, response.getheaders(), response.read()
        finally:
            connection.close()


def _reset(client: socket.socket) -> None:
    """Close with RST rather than FIN."""
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()


def _read_request(client: socket.socket) -> tuple[str, str, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        if not chunk:
            raise ValueError("connection closed before a request")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _version = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip()] = value.strip()
    length = int(headers.get("Content-Length", headers.get("content-length", "0")) or 0)
    while len(rest) < length:
        chunk = client.recv(65536)
        if not chunk:
            break
        rest += chunk
    return method, path, headers, rest
