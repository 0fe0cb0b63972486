"""Small OpenAI-compatible servers for the remote engine's tests, on 127.0.0.1.

:class:`StubServer` speaks the streamed chat completions of a plain OpenAI-compatible
server (no ``/props``, no cached tokens), of Ollama (``/api/version``; ``keep_alive``;
cached tokens in ``usage``) or of vLLM (its models ``owned_by: vllm`` with
``max_model_len``; cached tokens only when ``vllm_prompt_details``). What the last user
message says chooses a fault, so that one server can fail one conversation and answer
another: ``[401]``/``[404]``/``[429]``/``[500]`` (that status), ``[429-once]`` (a 429 with
``Retry-After: 0.2`` once, then an answer), ``[drop]`` (the connection closes after two
pieces), ``[malformed]`` (a piece that is no JSON), ``[hang]`` (headers, then nothing),
``[slow]`` (a piece every 0.2 s), ``[held]`` (the first piece, then the rest once
:attr:`StubState.held_release` is set), ``[silent]`` (not even the headers: the time the
client closed the connection is kept in :attr:`StubState.closed_at`), ``[not-sse]`` (a JSON answer where a stream was asked);
and the reasoning: ``[think]`` (``<think>…</think>`` in the text, for the splitter),
``[reasoning]`` (``delta.reasoning_content`` first, as llama-server and vLLM send it).
Tool calls: ``[tool-call]`` streams :data:`TOOL_PIECES` - two calls whose ``delta.tool_calls``
are split at odd places (the second call's id before its name, arguments cut inside keys
and strings, the two calls' pieces interleaved) - and ends with ``finish_reason:
"tool_calls"``; ``[tool-message]`` sends one call whole in ``message.tool_calls``;
``[tool-cut]`` drops the connection in the middle of a call's arguments; ``[tool-slow]``
sends the call pieces 0.2 s apart (with ``names_late=True`` these send
:data:`TOOL_PIECES_NAMES_LATE`: argument fragments before the names); ``[no-tools]``
answers a request that has ``tools`` with a 400, as a server without function calling does.
Every request is kept in :attr:`StubServer.requests` (path, headers, body);
:attr:`StubState.chat_received` is set when a chat request has been read (a test waits for
it instead of sleeping).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY = ("Hello", " from", " the", " stub", ".")
# (server index, id, name, fragment) per delta; joined, call 0 is get_weather
# {"city": "Paris", "unit": "c"} and call 1 is get_time {"zone": "CET"}
TOOL_PIECES: tuple[tuple[int, str | None, str | None, str], ...] = (
    (0, "call_w", "get_weather", ""),
    (0, None, None, '{"ci'),
    (0, None, None, 'ty": "Pa'),
    (5, "call_t", None, ""),  # an id first, the name in a later piece
    (0, None, None, 'ris", "unit'),
    (5, None, "get_time", '{"zo'),
    (0, None, None, '": "c"}'),
    (5, None, None, 'ne": "CET"}'),
)
# The same two calls with arguments before the names (``names_late=True``): call 0 gives
# its id, two fragments, then its name with a third; call 5 begins with a fragment, before
# even its id. A client that dropped what came before a name would lose '{"ci' and more.
TOOL_PIECES_NAMES_LATE: tuple[tuple[int, str | None, str | None, str], ...] = (
    (0, "call_w", None, ""),
    (0, None, None, '{"ci'),
    (5, None, None, '{"zo'),
    (0, None, None, 'ty": "Pa'),
    (0, None, "get_weather", 'ris", "unit'),
    (5, "call_t", "get_time", 'ne": "CET"}'),
    (0, None, None, '": "c"}'),
)


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class StubState:
    kind: str = "openai"  # openai | ollama | vllm
    vllm_prompt_details: bool = False
    names_late: bool = False  # [tool-call] and the like send TOOL_PIECES_NAMES_LATE
    api_key: str | None = None  # requests without "Bearer KEY" get a 401
    requests: list[Seen] = field(default_factory=list)
    once: set[str] = field(default_factory=set)  # faults already given once
    last_prompt: str = ""  # to count the "cached" prefix as a server would
    hang_release: threading.Event = field(default_factory=threading.Event)
    closed_at: float = 0.0  # monotonic time a [silent] request's client closed
    chat_received: threading.Event = field(default_factory=threading.Event)
    held_release: threading.Event = field(default_factory=threading.Event)  # for [held]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _refused(self) -> bool:
        key = self.server.state.api_key
        if key is not None and self.headers.get("Authorization") != f"Bearer {key}":
            self._json(401, {"error": {"message": "Invalid API key", "type": "auth"}})
            return True
        return False

    def do_GET(self) -> None:
        state = self.server.state
        state.requests.append(Seen(self.path, dict(self.headers), None))
        if self._refused():
            return
        if self.path == "/v1/models":
            owner = {"openai": "system", "ollama": "library", "vllm": "vllm"}[state.kind]
            model: dict[str, Any] = {"id": "stub-model", "object": "model", "owned_by": owner}
            if state.kind == "vllm":
                model["max_model_len"] = 4096
            self._json(200, {"object": "list", "data": [model]})
        elif self.path == "/api/version" and state.kind == "ollama":
            self._json(200, {"version": "0.13.0"})
        elif self.path == "/version" and state.kind == "vllm":
            self._json(200, {"version": "0.11.0"})
        else:
            self._json(404, {"error": {"message": "Not found", "type": "not_found"}})

    def do_POST(self) -> None:
        state = self.server.state
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        state.requests.append(Seen(self.path, dict(self.headers), body))
        if self._refused():
            return
        if self.path != "/v1/chat/completions":
            self._json(404, {"error": {"message": "Not found"}})
            return
        state.chat_received.set()
        messages = body.get("messages", [])
        last = messages[-1]["content"] if messages else ""
        for code in ("401", "404", "500"):
            if f"[{code}]" in last:
                self._json(int(code), {"error": {"message": f"stub says {code}"}})
                return
        if "[429]" in last:
            self._json(429, {"error": {"message": "slow down"}}, {"Retry-After": "60"})
            return
        if "[429-once]" in last and "429" not in state.once:
            state.once.add("429")
            self._json(429, {"error": {"message": "slow down"}}, {"Retry-After": "0.2"})
            return
        if "[silent]" in last:
            self.connection.settimeout(30)
            try:
                while self.connection.recv(1):
                    pass
            except OSError:
                pass
            state.closed_at = time.monotonic()
            self.close_connection = True
            return
        if "[no-tools]" in last and "tools" in body:
            message = "tools param requires --jinja flag"
            self._json(400, {"error": {"code": 400, "message": message}})
            return
        if "[not-sse]" in last:
            self._json(200, {"choices": [{"message": {"content": "whole"}}]})
            return
        self._stream(body, last)

    def _piece(self, data: str) -> None:
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def _stream(self, body: dict[str, Any], last: str) -> None:
        state = self.server.state
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if "[hang]" in last:
            state.hang_release.wait(30)
            return
        prompt = json.dumps(body.get("messages"))
        cached = 0
        for a, b in zip(prompt, state.last_prompt, strict=False):
            if a != b:
                break
            cached += 1
        state.last_prompt = prompt
        if "[think]" in last:
            for text in ("<think>", "let me ", "see", "</think>"):
                self._piece(json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}))
        if "[tool-call]" in last or "[tool-cut]" in last or "[tool-slow]" in last:
            self._tool_calls(cut="[tool-cut]" in last, slow="[tool-slow]" in last)
            return
        if "[tool-message]" in last:
            call = {
                "id": "call_m",
                "type": "function",
                "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'},
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            self._piece(
                json.dumps(
                    {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
                )
            )
            self._piece("[DONE]")
            return
        if "[reasoning]" in last:
            for text in ("let me ", "see"):
                delta = {"reasoning_content": text}
                self._piece(json.dumps({"choices": [{"index": 0, "delta": delta}]}))
        for i, text in enumerate(REPLY):
            if "[drop]" in last and i == 2:
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if "[malformed]" in last and i == 2:
                self._piece("{not json")
                return
            if "[held]" in last and i == 1:
                state.held_release.wait(60)
            if "[slow]" in last:
                time.sleep(0.2)
            chunk = {
                "id": "chatcmpl-stub",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
            }
            self._piece(json.dumps(chunk))
        n_prompt = len(prompt) // 4
        usage: dict[str, Any] = {
            "prompt_tokens": n_prompt,
            "completion_tokens": len(REPLY),
            "total_tokens": n_prompt + len(REPLY),
        }
        if state.kind == "ollama" or (state.kind == "vllm" and state.vllm_prompt_details):
            usage["prompt_tokens_details"] = {"cached_tokens": cached // 4}
        final = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        self._piece(json.dumps(final))
        if body.get("stream_options", {}).get("include_usage"):
            self._piece(json.dumps({"choices": [], "usage": usage}))
        self._piece("[DONE]")

    def _tool_calls(self, *, cut: bool, slow: bool) -> None:
        try:
            self._tool_pieces(cut=cut, slow=slow)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client closed the stream (a stop): what the test is after

    def _tool_pieces(self, *, cut: bool, slow: bool) -> None:
        self._piece(json.dumps({"choices": [{"index": 0, "delta": {"content": "Let me look."}}]}))
        pieces = TOOL_PIECES_NAMES_LATE if self.server.state.names_late else TOOL_PIECES
        for n, (index, call_id, name, fragment) in enumerate(pieces):
            if cut and n == 4:
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if slow:
                time.sleep(0.2)
            function: dict[str, Any] = {"arguments": fragment}
            if name is not None:
                function["name"] = name
            entry: dict[str, Any] = {"index": index, "function": function}
            if call_id is not None:
                entry.update(id=call_id, type="function")
            delta = {"role": "assistant", "content": None, "tool_calls": [entry]}
            self._piece(json.dumps({"choices": [{"index": 0, "delta": delta}]}))
        final = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
        self._piece(json.dumps(final))
        self._piece("[DONE]")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: StubState

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _Handler)
        self.open_connections: set[socket.socket] = set()

    def process_request(self, request: Any, client_address: Any) -> None:
        self.open_connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.open_connections.discard(request)
        super().shutdown_request(request)


class StubServer:
    """See the module docstring; ``port`` 0 takes a free one."""

    def __init__(self, kind: str = "openai", port: int = 0, **options: Any) -> None:
        self.state = StubState(kind=kind, **options)
        self._server = _Server(("127.0.0.1", port))
        self._server.state = self.state
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> list[Seen]:
        return self.state.requests

    def chat_bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests if r.path == "/v1/chat/completions"]

    def close(self) -> None:
        self.state.hang_release.set()
        self.state.held_release.set()
        self._server.shutdown()
        self._server.server_close()
        for conn in list(self._server.open_connections):  # a server that is gone is gone
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
