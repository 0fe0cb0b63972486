"""The HTTP layer: requests parsed by the standard library's ``BaseHTTPRequestHandler``
(its parser only: connections, deadlines and bounds are :mod:`app.server.transport`'s),
JSON in and out, server-sent events for streams.

Security, in the order it is checked, before the body is read: the ``Origin`` of a browser
page (:mod:`app.server.origin`: 403 unless allowed, on every route); without a key the
``Host`` header must name the loopback (a web page cannot reach the server by DNS
rebinding); an API key (``Authorization: Bearer``) when one is set (401 otherwise; without
a key only loopback binds are allowed, :meth:`ServerConfig.validate`). Bodies are bounded
in size (413) and time (408), and so are requests answered at once and waiting (503).
Every error, the parser's own too (400, 414, 431, 501, 505), is an OpenAI-shaped JSON
object (:mod:`app.server.errors`), never an HTML page.

Why the standard library and not Starlette + uvicorn + sse-starlette (what
llama-cpp-python's server uses): the properties this server needs - a deadline for the
whole request head and body, a cap that counts only requests being answered - are not in
uvicorn (its concurrency limit counts open connections, its timer restarts on each byte)
and would be the same socket-level code wrapped around its protocol classes; the service
is synchronous (engine calls block on the session thread, a stream is a generator polled
with ``gone()``), so under ASGI every request would hop to a thread pool and back per
event; and it would add four packages (starlette, uvicorn, anyio, sse-starlette) to an app
that ships as one bundle. What the standard library left to us - error shapes, malformed
input, resets - is handled here and tested raw (tests/server/test_hostile_http.py).

Measured with ``benchmarks/bench_server.py --model tiny-8k.gguf --skip-llama-server
--rounds 2`` (a tiny model, so that the HTTP layer dominates; 2 shared cores, load 6-11),
before and after, best of the rounds: ``GET /health`` on a keep-alive connection went from
20-21 to 350-580 requests/s (the old server wrote headers and body in two segments and
waited ~40 ms for the client's delayed ACK each time: with TCP_NODELAY alone it gave 227),
8 clients from 34-84 to 208-543, a connection per request from 170-208 to 283-472;
streaming and time-to-first-token figures stayed within the noise. A bare Starlette +
uvicorn (h11) ``/health``, measured in turns with the new server by the benchmark's
``requests_per_second``: median 4-8 ms a keep-alive request against 1.1-1.5 ms.
"""

from __future__ import annotations

import hmac
import itertools
import json
import logging
import select
import socket
import time
from collections.abc import Callable, Iterator
from http.client import HTTPMessage
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from app import __version__
from app.loopback import is_loopback_host
from app.server.config import ServerConfig
from app.server.errors import ApiError, bad_request, server_error
from app.server.openai_format import (
    chat_chunks,
    chat_response,
    completion_chunks,
    completion_response,
)
from app.server.origin import OriginPolicy, Verdict, refusal
from app.server.params import parse_chat, parse_completion
from app.server.service import ApiService, ClientGone, Item
from app.server.slots import slot_index
from app.server.transport import Conn, ConnReader, ConnWriter, Transport

log = logging.getLogger(__name__)

PUBLIC_PATHS = {"/health", "/v1/health"}
# The standard library parser's errors, as sentences and codes of our own.
PARSER_ERRORS = {
    400: "bad_request",
    408: "request_timeout",
    414: "uri_too_long",
    431: "headers_too_large",
    501: "method_not_supported",
    505: "http_version_not_supported",
}

__all__ = ["ApiHandler", "ApiServer"]


class ApiServer(Transport):
    """The transport answering with :class:`ApiHandler`: one request per ``answer``."""

    def __init__(self, service: ApiService, config: ServerConfig) -> None:
        self.service = service
        super().__init__(config, self._answer_one)
        self.origins = OriginPolicy(config.cors_origins, self.port)

    def _answer_one(self, conn: Conn) -> bool:
        handler = ApiHandler(conn, self)
        handler.handle_one_request()
        return not handler.close_connection and not handler.body_unread()


