"""mcp.json in the mcpServers shape: read as LM Studio, Cursor and Claude write it, and
refused with a sentence that names the place when malformed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.mcp.config import HttpServer, McpConfigError, StdioServer, load_config, parse_config


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")
    return path


def test_the_shape_other_apps_write_is_read_as_it_is(tmp_path: Path) -> None:
    data = {
        "mcpServers": {
            "files": {
                "command": "npx",
                "args": ["-y", "server-filesystem", "/tmp"],
                "env": {"DEBUG": "1"},
            },
            "search": {
                "url": "https://example.com/mcp",
                "headers": {"Authorization": "Bearer x"},
                "type": "http",
            },
            "old": {"command": "x", "disabled": True},
        }
    }
    config = load_config(_write(tmp_path, data))
    assert config.servers == (
        StdioServer("files", "npx", ("-y", "server-filesystem", "/tmp"), {"DEBUG": "1"}),
        HttpServer("search", "https://example.com/mcp", {"Authorization": "Bearer x"}),
    )
    assert config.server("files") is config.servers[0]
    assert config.servers[0].binding != StdioServer("files", "npx", ("-y", "other")).binding


@pytest.mark.parametrize(
    ("data", "sentence"),
    [
        ("{nope", "is not valid JSON (line 1, column 2"),
        ([], "must be a JSON object with an 'mcpServers' object"),
        ({"servers": {}}, "must be a JSON object with an 'mcpServers' object"),
        (
            {"mcpServers": {"a": "npx"}},
            "mcp.json: the MCP server 'a' must be an object with a 'command' or a 'url'",
        ),
        (
            {"mcpServers": {"a": {}}},
            "the MCP server 'a' needs either a 'command' (stdio) or a 'url'",
        ),
        ({"mcpServers": {"a": {"command": "x", "url": "http://h"}}}, "not both or neither"),
        (
            {"mcpServers": {"a": {"command": "x", "args": "-y"}}},
            "the MCP server 'a': 'args' must be a list of strings",
        ),
        (
            {"mcpServers": {"a": {"command": "x", "env": {"N": 1}}}},
            "'env': the value of 'N' must be a string",
        ),
        ({"mcpServers": {"a": {"url": "ftp://h"}}}, "'url' must be an http:// or https:// address"),
        ({"mcpServers": {"a": {"command": " "}}}, "'command' must be a non-empty string"),
    ],
)
def test_a_malformed_file_is_a_sentence(tmp_path: Path, data: Any, sentence: str) -> None:
    with pytest.raises(McpConfigError) as caught:
        load_config(_write(tmp_path, data))
    assert sentence in str(caught.value)
    assert str(caught.value).endswith(".") or str(caught.value).endswith(")")


def test_a_missing_or_binary_file_is_a_sentence(tmp_path: Path) -> None:
    with pytest.raises(McpConfigError, match="does not exist"):
        load_config(tmp_path / "none.json")
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(McpConfigError, match="is not UTF-8 text"):
        load_config(binary)


def test_parse_config_takes_the_json_value() -> None:
    assert parse_config({"mcpServers": {}}).servers == ()
