"""``CallAssembler`` on its own: the server's ``delta.tool_calls`` pieces, however split,
become one announcement per call (index, id, name) and then fragments that only append;
nothing that arrives before a call's name is lost; the finished calls are checked.

End to end (the stub's ``names_late``) in tests/remote/test_remote_tools.py."""

from __future__ import annotations

import json
import random

import pytest

from app.engine.tool_calls.request import ToolRequest
from app.engine.tool_calls.specs import ToolSpec
from app.remote.tool_stream import CallAssembler, CallStep
from app.remote.wire import CallPiece
from tests.remote.stub_server import TOOL_PIECES, TOOL_PIECES_NAMES_LATE

WEATHER_ARGS = '{"city": "Paris", "unit": "c"}'
TIME_ARGS = '{"zone": "CET"}'
EXPECTED = {0: ("call_w", "get_weather", WEATHER_ARGS), 1: ("call_t", "get_time", TIME_ARGS)}


def pieces(table: tuple[tuple[int, str | None, str | None, str], ...]) -> list[CallPiece]:
    return [
        CallPiece(i, call_id or "", name or "", fragment) for i, call_id, name, fragment in table
    ]


def replay(assembler: CallAssembler, stream: list[CallPiece]) -> list[CallStep]:
    steps: list[CallStep] = []
    for piece in stream:
        steps += assembler.feed(piece)
    return steps


def calls_of(steps: list[CallStep]) -> dict[int, tuple[str, str, str]]:
    """(id, name, arguments) per engine index, checking the steps' contract: a call is
    announced once, with its id and name, before any fragment; fragments are never empty."""
    out: dict[int, tuple[str, str, str]] = {}
    for step in steps:
        if step.started:
            assert step.index not in out, step
            assert step.call_id and step.name, step
            out[step.index] = (step.call_id, step.name, step.fragment)
        else:
            assert step.index in out, f"a fragment before its call was announced: {step}"
            assert step.fragment and not step.call_id and not step.name, step
            call_id, name, arguments = out[step.index]
            out[step.index] = (call_id, name, arguments + step.fragment)
    return out


@pytest.mark.parametrize(
    "table", [TOOL_PIECES, TOOL_PIECES_NAMES_LATE], ids=["names-first", "names-late"]
)
def test_the_stubs_streams_assemble_to_the_same_two_calls(
    table: tuple[tuple[int, str | None, str | None, str], ...],
) -> None:
    assembler = CallAssembler()
    assert not assembler.started
    steps = replay(assembler, pieces(table))
    assert assembler.started
    assert calls_of(steps) == EXPECTED
    calls, errors = assembler.result(None, complete=True)
    assert errors == ()
    assert [(c.index, c.call_id, c.name, c.arguments) for c in calls] == [
        (0, "call_w", "get_weather", json.loads(WEATHER_ARGS)),
        (1, "call_t", "get_time", json.loads(TIME_ARGS)),
    ]


def test_fragments_before_the_name_are_held_and_handed_over_with_it() -> None:
    assembler = CallAssembler()
    assert assembler.feed(CallPiece(3, "", "", '{"ci')) == []  # no name: nothing yet
    assert assembler.feed(CallPiece(3, "call_x", "", 'ty": ')) == []  # an id is not enough
    assert assembler.feed(CallPiece(3, "", "get_weather", '"Paris"')) == [
        CallStep(0, True, "call_x", "get_weather", '{"city": "Paris"')
    ]
    assert assembler.feed(CallPiece(3, "", "", "}")) == [CallStep(0, False, fragment="}")]
    assert assembler.feed(CallPiece(3, "", "", "")) == []  # an empty piece adds nothing
    [call], errors = assembler.result(None, complete=True)
    assert errors == () and call.arguments == {"city": "Paris"}


def test_an_id_and_name_repeated_on_every_piece_announce_the_call_once() -> None:
    assembler = CallAssembler()
    stream = [CallPiece(0, "call_a", "get_time", part) for part in ('{"zo', 'ne": "U', 'TC"}')]
    steps = replay(assembler, stream)
    assert [s.started for s in steps] == [True, False, False]
    assert calls_of(steps) == {0: ("call_a", "get_time", '{"zone": "UTC"}')}


