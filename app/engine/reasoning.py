"""Split a model's reply into its reasoning and its answer, while it streams.

Reasoning models write their chain of thought inside markers that their chat template
defines; the answer follows. llama.cpp's ``common/chat.cpp`` (and ``common/parsers/``)
parses these per template family; this module does the same in Python for the families
that real templates produce:

=====================  ==============================================================
format                 reply shape (``R`` reasoning, ``A`` answer)
=====================  ==============================================================
``THINK_TAGS``         ``<think>R</think>A`` (Qwen3/3.5, QwQ, DeepSeek-R1/V3.x/V4, GLM,
                       MiniMax-M2, Kimi-K2-Thinking, Nemotron, SmolLM3, Laguna, ...)
``THINK_BRACKETS``     ``[THINK]R[/THINK]A`` (Magistral / Ministral reasoning)
``HARMONY``            gpt-oss: ``<|channel|>analysis<|message|>R<|end|>``
                       ``<|start|>assistant<|channel|>final<|message|>A``
``SEED_THINK``         ``<seed:think>R</seed:think>A`` (ByteDance Seed-OSS)
``COHERE``             ``<|START_THINKING|>R<|END_THINKING|><|START_RESPONSE|>A...``
``APRIEL``             ``Here are my reasoning steps:\\nR[BEGIN FINAL RESPONSE]A``
``GRANITE``            ``<think>R</think><response>A</response>`` (Granite 3.3)
``GEMMA4``             ``<|channel>thought\\nR<channel|>A``
``KIMI_K3``            ``<|open|>think<|sep|>R<|close|>think<|sep|><|open|>response...``
``KIMI_VL``            ``◁think▷R◁/think▷A``
``MINIMAX_M3``         ``<mm:think>R</mm:think>A``
``HY3``                ``<think:opensource>R</think:opensource>A`` (Tencent Hunyuan 3)
``SOLAR``              ``<|think|>R<|end|><|begin|>assistant<|content|>A`` (Solar Open)
``APERTUS``            ``<|inner_prefix|>R<|inner_suffix|>A``
``GLIMMER``            ``<|start|>assistant to=self<|message|>R<|eom|>``
                       ``<|start|>assistant to=user<|message|>A`` (Muse Glimmer)
=====================  ==============================================================

Many templates open the reasoning block in the generation prompt (the prompt ends with
``<think>\\n``): the reply then starts inside the reasoning and only the closing marker
appears. :func:`prompt_opens_reasoning` tells from the rendered prompt.

Rules (as llama.cpp applies them):

* the opening marker counts only at the very start of the reply (after whitespace); a
  reply that does not start with it is all answer;
* whitespace right after the opening marker, right before the closing one and at the
  start of the answer is dropped;
* reasoning that never closes stays reasoning (the reply was cut off);
* the answer-wrapping markers of some formats (``<response>``, ``<|START_RESPONSE|>``,
  ``[END FINAL RESPONSE]`` ...) are removed from the answer;
* harmony-style formats never show their markup (``<|channel|>``, ``<|message|>``,
  ``<|start|>``, ``<|end|>`` ...); every channel except the final one (analysis,
  commentary = tool talk) is reasoning.

Streaming: :class:`ReasoningSplitter` holds back only the text that could still be the
beginning of a marker (and, inside the reasoning, trailing whitespace that may turn out
to precede the closing marker), so normal text is never delayed by more than the longest
marker. Feeding a reply in any chunks gives the same text per channel as feeding it whole
(:func:`merge_pieces` joins adjacent pieces of one channel).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "Channel",
    "Piece",
    "ReasoningFormat",
    "ReasoningSplitter",
    "detect_format",
    "format_markers",
    "merge_pieces",
    "prompt_opens_reasoning",
    "split_reasoning",
]


class ReasoningFormat(enum.Enum):
    """How a model family marks its reasoning in a reply."""

    NONE = "none"
    THINK_TAGS = "think_tags"
    THINK_BRACKETS = "think_brackets"
    HARMONY = "harmony"
    SEED_THINK = "seed_think"
    COHERE = "cohere"
    APRIEL = "apriel"
    GRANITE = "granite"
    GEMMA4 = "gemma4"
    KIMI_K3 = "kimi_k3"
    KIMI_VL = "kimi_vl"
    MINIMAX_M3 = "minimax_m3"
    HY3 = "hy3"
    SOLAR = "solar"
    APERTUS = "apertus"
    GLIMMER = "glimmer"


class Channel(enum.Enum):
    """Where a piece of reply text belongs."""

    REASONING = "reasoning"
    ANSWER = "answer"


@dataclass(frozen=True, slots=True)
class Piece:
    """A run of reply text of one channel (markers removed)."""

    channel: Channel
    text: str


@dataclass(frozen=True, slots=True)
class _TagSpec:
    """A format with an opening and a closing marker around the reasoning."""

    opens: tuple[str, ...]
    closes: tuple[str, ...]
    #: Answer wrappers removed from the answer wherever they appear.
    drops: tuple[str, ...] = ()


_TAG_SPECS: Final[dict[ReasoningFormat, _TagSpec]] = {
    ReasoningFormat.THINK_TAGS: _TagSpec(("<think>",), ("</think>",)),
    ReasoningFormat.THINK_BRACKETS: _TagSpec(("[THINK]",), ("[/THINK]",)),
    ReasoningFormat.SEED_THINK: _TagSpec(("<seed:think>",), ("</seed:think>",)),
    ReasoningFormat.COHERE: _TagSpec(
        ("<|START_THINKING|>",),
        ("<|END_THINKING|>", "<|START_RESPONSE|>", "<|START_TEXT|>"),
        ("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>"),
    ),
    ReasoningFormat.APRIEL: _TagSpec(
        ("Here are my reasoning steps:",),
        ("[BEGIN FINAL RESPONSE]",),
        ("[BEGIN FINAL RESPONSE]", "[END FINAL RESPONSE]"),
    ),
    ReasoningFormat.GRANITE: _TagSpec(("<think>",), ("</think>",), ("<response>", "</response>")),
    ReasoningFormat.GEMMA4: _TagSpec(("<|channel>thought",), ("<channel|>",)),
    ReasoningFormat.KIMI_K3: _TagSpec(
        ("<|open|>think<|sep|>",),
        ("<|close|>think<|sep|>", "<|open|>response<|sep|>"),
        ("<|open|>response<|sep|>", "<|close|>response<|sep|>"),
    ),
    ReasoningFormat.KIMI_VL: _TagSpec(("◁think▷",), ("◁/think▷",)),
    ReasoningFormat.MINIMAX_M3: _TagSpec(("<mm:think>",), ("</mm:think>",)),
    ReasoningFormat.HY3: _TagSpec(("<think:opensource>",), ("</think:opensource>",)),
    ReasoningFormat.SOLAR: _TagSpec(
        ("<|think|>",), ("<|end|>",), ("<|begin|>assistant", "<|content|>", "<|end|>")
    ),
    ReasoningFormat.APERTUS: _TagSpec(("<|inner_prefix|>",), ("<|inner_suffix|>",)),
}

# Harmony-style formats: a reply is a series of messages "header<|message|>body<|end|>".
_MESSAGE: Final = "<|message|>"
_HARMONY_ENDS: Final = ("<|end|>", "<|call|>", "<|return|>", "<|eom|>", "<|eot|>")
# These start a new header even when the model forgot to end the body.
_HARMONY_HEADS: Final = ("<|start|>", "<|channel|>")
_HARMONY_BODY_MARKERS: Final = _HARMONY_ENDS + _HARMONY_HEADS
# What a header may begin with; anything else is plain text the model wrote.
_HEADER_STARTS: Final = ("<|start|>", "<|channel|>", "<|constrain|>", " to=", "to=")
_MAX_HEADER: Final = 256
_CHANNEL_RE: Final = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")
_RECIPIENT_RE: Final = re.compile(r"\bto=([^\s<]+)")
_HARMONY_FORMATS: Final = frozenset({ReasoningFormat.HARMONY, ReasoningFormat.GLIMMER})
_SEGMENT_SEPARATOR: Final = "\n\n"


def format_markers(fmt: ReasoningFormat) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The (opening, closing) reasoning markers of ``fmt`` (empty for NONE)."""
    if fmt is ReasoningFormat.HARMONY:
        return ("<|channel|>analysis<|message|>",), ("<|end|>",)
    if fmt is ReasoningFormat.GLIMMER:
        return (" to=self<|message|>",), ("<|eom|>",)
    spec = _TAG_SPECS.get(fmt)
    if spec is None:
        return (), ()
    return spec.opens, spec.closes


