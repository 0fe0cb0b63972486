"""The stdio transport of MCP servers, with a bound on what one message may hold.

The SDK's ``stdio_client`` reads the server's stdout as text and joins the chunks of a
line by concatenation (quadratic in the line's length) into one string of any size: a
tool that answers 50 MB held the run for more than 30 s and hundreds of MB (issue 27,
item 6). This is that transport with another reader: bytes, split in linear time, and a
line longer than :data:`MAX_MESSAGE_BYTES` is not kept. Its start is, and when it is a
tool's result (``{"jsonrpc": ..., "id": N, "result": {"content": [{"type": "text",
"text": "...``, as the servers write it) the request gets a result made of that start and
a note saying how large the whole was (an error result: the call's outcome says the
result was not whole); any other oversized message answers its request
with an error result. Either way the call ends at once, and the connection goes on.

Everything else (starting the process in its own group, the shutdown sequence, parsing a
message) is the SDK's own, reused; with a version of the SDK without those helpers the
SDK's transport is used as it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final, TextIO

import anyio
import anyio.lowlevel
from mcp.client import stdio as sdk_stdio
from mcp.client.stdio import StdioServerParameters
from mcp.shared.message import SessionMessage

__all__ = ["MAX_MESSAGE_BYTES", "bounded_stdio_client"]

MAX_MESSAGE_BYTES: Final = 8 * 1024 * 1024
# What is kept of an oversized line: enough for any note the model reads of a result
# (app.mcp.client.DEFAULT_MAX_RESULT_CHARS, in JSON's escapes).
_HEAD_BYTES: Final = 256 * 1024
_CHUNK: Final = 64 * 1024
_ID: Final = re.compile(
    rb'^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")'
)
# The start of a text result's first block ("type" before or after "text", as servers
# write it).
_TEXT_START: Final = re.compile(
    rb'^[^\n]{0,200}?"result"\s*:\s*\{\s*"content"\s*:\s*\[\s*\{'
    rb'(?:\s*"type"\s*:\s*"text"\s*,)?\s*"text"\s*:\s*"'
)
_HELPERS: Final = (
    "_create_platform_compatible_process",
    "_get_executable_command",
    "_stop_server_process",
    "_parse_line",
    "_drain_stdout",
    "get_default_environment",
)


def _partial_string(raw: bytes) -> str:
    """The text of a JSON string cut anywhere (a split escape or character dropped)."""
    for trim in range(0, 12):
        body = raw[: len(raw) - trim] if trim else raw
        try:
            value = json.loads(b'"' + body + b'"')
        except ValueError:
            continue
        return value if isinstance(value, str) else ""
    return ""


def oversized_reply(head: bytes, size: int) -> SessionMessage | None:
    """The message that stands for a line of ``size`` bytes of which ``head`` was kept
    (None: no request id in it, nothing to answer)."""
    found = _ID.match(head)
    if found is None:
        return None
    request_id: Any = json.loads(found.group(1))
    note = (
        f"[The tool's result was {size:,} bytes, more than the {MAX_MESSAGE_BYTES:,} this "
        "app reads of one message; only its start is shown.]"
    )
    text = _TEXT_START.search(head)
    start = "\n" + _partial_string(head[text.end() :]) if text is not None else ""
    # An error result: the client does not check it against the tool's output schema
    # (the structured copy of the result was in the part not read).
    result = {"content": [{"type": "text", "text": note + start}], "isError": True}
    message = {"jsonrpc": "2.0", "id": request_id, "result": result}
    parsed = sdk_stdio._parse_line(json.dumps(message))
    return parsed if isinstance(parsed, SessionMessage) else None


class _Lines:
    """Splits a byte stream into lines in linear time, keeping at most
    ``MAX_MESSAGE_BYTES`` of a line (then its first ``_HEAD_BYTES`` and its length)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._scanned = 0
        self._skipping = False
        self._head = b""
        self._size = 0

    def feed(self, chunk: bytes) -> list[tuple[bytes, int]]:
        """The lines this chunk ends: (text, length); text shorter than length: cut."""
        out: list[tuple[bytes, int]] = []
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if self._skipping:
                self._size += len(piece)
            else:
                self._buffer += piece
                if len(self._buffer) > MAX_MESSAGE_BYTES:
                    self._skipping = True
                    self._head = bytes(self._buffer[:_HEAD_BYTES])
                    self._size = len(self._buffer)
                    self._buffer = bytearray()
            if end < 0:
                break
            if self._skipping:
                out.append((self._head, self._size))
                self._skipping, self._head, self._size = False, b"", 0
            else:
                out.append((bytes(self._buffer), len(self._buffer)))
                self._buffer = bytearray()
            start = end + 1
        return out


def _has_helpers() -> bool:
    return all(hasattr(sdk_stdio, name) for name in _HELPERS)


@asynccontextmanager
async def bounded_stdio_client(
    server: StdioServerParameters, errlog: TextIO
) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's ``stdio_client`` with the bounded reader (see the module's docstring)."""
    if not _has_helpers():  # another SDK version: its own transport, unbounded
        async with sdk_stdio.stdio_client(server, errlog) as streams:
            yield streams
        return
    command = await sdk_stdio._get_executable_command(server.command)
    process = await sdk_stdio._create_platform_compatible_process(
        command=command,
        args=server.args,
        env=sdk_stdio.get_default_environment() | (server.env or {}),
        errlog=errlog,
        cwd=server.cwd,
    )
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()

    async def stdout_reader() -> None:
        assert process.stdout is not None
        lines = _Lines()
        try:
            async with read_writer:
                try:
                    while True:
                        try:
                            chunk = await process.stdout.receive(_CHUNK)
                        except (anyio.EndOfStream, anyio.ClosedResourceError):
                            return
                        for text, size in lines.feed(chunk):
                            if len(text) == size:
                                message = sdk_stdio._parse_line(text.decode("utf-8", "replace"))
                            else:
                                reply = oversized_reply(text, size)
                                if reply is None:
                                    continue
                                message = reply
                            try:
                                await read_writer.send(message)
                            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                                return
                finally:
                    await sdk_stdio._drain_stdout(process)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            pass  # the session sees the read stream end

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for session_message in write_reader:
                    text = session_message.message.model_dump_json(
                        by_alias=True, exclude_unset=True
                    )
                    await process.stdin.send((text + "\n").encode("utf-8"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(0.5):
            await writer_done.wait()
        await sdk_stdio._stop_server_process(process)
        for stream in (read_stream, write_stream, read_writer, write_reader):
            await stream.aclose()
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(stdout_reader)
        group.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            # Bounded inside (the SDK's sequence): finished even when the caller is
            # cancelled, or the server process would outlive it.
            with anyio.CancelScope(shield=True):
                await shutdown()
            group.cancel_scope.cancel()
