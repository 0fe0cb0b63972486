"""Tool calls through the session: a turn with tools streams the call (name first, then
arguments that only grow), ends with TOOL_CALLS and the parsed calls; the next turn sends
the call and its result back and reuses the cache up to them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from app.engine import ContextSettings, Engine, SamplingParams
from app.engine.chat_template import ReasoningOptions
from app.engine.tool_calls import ToolSpec
from app.engine.tool_calls.request import ToolChoiceMode, ToolRequest
from app.messages import history
from app.session import ChatMessage, FinishReason, MessageToolCall, Session
from app.session import events as ev
from app.storage import Database
from app.storage.export import export_json, import_json
from tests.session.test_session import TIMEOUT, Recorder
from tests.support.tool_models import write_qwen25_model

CONTEXT = ContextSettings(
    n_ctx=4096, n_batch=128, n_ubatch=128, n_seq_max=2, n_threads=1, n_threads_batch=1
)
WEATHER = ToolSpec(
    "get_weather",
    {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "The weather in a city.",
)
FORCED = ToolRequest((WEATHER,), ToolChoiceMode.REQUIRED, parallel=False)
GREEDY = SamplingParams(temperature=0.0, max_tokens=120)


@pytest.fixture(scope="module")
def qwen_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_qwen25_model(tmp_path_factory.mktemp("tools"), 8192)


def test_a_tool_round_trip_streams_the_call_and_keeps_the_cache(
    make_session: Callable[..., tuple[Session, Recorder]], qwen_model: Path
) -> None:
    session, recorder = make_session(qwen_model, CONTEXT)
    recorder.follow(1)
    session.open(1)
    history = [ChatMessage("user", "the weather in Paris")]
    session.submit(1, history, sampling=GREEDY, reasoning=ReasoningOptions(), tools=FORCED)
    result = recorder.finish(1)
    assert result.finish_reason is FinishReason.TOOL_CALLS, result
    [call] = result.tool_calls
    assert call.name == "get_weather" and result.tool_errors == ()
    assert json.loads(call.arguments)["city"] in ("Paris", "Rome")
    streamed = [
        e for e in recorder.of(1, ev.ToolCallStreamed) if isinstance(e, ev.ToolCallStreamed)
    ]
    assert (streamed[0].index, streamed[0].call_id, streamed[0].name) == (
        0,
        call.call_id,
        call.name,
    )
    assert "".join(e.fragment for e in streamed[1:]) == call.arguments
    assert all(e.name == "" for e in streamed[1:])

    # The round trip: the call and its result go back. The re-sent history renders to
    # the prompt followed by exactly the text the model wrote (the cache's prefix)...
    history += [
        ChatMessage("assistant", result.text, tool_calls=result.tool_calls),
        ChatMessage("tool", '{"sky": "clear"}', tool_call_id=call.call_id, name=call.name),
    ]

    def rendered(engine: Engine) -> tuple[str, str, str]:
        template = engine.template
        assert template is not None
        first = template.render([m.to_engine() for m in history[:1]], tool_specs=[WEATHER])
        again = template.render([m.to_engine() for m in history], tool_specs=[WEATHER])
        return first, engine.detokenize(result.tokens, special=True), again

    prompt, written, again = session.call(rendered).result(TIMEOUT)
    assert written.startswith("<tool_call>") and again.startswith(prompt + written), written
    # ... so the next turn decodes only the result and what follows it: the prompt comes
    # from the cache, and the call too where the model sampled the tokens its text
    # tokenizes into (the tiny model samples bytes, which a tokenization merges).
    none = ToolRequest((WEATHER,), ToolChoiceMode.NONE)
    session.submit(1, history, sampling=SamplingParams(temperature=0.0, max_tokens=8), tools=none)
    second = recorder.finish(1, count=2)
    assert second.finish_reason is not FinishReason.ERROR, second
    assert second.cached_tokens >= result.n_prompt


def test_a_recorded_round_trip_stores_the_call_and_its_result(
    make_session: Callable[..., tuple[Session, Recorder]], qwen_model: Path, tmp_path: Path
) -> None:
    """Session.answer: the reply's calls are stored with it, the results under it, the
    next reply reads both back from the stored thread; export and import keep them."""
    db = Database.open(tmp_path / "chats.db")
    try:
        conv = db.create_conversation()
        session, recorder = make_session(qwen_model, CONTEXT, db)
        recorder.follow(conv.id)
        first = session.answer(conv.id, None, "the weather", sampling=GREEDY, tools=FORCED)
        reply_id = first.result(TIMEOUT).reply_message_id
        result = recorder.finish(conv.id)
        assert result.finish_reason is FinishReason.TOOL_CALLS
        [call] = result.tool_calls
        stored = db.get_message(reply_id)
        assert stored.chat().tool_calls == (call,) and stored.meta["finish_reason"] == "tool_calls"

        answer = ChatMessage("tool", "sunny", tool_call_id=call.call_id, name=call.name)
        none = ToolRequest((WEATHER,), ToolChoiceMode.NONE)
        short = SamplingParams(temperature=0.0, max_tokens=4)
        second = session.answer(
            conv.id,
            reply_id,
            sampling=short,
            tools=none,
            tool_results=[answer],
            tool_outcomes={call.call_id: "ok"},
        ).result(TIMEOUT)
        assert recorder.finish(conv.id, count=2).finish_reason is not FinishReason.ERROR
        [tool_id] = second.tool_message_ids
        assert db.get_message(tool_id).meta["tool_outcome"] == "ok"
        thread = db.get_thread(conv.id, second.reply_message_id)
        assert [m.id for m in thread[-3:]] == [reply_id, tool_id, second.reply_message_id]
        assert history(thread)[1:3] == (
            ChatMessage("assistant", "", tool_calls=(call,)),
            answer,
        )
        # Export and import carry the calls and results.
        [copy] = import_json(db, export_json(db, [conv.id]))
        assert [m.chat() for m in db.get_thread(copy)] == [m.chat() for m in thread]
    finally:
        db.close()


def test_a_fork_after_a_tool_turn_takes_over_the_cache(
    make_session: Callable[..., tuple[Session, Recorder]], qwen_model: Path
) -> None:
    """The fork point is found with the tools rendered, as the turn rendered them."""
    session, recorder = make_session(qwen_model, CONTEXT)
    recorder.follow(1)
    recorder.follow(2)
    session.open(1)
    history = [ChatMessage("user", "the weather in Paris")]
    session.submit(1, history, sampling=GREEDY, tools=FORCED)
    result = recorder.finish(1)
    session.fork(1, 2, history)
    recorder.wait(lambda: bool(recorder.of(2, ev.ConversationForked)))
    [forked] = recorder.of(2, ev.ConversationForked)
    assert isinstance(forked, ev.ConversationForked)
    # The prompt's tokens but the generation prompt's header (the fork ends at the message;
    # without the tools rendered it would end where the system text listing them begins).
    assert result.n_prompt - 16 <= forked.n_tokens < result.n_prompt, (forked, result.n_prompt)


def test_the_markdown_export_shows_calls_and_results(tmp_path: Path) -> None:
    from app.storage.export import export_markdown

    db = Database.open(tmp_path / "chats.db")
    try:
        conv = db.create_conversation()
        call = MessageToolCall("call_1", "get_weather", '{"city": "Paris"}')
        user = db.add_message(conv.id, "user", "weather?")
        reply = db.add_message(
            conv.id,
            "assistant",
            "",
            parent_id=user.id,
            meta=ChatMessage("assistant", "", tool_calls=(call,)).storage_meta(),
        )
        result = ChatMessage("tool", "sunny", tool_call_id="call_1", name="get_weather")
        db.add_message(conv.id, "tool", "sunny", parent_id=reply.id, meta=result.storage_meta())
        text = export_markdown(db, [conv.id])
        assert "Called `get_weather` (call `call_1`):" in text and '{"city": "Paris"}' in text
        assert "Result of `get_weather` (call `call_1`):" in text and "sunny" in text
        assert "*(empty)*" not in text
    finally:
        db.close()