# --------------------------------------------------------------------------- detection

# Checked in order: the first whose needles all occur in the template source wins.
_DETECTION: Final[tuple[tuple[tuple[str, ...], ReasoningFormat], ...]] = (
    (("<|channel|>",), ReasoningFormat.HARMONY),
    (("<atem:function_calls>", "to=self"), ReasoningFormat.GLIMMER),
    (("[THINK]",), ReasoningFormat.THINK_BRACKETS),
    (("<seed:think>",), ReasoningFormat.SEED_THINK),
    (("<|START_THINKING|>",), ReasoningFormat.COHERE),
    (("[BEGIN FINAL RESPONSE]",), ReasoningFormat.APRIEL),
    (("<|channel>thought", "<channel|>"), ReasoningFormat.GEMMA4),
    (("<|open|>", "<|close|>", "'think'"), ReasoningFormat.KIMI_K3),
    (("◁think▷",), ReasoningFormat.KIMI_VL),
    (("<mm:think>",), ReasoningFormat.MINIMAX_M3),
    (("<think{}>", ":opensource"), ReasoningFormat.HY3),
    (("<think:opensource>",), ReasoningFormat.HY3),
    (("<|think|>",), ReasoningFormat.SOLAR),
    (("<|inner_prefix|>", "<|inner_suffix|>"), ReasoningFormat.APERTUS),
    (("Write your thoughts between <think></think>", "<response>"), ReasoningFormat.GRANITE),
    (("</think>",), ReasoningFormat.THINK_TAGS),
)


