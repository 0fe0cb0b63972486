"""Tools through the remote engine: ``tools`` / ``tool_choice`` / ``parallel_tool_calls``
sent on the chat route, streamed ``delta.tool_calls`` (split at odd places by the stub)
turned into the engine's call events and the turn's calls, the round trip with ``tool``
results re-sent in the OpenAI shape, a server that refuses tools, and a forced call
from a real ``llamadesk serve`` on a tiny Qwen 2.5-templated model."""

from __future__ import annotations

import dataclasses
import json
import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import jsonschema  # type: ignore[import-untyped]
import openai
import pytest

from app.engine import Event as EngineEvent
from app.engine import Finished, SamplingParams, ToolCallArguments, ToolCallStarted
from app.engine.chat_template.tools import openai_tools
from app.engine.tool_calls.request import ToolChoiceMode, ToolRequest
from app.engine.tool_calls.specs import ToolSpec
from app.messages import TOOL_CALLS_KEY, ChatMessage
from app.remote import RemoteConnection
from app.remote.engine import RemoteEngine
from app.remote.loader import probe_connection
from app.session import events as ev
from app.session.engine_port import ChatPrompt
from app.session.types import FinishReason
from tests.remote.conftest import TURN_TIMEOUT_S, RemoteChat
from tests.remote.llama_server_process import start_llama_server
from tests.remote.stub_server import REPLY, StubServer
from tests.support.gguf_models import TinySpec, write_tiny_model
from tests.support.serve_process import ServeProcess

pytestmark = pytest.mark.timeout(180)

MakeStub = Callable[..., StubServer]
MakeChat = Callable[..., RemoteChat]

QWEN25 = Path(__file__).resolve().parents[1] / "data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"
WEATHER = ToolSpec(
    "get_weather",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "enum": ["Paris", "Rome"]},
            "unit": {"type": "string", "enum": ["c", "f"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
    "Weather in a city.",
)
TIME = ToolSpec(
    "get_time",
    {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}},
)
AUTO = ToolRequest((WEATHER, TIME))


@dataclass
class ToolTurn:
    result: Any
    failed: str | None
    reply_id: int | None
    text: str
    calls: list[ev.ToolCallStreamed] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # "text" / "call" as they came


def tool_turn(
    chat: RemoteChat,
    cid: int,
    events: queue.SimpleQueue[Any],
    text: str | None,
    tools: ToolRequest | None = AUTO,
    *,
    parent: int | None = None,
    results: tuple[ChatMessage, ...] = (),
    sampling: SamplingParams | None = None,
) -> ToolTurn:
    if parent is None and text is not None:
        thread = chat.db.get_thread(cid)
        parent = thread[-1].id if thread else None
    future = chat.session.answer(
        cid, parent, text, tools=tools, tool_results=results, sampling=sampling
    )
    recorded = future.result(timeout=TURN_TIMEOUT_S)
    failed: str | None = None
    pieces: list[str] = []
    calls: list[ev.ToolCallStreamed] = []
    order: list[str] = []
    while True:
        event = events.get(timeout=TURN_TIMEOUT_S)
        if isinstance(event, ev.TurnFailed):
            failed = event.message
        elif isinstance(event, ev.TextStreamed):
            pieces.append(event.text)
            order.append("text")
        elif isinstance(event, ev.ToolCallStreamed):
            calls.append(event)
            order.append("call")
        elif isinstance(event, ev.TurnFinished) and event.turn_id == recorded.turn_id:
            return ToolTurn(
                event.result, failed, recorded.reply_message_id, "".join(pieces), calls, order
            )


def assembled(calls: list[ev.ToolCallStreamed]) -> dict[int, tuple[str, str, str]]:
    """(id, name, arguments) per index, checking that each call is announced first, once."""
    out: dict[int, tuple[str, str, str]] = {}
    for event in calls:
        if event.index not in out:
            assert event.name and event.call_id and not event.fragment  # name first
            out[event.index] = (event.call_id, event.name, "")
        else:
            assert not event.name and not event.call_id
            call_id, name, arguments = out[event.index]
            out[event.index] = (call_id, name, arguments + event.fragment)
    return out