def test_a_whole_call_in_one_piece_and_a_server_that_gives_no_id() -> None:
    assembler = CallAssembler()
    steps = replay(assembler, [CallPiece(0, "", "get_time", TIME_ARGS), CallPiece(1, "", "f", "")])
    assert calls_of(steps) == {0: ("call_0", "get_time", TIME_ARGS), 1: ("call_1", "f", "")}
    calls, errors = assembler.result(None, complete=True)
    assert [(c.call_id, c.arguments) for c in calls] == [
        ("call_0", {"zone": "CET"}),
        ("call_1", {}),  # no arguments: an empty object
    ]
    assert errors == ()


def test_engine_indices_follow_the_order_calls_began_not_the_servers_index() -> None:
    assembler = CallAssembler()
    steps = replay(
        assembler,
        [CallPiece(7, "b", "second", "{}"), CallPiece(2, "a", "first", "{}")],
    )
    assert [(s.index, s.name) for s in steps] == [(0, "second"), (1, "first")]


@pytest.mark.parametrize("seed", range(40))
def test_any_split_with_the_name_anywhere_loses_nothing(seed: int) -> None:
    """Each call's arguments cut at random places, its name on a random piece (possibly
    the last) and its id on that one or an earlier one, the two calls' pieces interleaved
    at random."""
    rng = random.Random(seed)

    def split(server_index: int, call_id: str, name: str, text: str) -> list[CallPiece]:
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(0, min(5, len(text) - 1))))
        parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        for _ in range(rng.randint(0, 2)):  # pieces that carry only an id or a name
            parts.insert(rng.randrange(len(parts) + 1), "")
        named_at = rng.randrange(len(parts))
        id_at = rng.randrange(named_at + 1)  # servers send the id first or with the name
        return [
            CallPiece(
                server_index,
                call_id if i == id_at else "",
                name if i == named_at else "",
                part,
            )
            for i, part in enumerate(parts)
        ]

    first = split(0, "call_w", "get_weather", WEATHER_ARGS)
    second = split(5, "call_t", "get_time", TIME_ARGS)
    stream: list[CallPiece] = []
    while first or second:
        source = first if first and (not second or rng.random() < 0.5) else second
        stream.append(source.pop(0))
    assembler = CallAssembler()
    steps = replay(assembler, stream)
    got = calls_of(steps)
    assert sorted(got.values()) == sorted(EXPECTED.values()), (seed, stream)
    calls, errors = assembler.result(None, complete=True)
    assert errors == ()
    assert {c.name: c.arguments for c in calls} == {
        "get_weather": json.loads(WEATHER_ARGS),
        "get_time": json.loads(TIME_ARGS),
    }


def test_what_is_not_a_call_is_said() -> None:
    assembler = CallAssembler()
    replay(
        assembler,
        [
            CallPiece(0, "a", "cut", '{"city": "Pa'),  # the reply ended mid-arguments
            CallPiece(1, "b", "listy", "[1, 2]"),  # JSON, but no object
            CallPiece(2, "c", "", "{}"),  # never named
        ],
    )
    calls, errors = assembler.result(None, complete=False)
    assert calls == ()
    assert errors == (
        "The call to 'cut' has arguments that are no JSON (the reply was cut off).",
        "The call to 'listy' has arguments that are no JSON object.",
        "The server sent a tool call without a function name.",
    )
    _, errors = assembler.result(None, complete=True)
    assert errors[0] == "The call to 'cut' has arguments that are no JSON."


def test_calls_are_checked_against_the_request() -> None:
    request = ToolRequest(
        (ToolSpec("get_time", {"type": "object", "properties": {"zone": {"enum": ["CET"]}}}),)
    )
    assembler = CallAssembler()
    replay(
        assembler,
        [CallPiece(0, "a", "get_time", '{"zone": "UTC"}'), CallPiece(1, "b", "nope", "{}")],
    )
    calls, errors = assembler.result(request, complete=True)
    assert [c.name for c in calls] == ["get_time", "nope"]  # parsed; the checks speak
    assert len(errors) == 2
    assert any("nope" in e for e in errors) and any("get_time" in e for e in errors), errors