def detect_format(template_source: str) -> ReasoningFormat:
    """The reasoning format a chat template's model writes, from the template's source.

    Templates name their markers (they render past reasoning with them, or close the
    reasoning in the generation prompt when thinking is off); a template that names none
    is taken as a model without reasoning (:attr:`ReasoningFormat.NONE`).
    """
    for needles, fmt in _DETECTION:
        if all(needle in template_source for needle in needles):
            return fmt
    return ReasoningFormat.NONE


def prompt_opens_reasoning(prompt: str, fmt: ReasoningFormat) -> bool:
    """Whether ``prompt`` (a rendered prompt with its generation prompt) ends inside an
    open reasoning block, so that the reply starts in the reasoning."""
    tail = prompt.rstrip()
    if fmt in _HARMONY_FORMATS:
        # The body of a non-final channel is open: "...<|channel|>analysis<|message|>".
        if not tail.endswith(_MESSAGE):
            return False
        header_start = max(tail.rfind(head) for head in (*_HARMONY_HEADS, *_HARMONY_ENDS))
        header = tail[max(header_start, 0) : -len(_MESSAGE)]
        return _header_channel(header, fmt) is Channel.REASONING
    opens, _ = format_markers(fmt)
    return any(tail.endswith(marker.rstrip()) for marker in opens)


# --------------------------------------------------------------------------- streaming


def _partial_suffix(text: str, markers: Iterable[str]) -> int:
    """Length of the longest end of ``text`` that is a proper beginning of a marker."""
    best = 0
    for marker in markers:
        for size in range(min(len(text), len(marker) - 1), best, -1):
            if marker.startswith(text[-size:]):
                best = size
                break
    return best


def _find_first(text: str, markers: Iterable[str]) -> tuple[int, str] | None:
    found: tuple[int, str] | None = None
    for marker in markers:
        index = text.find(marker)
        if index >= 0 and (found is None or index < found[0]):
            found = (index, marker)
    return found


def _header_channel(header: str, fmt: ReasoningFormat) -> Channel:
    """The channel of a harmony message from its header."""
    if fmt is ReasoningFormat.GLIMMER:
        recipient = _RECIPIENT_RE.search(header)
        if recipient is None or recipient.group(1) == "user":
            return Channel.ANSWER
        return Channel.REASONING  # to=self (thinking) or a tool call
    channel = _CHANNEL_RE.search(header)
    if channel is None or channel.group(1) == "final":
        return Channel.ANSWER
    return Channel.REASONING  # analysis, commentary (tool talk)


