"""A hostile local client at the HTTP level (issue 18, items 2, 3 and 6): idle and trickling
sockets, cross-site requests, TLS and malformed bytes, resets. Raw sockets and real clients
against the real server on 127.0.0.1; every test checks that the server answers, stays
alive and serves the next request. The deadlines are short here (ServerConfig), so that
each test ends in seconds."""

from __future__ import annotations

import json
import logging
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from app.server import ServerConfig, ServerRunner
from tests.server.conftest import MakeServer, start_server, wait_for

KEY = "sesame"
CHAT = "/v1/chat/completions"
EVIL = "http://evil.example.com"
ENDLESS = 'root ::= ("hello" | " world" | " tab" | " llama") root'
SHORT = ServerConfig(
    parallel=2,
    api_key=KEY,
    max_connections=4,
    head_timeout_s=1.0,
    idle_timeout_s=1.0,
    body_timeout_s=1.0,
    body_min_bytes_per_s=1 << 20,
)

pytestmark = pytest.mark.timeout(120)
# The deadlines here are 1 s; what the tests tell apart is a deadline that fires from one
# that never does (the reads give up after READ_LIMIT_S), so a busy 2-core machine gets this
# much slack over a deadline before a test fails.
SLACK_S = 10.0
READ_LIMIT_S = 30.0


@pytest.fixture(scope="module")
def hostile(long_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerRunner]:
    """A keyed server with one-second deadlines and a cap of 4 requests answered at once."""
    runner = start_server(long_model, tmp_path_factory.mktemp("hostile"), SHORT)
    yield runner
    runner.close()


def address(runner: ServerRunner) -> tuple[str, int]:
    host, port = runner.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def answering(runner: ServerRunner) -> int:
    assert runner.http is not None
    return runner.http.answering


def answers(runner: ServerRunner, n: int) -> bool:
    return answering(runner) == n


def connect(runner: ServerRunner, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(address(runner), timeout=timeout)


def keyed(runner: ServerRunner) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{runner.url}/v1", api_key=KEY, max_retries=0, timeout=30)


def chat_works(runner: ServerRunner) -> None:
    """The server is alive and generates for a keyed client."""
    reply = keyed(runner).chat.completions.create(
        model="tiny-8k", messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert reply.choices[0].message.content is not None


def read_reply(sock: socket.socket, limit: float = 10.0) -> bytes:
    """Everything the server sends until it closes (or ``limit`` seconds)."""
    sock.settimeout(limit)
    data = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        data += chunk
    return data


def read_response(sock: socket.socket) -> bytes:
    """One whole response with a Content-Length (the connection stays open)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def json_error(raw: bytes, status: int) -> dict[str, Any]:
    """The OpenAI-shaped error a raw reply carries (never an HTML page)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), raw[:300]
    assert b"content-type: application/json" in head.lower(), head
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"].endswith((".", ")"))
    return dict(error)


def raw_request(runner: ServerRunner, data: bytes) -> bytes:
    with connect(runner) as sock:
        sock.sendall(data)
        return read_reply(sock)


# ------------------------------------------------------------------------ item 2: starvation


def test_idle_sockets_do_not_lock_out_a_keyed_chat(make_server: MakeServer) -> None:
    """200 sockets that send nothing (50 times the cap of 4): /health, /v1/models and a
    keyed chat are answered, and a request without the key still gets its 401."""
    hostile = make_server(replace(SHORT, head_timeout_s=30.0))
    idle = [connect(hostile) for _ in range(200)]
    try:
        assert wait_for(lambda: hostile.http is not None and hostile.http.pending == 200, 30)
        with httpx2.Client(base_url=hostile.url, timeout=10) as http:
            assert http.get("/health").status_code == 200
            assert http.get("/v1/models").status_code == 401
            models = http.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})
            assert models.status_code == 200
        chat_works(hostile)
        assert hostile.http is not None and hostile.http.pending >= 200  # none was closed
    finally:
        for sock in idle:
            sock.close()


