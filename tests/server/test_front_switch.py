"""``ApiService.front`` when the remote engine's connection changes (``serve --rpc``'s
model loaded again, a front's reconnect): a request that took the old front keeps a
working client, and the service closes every front it made when it closes (issue 27
review, item 8). Real HTTP: a small JSON server on the loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from app.remote.connection import RemoteConnection
from app.remote.probe import ServerKind, ServerTraits
from app.server import ServerConfig
from app.server.service import ApiService
from app.session import Session


class _Tokenize(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        data = json.dumps({"tokens": [len(str(body.get("content", "")))]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Tokenize)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _engine(url: str) -> SimpleNamespace:
    traits = ServerTraits(ServerKind.LLAMA_SERVER, ("m",), "m")
    return SimpleNamespace(conn=RemoteConnection(url), traits=traits)


def test_a_request_on_the_old_front_still_works_after_a_switch(url: str) -> None:
    session = Session(name="front-switch")
    service = ApiService(session, ServerConfig(), None)
    try:
        loader = SimpleNamespace(engine=_engine(url))
        service.remote_loader = loader
        taken = service.front  # a request thread took it
        assert taken is not None
        loader.engine = _engine(url)  # the model was loaded again: a new connection
        fronts: list[object] = []
        threads = [threading.Thread(target=lambda: fronts.append(service.front)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len({id(f) for f in fronts}) == 1 and fronts[0] is not taken  # one new front
        # The request that took the old front finishes on it.
        assert taken.post("/tokenize", {"content": "hello"}) == {"tokens": [5]}
    finally:
        service.close()
        session.shutdown()
    with pytest.raises(RuntimeError):  # closed with the service
        taken.post("/tokenize", {"content": "hello"})
