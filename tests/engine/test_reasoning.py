"""Splitting replies into reasoning and answer, whole and streamed in any chunks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine.reasoning import (
    Channel,
    Piece,
    ReasoningFormat,
    ReasoningSplitter,
    detect_format,
    format_markers,
    merge_pieces,
    prompt_opens_reasoning,
    split_reasoning,
)

F = ReasoningFormat
R = Channel.REASONING
A = Channel.ANSWER
TEMPLATES_DIR = Path(__file__).resolve().parents[1] / "data" / "chat-templates"

# (format, prompt opened the reasoning, reply, expected reasoning, expected answer)
REPLIES: list[tuple[ReasoningFormat, bool, str, str, str]] = [
    # Qwen3 / DeepSeek-R1 / QwQ / GLM...: the model writes <think> itself...
    (F.THINK_TAGS, False, "<think>\nLet me see.\n</think>\n\nParis.", "Let me see.", "Paris."),
    # ...or the prompt opened it (Qwen3.5, R1 distills, MiniMax-M2, Nemotron: "<think>\n").
    (F.THINK_TAGS, True, "Let me see.\n</think>\n\nParis.", "Let me see.", "Paris."),
    (F.THINK_TAGS, True, "<think>\nLet me see.</think>Paris.", "Let me see.", "Paris."),
    (F.THINK_TAGS, False, "Paris.", "", "Paris."),
    (F.THINK_TAGS, False, "Paris, not <think>x</think>.", "", "Paris, not <think>x</think>."),
    (F.THINK_TAGS, False, "<think>\n\n</think>\n\nParis.", "", "Paris."),  # thinking off
    (F.THINK_TAGS, True, "Still thinking when cut", "Still thinking when cut", ""),
    (F.THINK_TAGS, False, "<think>cut </thi", "cut </thi", ""),
    (F.THINK_TAGS, False, "<think>a</think>b</think>c", "a", "b</think>c"),
    # Magistral / Ministral reasoning.
    (F.THINK_BRACKETS, False, "[THINK]Hmm, 2+2.[/THINK]4", "Hmm, 2+2.", "4"),
    # gpt-oss harmony channels.
    (
        F.HARMONY,
        False,
        "<|channel|>analysis<|message|>User asks capital.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Paris.",
        "User asks capital.",
        "Paris.",
    ),
    (
        F.HARMONY,
        False,
        "<|channel|>analysis<|message|>Need weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris"}<|call|>',
        'Need weather.\n\n{"city": "Paris"}',
        "",
    ),
    (
        F.HARMONY,
        False,
        "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant"
        "<|channel|>analysis<|message|>Ok.<|end|><|start|>assistant<|channel|>final"
        "<|message|>Done.<|return|>",
        "Checking.\n\nOk.",
        "Done.",
    ),
    (F.HARMONY, False, "<|channel|>final<|message|>Only this.", "", "Only this."),
    (F.HARMONY, False, "No channels at all.", "", "No channels at all."),
    (F.HARMONY, False, "<|channel|>analysis<|message|>cut off", "cut off", ""),
    # ByteDance Seed-OSS.
    (F.SEED_THINK, False, "<seed:think>Plan.</seed:think>\nAnswer.", "Plan.", "Answer."),
    # Cohere Command R7B and Cohere2 MoE (the prompt opens <|START_THINKING|>).
    (
        F.COHERE,
        False,
        "<|START_THINKING|>Plan.<|END_THINKING|><|START_RESPONSE|>Hi!<|END_RESPONSE|>",
        "Plan.",
        "Hi!",
    ),
    (F.COHERE, True, "Plan.<|END_THINKING|><|START_TEXT|>Hi!<|END_TEXT|>", "Plan.", "Hi!"),
    # Apriel 1.6 (the prompt says "Here are my reasoning steps:\n") and 1.5.
    (
        F.APRIEL,
        True,
        "1. Look.\n2. Answer.\n[BEGIN FINAL RESPONSE]\nParis.\n[END FINAL RESPONSE]",
        "1. Look.\n2. Answer.",
        "Paris.\n",
    ),
    (
        F.APRIEL,
        False,
        "Here are my reasoning steps:\nLook.\n[BEGIN FINAL RESPONSE]\nParis.",
        "Look.",
        "Paris.",
    ),
    # Granite 3.3 with thinking on.
    (
        F.GRANITE,
        False,
        "<think>Consider.</think><response>Paris.</response>",
        "Consider.",
        "Paris.",
    ),
    # Gemma 4.
    (F.GEMMA4, False, "<|channel>thought\nConsider.<channel|>Paris.", "Consider.", "Paris."),
    # Kimi K3 (the prompt opens the think block).
    (
        F.KIMI_K3,
        True,
        "Consider.<|close|>think<|sep|><|open|>response<|sep|>Paris.<|close|>response<|sep|>",
        "Consider.",
        "Paris.",
    ),
    (F.KIMI_VL, False, "◁think▷Consider.◁/think▷Paris.", "Consider.", "Paris."),
    (F.MINIMAX_M3, True, "Consider.</mm:think>Paris.", "Consider.", "Paris."),
    (F.HY3, True, "Consider.</think:opensource>Paris.", "Consider.", "Paris."),
    (
        F.SOLAR,
        False,
        "<|think|>Consider.<|end|><|begin|>assistant<|content|>Paris.",
        "Consider.",
        "Paris.",
    ),
    (F.APERTUS, False, "<|inner_prefix|>Consider.<|inner_suffix|>Paris.", "Consider.", "Paris."),
    (
        F.GLIMMER,
        False,
        " to=self<|message|>Consider.<|eom|><|start|>assistant to=user<|message|>Paris.<|eot|>",
        "Consider.",
        "Paris.",
    ),
    (F.NONE, False, "<think>not parsed</think> ", "", "<think>not parsed</think> "),
]


def _feed(splitter: ReasoningSplitter, chunks: list[str]) -> list[Piece]:
    pieces: list[Piece] = []
    for chunk in chunks:
        pieces += splitter.feed(chunk)
    pieces += splitter.flush()
    return merge_pieces(pieces)


def _expected(reasoning: str, answer: str) -> list[Piece]:
    return merge_pieces([Piece(R, reasoning), Piece(A, answer)])


@pytest.mark.parametrize(("fmt", "opened", "reply", "reasoning", "answer"), REPLIES)
def test_split_replies(
    fmt: ReasoningFormat, opened: bool, reply: str, reasoning: str, answer: str
) -> None:
    assert split_reasoning(reply, fmt, opened) == (reasoning, answer)
    expected = _expected(reasoning, answer)
    assert _feed(ReasoningSplitter(fmt, opened), [reply]) == expected
    # One character at a time: every marker arrives split.
    assert _feed(ReasoningSplitter(fmt, opened), list(reply)) == expected


@settings(max_examples=300, deadline=None)
@given(
    fmt=st.sampled_from([F.HARMONY, F.GLIMMER]),
    parts=st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "<|channel|>analysis",
                    "<|channel|>final",
                    "<|channel|>commentary to=functions.f <|constrain|>json",
                    " to=self",
                    " to=user",
                ]
            ),
            st.text(alphabet="ab <>|\n", max_size=8),
            st.sampled_from(["<|end|>", "<|call|>", "<|eom|>", "<|eot|>", "<|return|>"]),
        ),
        max_size=4,
    ),
)
def test_harmony_markup_is_never_shown(
    fmt: ReasoningFormat, parts: list[tuple[str, str, str]]
) -> None:
    reply = "<|start|>assistant".join(f"{head}<|message|>{body}{end}" for head, body, end in parts)
    reasoning, answer = split_reasoning(reply, fmt)
    for marker in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", *_ENDS):
        assert marker not in reasoning + answer


_ENDS = ("<|end|>", "<|call|>", "<|eom|>", "<|eot|>", "<|return|>")


def test_markers_split_across_chunks_are_held_back_only_as_long_as_needed() -> None:
    splitter = ReasoningSplitter(F.THINK_TAGS, starts_in_reasoning=True)
    assert splitter.feed("Thinking") == [Piece(R, "Thinking")]
    assert splitter.feed(" hard</th") == [Piece(R, " hard")]  # "</th" may be the marker
    assert splitter.in_reasoning
    assert splitter.feed("ink>\n\nDone") == [Piece(A, "Done")]
    assert not splitter.in_reasoning
    assert splitter.feed(" now <") == [Piece(A, " now <")]  # no markers in the answer
    assert splitter.flush() == []


def test_text_that_is_not_a_marker_is_released_at_once() -> None:
    splitter = ReasoningSplitter(F.THINK_TAGS, starts_in_reasoning=True)
    assert splitter.feed("a </b") == [Piece(R, "a </b")]
    splitter = ReasoningSplitter(F.THINK_TAGS)
    assert splitter.feed("<th") == []  # may still open the reasoning
    assert splitter.feed("e end") == [Piece(A, "<the end")]


def test_whitespace_around_the_reasoning_is_dropped() -> None:
    splitter = ReasoningSplitter(F.THINK_TAGS)
    pieces = [*splitter.feed("<think>\n\n"), *splitter.feed("x\n\n"), *splitter.feed("y\n")]
    assert merge_pieces(pieces) == [Piece(R, "x\n\ny")]
    assert splitter.feed("</think>\n\n") == []
    assert splitter.feed("\n  answer") == [Piece(A, "answer")]


def test_prompt_opens_reasoning() -> None:
    assert prompt_opens_reasoning("<|im_start|>assistant\n<think>\n", F.THINK_TAGS)
    assert not prompt_opens_reasoning("<|im_start|>assistant\n", F.THINK_TAGS)
    assert not prompt_opens_reasoning("assistant\n<think>\n\n</think>\n\n", F.THINK_TAGS)
    assert not prompt_opens_reasoning("<|start|>assistant", F.HARMONY)
    assert prompt_opens_reasoning("<|start|>assistant<|channel|>analysis<|message|>", F.HARMONY)
    assert not prompt_opens_reasoning("<|start|>assistant<|channel|>final<|message|>", F.HARMONY)
    assert not prompt_opens_reasoning("<think>\n", F.NONE)


@pytest.mark.parametrize(
    ("source", "fmt"),
    [
        ("{{ '<think>' }}{{ '</think>' }}", F.THINK_TAGS),
        ("{{ '[THINK]' + x + '[/THINK]' }}", F.THINK_BRACKETS),
        ("{{ '<|start|>assistant<|channel|>final<|message|>' }}", F.HARMONY),
        ("{{ '<|im_start|>assistant' }}", F.NONE),
    ],
)
def test_detect_format(source: str, fmt: ReasoningFormat) -> None:
    assert detect_format(source) is fmt


def test_detect_format_on_real_templates() -> None:
    def fmt(name: str) -> ReasoningFormat:
        return detect_format((TEMPLATES_DIR / f"{name}.jinja").read_text(encoding="utf-8"))

    assert fmt("Qwen-Qwen3-0.6B") is F.THINK_TAGS
    assert fmt("openai-gpt-oss-120b") is F.HARMONY
    assert fmt("mistralai-Ministral-3-14B-Reasoning-2512") is F.THINK_BRACKETS
    assert fmt("Qwen-Qwen2.5-7B-Instruct") is F.NONE
    assert fmt("Mistral-Small-3.2-24B-Instruct-2506") is F.NONE


# --------------------------------------------------------------------------- properties

_FORMATS = [fmt for fmt in ReasoningFormat]
_ATOMS = st.sampled_from(
    sorted(
        {
            *(marker for fmt in _FORMATS for group in format_markers(fmt) for marker in group),
            "<|channel|>",
            "<|message|>",
            "<|start|>",
            "<|end|>",
            "<|call|>",
            "analysis",
            "final",
            "commentary",
            " to=user",
            " to=self",
            "assistant",
            "<response>",
            "</response>",
            "<|START_RESPONSE|>",
            "[END FINAL RESPONSE]",
            "<|open|>response<|sep|>",
            "<|content|>",
            "\n",
            "\n\n",
            " ",
            "<",
            "</",
            "<|",
            "[",
        }
    )
)
_TEXT = st.text(alphabet="ab <>/|[]\n:日", max_size=6)
_REPLIES = st.lists(st.one_of(_ATOMS, _TEXT), max_size=14).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    fmt=st.sampled_from(_FORMATS),
    opened=st.booleans(),
    reply=_REPLIES,
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=12),
)
def test_any_chunking_gives_the_same_pieces(
    fmt: ReasoningFormat, opened: bool, reply: str, cuts: list[int]
) -> None:
    whole = _feed(ReasoningSplitter(fmt, opened), [reply])
    points = sorted({min(cut, len(reply)) for cut in cuts})
    chunks = [reply[a:b] for a, b in zip([0, *points], [*points, len(reply)], strict=True)]
    assert _feed(ReasoningSplitter(fmt, opened), chunks) == whole
    assert _feed(ReasoningSplitter(fmt, opened), list(reply)) == whole
    reasoning, answer = split_reasoning(reply, fmt, opened)
    assert "".join(p.text for p in whole if p.channel is R) == reasoning
    assert "".join(p.text for p in whole if p.channel is A) == answer
    assert all(piece.text for piece in whole)


@settings(max_examples=200, deadline=None)
@given(reply=_REPLIES)
def test_without_a_format_the_reply_is_the_answer(reply: str) -> None:
    assert split_reasoning(reply, F.NONE) == ("", reply)


@settings(max_examples=200, deadline=None)
@given(fmt=st.sampled_from(_FORMATS), opened=st.booleans(), reply=_REPLIES, size=st.integers(1, 8))
def test_streamed_text_is_never_held_back_more_than_a_marker(
    fmt: ReasoningFormat, opened: bool, reply: str, size: int
) -> None:
    splitter = ReasoningSplitter(fmt, opened)
    # The longest marker or answer wrapper of any format ("Here are my reasoning steps:").
    longest = 28 if fmt is not F.NONE else 0
    longest = max(longest, 256 + len("<|message|>")) if fmt in (F.HARMONY, F.GLIMMER) else longest
    fed = 0
    for start in range(0, len(reply), size):
        chunk = reply[start : start + size]
        fed += len(chunk)
        splitter.feed(chunk)
        held = len(splitter._buffer)  # the property is about what the splitter holds
        unconsumed = reply[fed - held : fed]
        # What is held is either whitespace or could still start a marker.
        assert held <= longest or not unconsumed.strip()
