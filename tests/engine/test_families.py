"""Every engine behaviour a chat tab relies on, proved on every architecture family.

Attention caches can be cut anywhere; recurrent and hybrid ones cannot, and sliding-window
ones forget (swa_full off). Where llama.cpp cannot cut, the engine restores a checkpoint or
re-processes text: these tests compare every reply with a fresh run of the same
conversation, and count what was decoded, so a fallback that is wrong or slow fails here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.engine import Completion, ContextSettings, Engine, SamplingParams
from app.engine.cache import CacheFamily
from app.engine.events import ContextShifted
from tests.support.arch_models import ARCHITECTURES, family
from tests.support.settings import small_settings

# Replies of plain words, so a reply re-rendered into the next prompt is the same text.
WORDS = "root ::= [a-z ]+"
GREEDY = SamplingParams(temperature=0, max_tokens=8, grammar=WORDS)
SYSTEM = {"role": "system", "content": "you are a model"}
USER1 = {"role": "user", "content": "hello world what is my name"}
USER2 = {"role": "user", "content": "one two three four five"}
USER2_EDITED = {"role": "user", "content": "yes no yes the chat"}

Message = dict[str, Any]


@pytest.fixture(params=ARCHITECTURES)
def arch(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _open(path: Path, **settings: Any) -> Engine:
    # One thread: llama.cpp's spinning barrier crawls on a shared 2-core machine, and one
    # thread sums in one order, so greedy ties break the same way in every run.
    return Engine.open(path, small_settings(**{"n_threads": 1, "n_threads_batch": 1, **settings}))


@pytest.fixture
def engine(arch: str, family_models: dict[str, Path]) -> Iterator[Engine]:
    with _open(family_models[arch]) as e:
        yield e


def cuts_by_checkpoint(engine: Engine) -> bool:
    return engine.cache_traits.needs_checkpoints


def turn(engine: Engine, key: int, messages: list[Message]) -> Completion:
    engine.set_chat(key, messages)
    return engine.complete(key, GREEDY)


def fresh(engine: Engine, messages: list[Message]) -> Completion:
    key = engine.open_sequence()
    try:
        return turn(engine, key, messages)
    finally:
        engine.close_sequence(key)


def fresh_same_prompt(engine: Engine, key: int, completion: Completion) -> list[int]:
    """The reply a new sequence gives to exactly the prompt tokens ``key`` just answered.

    (A reply's text can tokenize another way than it was sampled, and the engine keeps the
    sampled tokens; a fresh run of the conversation's text would be another prompt.)"""
    prompt = engine.tokens(key)[: completion.n_prompt]
    probe = engine.open_sequence()
    try:
        engine.set_tokens(probe, prompt)
        return engine.complete(probe, GREEDY).tokens
    finally:
        engine.close_sequence(probe)


def reply(completion: Completion) -> Message:
    return {"role": "assistant", "content": completion.text}


def test_engine_sees_the_family_the_model_has(arch: str, engine: Engine) -> None:
    expected = {
        "attention": CacheFamily.ATTENTION,
        "sliding-window": CacheFamily.SLIDING_WINDOW,
        "hybrid": CacheFamily.HYBRID,
        "recurrent": CacheFamily.RECURRENT,
    }[family(arch).value]
    assert engine.cache_traits.family is expected
    # The default keeps every sliding-window position: only recurrent state needs checkpoints.
    assert cuts_by_checkpoint(engine) == (expected in (CacheFamily.HYBRID, CacheFamily.RECURRENT))


def test_parallel_equals_alone(engine: Engine) -> None:
    conversations = [[SYSTEM, USER1], [USER2], [SYSTEM, USER2_EDITED]]
    alone = [fresh(engine, c).tokens for c in conversations]
    keys = [engine.open_sequence() for _ in conversations]
    for key, messages in zip(keys, conversations, strict=True):
        engine.set_chat(key, messages)
        engine.start(key, GREEDY)
    while engine.has_work():
        engine.step()
    together = [engine.run_until_done(key).tokens for key in keys]
    assert together == alone
    assert all(len(t) == GREEDY.max_tokens for t in alone)


def test_next_turn_decodes_only_the_new_tokens(engine: Engine) -> None:
    key = engine.open_sequence()
    first = turn(engine, key, [SYSTEM, USER1])
    held = engine.tokens(key)
    second = turn(engine, key, [SYSTEM, USER1, reply(first), USER2])
    assert second.n_prompt_processed == second.n_prompt - len(held)
    assert second.tokens == fresh_same_prompt(engine, key, second)


def test_regenerate_gives_the_first_reply_without_decoding_the_prompt(engine: Engine) -> None:
    key = engine.open_sequence()
    first = turn(engine, key, [SYSTEM, USER1])
    again = turn(engine, key, [SYSTEM, USER1])
    assert again.tokens == first.tokens
    # The prompt's last logits were kept (in a checkpoint where the cache cannot be cut).
    assert again.n_prompt_processed == 0


def test_regenerate_an_earlier_turn(engine: Engine) -> None:
    key = engine.open_sequence()
    first = turn(engine, key, [SYSTEM, USER1])
    history = [SYSTEM, USER1, reply(first), USER2]
    second = turn(engine, key, history)
    assert turn(engine, key, history).tokens == second.tokens
    assert turn(engine, key, [SYSTEM, USER1]).tokens == first.tokens


def test_edit_of_the_last_message_equals_a_fresh_run(engine: Engine) -> None:
    key = engine.open_sequence()
    first = turn(engine, key, [SYSTEM, USER1])
    held_after_reply = len(engine.tokens(key))
    turn(engine, key, [SYSTEM, USER1, reply(first), USER2])
    edited = [SYSTEM, USER1, reply(first), USER2_EDITED]
    result = turn(engine, key, edited)
    assert result.tokens == fresh_same_prompt(engine, key, result)
    # Only the edited message (and the template's markup around it) is decoded.
    assert result.n_prompt_processed <= result.n_prompt - held_after_reply


def test_edit_far_back_equals_a_fresh_run(engine: Engine) -> None:
    key = engine.open_sequence()
    first = turn(engine, key, [SYSTEM, USER1])
    turn(engine, key, [SYSTEM, USER1, reply(first), USER2])
    edited = [SYSTEM, USER2_EDITED]
    assert turn(engine, key, edited).tokens == fresh(engine, edited).tokens


def test_fork_at_a_message_boundary_decodes_nothing_and_answers_as_the_source(
    engine: Engine,
) -> None:
    src = engine.open_sequence()
    first = turn(engine, src, [SYSTEM, USER1])
    boundary = engine.tokens(src)
    turn(engine, src, [SYSTEM, USER1, reply(first), USER2])
    dst = engine.fork(src, len(boundary))
    assert engine.tokens(dst) == boundary
    assert engine.pending_tokens(dst) == []  # the state was copied, nothing to process
    history = [SYSTEM, USER1, reply(first), USER2_EDITED]
    in_fork = turn(engine, dst, history)
    assert in_fork.n_prompt_processed == in_fork.n_prompt - len(boundary)
    assert in_fork.tokens == fresh_same_prompt(engine, dst, in_fork)
    # The source is untouched by what the fork did.
    assert turn(engine, src, history).tokens == in_fork.tokens


def test_fork_of_everything_continues_like_the_source(engine: Engine) -> None:
    src = engine.open_sequence()
    first = turn(engine, src, [SYSTEM, USER1])
    held = engine.tokens(src)
    dst = engine.fork(src)
    assert engine.tokens(dst) == held
    history = [SYSTEM, USER1, reply(first), USER2]
    a, b = turn(engine, src, history), turn(engine, dst, history)
    assert a.tokens == b.tokens
    assert a.n_prompt_processed == b.n_prompt_processed


def test_save_and_restore_equals_uninterrupted(
    arch: str, engine: Engine, family_models: dict[str, Path]
) -> None:
    key = engine.open_sequence()
    first = turn(engine, key, [SYSTEM, USER1])
    saved = engine.save_state(key)
    held = engine.tokens(key)
    history = [SYSTEM, USER1, reply(first), USER2]
    uninterrupted = turn(engine, key, history)
    with _open(family_models[arch]) as other:
        reopened = other.open_sequence()
        assert other.restore_state(reopened, saved), other.last_restore_error
        assert other.tokens(reopened) == held
        after = turn(other, reopened, history)
        assert after.tokens == uninterrupted.tokens
        assert after.n_prompt_processed == after.n_prompt - len(held)
        # The checkpoints came along: regenerating the first reply decodes no prompt token.
        # (A sliding-window state holds only the window once restored: past it, the prompt
        # is processed again.)
        again = turn(other, reopened, [SYSTEM, USER1])
        assert again.tokens == first.tokens
        if other.cache_traits.family is CacheFamily.SLIDING_WINDOW:
            assert again.n_prompt_processed == again.n_prompt
        else:  # attention caches keep the last prompt's logits only: one token again
            assert again.n_prompt_processed == (0 if cuts_by_checkpoint(other) else 1)


def test_state_saved_right_after_the_prompt_generates_without_decoding(
    arch: str, engine: Engine, family_models: dict[str, Path]
) -> None:
    key = engine.open_sequence()
    engine.set_chat(key, [SYSTEM, USER1])
    engine.prefill(key)
    engine.run_until_done(key)
    saved = engine.save_state(key)
    expected = fresh(engine, [SYSTEM, USER1]).tokens
    with _open(family_models[arch]) as other:
        reopened = other.open_sequence()
        assert other.restore_state(reopened, saved), other.last_restore_error
        completion = other.complete(reopened, GREEDY)
        assert completion.tokens == expected
        assert completion.n_prompt_processed == 0


def test_context_full_keeps_going(
    engine: Engine, arch: str, family_models: dict[str, Path]
) -> None:
    with _open(family_models[arch], n_ctx=256, n_seq_max=1) as small:
        key = small.open_sequence()
        small.set_chat(key, [SYSTEM, USER1])
        shifts: list[ContextShifted] = []
        completion = small.complete(
            key,
            SamplingParams(temperature=0, max_tokens=400),
            on_event=lambda e: shifts.append(e) if isinstance(e, ContextShifted) else None,
        )
        assert completion.error is None
        assert completion.finish_reason == "length"
        assert len(completion.tokens) == 400
        assert shifts
        if not small.cache_traits.shifts_exactly:
            # The fallback re-processed the kept text: the cache now answers as a fresh
            # sequence given the same tokens does.
            held, nxt = small.tokens(key), small.pending_tokens(key)
            probe = small.open_sequence()
            small.set_tokens(probe, held)
            assert small.complete(probe, SamplingParams(temperature=0, max_tokens=1)).tokens == nxt


def test_rebuild_keeps_tabs(engine: Engine) -> None:
    key = engine.open_sequence()
    first = turn(engine, key, [SYSTEM, USER1])
    held = engine.tokens(key)
    history = [SYSTEM, USER1, reply(first), USER2]
    engine.reconfigure(
        ContextSettings(**{**engine.settings.to_dict(), "n_batch": 32, "n_ubatch": 32})
    )
    assert engine.tokens(key) == held
    after = turn(engine, key, history)
    assert after.tokens == fresh_same_prompt(engine, key, after)
    assert after.n_prompt_processed == after.n_prompt - len(held)


def test_stop_mid_prompt_then_the_turn_equals_a_fresh_run(
    arch: str, family_models: dict[str, Path]
) -> None:
    with _open(family_models[arch], n_batch=16, n_ubatch=16) as engine:
        long_user = {"role": "user", "content": " ".join(["one two three four"] * 20)}
        key = engine.open_sequence()
        engine.set_chat(key, [SYSTEM, long_user])
        engine.start(key, GREEDY)
        engine.step()
        engine.step()
        engine.stop(key)
        stopped = engine.run_until_done(key)
        assert stopped.finish_reason == "aborted"
        assert not stopped.tokens
        assert (
            turn(engine, key, [SYSTEM, long_user]).tokens
            == fresh(engine, [SYSTEM, long_user]).tokens
        )


def test_more_tabs_than_resident_slots(arch: str, family_models: dict[str, Path]) -> None:
    with _open(family_models[arch], n_seq_max=2) as engine:
        conversations = [[SYSTEM, USER1], [USER2], [SYSTEM, USER2_EDITED]]
        keys = [engine.open_sequence() for _ in conversations]
        firsts = [turn(engine, k, c) for k, c in zip(keys, conversations, strict=True)]
        for key, messages, first in zip(keys, conversations, firsts, strict=True):
            history = [*messages, reply(first), USER2]
            held = engine.tokens(key)
            result = turn(engine, key, history)
            assert result.tokens == fresh_same_prompt(engine, key, result)
            assert result.n_prompt_processed == result.n_prompt - len(held)


def test_split_cache_regenerate_and_fork(arch: str, family_models: dict[str, Path]) -> None:
    with _open(family_models[arch], kv_unified=False, n_ctx=1024, n_seq_max=4) as engine:
        key = engine.open_sequence()
        first = turn(engine, key, [SYSTEM, USER1])
        boundary = engine.tokens(key)
        turn(engine, key, [SYSTEM, USER1, reply(first), USER2])
        assert turn(engine, key, [SYSTEM, USER1]).tokens == first.tokens
        dst = engine.fork(key, len(boundary))
        history = [SYSTEM, USER1, reply(first), USER2_EDITED]
        result = turn(engine, dst, history)
        assert result.tokens == fresh_same_prompt(engine, dst, result)


def test_greedy_equals_llama_cpps_own_run(arch: str, family_models: dict[str, Path]) -> None:
    from tests.support.llama_reference import ReferenceUnavailable, run_llama_simple

    prompt, n_predict = "hello world what is my name", 24
    try:
        expected = run_llama_simple(family_models[arch], prompt, n_predict)
    except ReferenceUnavailable as exc:
        pytest.skip(str(exc))
    # llama-simple's threads (ggml's default, 4): the same sums in the same order.
    with _open(family_models[arch], n_threads=4, n_threads_batch=4) as engine:
        assert engine.model is not None
        key = engine.open_sequence()
        engine.set_prompt(key, prompt, raw=True)
        completion = engine.complete(key, SamplingParams(temperature=0, max_tokens=n_predict))
        pieces = engine.tokenize(prompt) + completion.tokens
        ours = b"".join(engine.model.piece(t, special=True) for t in pieces) + b"\n"
    # llama-simple prints each piece with printf("%s"): a <0x00> byte token prints nothing.
    assert ours.replace(b"\x00", b"") == expected


SLIDING = [a for a in ARCHITECTURES if family(a).value == "sliding-window"]
LONG_USER = {"role": "user", "content": " ".join(["one two three four five six"] * 12)}


@pytest.mark.parametrize("swa_arch", SLIDING)
def test_sliding_window_without_full_cache_cuts_back_correctly(
    swa_arch: str, family_models: dict[str, Path]
) -> None:
    # swa_full off: the window's cache (256 cells here) forgets positions of a ~330-token
    # conversation, so cutting back needs the checkpoints.
    with _open(family_models[swa_arch], swa_full=False, n_seq_max=1, n_batch=64) as engine:
        assert engine.cache_traits.needs_checkpoints
        key = engine.open_sequence()
        first = turn(engine, key, [SYSTEM, LONG_USER])
        held_after_reply = len(engine.tokens(key))
        assert held_after_reply > 300
        turn(engine, key, [SYSTEM, LONG_USER, reply(first), USER2])
        edited = [SYSTEM, LONG_USER, reply(first), USER2_EDITED]
        result = turn(engine, key, edited)
        assert result.n_prompt_processed <= result.n_prompt - held_after_reply
        expected = fresh_same_prompt(engine, key, result)
        assert result.tokens == expected
        again = turn(engine, key, edited)
        assert again.tokens == expected and again.n_prompt_processed == 0
        far_back = [SYSTEM, USER1]
        assert turn(engine, key, far_back).tokens == fresh(engine, far_back).tokens


def exercise_chat_features(engine: Engine) -> None:
    """Regenerate, edit the last message, fork at a boundary and reopen a saved state, each
    checked against a fresh run and for what it decodes."""
    key = engine.open_sequence()
    first = turn(engine, key, [SYSTEM, USER1])
    boundary = engine.tokens(key)
    again = turn(engine, key, [SYSTEM, USER1])
    assert again.tokens == first.tokens and again.n_prompt_processed == 0
    history = [SYSTEM, USER1, reply(first), USER2]
    second = turn(engine, key, history)
    assert second.n_prompt_processed == second.n_prompt - len(boundary)
    edited = [SYSTEM, USER1, reply(first), USER2_EDITED]
    result = turn(engine, key, edited)
    assert result.n_prompt_processed <= result.n_prompt - len(boundary)
    assert result.tokens == fresh_same_prompt(engine, key, result)
    fork = engine.fork(key, len(boundary))
    assert engine.pending_tokens(fork) == [] and engine.tokens(fork) == boundary
    in_fork = turn(engine, fork, history)
    assert in_fork.tokens == second.tokens
    saved = engine.save_state(key)
    reopened = engine.open_sequence()
    assert engine.restore_state(reopened, saved), engine.last_restore_error
    regenerated = turn(engine, reopened, edited)
    assert regenerated.tokens == result.tokens
    # A restored sliding-window state holds the window only: cutting back re-reads the text.
    sliding = engine.cache_traits.family is CacheFamily.SLIDING_WINDOW
    assert regenerated.n_prompt_processed == (regenerated.n_prompt if sliding else 0)
    for k in (key, fork, reopened):
        engine.close_sequence(k)


@pytest.mark.parametrize("kv_type", ["q8_0", "q4_0"])
def test_quantized_cache(arch: str, family_models: dict[str, Path], kv_type: str) -> None:
    with _open(family_models[arch], type_k=kv_type, type_v=kv_type) as engine:
        exercise_chat_features(engine)