def test_a_flood_beyond_the_pending_bound_closes_the_oldest(make_server: MakeServer) -> None:
    runner = make_server(ServerConfig(parallel=1, max_pending=20))
    flood = [connect(runner) for _ in range(60)]
    try:
        assert wait_for(lambda: runner.http is not None and runner.http.pending == 20, 30)
        flood[0].settimeout(5)
        assert flood[0].recv(100) == b""  # the oldest was closed to make room
        with httpx2.Client(base_url=runner.url, timeout=10) as http:
            assert http.get("/health").status_code == 200
            reply = http.post(CHAT, json={"messages": [{"role": "user", "content": "x"}]})
            assert reply.status_code == 200, reply.text
        assert runner.http is not None and runner.http.pending <= 20
    finally:
        for sock in flood:
            sock.close()


def test_a_trickled_head_is_closed_by_its_deadline(hostile: ServerRunner) -> None:
    """One byte every 0.1 s: the per-byte timer of old never fired; the head deadline (1 s
    here, 20 s by default) does, with a JSON 408."""
    with connect(hostile) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /health HTTP/1.1\r\n")
        sock.settimeout(0.1)
        reply = b""
        while not reply and time.monotonic() - started < READ_LIMIT_S:
            try:
                sock.sendall(b"X")
                reply = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
        elapsed = time.monotonic() - started
        reply += read_reply(sock, 2)
    assert elapsed < SHORT.head_timeout_s + SLACK_S
    assert json_error(reply, 408)["code"] == "request_timeout"
    chat_works(hostile)


def test_a_silent_connection_is_closed_by_the_head_deadline(hostile: ServerRunner) -> None:
    with connect(hostile) as sock:
        started = time.monotonic()
        assert read_reply(sock, READ_LIMIT_S) == b""
        assert time.monotonic() - started < SHORT.head_timeout_s + SLACK_S
    chat_works(hostile)


def test_a_trickled_body_is_cut_by_its_deadline(hostile: ServerRunner) -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "x" * 200}]}).encode()
    with connect(hostile) as sock:
        sock.sendall(
            f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        )
        started = time.monotonic()
        reply = b""
        sock.settimeout(0.1)
        for byte in body:
            try:
                sock.sendall(bytes([byte]))
                reply = sock.recv(65536)
                break
            except TimeoutError:
                continue
            except OSError:
                break
        reply += read_reply(sock, 2)
    assert time.monotonic() - started < SHORT.body_timeout(len(body)) + SLACK_S
    assert json_error(reply, 408)["code"] == "request_timeout"
    chat_works(hostile)


