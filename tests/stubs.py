"""Fake Iceberg catalogs, named as such: for answers the real server cannot be made to give on
demand (fixed failure statuses, an OAuth2 token endpoint that records what it sees)."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

CONFIG_ANSWER = {"defaults": {"prefix": "p"}, "overrides": {}}


class JsonHandler(BaseHTTPRequestHandler):
    """Answers JSON, quietly."""

    def log_message(self, *args: object) -> None:
        pass

    def send_json(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class StubServer:
    """Runs a handler on a free loopback port in a thread; ``endpoint`` is its URL."""

    def start(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class StatusStubServer(StubServer):
    """A fake catalog: answers /v1/config normally and every other request with a fixed status
    (its message echoes the Authorization header, to prove secrets get redacted)."""

    def __init__(self, status: int, message: str = "injected failure") -> None:
        stub = self
        self.status, self.message = status, message

        class Handler(JsonHandler):
            def answer(self) -> None:
                if self.path.startswith("/v1/config"):
                    self.send_json(200, CONFIG_ANSWER)
                    return
                message = f"{stub.message} (auth={self.headers.get('Authorization')})"
                error = {"message": message, "type": "InjectedException", "code": stub.status}
                self.send_json(stub.status, {"error": error})

            do_GET = do_POST = do_DELETE = do_HEAD = answer

        self.start(Handler)


class OAuthRecordingStub(StubServer):
    """A fake catalog with an OAuth2 token endpoint: it issues a token for the client-credentials
    grant and records the Authorization header of every catalog request."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        stub = self
        self.token_requests: list[tuple[str, str]] = []  # (client id, secret) of each token request
        self.authorizations: list[str | None] = []
        self.config_authorizations: list[str | None] = []  # of each /v1/config request
        config_answer = config or CONFIG_ANSWER  # what /v1/config answers (a token among its overrides, say)

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length", 0))).decode())
                client = (form.get("client_id", [""])[0], form.get("client_secret", [""])[0])
                basic = self.headers.get("Authorization", "")
                if basic.lower().startswith("basic "):  # RFC 6749: client credentials in Basic auth
                    client_id, _, secret = base64.b64decode(basic[6:]).decode().partition(":")
                    client = (client_id, secret)
                stub.token_requests.append(client)
                self.send_json(200, {"access_token": "issued-token-123", "token_type": "bearer", "expires_in": 3600})

            def do_GET(self) -> None:
                if self.path.startswith("/v1/config"):
                    stub.config_authorizations.append(self.headers.get("Authorization"))
                    self.send_json(200, config_answer)
                else:
                    stub.authorizations.append(self.headers.get("Authorization"))
                    self.send_json(200, {"namespaces": [["sales"]]})

        self.start(Handler)
