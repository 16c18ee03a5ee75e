"""Fake Iceberg catalogs, named as such: for answers the real server cannot be made to give on
demand (fixed failure statuses, an OAuth2 token endpoint that records what it sees)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StatusStubServer:
    """A fake catalog (named as such): answers /v1/config normally and every other request with a
    fixed status, for statuses the real server cannot be made to return on demand."""

    def __init__(self, status: int, message: str = "injected failure") -> None:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                if self.path.startswith("/v1/config"):
                    self._send(200, {"defaults": {"prefix": "p"}, "overrides": {}})
                else:
                    body = {"error": {"message": f"{stub.message} (auth={self.headers.get('Authorization')})",
                                      "type": "InjectedException", "code": stub.status}}  # fmt: skip
                    self._send(stub.status, body)

            def _send(self, status: int, body: dict) -> None:  # type: ignore[type-arg]
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_HEAD = _answer

        self.status, self.message = status, message
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class OAuthRecordingStub:
    """A fake catalog (named as such) with an OAuth2 token endpoint: it issues a token for the
    client-credentials grant and records the Authorization header of every catalog request."""

    def __init__(self) -> None:
        stub = self
        self.token_requests: list[str] = []
        self.authorizations: list[str | None] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                form = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                stub.token_requests.append(form)
                self._send({"access_token": "issued-token-123", "token_type": "bearer", "expires_in": 3600})

            def do_GET(self) -> None:
                if self.path.startswith("/v1/config"):
                    self._send({"defaults": {"prefix": "p"}, "overrides": {}})
                else:
                    stub.authorizations.append(self.headers.get("Authorization"))
                    self._send({"namespaces": [["sales"]]})

            def _send(self, body: dict) -> None:  # type: ignore[type-arg]
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