def test_trickled_bodies_cannot_hold_every_thread(make_server: MakeServer) -> None:
    """A cap of two requests answered at once, both taken by bodies that trickle within a
    long deadline: a new request ends the oldest of them and is answered."""
    runner = make_server(ServerConfig(parallel=1, max_connections=2))
    head = f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{{".encode()
    uploads = []
    for expected in (1, 2):
        sock = connect(runner)
        sock.sendall(head)
        uploads.append(sock)
        assert wait_for(partial(answers, runner, expected), 30)
    try:
        with httpx2.Client(base_url=runner.url, timeout=10) as http:
            reply = http.post(CHAT, json={"messages": [{"role": "user", "content": "x"}]})
            assert reply.status_code == 200, reply.text
        assert read_reply(uploads[0], 5) == b""  # the oldest upload was ended
        uploads[1].sendall(b'"x": 1')  # the younger one is still being read
        assert runner.http is not None and runner.http.answering == 1
    finally:
        for sock in uploads:
            sock.close()


def test_idle_keep_alive_connections_do_not_count_and_are_closed(
    make_server: MakeServer,
) -> None:
    """A cap of one request answered at once: a client idle on its keep-alive connection
    after a reply does not hold it, and is closed after the idle timeout."""
    runner = make_server(ServerConfig(parallel=1, max_connections=1, idle_timeout_s=1.0))
    with connect(runner) as idle:
        idle.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_response(idle).startswith(b"HTTP/1.1 200")
        with httpx2.Client(base_url=runner.url, timeout=10) as http:
            for _ in range(3):
                reply = http.post(CHAT, json={"messages": [{"role": "user", "content": "x"}]})
                assert reply.status_code == 200, reply.text
        started = time.monotonic()
        assert read_reply(idle, READ_LIMIT_S) == b""  # closed by the server
        assert time.monotonic() - started < 1.0 + SLACK_S


def test_requests_being_answered_are_capped(make_server: MakeServer) -> None:
    """The cap counts requests being answered: beyond it a JSON 503, then service again."""
    runner = make_server(ServerConfig(parallel=1, max_connections=1, max_queue=4))
    body = json.dumps(
        {
            "messages": [{"role": "user", "content": "x"}],
            "grammar": ENDLESS,
            "stream": True,
            "temperature": 0.8,
        }
    ).encode()
    with connect(runner) as holder:
        holder.sendall(
            f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert holder.recv(65536).startswith(b"HTTP/1.1 200")
        assert runner.http is not None and runner.http.answering == 1
        refused = raw_request(runner, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert json_error(refused, 503)["code"] == "too_many_connections"
    assert wait_for(lambda: runner.http is not None and runner.http.answering == 0, 30)
    with httpx2.Client(base_url=runner.url, timeout=10) as http:
        assert http.get("/health").status_code == 200


def test_pipelined_requests_are_answered_in_order(hostile: ServerRunner) -> None:
    with connect(hostile) as sock:
        sock.sendall(
            b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        replies = read_reply(sock)  # the third closes the connection
    first, second, third = (b"HTTP/1.1 " + r for r in replies.split(b"HTTP/1.1 ")[1:])
    assert first.startswith(b"HTTP/1.1 200") and first.endswith(b'{"status": "ok"}')
    assert json_error(second, 401)["code"] == "invalid_api_key"
    assert third.startswith(b"HTTP/1.1 200")


def test_100_continue_comes_only_after_the_checks(hostile: ServerRunner) -> None:
    body = json.dumps({"content": "hello"}).encode()
    head = (
        f"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
        "Expect: 100-continue\r\n"
    )
    with connect(hostile) as sock:
        sock.sendall(f"{head}Authorization: Bearer {KEY}\r\n\r\n".encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        assert read_response(sock).startswith(b"HTTP/1.1 200")
    refused = raw_request(hostile, f"{head}Authorization: Bearer wrong\r\n\r\n".encode())
    assert json_error(refused, 401)["code"] == "invalid_api_key"  # no 100 before it
    refused = raw_request(hostile, f"{head}Origin: {EVIL}\r\n\r\n".encode())
    assert json_error(refused, 403)["code"] == "origin_not_allowed"


# ------------------------------------------------------------------------ item 3: origins


@pytest.fixture
def open_server(make_server: MakeServer, tmp_path: Path) -> tuple[ServerRunner, Path]:
    """A server without a key (the loopback default) and its data folder."""
    runner = make_server(ServerConfig(parallel=1, max_resident=1))
    return runner, tmp_path / "home0"


def test_an_evil_origin_is_refused_before_anything_runs(
    open_server: tuple[ServerRunner, Path],
) -> None:
    runner, home = open_server
    with httpx2.Client(base_url=runner.url, timeout=30) as http:
        named = http.post(
            CHAT,
            json={"messages": [{"role": "user", "content": "x"}], "conversation": "kept"},
        )
        assert named.status_code == 200, named.text
        assert runner.store is not None
        names_before = runner.store.names()
        log_before = len(runner.service.log)
        evil = {"Origin": EVIL, "Content-Type": "text/plain"}
        text = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        attempts = [
            http.post(CHAT, content=text, headers=evil),
            http.post("/v1/completions", content='{"prompt": "a"}', headers=evil),
            http.post("/slots/0?action=save", content='{"filename": "evil.bin"}', headers=evil),
            http.post("/slots/0?action=erase", headers=evil),
            http.get("/v1/models", headers=evil),
            http.get("/health", headers=evil),
            http.get("/slots", headers=evil),
            http.options(CHAT, headers={**evil, "Access-Control-Request-Method": "POST"}),
            http.post("/tokenize", content='{"content": "a"}', headers=evil),
        ]
        for reply in attempts:
            assert reply.status_code == 403, reply.text
            assert reply.json()["error"]["code"] == "origin_not_allowed"
            assert "--cors-origin" in reply.json()["error"]["message"]
            assert "access-control-allow-origin" not in reply.headers
        assert runner.store.names() == names_before  # no "API:" conversation
        assert len(runner.service.log) == log_before  # nothing generated
        assert not (home / "states" / "slots" / "evil.bin").exists()
        slots = http.get("/slots").json()
        assert any(s["conversation"] == "kept" and s["n_prompt_tokens"] > 0 for s in slots)
        # curl -d: no Origin, still served
        assert http.post(CHAT, content=text, headers={"Content-Type": "text/plain"}).is_success


def test_the_origin_is_checked_before_the_key_and_the_body(make_server: MakeServer) -> None:
    """A wrong key and a body that never comes: the 403 comes at once, not a 401 and not
    after the body deadline (60 s here, so "at once" has room on a busy machine)."""
    patient = replace(SHORT, body_timeout_s=60.0)
    runner = make_server(patient)
    for key in ("wrong", KEY):
        started = time.monotonic()
        reply = raw_request(
            runner,
            f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: {EVIL}\r\n"
            f"Authorization: Bearer {key}\r\nContent-Length: 5000\r\n\r\n".encode(),
        )
        assert json_error(reply, 403)["code"] == "origin_not_allowed"
        assert time.monotonic() - started < SLACK_S < patient.body_timeout(5000)
    chat_works(runner)


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Origin": "null"}, 403),  # a file:// page or a sandboxed frame
        ({"Sec-Fetch-Site": "cross-site"}, 403),  # an <img> or <script> GET of another site
        ({"Origin": "http://127.0.0.1:1"}, 403),  # another port is another origin
        ({"Origin": "https://127.0.0.1:{port}"}, 403),  # another scheme too
        ({"Origin": "http://127.0.0.1:{port}"}, 200),  # the server's own origin
        ({"Origin": "http://localhost:{port}"}, 200),
        ({"Sec-Fetch-Site": "same-origin"}, 200),
        ({}, 200),  # curl, SDKs
    ],
)
def test_which_origins_are_served(
    open_server: tuple[ServerRunner, Path], headers: dict[str, str], status: int
) -> None:
    runner, _ = open_server
    port = address(runner)[1]
    sent = {name: value.format(port=port) for name, value in headers.items()}
    with httpx2.Client(base_url=runner.url, timeout=30) as http:
        reply = http.get("/v1/models", headers=sent)
        assert reply.status_code == status, reply.text
        assert "access-control-allow-origin" not in reply.headers
        assert http.get("/health").status_code == 200


def test_configured_origins_and_null(make_server: MakeServer) -> None:
    runner = make_server(ServerConfig(parallel=1, cors_origins=("http://App.example/", "null")))
    with httpx2.Client(base_url=runner.url, timeout=30) as http:
        ok = http.post(
            CHAT,
            json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 2},
            headers={"Origin": "http://app.example"},
        )
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == "http://app.example"
        assert http.get("/health", headers={"Origin": "null"}).status_code == 200
        assert http.get("/health", headers={"Origin": EVIL}).status_code == 403


# ------------------------------------------------------------------------ item 6: wire errors


def client_hello() -> bytes:
    """A real TLS ClientHello, as a client that took the server for https:// sends it."""
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_tls_bytes_get_a_json_400(hostile: ServerRunner) -> None:
    hello = client_hello()
    assert hello[0] == 0x16
    error = json_error(raw_request(hostile, hello), 400)
    assert "http://" in error["message"]
    # a real TLS client fails cleanly and the server serves the next one
    context = ssl.create_default_context()
    with connect(hostile) as sock, pytest.raises(ssl.SSLError):
        context.wrap_socket(sock, server_hostname="localhost")
    chat_works(hostile)


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 414),
        (b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
        (
            b"GET /health HTTP/1.1\r\n"
            + b"".join(b"X-%d: 1\r\n" % i for i in range(150))
            + b"\r\n",
            431,
        ),
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / FOO/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1 extra\r\n\r\n", 400),
        (b"GET /health HTTP/9.9\r\n\r\n", 505),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),  # HTTP/2 with prior knowledge
        (b"BREW /pot HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 501),
        (b"\x00\xff\xfe garbage\r\n\r\n", 400),
        (
            b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sesame\r\n"
            b"Content-Length: abc\r\n\r\n{}",
            400,
        ),
        (
            b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sesame\r\n"
            b"Content-Length: +2\r\n\r\n{}",
            400,
        ),
        (
            b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sesame\r\n"
            b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
            400,
        ),
        (
            b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sesame\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
            411,
        ),
    ],
    ids=[
        "uri-too-long",
        "header-too-large",
        "too-many-headers",
        "no-version",
        "bad-version",
        "four-words",
        "http-9.9",
        "http2-preface",
        "unknown-method",
        "binary",
        "length-not-a-number",
        "length-signed",
        "two-lengths",
        "chunked",
    ],
)
def test_wire_errors_are_json(hostile: ServerRunner, data: bytes, status: int) -> None:
    json_error(raw_request(hostile, data), status)
    with httpx2.Client(base_url=hostile.url, timeout=10) as http:
        assert http.get("/health").status_code == 200


def test_real_clients_get_json_414_and_431(hostile: ServerRunner) -> None:
    with httpx2.Client(base_url=hostile.url, timeout=10) as http:
        long = http.get("/v1/models/" + "m" * 10_000)
        assert long.status_code == 414 and long.json()["error"]["code"] == "uri_too_long"
        big = http.get("/health", headers={"X-Big": "b" * 70_000})
        assert big.status_code == 431 and big.json()["error"]["code"] == "headers_too_large"
        assert http.get("/health").status_code == 200


def reset(sock: socket.socket) -> None:
    """Close with an RST, as a killed client's kernel does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_a_reset_mid_stream_is_one_log_line(
    hostile: ServerRunner, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO, logger="app.server")
    body = json.dumps(
        {
            "messages": [{"role": "user", "content": "talk"}],
            "grammar": ENDLESS,
            "stream": True,
            "temperature": 0.8,
        }
    ).encode()
    sock = connect(hostile)
    sock.sendall(
        f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    got = b""
    while got.count(b"data: ") < 5:
        chunk = sock.recv(65536)
        assert chunk, got
        got += chunk
    reset(sock)
    assert wait_for(lambda: hostile.http is not None and hostile.http.answering == 0, 30)
    gone = [r for r in caplog.records if "left during" in r.getMessage()]
    assert len(gone) == 1, [r.getMessage() for r in caplog.records]
    assert f"POST {CHAT}" in gone[0].getMessage()
    assert gone[0].exc_info is None
    assert "Traceback" not in capfd.readouterr().err
    chat_works(hostile)


def test_a_reset_mid_body_is_one_log_line(
    hostile: ServerRunner, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO, logger="app.server")
    sock = connect(hostile)
    sock.sendall(
        f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
        'Content-Length: 1000\r\n\r\n{"messages": '.encode()
    )
    assert wait_for(lambda: hostile.http is not None and hostile.http.answering == 1, 30)
    reset(sock)
    assert wait_for(lambda: hostile.http is not None and hostile.http.answering == 0, 30)
    assert wait_for(lambda: any("left during" in r.getMessage() for r in caplog.records), 30)
    gone = [r for r in caplog.records if "left during" in r.getMessage()]
    assert len(gone) == 1 and gone[0].exc_info is None
    assert "Traceback" not in capfd.readouterr().err
    chat_works(hostile)