@pytest.mark.parametrize("names_late", [False, True], ids=["names-first", "names-late"])
def test_streamed_calls_split_at_odd_places(
    stub: MakeStub, remote_chat: MakeChat, names_late: bool
) -> None:
    """names-late: argument fragments come before the calls' names (and one before its
    id): held until the name, none lost."""
    server = stub("openai", names_late=names_late)
    chat = remote_chat(server.url)
    cid, events = chat.new_conversation()
    turn = tool_turn(chat, cid, events, "weather and time [tool-call]")
    assert turn.failed is None
    assert turn.text == "Let me look."
    assert turn.order.index("call") > turn.order.index("text")  # text handed out first
    assert assembled(turn.calls) == {
        0: ("call_w", "get_weather", '{"city": "Paris", "unit": "c"}'),
        1: ("call_t", "get_time", '{"zone": "CET"}'),
    }
    result = turn.result
    assert result.finish_reason is FinishReason.TOOL_CALLS
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in result.tool_calls] == [
        ("call_w", "get_weather", {"city": "Paris", "unit": "c"}),
        ("call_t", "get_time", {"zone": "CET"}),
    ]
    assert result.tool_errors == ()
    [body] = server.chat_bodies()
    assert body["tools"] == openai_tools(AUTO.tools)
    assert body["tool_choice"] == "auto" and body["parallel_tool_calls"] is True
    assert body["stream"] is True
    stored = chat.db.get_thread(cid)[-1]
    assert [c["id"] for c in stored.meta[TOOL_CALLS_KEY]] == ["call_w", "call_t"]


def test_the_round_trip_resends_calls_and_results_in_the_openai_shape(
    stub: MakeStub, remote_chat: MakeChat
) -> None:
    server = stub("openai")
    chat = remote_chat(server.url)
    cid, events = chat.new_conversation()
    first = tool_turn(chat, cid, events, "weather and time [tool-call]")
    assert first.reply_id is not None
    results = tuple(
        ChatMessage("tool", f"result of {c.name}", tool_call_id=c.call_id, name=c.name)
        for c in first.result.tool_calls
    )
    second = tool_turn(chat, cid, events, None, parent=first.reply_id, results=results)
    assert second.failed is None and second.text == "".join(REPLY)
    assert second.result.finish_reason is FinishReason.EOG and second.result.tool_calls == ()
    messages = server.chat_bodies()[-1]["messages"]
    assistant, *tools = messages[-3:]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"] == [
        {
            "id": "call_w",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'},
        },
        {
            "id": "call_t",
            "type": "function",
            "function": {"name": "get_time", "arguments": '{"zone": "CET"}'},
        },
    ]
    assert [(t["role"], t["tool_call_id"], t["content"]) for t in tools] == [
        ("tool", "call_w", "result of get_weather"),
        ("tool", "call_t", "result of get_time"),
    ]


def test_a_whole_message_with_calls(stub: MakeStub, remote_chat: MakeChat) -> None:
    chat = remote_chat(stub("openai").url)
    cid, events = chat.new_conversation()
    turn = tool_turn(chat, cid, events, "time [tool-message]")
    assert turn.failed is None and turn.text == ""
    assert assembled(turn.calls) == {0: ("call_m", "get_time", '{"zone": "UTC"}')}
    assert turn.result.finish_reason is FinishReason.TOOL_CALLS
    [call] = turn.result.tool_calls
    assert (call.call_id, call.name, call.arguments) == ("call_m", "get_time", '{"zone": "UTC"}')


