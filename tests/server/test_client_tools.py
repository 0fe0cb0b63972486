"""Tools as real clients send them (issue 27, item 7), through ``/v1/chat/completions``:
a pydantic model's tool (``openai.pydantic_function_tool``: ``$ref``/``$defs``) for auto,
required and named, read back by the client's ``.parse()``; a schema that cannot be a
grammar is a 400 sentence; ``role: "tool"`` messages without ``name`` take the matching
call's, in the prompt and in the stored conversation; a result that answers no call, and
arguments that are not JSON, are 400s."""

from __future__ import annotations

import enum
import json
import time
from pathlib import Path
from typing import Any, Literal, cast

import httpx2
import openai
import pydantic
import pytest

from app.server.store import NAME_KEY
from app.storage import Database
from tests.server.conftest import MakeServer, openai_client


class Unit(enum.Enum):
    CELSIUS = "c"
    FAHRENHEIT = "f"


class Place(pydantic.BaseModel):
    city: Literal["Paris", "Rome"]


class Trip(pydantic.BaseModel):
    """Two refs (a model and an enum class); every value bounded, so that the tiny model's
    forced call ends well within max_tokens."""

    place: Place
    unit: Unit
    days: int


TRIP: Any = openai.pydantic_function_tool(Trip)
ASK: list[Any] = [{"role": "user", "content": "plan a trip to Paris"}]
CALL: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_w1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ],
}


@pytest.fixture
def client(make_server: MakeServer, qwen_model: Path) -> openai.OpenAI:
    return openai_client(make_server(model=qwen_model), timeout=90)


def _post(client: openai.OpenAI, path: str, body: dict[str, Any]) -> httpx2.Response:
    return httpx2.post(f"{client.base_url}{path}", json=body, timeout=60)


def test_the_pydantic_tool_uses_refs() -> None:
    parameters = TRIP["function"]["parameters"]
    assert "$defs" in parameters and "$ref" in json.dumps(parameters["properties"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("choice", ["required", "named"])
def test_a_pydantic_model_tool_is_forced_and_parsed_by_the_client(
    client: openai.OpenAI, choice: str
) -> None:
    tool_choice: Any = (
        "required" if choice == "required" else {"type": "function", "function": {"name": "Trip"}}
    )
    reply = client.chat.completions.parse(
        model="x",
        messages=ASK,
        tools=[TRIP],
        tool_choice=tool_choice,
        temperature=0,
        max_tokens=300,
    )
    [call] = reply.choices[0].message.tool_calls or []
    assert call.function.name == "Trip"
    # The client's own parsing: the arguments are a valid Trip.
    assert isinstance(call.function.parsed_arguments, Trip)
    assert reply.choices[0].finish_reason == "tool_calls"


@pytest.mark.timeout(300)
def test_a_pydantic_model_tool_with_auto(client: openai.OpenAI) -> None:
    """auto builds the lazy grammar from the same schema: 200, text or a valid call."""
    reply = client.chat.completions.parse(
        model="x", messages=ASK, tools=[TRIP], tool_choice="auto", temperature=0, max_tokens=24
    )
    message = reply.choices[0].message
    for call in message.tool_calls or []:
        assert isinstance(call.function.parsed_arguments, Trip)


@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_a_schema_that_cannot_be_a_grammar_is_a_400_sentence(
    client: openai.OpenAI, choice: str
) -> None:
    lost = {
        "type": "function",
        "function": {
            "name": "lost",
            "parameters": {"type": "object", "properties": {"p": {"$ref": "#/$defs/Nowhere"}}},
        },
    }
    tool_choice: Any = (
        choice if choice != "named" else {"type": "function", "function": {"name": "lost"}}
    )
    response = _post(
        client, "chat/completions", {"messages": ASK, "tools": [lost], "tool_choice": tool_choice}
    )
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "'lost'" in message and "#/$defs/Nowhere" in message, message
    assert "{" not in message and message.endswith("."), message


def test_a_tool_message_without_a_name_takes_the_calls(
    make_server: MakeServer, tmp_path: Path
) -> None:
    """The tiny model's template shows no tools: the app writes the result as the generic
    ``{"tool_response": {"tool": NAME, ...}}``, which had an empty name."""
    server = make_server()
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    result = {"role": "tool", "tool_call_id": "call_w1", "content": "sunny"}
    prompt = _post(client, "../apply-template", {"messages": [*ASK, CALL, result]})
    assert prompt.status_code == 200, prompt.text
    response = {"tool_response": {"tool": "get_weather", "content": "sunny"}}
    assert json.dumps(response) in prompt.json()["prompt"]
    # The stored conversation (and so the export) keeps the call's name.
    reply = _post(
        client,
        "chat/completions",
        {"messages": [*ASK, CALL, result], "max_tokens": 2, "conversation": "weather"},
    )
    assert reply.status_code == 200, reply.text
    assert _stored_tool_results(tmp_path / "home0" / "llamadesk.sqlite3", "weather") == [
        ("call_w1", "get_weather")
    ]


def _stored_tool_results(path: Path, name: str) -> list[tuple[str, str]]:
    """The stored tool results of the API conversation ``name`` (the store writes on its
    own thread: waited for, up to 30 s)."""
    deadline = time.monotonic() + 30
    while True:
        db = Database.open(path)
        try:
            ids = [c.id for c in db.list_conversations() if c.sampling.get(NAME_KEY) == name]
            rows = [m for cid in ids for m in db.get_thread(cid) if m.role == "tool"]
        finally:
            db.close()
        if rows or time.monotonic() > deadline:
            return [(m.meta["tool_call_id"], m.meta["tool_name"]) for m in rows]
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("messages", "needle"),
    [
        ([*ASK, {"role": "tool", "tool_call_id": "call_w1", "content": "x"}], "must follow"),
        (
            [*ASK, CALL, {"role": "tool", "tool_call_id": "call_zz", "content": "x"}],
            'tool_call_id "call_zz" matches no call',
        ),
        (
            [
                *ASK,
                CALL,
                {"role": "tool", "tool_call_id": "call_w1", "content": "x"},
                {"role": "user", "content": "and?"},
                {"role": "tool", "tool_call_id": "call_w1", "content": "again"},
            ],
            "must follow",
        ),
        (
            [
                *ASK,
                {
                    **CALL,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": "{city: Paris"},
                        }
                    ],
                },
            ],
            "'arguments' is not JSON",
        ),
        (
            [
                *ASK,
                {
                    **CALL,
                    "tool_calls": [
                        {"id": "c1", "function": {"name": "get_weather", "arguments": "[1]"}}
                    ],
                },
            ],
            "must be a JSON object, not an array",
        ),
    ],
    ids=["no call before", "unknown id", "after a user message", "not json", "not an object"],
)
def test_a_history_that_does_not_fit_together_is_a_400(
    client: openai.OpenAI, messages: list[Any], needle: str
) -> None:
    response = _post(client, "chat/completions", {"messages": messages, "max_tokens": 2})
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert needle in message and message.endswith("."), message


