"""A full context shifts (keeping the system prompt); stop works mid-prompt."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from app.engine import ContextFullError, ContextShifted, Engine, Event, SamplingParams
from tests.support.settings import small_settings


def test_shift_keeps_system_prompt_and_goes_on(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings(n_ctx=256, n_batch=64, n_ubatch=64)) as engine:
        key = engine.open_sequence()
        system = "you are a llama desk model"
        messages = [{"role": "user", "content": "hello world " * 8}]
        engine.set_chat(key, messages, system=system, reserve=16)
        n_keep = engine._seqs[key].n_keep
        system_tokens = engine.tokenize(
            engine.render_chat([{"role": "system", "content": system}], False)
        )
        assert n_keep == len(system_tokens) and n_keep > 3
        shifts: list[ContextShifted] = []
        params = SamplingParams(temperature=0.0, max_tokens=600)
        # The random model may emit an end-of-generation token: ban nothing, just re-start until shifted.
        completion = engine.complete(
            key,
            params,
            on_event=lambda e: shifts.append(e) if isinstance(e, ContextShifted) else None,
        )
        while not shifts and completion.finish_reason == "eog":
            engine.append_text(key, " one two three")
            completion = engine.complete(
                key,
                params,
                on_event=lambda e: shifts.append(e) if isinstance(e, ContextShifted) else None,
            )
        assert shifts, "the context never filled"
        assert shifts[0].n_kept == n_keep
        tokens = engine.tokens(key)
        assert tokens[:n_keep] == system_tokens  # the system prompt survived the shift
        assert len(tokens) <= engine.n_ctx_seq
        assert completion.finish_reason in ("length", "eog")
        assert len(completion.tokens) > 0


def test_stop_policy_finishes_with_context_full(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings(n_ctx=128, n_batch=64, n_ubatch=64)) as engine:
        engine.context_full_policy = "stop"
        key = engine.open_sequence()
        engine.set_tokens(key, [1] + [300] * 100)
        completion = engine.complete(key, SamplingParams(temperature=0.0, max_tokens=500))
        room = engine.n_ctx_seq - 101
        if completion.finish_reason == "eog":  # the random model may end early
            assert len(completion.tokens) < room
        else:
            assert completion.finish_reason == "context_full"
            assert len(completion.tokens) == room + 1  # the last sample had no cell left
        assert len(engine.tokens(key)) <= engine.n_ctx_seq


def test_prompt_longer_than_context_is_a_clear_error(engine: Engine) -> None:
    key = engine.open_sequence()
    with pytest.raises(ContextFullError, match="context holds"):
        engine.set_tokens(key, [1] + [300] * 5000)
    # The sequence is still usable.
    engine.set_prompt(key, "hello")
    assert engine.complete(key, SamplingParams(temperature=0, max_tokens=2)).finish_reason in (
        "length",
        "eog",
    )


def test_long_chat_drops_oldest_messages_to_fit(tiny_model: Path) -> None:
    with Engine.open(tiny_model, small_settings(n_ctx=256)) as engine:
        key = engine.open_sequence()
        messages = []
        for i in range(30):
            messages.append({"role": "user", "content": f"hello world {i} " * 3})
            messages.append({"role": "assistant", "content": "yes one two"})
        messages.append({"role": "user", "content": "what is my name ?"})
        engine.set_chat(key, messages, system="you are a model", reserve=32)
        held = engine.detokenize(engine.pending_tokens(key), special=True)
        assert "you are a model" in held and "what is my name" in held
        assert "hello world 0 " not in held
        assert len(engine.pending_tokens(key)) <= 256 - 32


def test_stop_mid_prompt_within_100ms(tiny_model: Path) -> None:
    # A big batch of a wide model: one decode takes long enough to stop in the middle.
    from tests.support.gguf_models import TinySpec, write_tiny_model

    path = write_tiny_model(
        tiny_model.parent / "wide.gguf",
        TinySpec(n_embd=512, n_head=8, n_head_kv=8, n_layer=4, n_ff=2048, seed=3, n_ctx_train=8192),
    )
    with Engine.open(
        path, small_settings(n_ctx=4096, n_batch=4096, n_ubatch=256, n_seq_max=2)
    ) as engine:
        key = engine.open_sequence()
        prompt = [1] + [300 + (i % 100) for i in range(4000)]
        engine.set_tokens(key, prompt)
        engine.start(key, SamplingParams(temperature=0.0, max_tokens=8))
        stopped_at: list[float] = []

        def stopper() -> None:
            time.sleep(0.3)
            stopped_at.append(time.perf_counter())
            engine.stop(key)

        thread = threading.Thread(target=stopper)
        thread.start()
        t0 = time.perf_counter()
        engine.step()  # one decode of the whole prompt; the stop aborts it
        returned = time.perf_counter()
        thread.join()
        completion = engine.run_until_done(key)
        assert completion.finish_reason == "aborted"
        assert stopped_at and returned - stopped_at[0] < 0.1, (
            f"stop took {returned - stopped_at[0]:.3f}s"
        )
        assert returned - t0 < 5
        # The cache is consistent: whole micro-batches kept, and the sequence goes on from there.
        held = engine.tokens(key)
        assert held == prompt[: len(held)]
        assert len(held) % 256 == 0 and len(held) < len(prompt)
        assert engine.context is not None
        assert engine.context.seq_pos_max(engine._seqs[key].seq_id or 0) + 1 == len(held)
        engine.set_tokens(key, prompt[:300])
        assert engine.complete(key, SamplingParams(temperature=0, max_tokens=2)).finish_reason in (
            "length",
            "eog",
        )


def test_stop_mid_reply(engine: Engine) -> None:
    key = engine.open_sequence()
    engine.set_prompt(key, "hello world")
    engine.start(key, SamplingParams(temperature=0.0, max_tokens=500))
    for _ in range(3):
        engine.step()
    engine.stop(key)
    engine.step()
    completion = engine.run_until_done(key)
    assert completion.finish_reason in ("aborted", "eog")
    assert not engine.is_busy(key)


def test_full_cache_pool_evicts_idle_sequences(tiny_model: Path) -> None:
    # Four slots share 512 cells; three idle sequences hold most of them.
    with Engine.open(
        tiny_model, small_settings(n_ctx=512, n_batch=64, n_ubatch=64, n_seq_max=4)
    ) as engine:
        idle = []
        for i in range(3):
            key = engine.open_sequence()
            engine.set_tokens(key, [1] + [300 + i] * 140)
            engine.prefill(key)
            engine.run_until_done(key)
            idle.append(key)
        busy = engine.open_sequence()
        engine.set_tokens(busy, [1] + [310] * 100)
        events: list[Event] = []
        completion = engine.complete(
            busy, SamplingParams(temperature=0.0, max_tokens=60), on_event=events.append
        )
        assert completion.finish_reason in ("length", "eog")
        evicted = [e.key for e in events if type(e).__name__ == "Evicted"]
        assert evicted and evicted[0] == idle[0]  # the least recently used went first
        # An evicted sequence comes back intact from its parked state.
        assert engine.parked_state(idle[0]) is not None
        assert engine.next_logits(idle[0]) is not None
        assert engine.tokens(idle[0]) == [1] + [300] * 140