def test_named_choice_and_no_parallel_calls_are_sent(stub: MakeStub, remote_chat: MakeChat) -> None:
    server = stub("openai")
    chat = remote_chat(server.url)
    cid, events = chat.new_conversation()
    named = ToolRequest((WEATHER, TIME), ToolChoiceMode.NAMED, "get_weather", parallel=False)
    tool_turn(chat, cid, events, "hi", named)
    tool_turn(chat, cid, events, "again", ToolRequest((WEATHER,), ToolChoiceMode.NONE))
    tool_turn(chat, cid, events, "no tools", None)
    first, second, third = server.chat_bodies()
    assert first["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert first["parallel_tool_calls"] is False
    assert second["tool_choice"] == "none" and len(second["tools"]) == 1
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(third)


def test_a_server_that_refuses_tools_says_so(stub: MakeStub, remote_chat: MakeChat) -> None:
    chat = remote_chat(stub("openai").url)
    cid, events = chat.new_conversation()
    turn = tool_turn(chat, cid, events, "weather [no-tools]")
    assert turn.failed is not None
    assert "refused the request with tools (HTTP 400)" in turn.failed
    assert "tools param requires --jinja flag" in turn.failed  # the server's sentence kept
    assert turn.result.finish_reason is FinishReason.ERROR
    thread = chat.db.get_thread(cid)
    assert thread[0].role == "user" and thread[0].content == "weather [no-tools]"
    # the same conversation goes on without tools
    again = tool_turn(chat, cid, events, "plain [no-tools]", None)
    assert again.failed is None and again.text == "".join(REPLY)


def test_a_call_cut_off_mid_stream(stub: MakeStub, remote_chat: MakeChat) -> None:
    chat = remote_chat(stub("openai").url)
    cid, events = chat.new_conversation()
    turn = tool_turn(chat, cid, events, "weather [tool-cut]")
    assert turn.failed is not None and "broke off" in turn.failed
    assert turn.result.finish_reason is FinishReason.ABORTED
    assert turn.result.tool_calls == ()
    assert any("cut off" in e for e in turn.result.tool_errors)
    assert chat.db.get_thread(cid)[-1].content == "Let me look."  # kept


def engine_turn(engine: RemoteEngine, prompt: ChatPrompt) -> list[EngineEvent]:
    key = engine.open()
    engine.start(key, prompt, SamplingParams(temperature=0.0))
    events: list[EngineEvent] = []
    deadline = time.monotonic() + TURN_TIMEOUT_S
    while not any(isinstance(e, Finished) for e in events):
        assert time.monotonic() < deadline
        events += engine.step()
    return events


@pytest.fixture
def stub_engine(stub: MakeStub) -> Iterator[tuple[StubServer, RemoteEngine]]:
    server = stub("openai")
    conn = RemoteConnection(server.url)
    # As llama-server with /apply-template: a turn without tools would take /completion.
    traits = dataclasses.replace(probe_connection(conn), token_prompts=True)
    engine = RemoteEngine(conn, traits, lambda: httpx2.Client(timeout=10))
    yield server, engine
    engine.shutdown()


def test_engine_events_and_the_chat_route_for_tools(
    stub_engine: tuple[StubServer, RemoteEngine],
) -> None:
    server, engine = stub_engine
    prompt = ChatPrompt((ChatMessage("user", "[tool-call]"),), tools=AUTO)
    events = engine_turn(engine, prompt)
    calls = [e for e in events if isinstance(e, ToolCallStarted | ToolCallArguments)]
    starts = [(e.index, e.call_id, e.name) for e in calls if isinstance(e, ToolCallStarted)]
    assert starts == [(0, "call_w", "get_weather"), (1, "call_t", "get_time")]
    fragments = [e for e in calls if isinstance(e, ToolCallArguments)]
    assert all(f.fragment for f in fragments)
    assert "".join(f.fragment for f in fragments if f.index == 1) == '{"zone": "CET"}'
    # the arguments of call 1 came before its name: the start is still first
    assert calls.index(
        next(e for e in calls if isinstance(e, ToolCallStarted) and e.index == 1)
    ) < (calls.index(next(f for f in fragments if f.index == 1)))
    [done] = [e for e in events if isinstance(e, Finished)]
    completion = done.completion
    assert completion.finish_reason == "tool_calls" and completion.tool_errors == []
    assert [(c.index, c.name, c.arguments) for c in completion.tool_calls] == [
        (0, "get_weather", {"city": "Paris", "unit": "c"}),
        (1, "get_time", {"zone": "CET"}),
    ]
    assert [r.path for r in server.requests if r.body is not None] == ["/v1/chat/completions"]


def test_engine_events_when_arguments_come_before_the_names(stub: MakeStub) -> None:
    server = stub("openai", names_late=True)
    conn = RemoteConnection(server.url)
    traits = dataclasses.replace(probe_connection(conn), token_prompts=True)
    engine = RemoteEngine(conn, traits, lambda: httpx2.Client(timeout=10))
    try:
        prompt = ChatPrompt((ChatMessage("user", "[tool-call]"),), tools=AUTO)
        events = engine_turn(engine, prompt)
    finally:
        engine.shutdown()
    calls = [e for e in events if isinstance(e, ToolCallStarted | ToolCallArguments)]
    arguments: dict[int, str] = {}
    for event in calls:
        if isinstance(event, ToolCallStarted):
            assert event.index not in arguments  # announced once, before its fragments
            arguments[event.index] = ""
        else:
            assert event.fragment
            arguments[event.index] += event.fragment  # KeyError: a fragment before its start
    assert arguments == {0: '{"city": "Paris", "unit": "c"}', 1: '{"zone": "CET"}'}
    starts = [(e.index, e.call_id, e.name) for e in calls if isinstance(e, ToolCallStarted)]
    assert starts == [(0, "call_w", "get_weather"), (1, "call_t", "get_time")]
    [done] = [e for e in events if isinstance(e, Finished)]
    assert done.completion.tool_errors == []
    assert [(c.name, c.arguments) for c in done.completion.tool_calls] == [
        ("get_weather", {"city": "Paris", "unit": "c"}),
        ("get_time", {"zone": "CET"}),
    ]


def test_calls_outside_the_offered_tools_are_told(
    stub_engine: tuple[StubServer, RemoteEngine],
) -> None:
    _, engine = stub_engine
    prompt = ChatPrompt((ChatMessage("user", "[tool-call]"),), tools=ToolRequest((TIME,)))
    [done] = [e for e in engine_turn(engine, prompt) if isinstance(e, Finished)]
    assert done.completion.tool_errors == [
        "The model called 'get_weather', which is not among the tools."
    ]


# ---------------------------------------------------------------- a real llamadesk serve


@pytest.fixture(scope="module")
def qwen_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    model = write_tiny_model(
        tmp_path_factory.mktemp("tools-models") / "qwen25.gguf",
        TinySpec(chat_template=QWEN25.read_text(), n_ctx_train=4096),
    )
    proc = ServeProcess(
        [str(model), "--ctx-size", "4096", "--threads", "1"],
        tmp_path_factory.mktemp("tools-serve-home"),
    )
    yield proc
    proc.stop()


def test_a_forced_call_from_llamadesk_serve_and_the_round_trip(
    qwen_server: ServeProcess, remote_chat: MakeChat
) -> None:
    chat = remote_chat(qwen_server.url)
    cid, events = chat.new_conversation()
    forced = ToolRequest((WEATHER, TIME), ToolChoiceMode.NAMED, "get_weather", parallel=False)
    sampling = SamplingParams(temperature=0.0, max_tokens=200)
    turn = tool_turn(chat, cid, events, "the weather in Paris", forced, sampling=sampling)
    assert turn.failed is None
    result = turn.result
    assert result.finish_reason is FinishReason.TOOL_CALLS and result.tool_errors == ()
    [call] = result.tool_calls
    assert call.name == "get_weather" and call.call_id
    jsonschema.validate(json.loads(call.arguments), WEATHER.parameters)
    [(call_id, name, arguments)] = assembled(turn.calls).values()
    assert (call_id, name, arguments) == (call.call_id, call.name, call.arguments)

    answer = ChatMessage("tool", '{"sky": "clear"}', tool_call_id=call.call_id, name=call.name)
    short = SamplingParams(temperature=0.0, max_tokens=4)
    again = tool_turn(
        chat,
        cid,
        events,
        None,
        ToolRequest((WEATHER, TIME), ToolChoiceMode.NONE),
        parent=turn.reply_id,
        results=(answer,),
        sampling=short,
    )
    assert again.failed is None and again.result.tool_calls == ()
    assert again.result.finish_reason in (FinishReason.LENGTH, FinishReason.EOG)
    # the re-sent history rendered to the same prefix: the server's cache held it
    assert again.result.cached_tokens > 0


# ---------------------------------------------------------------- llama.cpp's llama-server


@pytest.fixture(scope="module")
def qwen_llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = write_tiny_model(
        tmp_path_factory.mktemp("tools-llama-server") / "qwen25.gguf",
        TinySpec(chat_template=QWEN25.read_text(), n_ctx_train=4096),
    )
    proc, url = start_llama_server(model, "--jinja")
    yield url
    proc.terminate()
    proc.wait(30)


def test_llama_server_with_tools_answers_or_refuses_with_a_sentence(
    qwen_llama_server: str, remote_chat: MakeChat
) -> None:
    chat = remote_chat(qwen_llama_server)
    assert chat.loader.engine is not None and chat.loader.engine.traits.token_prompts
    cid, events = chat.new_conversation()
    short = SamplingParams(temperature=0.0, max_tokens=8)
    # auto: the tools go on the chat route, the tiny model writes text (no call)
    turn = tool_turn(chat, cid, events, "the weather in Paris", AUTO, sampling=short)
    assert turn.failed is None and turn.text
    assert turn.result.finish_reason in (FinishReason.LENGTH, FinishReason.EOG)
    assert turn.result.tool_calls == ()
    # required: this llama-server cannot build the forcing grammar for the tiny vocabulary
    # and answers 400 - a real refusal of tools, said as one, nothing lost
    forced = ToolRequest((WEATHER, TIME), ToolChoiceMode.REQUIRED, parallel=False)
    refused = tool_turn(chat, cid, events, "call one", forced, sampling=short)
    assert refused.failed is not None
    assert "refused the request with tools (HTTP 400)" in refused.failed
    assert "Failed to initialize samplers" in refused.failed
    assert [m.content for m in chat.db.get_thread(cid) if m.role == "user"][-1] == "call one"
    # the next turn without tools takes the token route again and answers
    plain = tool_turn(chat, cid, events, "thanks", None, sampling=short)
    assert plain.failed is None and plain.text


def test_serve_remote_fronts_tool_calls_for_the_openai_client(
    stub: MakeStub, tmp_path: Path
) -> None:
    upstream = stub("openai")
    front = ServeProcess(["--remote", upstream.url], tmp_path / "front-home")
    try:
        client = openai.OpenAI(base_url=f"{front.url}/v1", api_key="x", max_retries=0)
        ask: Any = [{"role": "user", "content": "weather and time [tool-call]"}]
        tools: Any = openai_tools(AUTO.tools)
        with client.chat.completions.stream(model="stub-model", messages=ask, tools=tools) as s:
            final = s.get_final_completion()
        choice = final.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert [
            (c.function.name, json.loads(c.function.arguments))
            for c in choice.message.tool_calls or []
        ] == [
            ("get_weather", {"city": "Paris", "unit": "c"}),
            ("get_time", {"zone": "CET"}),
        ]
        assert upstream.chat_bodies()[-1]["tools"] == tools
    finally:
        code, err = front.stop()
    assert code == 0, err


def test_stop_during_a_call(stub_engine: tuple[StubServer, RemoteEngine]) -> None:
    _, engine = stub_engine
    key = engine.open()
    prompt = ChatPrompt((ChatMessage("user", "[tool-slow]"),), tools=AUTO)
    engine.start(key, prompt, SamplingParams())
    events: list[EngineEvent] = []
    deadline = time.monotonic() + TURN_TIMEOUT_S
    while not any(isinstance(e, ToolCallArguments) for e in events):
        assert time.monotonic() < deadline
        events += engine.step()
    engine.stop(key)
    t0 = time.monotonic()
    while not any(isinstance(e, Finished) for e in events):
        assert time.monotonic() - t0 < 2.0  # the stream is closed at once
        events += engine.step()
    [done] = [e for e in events if isinstance(e, Finished)]
    assert done.completion.finish_reason == "aborted"
    assert done.completion.text == "Let me look." and done.completion.tool_calls == []
    assert any("cut off" in e for e in done.completion.tool_errors)
    assert not engine.is_busy(key)