def test_a_streamed_replys_first_delta_has_null_content(client: openai.OpenAI) -> None:
    """As the non-streamed reply with a call and llama-server have it: null, not ""."""
    body = {
        "messages": ASK,
        "tools": [TRIP],
        "tool_choice": "required",
        "max_tokens": 300,
        "temperature": 0,
        "stream": True,
    }
    with httpx2.stream("POST", f"{client.base_url}chat/completions", json=body, timeout=90) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: {")]
    first = json.loads(lines[0][len("data: ") :])["choices"][0]["delta"]
    assert first == {"role": "assistant", "content": None}
    reply = client.chat.completions.create(
        model="x", messages=ASK, tools=[TRIP], tool_choice="required", max_tokens=300
    )
    assert reply.choices[0].message.content is None


def _mcp_plan_tool(folder: Path) -> dict[str, Any]:
    """The ``plan`` tool as a real MCP server (the SDK's MCPServer) lists it: its parameter
    is a pydantic model, so its schema has ``$defs``."""
    import sys

    import anyio

    from app.mcp.approval import ApprovalPolicy
    from app.mcp.client import McpManager
    from app.mcp.config import McpConfig, StdioServer
    from app.mcp.host import ToolHost
    from tests.mcp.test_run_mcp_tools import SERVER

    script = folder / "server.py"
    script.write_text(SERVER, encoding="utf-8")

    async def listed() -> list[dict[str, Any]]:
        server = StdioServer("one", sys.executable, (str(script), "one", "10"), {})
        async with McpManager(McpConfig((server,)), start_timeout=60) as manager:
            host = ToolHost(manager, ApprovalPolicy(folder / "permissions.json"))
            return host.openai_tools()

    [plan] = [t for t in anyio.run(listed) if t["function"]["name"] == "plan"]
    return plan


@pytest.mark.timeout(300)
def test_an_mcp_sdk_tool_with_defs_for_auto_required_and_named(
    client: openai.OpenAI, tmp_path: Path
) -> None:
    plan = _mcp_plan_tool(tmp_path)
    assert "$defs" in plan["function"]["parameters"]
    named: Any = {"type": "function", "function": {"name": "plan"}}
    choices: list[Any] = ["auto", "required", named]
    for choice in choices:
        reply = client.chat.completions.create(
            model="x",
            messages=ASK,
            tools=[cast(Any, plan)],
            tool_choice=choice,
            temperature=0,
            max_tokens=300 if choice != "auto" else 24,
        )
        calls: list[Any] = list(reply.choices[0].message.tool_calls or [])
        if choice != "auto":
            [call] = calls
            arguments = json.loads(call.function.arguments)
            assert arguments["trip"]["place"]["city"] in ("Paris", "Rome")
            assert arguments["trip"]["unit"] in ("c", "f")
