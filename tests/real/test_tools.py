"""Forced tool calls on SmolLM2: through ``serve`` (tool_choice required and named, streamed
and not, with the ``openai`` client) and through ``run --mcp`` with a stdio MCP server of
tests/mcp (the call runs, its result goes back, the model answers after it).

A forced call's arguments are constrained by a grammar, so what is checked is what the
grammar and the protocol promise (the name, schema-valid arguments, the finish reason and
the result's round trip), not the model's free text.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import openai
import pytest

from app.server import ServerConfig, ServerRunner
from tests.mcp.servers import SERVER_SCRIPT
from tests.real.conftest import cli_env
from tests.server.conftest import start_server

pytestmark = pytest.mark.timeout(300)

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather forecast for a city.",
            "parameters": PARAMETERS,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The time in a time zone.",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
        },
    },
]
ASK: Any = [{"role": "user", "content": "What will the weather be in Paris for the next 3 days?"}]


@pytest.fixture(scope="module")
def client(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    runner: ServerRunner = start_server(
        smollm2, tmp_path_factory.mktemp("tools-home"), ServerConfig(port=0, parallel=1), n_ctx=4096
    )
    yield openai.OpenAI(base_url=f"{runner.url}/v1", api_key="unused", max_retries=0, timeout=120)
    runner.close()


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_weather"}}]
)
def test_a_forced_call_through_serve(client: openai.OpenAI, choice: Any) -> None:
    reply = client.chat.completions.create(
        model="smollm2", messages=ASK, tools=TOOLS, tool_choice=choice, temperature=0, max_tokens=96
    )
    [result] = reply.choices
    assert result.finish_reason == "tool_calls", result
    [call] = result.message.tool_calls or []
    assert call.type == "function" and call.id
    if isinstance(choice, dict):
        assert call.function.name == "get_weather"
    assert call.function.name in ("get_weather", "get_time")
    schema = TOOLS[0 if call.function.name == "get_weather" else 1]["function"]["parameters"]
    jsonschema.validate(json.loads(call.function.arguments), schema)

    # the result goes back and the model answers in text
    answer = client.chat.completions.create(
        model="smollm2",
        messages=[
            *ASK,
            result.message.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 24 C."},
        ],
        tools=TOOLS,
        temperature=0,
        max_tokens=24,
    )
    assert answer.choices[0].finish_reason in ("stop", "length")


def test_a_forced_call_streamed_through_serve(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(
        model="smollm2",
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0,
        max_tokens=96,
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    [result] = final.choices
    assert result.finish_reason == "tool_calls"
    [call] = result.message.tool_calls or []
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), PARAMETERS)


def test_a_forced_call_and_an_mcp_round_trip_through_run(
    smollm2: Path, cli_home: Path, tmp_path: Path
) -> None:
    config = tmp_path / "mcp.json"
    servers = {"test": {"command": sys.executable, "args": [str(SERVER_SCRIPT), "stdio"]}}
    config.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "run",
            str(smollm2),
            "Use the echo tool to say: good morning.",
            "--mcp",
            str(config),
            "--allow",
            "echo",
            "--tool-choice",
            "echo",
            "--temp",
            "0",
            "-n",
            "64",
            "-c",
            "2048",
            "-t",
            "1",
            "--max-rounds",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=cli_env(cli_home),
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    [[call]] = out["rounds"][:1]
    assert (call["name"], call["server"], call["outcome"]) == ("echo", "test", "ok")
    # the MCP server ran it and its result came back (the arguments are the model's)
    assert call["result"].startswith("echo: ")
    assert out["finish_reason"] in ("eog", "length")  # the model answered after the result