class ApiHandler(BaseHTTPRequestHandler):
    """One request on a connection whose head the transport has read whole."""

    protocol_version = "HTTP/1.1"
    server_version = f"LlamaDesk/{__version__}"
    # A request line without a version is HTTP/0.9 to the parser, whose replies have no
    # status line; as HTTP/1.0 a malformed request still gets a status and a JSON body.
    default_request_version = "HTTP/1.0"
    server: ApiServer  # type: ignore[assignment]
    rfile: ConnReader  # type: ignore[assignment]
    wfile: ConnWriter  # type: ignore[assignment]

    def __init__(self, conn: Conn, server: ApiServer) -> None:
        # Not BaseRequestHandler.__init__: that would handle the connection to its end.
        self.request = self.connection = conn.sock
        self.client_address = conn.address
        self.server = server
        self.rfile = ConnReader(conn)
        self.wfile = ConnWriter(conn.sock)
        self.close_connection = True
        self.requestline = ""
        self.request_version = self.default_request_version
        self.command = ""
        self.path = ""
        self.headers = HTTPMessage()
        self._body_read = False
        self._expect_continue = False
        self._allow_origin: str | None = None

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The parser's errors (malformed request line, bad version, too many headers,
        unknown method) as JSON; the connection closes (what follows cannot be trusted)."""
        self.close_connection = True
        text = (message or self.responses.get(code, ("Error",))[0])[:300].rstrip(".")
        self._send_error(ApiError(code, f"{text}.", code=PARSER_ERRORS.get(code)))

    def handle_expect_100(self) -> bool:
        # "100 Continue" invites the body: it goes out only once the origin, host and key
        # checks have passed (in _read_json), not as the parser would, at once.
        self._expect_continue = True
        return True

    def body_unread(self) -> bool:
        """Whether the request had a body nobody read (the connection cannot go on)."""
        if self._body_read:
            return False
        length = self.headers.get("Content-Length", "0").strip()
        return length != "0" or "Transfer-Encoding" in self.headers

    # ---------------------------------------------------------------- plumbing

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_OPTIONS(self) -> None:
        try:
            self._check_origin_and_host()
        except ApiError as error:
            self._send_error(error)
            return
        self.send_response(204)
        if self._allow_origin is not None:
            self._cors_headers()
            self.send_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
            self.send_header(
                "Access-Control-Allow-Headers", "Authorization, Content-Type, X-Conversation-Id"
            )
            self.send_header("Access-Control-Max-Age", "600")
        else:
            self.send_header("Allow", "GET, POST, OPTIONS")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _check_origin_and_host(self) -> None:
        """The checks that come before anything else of the request is looked at."""
        origin = self.headers.get("Origin")
        policy = self.server.origins
        verdict = policy.judge(origin, self.headers.get("Sec-Fetch-Site"))
        if verdict is Verdict.REFUSED:
            raise ApiError(403, refusal(origin), code="origin_not_allowed")
        self._allow_origin = policy.allow_origin_header(origin, verdict)
        if not self._host_allowed():
            raise ApiError(403, "This server answers only requests addressed to localhost.")

    def _cors_headers(self) -> None:
        if self._allow_origin is not None:
            self.send_header("Access-Control-Allow-Origin", self._allow_origin)
            self.send_header("Vary", "Origin")

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self._cors_headers()
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, error: ApiError) -> None:
        if self.body_unread():
            self.close_connection = True  # an unread body would be read as a request
        try:
            self._send_json(error.status, error.body(), error.headers)
        except OSError as exc:
            self.close_connection = True
            self._log_gone(exc)

    def _log_gone(self, exc: BaseException | None) -> None:
        """One line for a client that went away (no traceback: it is not our fault)."""
        why = "closed the connection" if exc is None else type(exc).__name__
        what = f"{self.command} {urlsplit(self.path).path}" if self.command else "a request"
        log.info("%s left during %s (%s)", self.client_name(), what, why)

    def client_name(self) -> str:
        agent = self.headers.get("User-Agent", "")[:60]
        return f"{self.client_address[0]} {agent}".strip()

    def gone(self) -> bool:
        """Whether the client closed its connection."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            peeked: bytes = self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            return peeked == b""  # typeshed types the handler's socket as Any
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True

    def _read_json(self) -> Any:
        if self.headers.get("Transfer-Encoding", "").lower() not in ("", "identity"):
            self.close_connection = True
            raise ApiError(411, "Send the body with a Content-Length (no chunked bodies).")
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            if self.command == "POST":
                self.close_connection = True
                raise ApiError(411, "A POST needs a Content-Length header and a JSON body.")
            self._body_read = True
            return None
        try:
            length = int(lengths[0].strip())
            if length < 0 or not lengths[0].strip().isdigit() or len(set(lengths)) > 1:
                raise ValueError
        except ValueError:
            self.close_connection = True
            raise bad_request("The Content-Length header is not one number.") from None
        limit = self.server.config.max_body_bytes
        if length > limit:
            self.close_connection = True
            raise ApiError(
                413,
                f"The request body has {length:,} bytes; at most {limit:,} are accepted.",
                code="request_too_large",
            )
        if self._expect_continue:
            self._expect_continue = False
            self.send_response_only(100)
            self.end_headers()
        seconds = self.server.config.body_timeout(length)
        self.rfile.deadline = time.monotonic() + seconds
        try:
            data = self.rfile.read(length)
        except TimeoutError:
            self.close_connection = True
            raise ApiError(
                408,
                f"The request body ({length:,} bytes) did not arrive within {seconds:.0f} s.",
                code="request_timeout",
            ) from None
        self._body_read = True
        if len(data) < length:
            self.close_connection = True
            raise bad_request("The request body ended early.")
        if not data.strip():
            raise bad_request("The request body is empty; send a JSON object.")
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise bad_request(f"The request body is not valid JSON: {exc}.") from None

    def _authorized(self) -> bool:
        key = self.server.config.api_key
        if not key:
            return True
        given = self.headers.get("Authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer":
            token = self.headers.get("X-Api-Key", "")
        return hmac.compare_digest(token.strip().encode(), key.encode())

    def _host_allowed(self) -> bool:
        """Without a key, a loopback server answers only requests addressed to the loopback
        (a web page's DNS-rebound name is refused)."""
        if self.server.config.api_key:
            return True
        host = self.headers.get("Host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return is_loopback_host(name)

    def _dispatch(self, method: str) -> None:
        path = urlsplit(self.path).path.rstrip("/") or "/"
        self._body_read = False
        try:
            self._check_origin_and_host()
            if path not in PUBLIC_PATHS and not self._authorized():
                raise ApiError(
                    401,
                    "A valid API key is needed: send it as 'Authorization: Bearer KEY'.",
                    code="invalid_api_key",
                    headers={"WWW-Authenticate": "Bearer"},
                )
            route = ROUTES.get(path)
            if route is None and path.startswith("/v1/models/"):
                route = {"GET": ApiHandler._get_model}
            if route is None and path.startswith("/slots/"):
                route = {"POST": ApiHandler._slot_action}
            if route is None:
                raise ApiError(404, f"There is no endpoint {path}.", code="not_found")
            handler = route.get(method)
            if handler is None:
                allowed = ", ".join(sorted(route))
                raise ApiError(
                    405, f"{path} takes {allowed}, not {method}.", headers={"Allow": allowed}
                )
            handler(self, path)
        except ApiError as error:
            self._send_error(error)
        except ClientGone:
            self.close_connection = True
            self._log_gone(None)
        except OSError as exc:  # reset, broken pipe, a send that timed out
            self.close_connection = True
            self._log_gone(exc)
        except Exception:
            log.exception("request %s %s failed", method, path)
            self.close_connection = True
            self._send_error(server_error("Internal error while handling the request."))

    # ---------------------------------------------------------------- streams

    def _stream(self, chunks: Iterator[dict[str, Any]]) -> None:
        chunked = self.request_version != "HTTP/1.0"  # HTTP/1.0: the end is the close
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("X-Accel-Buffering", "no")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.close_connection = True
            self.send_header("Connection", "close")
        self._cors_headers()
        self.end_headers()

        def write(data: bytes) -> None:
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                self.wfile.flush()
            except (OSError, ValueError):
                raise ClientGone from None

        for chunk in chunks:
            write(b"data: " + json.dumps(chunk, ensure_ascii=False).encode("utf-8") + b"\n\n")
        write(b"data: [DONE]\n\n")
        if chunked:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (OSError, ValueError):
                raise ClientGone from None

    def _generate(
        self,
        items: Iterator[Item],
        stream: bool,
        include_usage: bool,
        whole: Callable[[Iterator[Item], str], dict[str, Any]],
        chunked: Callable[[Iterator[Item], str, bool], Iterator[dict[str, Any]]],
    ) -> None:
        service = self.server.service
        try:
            if not stream:
                self._send_json(200, whole(items, service.model_id))
                return
            first = next(items, None)  # errors before the first token are plain responses
            rest = itertools.chain([first] if first is not None else [], items)
            self._stream(chunked(rest, service.model_id, include_usage))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    # ---------------------------------------------------------------- endpoints

    def _health(self, path: str) -> None:
        status, body = self.server.service.health()
        self._send_json(status, body)

    def _models(self, path: str) -> None:
        self._send_json(200, self.server.service.models())

    def _get_model(self, path: str) -> None:
        self._send_json(200, self.server.service.model_info(path.removeprefix("/v1/models/")))

    def _props(self, path: str) -> None:
        self._send_json(200, self.server.service.props())

    def _slots(self, path: str) -> None:
        self._send_json(200, self.server.service.slots())

    def _slot_action(self, path: str) -> None:
        index = slot_index(path)
        action = parse_qs(urlsplit(self.path).query).get("action", [None])[0]
        # llama-server's erase takes no body; save and restore name their file in one.
        length = self.headers.get("Content-Length", "0").strip()
        has_body = length != "0" or "Transfer-Encoding" in self.headers
        body = self._read_json() if has_body else None
        self._body_read = True
        self._send_json(200, self.server.service.slot_action(index, action, body))

    def _tokenize(self, path: str) -> None:
        self._send_json(200, self.server.service.tokenize(self._read_json()))

    def _detokenize(self, path: str) -> None:
        self._send_json(200, self.server.service.detokenize(self._read_json()))

    def _apply_template(self, path: str) -> None:
        self._send_json(200, self.server.service.apply_template(self._read_json()))

    def _embeddings(self, path: str) -> None:
        self._send_json(200, self.server.service.embeddings(self._read_json(), self.gone))

    def _chat(self, path: str) -> None:
        req = parse_chat(self._read_json(), self.headers.get("X-Conversation-Id"))
        items = self.server.service.generate(req, self.gone, self.client_name(), path)
        self._generate(items, req.stream, req.include_usage, chat_response, chat_chunks)

    def _completions(self, path: str) -> None:
        body = self._read_json()
        if self.server.service.front is not None:  # serve --remote: the remote server answers
            answer = self.server.service.forward_completion(body, self.gone)
            if isinstance(answer, dict):
                self._send_json(200, answer)
                return
            try:
                self._stream(answer)
            finally:
                answer.close()
            return
        req = parse_completion(body, self.headers.get("X-Conversation-Id"))
        items = self.server.service.generate(req, self.gone, self.client_name(), path)
        self._generate(items, req.stream, req.include_usage, completion_response, completion_chunks)


Handler = Callable[[ApiHandler, str], None]
ROUTES: dict[str, dict[str, Handler]] = {
    "/health": {"GET": ApiHandler._health},
    "/v1/health": {"GET": ApiHandler._health},
    "/v1/models": {"GET": ApiHandler._models},
    "/models": {"GET": ApiHandler._models},
    "/props": {"GET": ApiHandler._props},
    "/slots": {"GET": ApiHandler._slots},
    "/tokenize": {"POST": ApiHandler._tokenize},
    "/detokenize": {"POST": ApiHandler._detokenize},
    "/apply-template": {"POST": ApiHandler._apply_template},
    "/v1/embeddings": {"POST": ApiHandler._embeddings},
    "/embeddings": {"POST": ApiHandler._embeddings},
    "/v1/chat/completions": {"POST": ApiHandler._chat},
    "/chat/completions": {"POST": ApiHandler._chat},
    "/v1/completions": {"POST": ApiHandler._completions},
    "/completions": {"POST": ApiHandler._completions},
}
