"""A conversation longer than the context, on every cache family: what the model sees and
what each turn decodes once old messages fall out.

The reply's reserve is clamped (a 1024-token ``max_tokens`` in a 512-token context keeps a
quarter, 128, not half); once messages are dropped the next turns append to a prefix the cache
holds (attention caches shift the kept part into place, the others drop down to half the
budget at once and re-read from the system prompt's checkpoint only now and then); and
every reply equals a fresh run of the same kept tokens.

Which fresh run (issue 18, item 10): the probe decodes the kept tokens whole, the turn reused
a cached prefix (another chunking). Identity holds on the random-weight tiny models here
(checked per turn below); with trained weights it would not, and a test of such a model
compares logits within a tolerance instead (tests/engine/test_families.py,
``assert_logits_close``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.engine import Engine, SamplingParams
from app.engine.chat_fit import reply_reserve
from tests.engine.test_families import SYSTEM, WORDS, _open
from tests.support.arch_models import ARCHITECTURES

Message = dict[str, Any]
N_CTX = 512
REPLY = SamplingParams(temperature=0, max_tokens=8, grammar=WORDS)
TOPICS = [
    "hello world what is my name",
    "one two three four five",
    "yes no yes the chat",
    "what is the model",
    "the name is llama",
]


def _user(i: int) -> Message:
    return {"role": "user", "content": TOPICS[i % len(TOPICS)]}


def _fresh_tokens(engine: Engine, prompt: list[int]) -> list[int]:
    probe = engine.open_sequence()
    try:
        engine.set_tokens(probe, prompt)
        return engine.complete(probe, REPLY).tokens
    finally:
        engine.close_sequence(probe)


def test_the_reply_reserve_is_clamped_to_a_quarter_of_the_context() -> None:
    assert reply_reserve(1024, 512) == 128  # the demo model's case: 384 tokens of history
    assert reply_reserve(64, 512) == 64
    assert reply_reserve(None, 512) == 128
    assert reply_reserve(0, 4096) == 1024
    assert reply_reserve(1024, 32) == 16  # never more than half a tiny context


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_overflowing_conversation_keeps_its_cache_on_every_family(
    arch: str, family_models: dict[str, Path]
) -> None:
    with _open(family_models[arch], n_ctx=2 * N_CTX, n_seq_max=2, kv_unified=False) as engine:
        key = engine.open_sequence()
        history: list[Message] = [SYSTEM]
        n_keep = len(engine.tokenize(engine.render_chat([SYSTEM], add_generation_prompt=False)))
        turns_after_overflow = 0
        rereads = 0
        dropped_before = 0
        decoded = rereading_all = 0  # after the overflow: decoded, and what re-reading costs
        for i in range(40):
            history.append(_user(i))
            engine.set_chat(key, history, reserve=1024)
            info = engine.info(key)
            assert info.n_reserved == reply_reserve(1024, N_CTX) == 128
            assert info.n_tokens + info.n_reserved <= N_CTX
            completion = engine.complete(key, REPLY)
            assert completion.error is None and completion.tokens
            n_dropped = engine.info(key).n_dropped
            # The new message with the template's markers, and the end of the last reply:
            # its last sampled token (sampled, not decoded yet) and its end-of-turn marker,
            # and the reply itself where its text tokenizes another way than it was sampled
            # (the prompt is the tokenized text: processed again from the first difference,
            # or from the checkpoint after the prompt where the cache cannot be cut).
            n_new = len(engine.tokenize(engine.render_chat([history[-1]]), add_special=False))
            n_reply = len(engine.tokenize(history[-2]["content"], add_special=False)) if i else 0
            if i and completion.n_prompt_processed > n_new + n_reply + 4:
                # The history was read again: from the system prompt (its checkpoint where
                # the cache cannot be cut), and only on a turn that dropped more messages.
                assert n_dropped > dropped_before, (i, completion.n_prompt_processed, n_new)
                assert completion.n_prompt_processed <= completion.n_prompt - n_keep + 1
                rereads += 1
            if n_dropped:
                turns_after_overflow += 1
                decoded += completion.n_prompt_processed
                rereading_all += completion.n_prompt - n_keep
                # What the cache held answers as a fresh sequence given the same tokens.
                prompt = engine.tokens(key)[: completion.n_prompt]
                assert completion.tokens == _fresh_tokens(engine, prompt), i
            dropped_before = n_dropped
            history.append({"role": "assistant", "content": completion.text})
            if turns_after_overflow >= 10:
                break
        assert turns_after_overflow >= 10
        # Half the budget at once: one turn in two to four reads the (halved) history
        # again, the others append: less than half of what re-reading the kept history
        # every turn costs (and dropping one message at a time, as before, kept the history
        # near the whole budget: twice that again).
        assert 1 <= rereads <= 5
        assert decoded * 2 <= rereading_all, (decoded, rereading_all)
