"""The bounded stdio reader (app/mcp/stdio_transport.py): lines split in linear time, a
line over MAX_MESSAGE_BYTES kept as its start and length, and the reply that stands for
an oversized tool result (its start, a note, the request's id)."""

from __future__ import annotations

import json

import mcp_types
import pytest

from app.mcp import stdio_transport
from app.mcp.stdio_transport import MAX_MESSAGE_BYTES, _Lines, oversized_reply


def test_lines_are_split_across_chunks() -> None:
    lines = _Lines()
    out = lines.feed(b'{"a":1}\n{"b"') + lines.feed(b":2}\n\n") + lines.feed(b"tail")
    assert out == [(b'{"a":1}', 7), (b'{"b":2}', 7), (b"", 0)]
    assert lines.feed(b"\n") == [(b"tail", 4)]


def test_an_oversized_line_keeps_its_start_and_its_length() -> None:
    lines = _Lines()
    size = MAX_MESSAGE_BYTES + 5 * 65536 + 3
    out = []
    for start in range(0, size, 65536):
        out += lines.feed(b"x" * min(65536, size - start))
    out += lines.feed(b"\n{}\n")
    [(head, length), after] = out
    assert length == size and 0 < len(head) < MAX_MESSAGE_BYTES and set(head) == {ord("x")}
    assert after == (b"{}", 2)  # the next message is read as usual


@pytest.mark.parametrize(
    "head",
    [
        b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"text":"caf\\u00e9 au l',
        b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"caf\\u00e9 au l',
        b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"caf\\u00e9 au l\\u00',
    ],
    ids=["text first", "type first", "cut in an escape"],
)
def test_an_oversized_result_becomes_its_start_and_a_note(head: bytes) -> None:
    message = oversized_reply(head, 52_000_123)
    assert message is not None
    reply = message.message
    assert isinstance(reply, mcp_types.JSONRPCResponse) and reply.id == 7
    result = reply.result
    assert result["isError"] is True
    [block] = result["content"]
    note, start = block["text"].split("\n")
    assert note == (
        f"[The tool's result was 52,000,123 bytes, more than the {MAX_MESSAGE_BYTES:,} this "
        "app reads of one message; only its start is shown.]"
    )
    assert start == "café au l"


def test_an_oversized_line_without_an_id_is_dropped() -> None:
    assert (
        oversized_reply(b'{"jsonrpc":"2.0","method":"notifications/message","params"', 10**9)
        is None
    )
    # A string id is kept as a string.
    message = oversized_reply(b'{"jsonrpc":"2.0","id":"q-1","result":{"tools":[', 10**9)
    assert message is not None and json.loads(message.message.model_dump_json())["id"] == "q-1"


def test_the_sdk_still_has_what_the_transport_reuses() -> None:
    """Else the SDK's own (unbounded) transport would be used, silently."""
    assert stdio_transport._has_helpers()
