"""What a client of ``serve --remote`` is told when the remote server answers oddly: a key
or URL the front was given that the remote refuses is the front's fault (502), never "your
key is wrong"; an answer that is JSON but not an object is malformed (502), not a 500 or a
stream; ``/props`` never shows the remote URL's user:password. Upstream: a local HTTP
server answering each route as the test says."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.remote.connection import RemoteConnection
from app.remote.probe import ServerKind, ServerTraits
from app.server.errors import ApiError
from app.server.front import RemoteFront

ANSWERS: dict[str, tuple[int, bytes]] = {}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, body = ANSWERS[self.path]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://user:secret@127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _front(url: str) -> RemoteFront:
    traits = ServerTraits(ServerKind.LLAMA_SERVER, ("m",), "m")
    return RemoteFront(RemoteConnection(url), traits)


@pytest.mark.parametrize(
    ("route", "status", "body", "expected"),
    [
        ("/tokenize", 401, b'{"error": "bad key"}', 502),  # the front's key, not the client's
        ("/v1/completions", 404, b'{"error": "no model"}', 502),  # the front's URL or model
        ("/tokenize", 404, b"{}", 501),  # a route this server does not offer: said so
        ("/tokenize", 400, b'{"error": {"message": "bad tokens"}}', 400),  # the client's
        ("/tokenize", 200, b"[1, 2, 3]", 502),  # JSON, but not the object every route answers
        ("/v1/completions", 200, b'"text"', 502),
    ],
)
def test_the_remote_answer_becomes_the_clients_status(
    upstream: str, route: str, status: int, body: bytes, expected: int
) -> None:
    ANSWERS[route] = (status, body)
    front = _front(upstream)
    try:
        with pytest.raises(ApiError) as raised:
            front.post(route, {"prompt": "hi"})
        assert raised.value.status == expected
        assert "secret" not in str(raised.value)
    finally:
        front.close()


def test_an_object_is_passed_on(upstream: str) -> None:
    ANSWERS["/tokenize"] = (200, json.dumps({"tokens": [1, 2]}).encode())
    front = _front(upstream)
    try:
        assert front.post("/tokenize", {"content": "hi"}) == {"tokens": [1, 2]}
        assert front.conn.shown_root.startswith("http://127.0.0.1:")
    finally:
        front.close()
