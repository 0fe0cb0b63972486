"""The token route's rules (app/remote/completion.py): what is sent as a mixed prompt,
which reply tokens are kept for the next turn, how a /completion chunk reads."""

from __future__ import annotations

from app.engine import SamplingParams
from app.remote.completion import (
    Held,
    Prepared,
    finish_of,
    held_after,
    prepare,
    prompt_of,
    read_piece,
)


def prepared(text: str, *parts: str | int) -> Prepared:
    return Prepared({}, text, parts or (text,), 0)


def test_a_prompt_with_token_ids_is_mixed_and_one_of_text_alone_is_a_string() -> None:
    assert prompt_of(("<s>hi", 5, 6, "\nnext")) == ["<s>hi", 5, 6, "\nnext"]
    # a list of texts alone would be several prompts to llama-server
    assert prompt_of(("<s>hi", "\nnext")) == "<s>hi\nnext"


def test_a_reply_that_ran_to_its_limit_keeps_every_token() -> None:
    held = held_after(prepared("P:"), " a b", [7, 8], "limit", 2)
    assert held == (Held("P:", ("P:",)), Held("P: a b", ("P:", 7, 8)))


def test_a_reply_ended_by_its_end_token_leaves_that_token_to_the_template() -> None:
    held = held_after(prepared("P:"), " a", [7, 2], "eos", 2)
    assert held[-1] == Held("P: a", ("P:", 7))


def test_tokens_that_may_not_stand_for_the_text_are_not_kept() -> None:
    base = prepared("P:", "P:", 3, 4, "Q:")
    prompt_only = (Held("P:", ("P:", 3, 4, "Q:")),)
    assert held_after(base, " a", [7], "word", 1) == prompt_only  # a stop string's tokens
    assert held_after(base, " a", [7], "limit", 2) == prompt_only  # one held back (UTF-8)
    assert held_after(base, " a", [7], None, 1) == prompt_only  # failed or cancelled
    assert held_after(base, " a", [7], "limit", None) == prompt_only


def test_a_completion_chunk_reads_as_text_tokens_and_end() -> None:
    assert read_piece({"content": " hi", "tokens": [5], "stop": False, "tokens_predicted": 1})
    piece = read_piece({"content": " hi", "tokens": [5], "stop": False, "tokens_predicted": 1})
    assert (piece.content, piece.tokens, piece.stop_type) == (" hi", (5,), None)
    last = read_piece(
        {"content": "", "tokens": [], "stop": True, "stop_type": "limit", "tokens_predicted": 9}
    )
    assert (last.stop_type, last.n_predicted) == ("limit", 9)
    # a prompt-progress chunk carries a placeholder token that is no reply token
    progress = read_piece({"content": "", "tokens": [0], "prompt_progress": {"total": 5}})
    assert progress.tokens == () and progress.stop_type is None
    assert finish_of("limit") == "length" and finish_of("eos") == "stop"
    assert finish_of("word") == "stop" and finish_of(None) is None


def test_the_longest_earlier_turn_the_prompt_begins_with_is_sent_again() -> None:
    first = Held("P:", ("P:",))
    reply = Held("P: a", ("P:", 7))
    chat = {"temperature": 0.0, "id_slot": 1}
    again = prepare(chat, SamplingParams(), (first, reply), "P: a Q:")
    assert again.body["prompt"] == ["P:", 7, " Q:"] and again.reused == 2
    regenerate = prepare(chat, SamplingParams(), (first, reply), "P:")
    assert regenerate.body["prompt"] == "P:" and regenerate.body["id_slot"] == 1
    edited = prepare(chat, SamplingParams(), (first, reply), "R:")
    assert edited.body["prompt"] == "R:" and edited.reused == 0
