"""Prompt fitting: a conversation rendered into the tokens a sequence should hold.

When the conversation does not fit, the oldest messages after the system prompt are left
out (the same ones a context shift dropped). Also here: the system prompt's length (what a
shift keeps), where the messages start in the cache (where a shift may cut), the
checkpoint marks of a chat prompt.

The prompt is always the tokenization of the rendered text, as llama-server makes it: the
cache is reused up to the first token where it differs from that. A reply the model
sampled as other tokens than its text tokenizes into (a byte-level BPE can split the
same text another way) is processed again from the first difference: keeping the
sampled tokens would answer another prompt than a fresh run of the same conversation
(issue 18, item 8c: 58 tokens held where the rendered text tokenizes into 60).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.chat_template import ReasoningOptions
from app.engine.errors import ContextFullError, context_full_message
from app.engine.handles import Handles
from app.engine.prefix import common_prefix
from app.engine.reasoning import ReasoningFormat, prompt_opens_reasoning
from app.engine.sequence import Message, Sequence
from app.engine.tool_calls.specs import ToolSpec


def reply_reserve(max_tokens: int | None, n_ctx_seq: int) -> int:
    """Cells kept free for the reply when a conversation is fitted into the context.

    ``min(max_tokens, n_ctx/4)``, and n_ctx/4 without ``max_tokens`` (never under 16
    tokens, never over half the context). The quarter is a clamp, not a limit: a reply may
    still run to ``max_tokens``, past the reserve, by the sequence's context-full policy
    (shift drops the oldest messages, stop ends the reply). Reserving the whole
    ``max_tokens`` instead (the default 1024 in a 512-token context: half of it) left a
    quarter of the context to the history and silently dropped what the model had been told.
    """
    quarter = max(16, n_ctx_seq // 4)
    wanted = max_tokens if max_tokens is not None and max_tokens > 0 else quarter
    return max(1, min(wanted, quarter, n_ctx_seq // 2))


@dataclass(frozen=True)
class FittedChat:
    """What ``set_chat`` queues: the tokens and what the sequence remembers about them."""

    messages: list[Message]  # the whole conversation (with the system prompt merged in)
    n_dropped: int  # messages after the system prompt left out
    n_keep: int  # BOS and the system prompt's tokens
    tokens: list[int]
    marks: tuple[int, ...]  # where to take checkpoints besides the end
    reasoning: ReasoningOptions | None
    reasoning_format: ReasoningFormat
    opens_reasoning: bool
    reserve: int = 0  # cells kept free for the reply (:func:`reply_reserve`)


def _split_head(messages: list[Message]) -> tuple[list[Message], list[Message]]:
    """The system prompt (kept by every shift) and the messages after it."""
    head = messages[:1] if messages and messages[0].get("role") == "system" else []
    return head, messages[len(head) :]


def _tools(seq: Sequence) -> tuple[ToolSpec, ...]:
    """The tools every render of the chat lists (the same prefix each time)."""
    return seq.tools.tools if seq.tools is not None else ()


class ChatFitter:
    def __init__(self, handles: Handles) -> None:
        self._h = handles

    def fit(
        self,
        seq: Sequence,
        messages: list[Message],
        system: str | None,
        add_generation_prompt: bool,
        reserve: int | None,
        reasoning: ReasoningOptions | None,
    ) -> FittedChat:
        h = self._h
        model = h.need_model()
        n_ctx_seq = h.n_ctx_seq
        msgs = [dict(m) for m in messages]
        if system:
            msgs = [
                {"role": "system", "content": system},
                *[m for m in msgs if m.get("role") != "system"],
            ]
        head, body = _split_head(msgs)
        room = reply_reserve(reserve, n_ctx_seq)
        budget = n_ctx_seq - room
        start = min(seq.n_dropped, max(0, len(body) - 1)) if seq.messages is not None else 0
        dropped = start
        # Hysteresis: leaving out one more old message changes the prompt right after the
        # system prompt, so everything kept is processed again (from the system prompt's
        # checkpoint). Dropping down to half the budget at once lets the next several turns
        # append to a prefix the cache holds, instead of each turn dropping one more message
        # and processing the whole history again. (Shifting the kept cells into place, as a
        # full context does while generating, would not decode them, but their keys and
        # values were computed while attending to the dropped messages: the reply would not
        # be the one the model gives to the text it is said to see.)
        low = budget // 2
        while True:
            kept = head + body[dropped:]
            text = h.render_chat(kept, add_generation_prompt, reasoning, _tools(seq))
            tokens = h.tokenize_chat(text)
            limit = budget if dropped == start else low
            if len(tokens) <= limit or dropped >= len(body) - 1:
                break
            dropped += 1
        if len(tokens) >= n_ctx_seq:
            raise ContextFullError(context_full_message(len(tokens), n_ctx_seq, model.n_ctx_train))
        if head:
            head_text = h.render_chat(head, False, reasoning, _tools(seq))
            n_keep = common_prefix(h.tokenize_chat(head_text), tokens)
        else:
            n_keep = 1 if model.add_bos else 0
        template = h.template
        assert template is not None
        reasoning_format = (
            template.reasoning_format if add_generation_prompt else ReasoningFormat.NONE
        )
        marks = (
            self._marks(seq, n_keep, kept, tokens, reasoning) if h.traits.needs_checkpoints else ()
        )
        return FittedChat(
            msgs,
            dropped,
            n_keep,
            tokens,
            marks,
            reasoning,
            reasoning_format,
            prompt_opens_reasoning(text, reasoning_format),
            room,
        )

    def _marks(
        self,
        seq: Sequence,
        n_keep: int,
        kept: list[Message],
        tokens: list[int],
        reasoning: ReasoningOptions | None,
    ) -> tuple[int, ...]:
        """Where to checkpoint a chat prompt besides its end: after the system prompt and
        before the last user message (an edit of that message restores there)."""
        marks = [n_keep] if n_keep > 1 else []
        last_user = max((i for i, m in enumerate(kept) if m.get("role") == "user"), default=0)
        if last_user > 0:
            before = self._h.tokenize_chat(
                self._h.render_chat(kept[:last_user], False, reasoning, _tools(seq))
            )
            if common_prefix(before, tokens) == len(before):
                marks.append(len(before))
        return tuple(marks)

    def message_boundaries(self, seq: Sequence) -> list[int]:
        """Token offsets where messages start in the cache, for cutting at whole messages."""
        if not seq.messages:
            return []
        head, body = _split_head(seq.messages)
        body = body[seq.n_dropped :]
        bounds = []
        for i in range(1, len(body) + 1):
            toks = self._h.tokenize_chat(
                self._h.render_chat(head + body[:i], False, seq.reasoning, _tools(seq))
            )
            n = common_prefix(toks, seq.tokens)
            if n == len(toks):
                bounds.append(n)
            else:
                break
        return bounds
