"""Generation through the real engine: stops, limits, grammar, chat reuse, embeddings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.engine import ContextError, Engine, SamplingParams, TokenText
from app.engine.settings import SettingsError
from tests.support.settings import small_settings


def test_max_tokens_and_streamed_text_add_up(engine: Engine) -> None:
    key = engine.open_sequence()
    engine.set_prompt(key, "hello world")
    streamed: list[str] = []
    completion = engine.complete(
        key,
        SamplingParams(temperature=0, max_tokens=12),
        on_event=lambda e: streamed.append(e.text) if isinstance(e, TokenText) else None,
    )
    assert "".join(streamed) == completion.text
    if completion.finish_reason == "length":
        assert len(completion.tokens) == 12
    assert completion.tokens_per_second > 0


def test_stop_string_ends_generation_without_showing_it(engine: Engine) -> None:
    key = engine.open_sequence()
    engine.set_prompt(key, "hello world")
    free = engine.complete(key, SamplingParams(temperature=0, max_tokens=30))
    words = [w for w in free.text.split() if len(w) >= 2 and w.isascii() and w.isprintable()]
    if not words:
        pytest.skip("the random model produced no plain word to stop on")
    stop = words[len(words) // 2]
    engine.set_prompt(key, "hello world")
    stopped = engine.complete(key, SamplingParams(temperature=0, max_tokens=30, stop=[stop]))
    assert stopped.finish_reason == "stop"
    assert stop not in stopped.text
    assert free.text.startswith(stopped.text)


def test_grammar_constrains_output(engine: Engine) -> None:
    key = engine.open_sequence()
    engine.set_prompt(key, "hello world")
    grammar = 'root ::= ("yes" | "no") " " ("one" | "two")'
    completion = engine.complete(
        key, SamplingParams(temperature=0.8, seed=1, max_tokens=20, grammar=grammar)
    )
    assert completion.text.strip() in {"yes one", "yes two", "no one", "no two"}


def test_invalid_grammar_is_a_clear_error(engine: Engine) -> None:
    key = engine.open_sequence()
    engine.set_prompt(key, "hello")
    with pytest.raises(ContextError, match="GBNF"):
        engine.start(key, SamplingParams(grammar="root ::= (("))
    assert not engine.is_busy(key)


def test_repeat_penalty_changes_greedy_output(engine: Engine) -> None:
    key = engine.open_sequence()
    results = []
    for penalty in (1.0, 1.8):
        engine.set_prompt(key, "one one one one one one")
        results.append(
            engine.complete(
                key, SamplingParams(temperature=0, max_tokens=24, repeat_penalty=penalty)
            ).tokens
        )
    assert results[0] != results[1]


def test_next_turn_processes_only_the_new_suffix(engine: Engine) -> None:
    key = engine.open_sequence()
    greedy = SamplingParams(temperature=0, max_tokens=8)
    messages = [
        {"role": "system", "content": "you are a model"},
        {"role": "user", "content": "hello world"},
    ]
    first = engine.chat(messages, greedy, key=key)
    assert first.n_prompt_processed == first.n_prompt
    # The random model's reply is noise; a clean reply stands in for it (it is re-tokenized).
    messages += [
        {"role": "assistant", "content": "yes one two"},
        {"role": "user", "content": "what is my name ?"},
    ]
    second = engine.chat(messages, greedy, key=key)
    # Everything the first turn's prompt held is reused; only the new turn is processed.
    assert second.n_prompt - second.n_prompt_processed >= first.n_prompt - 1
    assert second.n_prompt_processed < second.n_prompt / 2
    # Regenerating the last reply re-processes nothing: the prompt's last logits were kept.
    again = engine.chat(messages, greedy, key=key)
    assert again.n_prompt_processed == 0
    assert again.tokens == second.tokens  # the same kept logits: identical by construction


def test_editing_an_early_message_removes_only_the_changed_suffix(engine: Engine) -> None:
    key = engine.open_sequence()
    messages = [
        {"role": "user", "content": "hello world"},
        {"role": "assistant", "content": "yes"},
        {"role": "user", "content": "one two"},
    ]
    engine.set_chat(key, messages)
    engine.prefill(key)
    engine.run_until_done(key)
    before = engine.tokens(key)
    edited = [*messages[:2], {"role": "user", "content": "three four"}]
    processed = engine.set_chat(key, edited)
    kept = engine.tokens(key)
    assert kept == before[: len(kept)] and len(kept) > len(before) // 2
    assert processed < len(before)


def test_embeddings_are_pooled_per_text(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings(embeddings=True, pooling_type="mean")) as engine:
        a, b, a2 = engine.embed(["hello world", "one two three four", "hello world"])
        assert a.shape == (64,)
        assert np.allclose(a, a2, atol=1e-5)
        assert not np.allclose(a, b)
        assert np.linalg.norm(a) == pytest.approx(1.0, rel=1e-4)


def test_embeddings_with_sequences_that_do_not_divide_the_micro_batch_are_refused(
    tiny_model: Path,
) -> None:
    # llama.cpp aborts the whole process there (measured: n_ubatch 256 with n_seq_max 3, 5,
    # 6; 64 with 6), so the settings refuse it first, naming both fields.
    settings = small_settings(embeddings=True, pooling_type="mean", n_ubatch=64, n_seq_max=6)
    with pytest.raises(SettingsError, match="multiple of the parallel sequences") as caught:
        Engine.open(tiny_model, settings)
    assert caught.value.fields == ("n_ubatch", "n_seq_max")


def test_next_turn_prompt_is_the_tokenized_text_even_where_the_reply_was_sampled_otherwise() -> (
    None
):
    """A reply the model split differently from the tokenizer is processed again from the
    first token where the cache differs: the prompt is the tokenization of the rendered
    text, as llama-server makes it, so the reply is the one a fresh run of the same
    conversation gives (issue 18, item 8c)."""
    from app.paths import demo_model_path

    if not demo_model_path().is_file():
        pytest.skip("the demo model (a byte-level BPE vocabulary) is not in resources/models")
    with Engine.open(demo_model_path(), small_settings(n_ctx=512)) as engine:
        key = engine.open_sequence()
        messages = [{"role": "user", "content": "Hello!"}]
        engine.set_chat(key, messages)
        engine.prefill(key)
        engine.run_until_done(key)
        n_prompt = len(engine.tokens(key))
        reply = "Hello! How can I help you today?"
        # As if sampled one character at a time: the same text, not the tokenizer's split.
        odd = [t for ch in reply for t in engine.tokenize(ch, add_special=False)]
        assert odd != engine.tokenize(reply, add_special=False)
        engine.append_tokens(key, odd)
        engine.prefill(key)
        engine.run_until_done(key)
        messages += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "What is 2 + 3?"},
        ]
        expected = engine.tokenize(engine.render_chat(messages))
        processed = engine.set_chat(key, messages)
        assert engine.tokens(key) + engine.pending_tokens(key) == expected
        # Kept: the first prompt and the reply's tokens up to the first that differs.
        kept = len(engine.tokens(key))
        assert n_prompt <= kept < n_prompt + len(odd)
        assert processed == len(expected) - kept


def test_tokenizers_that_add_spaces_fall_back_to_the_common_prefix(engine: Engine) -> None:
    key = engine.open_sequence()
    engine.set_chat(key, [{"role": "user", "content": "hello world"}])
    engine.prefill(key)
    engine.run_until_done(key)
    engine.append_tokens(key, engine.tokenize("yes one", add_special=False))
    engine.prefill(key)
    engine.run_until_done(key)
    messages = [
        {"role": "user", "content": "hello world"},
        {"role": "assistant", "content": "yes one"},
        {"role": "user", "content": "two"},
    ]
    engine.set_chat(key, messages)
    # Whatever was kept, the cache plus the queue is exactly the rendered conversation.
    expected = engine.tokenize(engine.render_chat(messages))
    got = engine.tokens(key) + engine.pending_tokens(key)
    assert engine.detokenize(got, special=True) == engine.detokenize(expected, special=True)


def test_per_sequence_context_policy(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings(n_ctx=256)) as engine:
        key = engine.open_sequence()
        engine.set_policy(key, "stop")
        engine.set_tokens(key, [1] + [300] * 200)
        completion = engine.complete(key, SamplingParams(temperature=0.0, max_tokens=500))
        assert completion.finish_reason in ("context_full", "eog")
        with pytest.raises(Exception, match="shift"):
            engine.set_policy(key, "explode")