class _State(enum.Enum):
    START = "start"  # nothing decided yet: does the reply open the reasoning?
    REASONING_START = "reasoning_start"  # at the start of the reasoning (a repeated opener?)
    REASONING = "reasoning"
    ANSWER = "answer"
    HEADER = "header"  # harmony: reading a message header
    BODY = "body"  # harmony: inside a message body


class ReasoningSplitter:
    """Streaming splitter of one reply: :meth:`feed` text as it comes, :meth:`flush` at
    the end. ``starts_in_reasoning`` says that the prompt opened the reasoning block
    (see :func:`prompt_opens_reasoning`)."""

    def __init__(self, fmt: ReasoningFormat, starts_in_reasoning: bool = False) -> None:
        self.format: Final = fmt
        self.starts_in_reasoning: Final = starts_in_reasoning
        self._buffer = ""
        self._spec = _TAG_SPECS.get(fmt)
        self._harmony = fmt in _HARMONY_FORMATS
        # Whether the current segment has not written visible text yet (strip whitespace).
        self._lead = True
        self._body_channel = Channel.REASONING
        self._emitted: set[Channel] = set()
        self._segment_has_text = False
        self._out: list[Piece] = []
        if fmt is ReasoningFormat.NONE:
            self._state = _State.ANSWER
            self._lead = False
        elif self._harmony:
            self._state = _State.BODY if starts_in_reasoning else _State.HEADER
        else:
            self._state = _State.REASONING_START if starts_in_reasoning else _State.START

    # ------------------------------------------------------------------ public

    def feed(self, text: str) -> list[Piece]:
        """The pieces that ``text`` (the next part of the reply) completes."""
        if text:
            self._buffer += text
            self._run(final=False)
        return self._take()

    def flush(self) -> list[Piece]:
        """The pieces still held back, at the end of the reply."""
        self._run(final=True)
        return self._take()

    @property
    def in_reasoning(self) -> bool:
        """Whether the text fed so far ends inside the reasoning."""
        if self._harmony:
            return self._state is _State.BODY and self._body_channel is Channel.REASONING
        return self._state in (_State.REASONING_START, _State.REASONING)

    # ------------------------------------------------------------------ machinery

    def _take(self) -> list[Piece]:
        out = merge_pieces(self._out)
        self._out = []
        return out

    def _emit(self, channel: Channel, text: str) -> None:
        if self._lead:
            text = text.lstrip()
            if not text:
                return
            self._lead = False
            if not self._segment_has_text and channel in self._emitted:
                text = _SEGMENT_SEPARATOR + text
            self._segment_has_text = True
        if text:
            self._emitted.add(channel)
            self._out.append(Piece(channel, text))

    def _new_segment(self) -> None:
        self._lead = True
        self._segment_has_text = False

    def _run(self, final: bool) -> None:
        if self._harmony:
            while self._step_harmony(final):
                pass
        else:
            while self._step_tags(final):
                pass

    def _step_tags(self, final: bool) -> bool:
        """One move of the tag machine; False when it needs more text."""
        buffer = self._buffer
        if not buffer:
            return False
        state = self._state
        spec = self._spec
        if state is _State.ANSWER:
            drops = spec.drops if spec is not None else ()
            self._buffer = self._pass(Channel.ANSWER, buffer, drops, final, hold_space=False)
            return False
        assert spec is not None
        if state in (_State.START, _State.REASONING_START):
            stripped = buffer.lstrip()
            if not stripped:
                self._buffer = ""
                return False
            opener = next((m for m in spec.opens if stripped.startswith(m)), None)
            if opener is not None:
                self._buffer = stripped[len(opener) :]
                self._state = _State.REASONING
                self._new_segment()
                return True
            if not final and any(m.startswith(stripped) for m in spec.opens):
                self._buffer = stripped
                return False  # could still become the opening marker
            self._buffer = stripped
            if state is _State.START:
                self._state = _State.ANSWER
            else:
                self._state = _State.REASONING
            return True
        # REASONING: look for the closing marker.
        found = _find_first(buffer, spec.closes)
        if found is not None:
            index, marker = found
            self._emit(Channel.REASONING, buffer[:index].rstrip())
            self._buffer = buffer[index + len(marker) :]
            self._state = _State.ANSWER
            self._new_segment()
            return True
        self._buffer = self._pass(
            Channel.REASONING, buffer, (), final, hold_space=True, ends=spec.closes
        )
        return False

    def _pass(
        self,
        channel: Channel,
        buffer: str,
        drops: tuple[str, ...],
        final: bool,
        *,
        hold_space: bool,
        ends: tuple[str, ...] = (),
    ) -> str:
        """Emit ``buffer`` as ``channel`` text, removing ``drops`` and holding back what
        could still begin a marker; returns what is held."""
        while drops:
            found = _find_first(buffer, drops)
            if found is None:
                break
            index, marker = found
            self._emit(channel, buffer[:index])
            buffer = buffer[index + len(marker) :]
        if final:
            self._emit(channel, buffer.rstrip() if hold_space else buffer)
            return ""
        keep = _partial_suffix(buffer, (*drops, *ends))
        safe = buffer[: len(buffer) - keep]
        if hold_space:
            safe = safe.rstrip()
        self._emit(channel, safe)
        return buffer[len(safe) :]

    def _step_harmony(self, final: bool) -> bool:
        buffer = self._buffer
        if not buffer:
            return False
        if self._state is _State.HEADER:
            index = buffer.find(_MESSAGE)
            if 0 <= index <= _MAX_HEADER and self._header_plausible(buffer[:index], complete=True):
                self._body_channel = _header_channel(buffer[:index], self.format)
                self._buffer = buffer[index + len(_MESSAGE) :]
                self._state = _State.BODY
                self._new_segment()
                return True
            could_come = len(buffer) < _MAX_HEADER + len(_MESSAGE)
            # The header so far, without an end that may be the start of <|message|>.
            so_far = buffer[: len(buffer) - _partial_suffix(buffer, (_MESSAGE,))]
            if index < 0 and could_come and self._header_plausible(so_far):
                if final:  # a header cut off: markup, not text
                    self._buffer = ""
                return False  # the header goes on
            # Not a header: the model wrote plain text; show it as the answer (without
            # the markup it may start with, which also guarantees progress).
            stripped = buffer.lstrip()
            head = next((h for h in _HARMONY_HEADS if stripped.startswith(h)), "")
            self._buffer = stripped[len(head) :]
            self._state = _State.BODY
            self._body_channel = Channel.ANSWER
            self._new_segment()
            return True
        found = _find_first(buffer, _HARMONY_BODY_MARKERS)
        channel = self._body_channel
        hold_space = channel is Channel.REASONING
        if found is not None:
            index, marker = found
            text = buffer[:index]
            self._emit(channel, text.rstrip() if hold_space else text)
            rest = buffer[index:] if marker in _HARMONY_HEADS else buffer[index + len(marker) :]
            self._buffer = rest
            self._state = _State.HEADER
            return True
        self._buffer = self._pass(
            channel, buffer, (), final, hold_space=hold_space, ends=_HARMONY_BODY_MARKERS
        )
        return False

    @staticmethod
    def _header_plausible(header: str, complete: bool = False) -> bool:
        """Whether ``header`` (or, unless ``complete``, its beginning so far) looks like
        the header of a harmony message."""
        stripped = header.lstrip()
        if not stripped:
            return True
        if any(stripped.startswith(start) for start in _HEADER_STARTS):
            return True
        return not complete and any(start.startswith(stripped) for start in _HEADER_STARTS)


def merge_pieces(pieces: Iterable[Piece]) -> list[Piece]:
    """``pieces`` with adjacent pieces of one channel joined and empty ones left out."""
    merged: list[Piece] = []
    for piece in pieces:
        if not piece.text:
            continue
        if merged and merged[-1].channel is piece.channel:
            merged[-1] = Piece(piece.channel, merged[-1].text + piece.text)
        else:
            merged.append(piece)
    return merged


def split_reasoning(
    text: str, fmt: ReasoningFormat, starts_in_reasoning: bool = False
) -> tuple[str, str]:
    """``(reasoning, answer)`` of a whole reply (for stored text)."""
    splitter = ReasoningSplitter(fmt, starts_in_reasoning)
    pieces = [*splitter.feed(text), *splitter.flush()]
    reasoning = "".join(p.text for p in pieces if p.channel is Channel.REASONING)
    answer = "".join(p.text for p in pieces if p.channel is Channel.ANSWER)
    return reasoning, answer
