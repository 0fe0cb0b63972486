"""The HTTP transport: a threading server from the standard library, one thread per
connection (bounded), JSON in and out, server-sent events for streams.

Security: an API key (``Authorization: Bearer``) when one is set (401 otherwise); without
a key only loopback binds are allowed (:meth:`ServerConfig.validate`) and the ``Host``
header must name the loopback (a web page cannot reach the server by DNS rebinding); CORS
is off unless origins are configured; bodies are bounded (413) and so are connections and
waiting requests (503).
"""

from __future__ import annotations

import contextlib
import hmac
import itertools
import json
import logging
import select
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from app import __version__
from app.server.config import ServerConfig
from app.server.errors import ApiError, bad_request, server_error, unavailable
from app.server.openai_format import (
    chat_chunks,
    chat_response,
    completion_chunks,
    completion_response,
)
from app.server.params import parse_chat, parse_completion
from app.server.service import ApiService, ClientGone, Item
from app.server.slots import slot_index

log = logging.getLogger(__name__)

PUBLIC_PATHS = {"/health", "/v1/health"}
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, service: ApiService, config: ServerConfig) -> None:
        self.service = service
        self.config = config
        self._connections = 0
        self._count_lock = threading.Lock()
        self._open: set[socket.socket] = set()  # guarded by _count_lock
        host = config.host.strip("[]")
        if ":" in host:
            self.address_family = socket.AF_INET6
        handler = type("ApiHandler", (ApiHandler,), {"timeout": config.idle_timeout_s})
        super().__init__((host, config.port), handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._count_lock:
            full = self._connections >= self.config.max_connections
            if not full:
                self._connections += 1
        if full:
            body = json.dumps(
                unavailable(
                    f"Too many connections (at most {self.config.max_connections}); retry shortly.",
                    "too_many_connections",
                ).body()
            ).encode()
            with contextlib.suppress(OSError):
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    b"Connection: close\r\nRetry-After: 1\r\nContent-Length: "
                    + str(len(body)).encode()
                    + b"\r\n\r\n"
                    + body
                )
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self._count_lock:
            self._open.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._count_lock:
                self._connections -= 1
                self._open.discard(request)

    def close_connections(self) -> None:
        """End every open connection (after ``shutdown``): a keep-alive client must not
        go on being served by a stopped server, and a reply in progress sees its client
        gone and frees its sequence."""
        with self._count_lock:
            sockets = list(self._open)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = f"LlamaDesk/{__version__}"
    server: ApiServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

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
        origin = self._cors_origin()
        if origin is None:
            self._send_error(
                ApiError(403, "Cross-origin requests are off on this server.", code="cors_off")
            )
            return
        self.send_response(204)
        self._cors_headers(origin)
        self.send_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
        self.send_header(
            "Access-Control-Allow-Headers", "Authorization, Content-Type, X-Conversation-Id"
        )
        self.send_header("Access-Control-Max-Age", "600")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _cors_origin(self) -> str | None:
        origin = self.headers.get("Origin")
        allowed = self.server.config.cors_origins
        if origin is None or not allowed:
            return None
        if "*" in allowed:
            return "*"
        return origin if origin in allowed else None

    def _cors_headers(self, origin: str | None) -> None:
        if origin is not None:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Vary", "Origin")

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self._cors_headers(self._cors_origin())
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, error: ApiError) -> None:
        with contextlib.suppress(OSError):
            self._send_json(error.status, error.body(), error.headers)

    def client_name(self) -> str:
        agent = self.headers.get("User-Agent", "")[:60]
        return f"{self.client_address[0]} {agent}".strip()

    def gone(self) -> bool:
        """Whether the client closed its connection."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True

    def _read_json(self) -> Any:
        if self.headers.get("Transfer-Encoding", "").lower() not in ("", "identity"):
            self.close_connection = True
            raise ApiError(411, "Send the body with a Content-Length (no chunked bodies).")
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            if self.command == "POST":
                self.close_connection = True
                raise ApiError(411, "A POST needs a Content-Length header and a JSON body.")
            self._body_read = True
            return None
        try:
            length = int(length_text)
            if length < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            raise bad_request("The Content-Length header is not a number.") from None
        limit = self.server.config.max_body_bytes
        if length > limit:
            self.close_connection = True
            raise ApiError(
                413,
                f"The request body has {length:,} bytes; at most {limit:,} are accepted.",
                code="request_too_large",
            )
        data = self.rfile.read(length)
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
        return name.lower().removesuffix(".") in LOOPBACK_NAMES

    def _dispatch(self, method: str) -> None:
        path = urlsplit(self.path).path.rstrip("/") or "/"
        self._body_read = False
        try:
            if not self._host_allowed():
                raise ApiError(403, "This server answers only requests addressed to localhost.")
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
            if not self._body_read and "Content-Length" in self.headers:
                self.close_connection = True  # an unread body would be read as a request
            self._send_error(error)
        except ClientGone:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True
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
        self._cors_headers(self._cors_origin())
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
        req = parse_completion(self._read_json(), self.headers.get("X-Conversation-Id"))
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
