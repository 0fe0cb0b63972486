"""A message's siblings while another connection deletes it (the window's reader against
the session thread's recorder, which drops a reply that failed before writing anything).

The window read the message, then its siblings in a second statement; a drop landing
between the two left a list without the message, and ``sibling_position`` died with
ValueError "2 is not in list" (tests/ui/test_window_polish.py, once). The delete is made
to land before each statement the read runs in turn (SQLite's trace callback fires as a
statement starts, before it reads), so every interleaving is tried, not only the lucky
ones: each answer is either right or NotFoundError.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator

import pytest

from app.storage import Database
from app.storage.errors import NotFoundError


def _interleavings(
    db: Database, writer: Database, read: Callable[[int], object]
) -> list[tuple[int, object]]:
    """Run ``read`` on a fresh failed reply once per statement it executes, the reply
    dropped (by ``writer``) just before the k-th of them; returns (k, what it gave)."""
    conn: sqlite3.Connection = db._conn
    outcomes: list[tuple[int, object]] = []
    k = 1
    while True:
        conv = writer.create_conversation("race")
        user = writer.add_message(conv.id, "user", "hello")
        reply = writer.begin_reply(conv.id, user.id)
        seen = 0

        def trace(_sql: str, reply_id: int = reply.id, at: int = k) -> None:
            nonlocal seen
            seen += 1
            if seen == at:
                writer.delete_branch(reply_id)

        conn.set_trace_callback(trace)
        try:
            outcome: object = read(reply.id)
        except NotFoundError as exc:
            outcome = exc
        finally:
            conn.set_trace_callback(None)
        outcomes.append((k, outcome))
        if seen < k:  # the delete never landed: every statement has had its turn
            return outcomes
        k += 1


@pytest.fixture
def writer(db: Database) -> Iterator[Database]:
    other = db.clone()
    yield other
    other.close()


def test_sibling_position_is_right_or_not_found_whenever_the_reply_goes(
    db: Database, writer: Database
) -> None:
    outcomes = _interleavings(db, writer, db.sibling_position)
    *raced, (_, untouched) = outcomes
    assert raced, "sibling_position ran no statement"
    for k, outcome in raced:
        assert isinstance(outcome, NotFoundError), (k, outcome)
        assert "does not exist" in str(outcome)
    assert untouched == (1, 1)


def test_siblings_never_leave_out_the_message_asked_about(db: Database, writer: Database) -> None:
    outcomes = _interleavings(db, writer, db.siblings)
    *raced, (_, untouched) = outcomes
    assert raced
    for k, outcome in raced:
        assert isinstance(outcome, NotFoundError), (k, outcome)
    assert isinstance(untouched, list) and len(untouched) == 1


def test_positions_among_several_branches(db: Database) -> None:
    conv = db.create_conversation("branches")
    first = db.add_message(conv.id, "user", "a")
    edit = db.add_message(conv.id, "user", "b")  # a root sibling
    replies = [db.begin_reply(conv.id, first.id) for _ in range(3)]
    other = db.create_conversation("elsewhere")
    db.add_message(other.id, "user", "not a sibling: another conversation's root")
    assert db.sibling_position(first.id) == (1, 2)
    assert db.sibling_position(edit.id) == (2, 2)
    assert [db.sibling_position(r.id) for r in replies] == [(1, 3), (2, 3), (3, 3)]
    assert [m.id for m in db.siblings(replies[1].id)] == [r.id for r in replies]
    with pytest.raises(NotFoundError, match="does not exist"):
        db.sibling_position(10_000)
    with pytest.raises(NotFoundError, match="does not exist"):
        db.siblings(10_000)
