"""Tool calls through ``/v1/chat/completions`` with the official ``openai`` client: a forced
call (tool_choice required / named) parsed and schema-valid, non-streamed and streamed
(the client's stream helper assembles it), the round trip with the cache warm, and
malformed tools answered with a 400 sentence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import jsonschema  # type: ignore[import-untyped]
import openai
import pytest

from tests.server.conftest import MakeServer, openai_client

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome"]},
        "days": {"type": "integer"},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather.", "parameters": PARAMETERS},
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC"]}}},
        },
    },
]
NAMED: Any = {"type": "function", "function": {"name": "get_weather"}}
ASK: list[Any] = [{"role": "user", "content": "the weather in Paris"}]
NO_THINKING: dict[str, Any] = {}


@pytest.fixture
def client(make_server: MakeServer, qwen_model: Path) -> openai.OpenAI:
    return openai_client(make_server(model=qwen_model), timeout=60)


def test_a_forced_call_not_streamed(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="x", messages=ASK, tools=TOOLS, tool_choice=NAMED, temperature=0, max_tokens=200
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    jsonschema.validate(json.loads(call.function.arguments), PARAMETERS)


def test_a_forced_call_streamed_through_the_clients_helper(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="x",
            messages=ASK,
            tools=TOOLS,
            tool_choice="required",
            parallel_tool_calls=False,
            temperature=0,
            max_tokens=200,
            stream=True,
        )
    )
    deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    first = deltas[0]
    assert first.index == 0 and first.id and first.type == "function" and first.function
    assert first.function.name in ("get_weather", "get_time")
    assert all(d.id is None and d.function and d.function.name is None for d in deltas[1:])
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    json.loads(arguments)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # The client's own stream helper assembles the same call.
    with client.chat.completions.stream(
        model="x", messages=ASK, tools=TOOLS, tool_choice=NAMED, temperature=0, max_tokens=200
    ) as stream:
        final = stream.get_final_completion()
    [call] = final.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), PARAMETERS)
    assert final.choices[0].finish_reason == "tool_calls"


def test_the_round_trip_keeps_a_named_conversations_cache(client: openai.OpenAI) -> None:
    named = {"conversation": "weather"}
    first = client.chat.completions.create(
        model="x",
        messages=ASK,
        tools=TOOLS,
        tool_choice=NAMED,
        temperature=0,
        max_tokens=200,
        extra_body=named,
    )
    message = first.choices[0].message
    [call] = message.tool_calls or []
    assert call.type == "function"
    history: list[Any] = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "clear"}'},
    ]
    second = client.chat.completions.create(
        model="x", messages=history, tools=TOOLS, temperature=0, max_tokens=4, extra_body=named
    )
    assert first.usage is not None and second.usage is not None
    details = second.usage.prompt_tokens_details
    assert details is not None and details.cached_tokens is not None
    # The prompt and the call come back from the cache (all but the tokens a text's
    # tokenization merges where the tiny model sampled bytes: at most the call's length).
    assert details.cached_tokens >= first.usage.prompt_tokens


@pytest.mark.parametrize(
    ("tools", "extra", "needle"),
    [
        ([{"type": "function", "function": {"name": "bad name"}}], {}, "letters, digits"),
        (
            [{"type": "function", "function": {"name": "f", "parameters": {"type": "nope"}}}],
            {},
            "schema",
        ),
        ("not a list", {}, "tools"),
        ([TOOLS[0]] * 200, {}, "at most 128"),
        ([TOOLS[0], TOOLS[0]], {}, "Two tools are named"),
        (TOOLS, {"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "'nope'"),
        (TOOLS, {"tool_choice": "sometimes"}, "tool_choice"),
        (None, {"tool_choice": "required"}, "no tools"),
        (TOOLS, {"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        (TOOLS, {"response_format": {"type": "json_object"}}, "cannot both"),
    ],
)
def test_malformed_tools_get_a_400_sentence(
    client: openai.OpenAI, tools: Any, extra: dict[str, Any], needle: str
) -> None:
    body: dict[str, Any] = {"model": "x", "messages": ASK, **extra}
    if tools is not None:
        body["tools"] = tools
    response = httpx2.post(f"{client.base_url}chat/completions", json=body, timeout=30)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert needle in message and message.endswith("."), message


def test_a_history_with_calls_and_results_is_checked(client: openai.OpenAI) -> None:
    bad_result = [*ASK, {"role": "tool", "content": "x"}]
    response = httpx2.post(
        f"{client.base_url}chat/completions", json={"messages": bad_result}, timeout=30
    )
    assert response.status_code == 400 and "tool_call_id" in response.json()["error"]["message"]


@pytest.mark.parametrize("choice", ["auto", "none"])
def test_auto_and_none_answer_with_text_or_calls(client: openai.OpenAI, choice: Any) -> None:
    """auto: the lazy grammar is built (llama.cpp would abort the server on a bad trigger
    pattern) and a reply that opens no call is text; none: never a call."""
    reply = client.chat.completions.create(
        model="x", messages=ASK, tools=TOOLS, tool_choice=choice, temperature=0, max_tokens=16
    )
    choice_out = reply.choices[0]
    if choice == "none":
        assert not choice_out.message.tool_calls
    if choice_out.message.tool_calls:
        assert choice_out.finish_reason == "tool_calls"
    else:
        assert choice_out.finish_reason in ("stop", "length")
        assert choice_out.message.content is not None


def test_langchain_binds_the_tools_and_reads_the_call(client: openai.OpenAI) -> None:
    """langchain-openai's ``bind_tools``: the forced call parsed, streamed and not."""
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    model = ChatOpenAI(
        base_url=str(client.base_url),
        api_key=SecretStr("unused"),
        model="x",
        temperature=0,
        max_retries=0,
        max_completion_tokens=200,
    )
    bound = model.bind_tools(TOOLS, tool_choice="get_weather", parallel_tool_calls=False)
    message: Any = bound.invoke("the weather in Paris")
    [call] = message.tool_calls
    assert call["name"] == "get_weather"
    jsonschema.validate(call["args"], PARAMETERS)
    chunks = list(bound.stream("the weather in Paris"))
    whole: Any = chunks[0]
    for chunk in chunks[1:]:
        whole = whole + chunk
    [streamed] = whole.tool_calls
    assert streamed["name"] == "get_weather" and streamed["args"] == call["args"]


def test_a_deeply_nested_schema_is_a_400(client: openai.OpenAI) -> None:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(400):  # within what the JSON reader takes, beyond the schema checker
        schema = {"type": "object", "properties": {"a": schema}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    body = {"messages": ASK, "tools": tools}
    response = httpx2.post(f"{client.base_url}chat/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    assert "nested too deeply" in response.json()["error"]["message"]
