"""The streaming parser per family, fed the reply in pieces: announced calls and their
argument fragments only grow, the final arguments are JSON, text and reasoning stay apart,
and any chunking gives the same result."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine.reasoning import ReasoningFormat
from app.engine.tool_calls import (
    SYNTAXES,
    ArgumentsDelta,
    CallStarted,
    CallText,
    ParseResult,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallFormat,
    new_parser,
    render_calls,
)

F = ToolCallFormat
WEATHER = {"city": "Paris <3", "days": 3}
NOTE = {"text": 'a "quoted"\nline', "tags": ["x", "y"], "urgent": True}
SCHEMAS = {
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    },
    "note": {"type": "object", "properties": {"text": {"type": "string"}}},
}


@dataclass(frozen=True)
class Case:
    fmt: ToolCallFormat
    reply: str
    calls: tuple[tuple[str, dict[str, object]], ...]
    content: str = ""
    reasoning: str = ""
    think: ReasoningFormat = ReasoningFormat.NONE


def _rendered(fmt: ToolCallFormat, *calls: tuple[str, dict[str, object]]) -> str:
    return render_calls(SYNTAXES[fmt][0], [CallText(n, a) for n, a in calls])


# Python-style and Gemma calls cannot write every JSON value; they get flat arguments.
FLAT = {"city": "Paris", "days": 3, "ok": True}
_RENDERED = [
    Case(
        fmt,
        "Let me look. " + _rendered(fmt, ("get_weather", FLAT)),
        (("get_weather", FLAT),),
        "Let me look.",
    )
    for fmt in (F.LFM2, F.GEMMA4)
] + [
    Case(
        fmt,
        "Let me look. " + _rendered(fmt, ("get_weather", WEATHER), ("note", NOTE)),
        (("get_weather", WEATHER), ("note", NOTE)),
        "Let me look.",
    )
    for fmt in F
    if fmt not in (F.LFM2, F.GEMMA4, F.LLAMA3_JSON, F.HARMONY)
    # Families without a section write one call per region; the text precedes the first.
]

HAND_WRITTEN = [
    Case(
        F.HERMES,
        '<think>Maybe <tool_call> {"name": "x"}</think>Sure.\n<tool_call>\n{"arguments": {"city": "Oslo"}, '
        '"name": "get_weather"}\n</tool_call>',
        (("get_weather", {"city": "Oslo"}),),
        "Sure.",
        'Maybe <tool_call> {"name": "x"}',
        ReasoningFormat.THINK_TAGS,
    ),
    Case(
        F.HERMES,
        '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Rome\\"}"}</tool_call> done',
        (("get_weather", {"city": "Rome"}),),
        " done",
    ),
    Case(
        F.HERMES,
        "No call: <tool_call is not a tag, <tool_call>{oops",
        (),
        "No call: <tool_call is not a tag, <tool_call>{oops",
    ),
    Case(
        F.LLAMA3_JSON,
        ' {"name": "get_weather", "parameters": {"city": "Lima"}}',
        (("get_weather", {"city": "Lima"}),),
    ),
    Case(
        F.LLAMA3_JSON,
        'The JSON {"name": "get_weather", "parameters": {}}',
        (),
        'The JSON {"name": "get_weather", "parameters": {}}',
    ),
    Case(
        F.LLAMA3_JSON,
        '<|python_tag|>{"name": "note", "parameters": {"text": "hi"}}',
        (("note", {"text": "hi"}),),
    ),
    Case(F.LLAMA3_JSON, '{"answer": 42}', (), '{"answer": 42}'),
    Case(
        F.QWEN3_CODER,
        "<think>\nhmm\n</think>\n\n<tool_call>\n<function=note>\n<parameter=text>\nif a < b:\n    pass\n"
        "</parameter>\n</function>\n</tool_call>",
        (("note", {"text": "if a < b:\n    pass"}),),
        "",
        "hmm",
        ReasoningFormat.THINK_TAGS,
    ),
    Case(
        F.HARMONY,
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
        (("get_weather", {"city": "Paris"}),),
        "",
        "Need the weather.",
        ReasoningFormat.HARMONY,
    ),
    Case(
        F.HARMONY,
        "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|>",
        (),
        "Hello!",
        "Easy.",
        ReasoningFormat.HARMONY,
    ),
    Case(
        F.HARMONY,
        '<|start|>assistant to=functions.note<|channel|>commentary json<|message|>{"text": "a"}<|call|>',
        (("note", {"text": "a"}),),
        "",
        "",
        ReasoningFormat.HARMONY,
    ),
    Case(
        F.DEEPSEEK_DSML,
        '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" '
        'string="true">123</｜DSML｜parameter>\n<｜DSML｜parameter name="days" string="false">2'
        "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
        (("get_weather", {"city": "123", "days": 2}),),
    ),
]

CASES = _RENDERED + HAND_WRITTEN


def _ids() -> itertools.count[int]:
    return itertools.count()


def _run(case: Case, chunks: list[str]) -> tuple[list[StreamEvent], ParseResult]:
    counter = _ids()
    parser = new_parser(
        case.fmt, case.think, schemas=SCHEMAS, id_factory=lambda: f"call{next(counter)}"
    )
    events: list[StreamEvent] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    events += parser.finish()
    return events, parser.result()


def _check(case: Case, events: list[StreamEvent], result: ParseResult) -> None:
    args: dict[int, str] = {}
    names: dict[int, str] = {}
    for event in events:
        if isinstance(event, CallStarted):
            assert event.index not in names and event.index == len(names), (
                "calls announced once, in order"
            )
            names[event.index] = event.name
            args[event.index] = ""
        elif isinstance(event, ArgumentsDelta):
            assert event.index in names, "the name comes before the arguments"
            assert event.fragment
            args[event.index] += event.fragment
    for call in result.calls:
        assert args[call.index] == call.arguments_text, "the fragments join to the arguments"
        assert json.loads(call.arguments_text) == call.arguments
    assert [(c.name, c.arguments) for c in result.calls] == list(case.calls)
    assert result.content == case.content
    assert result.reasoning == case.reasoning
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == case.content
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == case.reasoning
    assert result.errors == ()


def _label(case: Case) -> str:
    return f"{case.fmt.value}-{abs(hash(case.reply)) % 10_000}"


@pytest.mark.parametrize("case", CASES, ids=_label)
def test_fed_character_by_character(case: Case) -> None:
    events, result = _run(case, list(case.reply))
    _check(case, events, result)


@pytest.mark.parametrize("case", CASES, ids=_label)
def test_fed_whole(case: Case) -> None:
    events, result = _run(case, [case.reply])
    _check(case, events, result)


def _chunked(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    edges = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(edges) if b > a]


@settings(max_examples=30, deadline=None)
@given(
    case=st.sampled_from(CASES),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40),
)
def test_any_chunking_gives_the_same_calls(case: Case, cuts: list[int]) -> None:
    events, result = _run(case, _chunked(case.reply, cuts))
    _check(case, events, result)


def test_a_call_cut_off_is_reported_and_nothing_retracted() -> None:
    parser = new_parser(F.HERMES)
    events = parser.feed('Hi <tool_call>{"name": "note", "arguments": {"text": "unfinis')
    events += parser.finish()
    result = parser.result()
    assert result.calls == ()
    assert result.content == "Hi"
    assert result.errors == (
        "The model's call to the tool 'note' was cut off before it was complete.",
    )
    assert [type(e) for e in events] == [TextDelta, CallStarted, ArgumentsDelta]


def test_a_malformed_call_after_its_name_is_an_error_not_text() -> None:
    parser = new_parser(F.MISTRAL_ARGS)
    parser.feed("[TOOL_CALLS]note[ARGS][1, 2] and the rest")
    parser.finish()
    result = parser.result()
    assert result.calls == ()
    assert result.content == "[1, 2] and the rest", "what follows the break is kept"
    assert result.errors == ("The model's call to the tool 'note' is not well-formed.",)


def test_a_broken_call_between_good_ones_keeps_the_good_ones() -> None:
    parser = new_parser(F.HERMES)
    parser.feed('<tool_call>{"name": "a", "arguments": {}}</tool_call>')
    parser.feed('<tool_call>{"name": "b", "arguments": 3}</tool_call>')
    parser.feed('<tool_call>{"name": "c", "arguments": {"x": 1}}</tool_call>')
    parser.finish()
    result = parser.result()
    assert [(c.index, c.name) for c in result.calls] == [(0, "a"), (2, "c")]
    assert result.errors == ("The model's call to the tool 'b' is not well-formed.",)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", [F.HERMES, F.MISTRAL_ARGS, F.QWEN3_CODER], ids=lambda f: f.value)
def test_a_long_argument_streams_in_bounded_time(fmt: ToolCallFormat) -> None:
    """A 20,000-character argument (a file's text) fed in 4-character pieces: a long JSON
    value is not re-scanned from its start each time (the scan resumes)."""
    body = 'line "quoted" \\ and more\n' * 800
    reply = render_calls(SYNTAXES[fmt][0], [CallText("note", {"text": body})])
    case = Case(fmt, reply, (("note", {"text": body.strip() if fmt is F.QWEN3_CODER else body}),))
    events, result = _run(case, [reply[i : i + 4] for i in range(0, len(reply), 4)])
    _check(case, events, result)
    assert sum(isinstance(e, ArgumentsDelta) for e in events) > 1000, (
        "the argument streams as it grows"
    )


_SOUP = [
    *(
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        '"name"',
        ":",
        '"x"',
        '"arguments"',
        ",",
        "[",
        "]",
        " ",
        "\n",
    ),
    *(
        "<|channel|>",
        "<|message|>",
        "<|end|>",
        "<|call|>",
        "<|start|>",
        " to=functions.f",
        "[TOOL_CALLS]",
    ),
    *(
        "[ARGS]",
        "<think>",
        "</think>",
        "<function=",
        "<parameter=",
        ">",
        "</parameter>",
        "(",
        ")",
        "=",
    ),
    *('<|"|>', "call:", "<|tool_call>", "<tool_call|>", "<|tool_call_start|>", "\\", '"', "abc"),
]


@settings(max_examples=60, deadline=None)
@given(
    fmt=st.sampled_from(list(F)),
    parts=st.lists(st.sampled_from(_SOUP), max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=20),
)
def test_any_text_is_read_without_error_and_indices_are_never_reused(
    fmt: ToolCallFormat, parts: list[str], cuts: list[int]
) -> None:
    reply = "".join(parts)
    think = ReasoningFormat.HARMONY if fmt is F.HARMONY else ReasoningFormat.THINK_TAGS
    events, result = _run(Case(fmt, reply, (), think=think), _chunked(reply, cuts) if reply else [])
    started = [e.index for e in events if isinstance(e, CallStarted)]
    assert started == list(range(len(started)))
    assert all(json.loads(c.arguments_text) == c.arguments for c in result.calls)


def test_mistral_calls_get_ids_their_template_accepts() -> None:
    parser = new_parser(F.MISTRAL_ARGS)
    parser.feed('[TOOL_CALLS]note[ARGS]{"text": "a"}')
    parser.finish()
    (call,) = parser.result().calls
    assert len(call.call_id) == 9 and call.call_id.isalnum()
    hermes = new_parser(F.HERMES)
    hermes.feed('<tool_call>{"name": "note", "arguments": {}}</tool_call>')
    hermes.finish()
    assert hermes.result().calls[0].call_id.startswith("call_")
