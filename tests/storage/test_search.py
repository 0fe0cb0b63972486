"""Full-text search: ranking, snippets, safety against FTS syntax in user input."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.storage import Database, fts_query


def _seed(db: Database) -> dict[str, int]:
    c1 = db.create_conversation("Camelids")
    c2 = db.create_conversation("Cooking")
    ids = {
        "dense": db.add_message(c1.id, "user", "llama llama llama: the llama is a camelid").id,
        "once": db.add_message(
            c1.id, "assistant", "A long text that mentions a llama only once " + "filler " * 80
        ).id,
        "other": db.add_message(c2.id, "user", "How long should I boil an egg?").id,
        "accent": db.add_message(c2.id, "assistant", "Crème brûlée needs a café torch").id,
    }
    ids["c1"], ids["c2"] = c1.id, c2.id
    return ids


def test_ranked_hits_with_snippets(db: Database) -> None:
    ids = _seed(db)
    hits = db.search("llama")
    assert [h.message_id for h in hits] == [ids["dense"], ids["once"]]  # best first
    assert hits[0].rank <= hits[1].rank
    assert hits[0].title == "Camelids" and hits[0].conversation_id == ids["c1"]
    assert hits[0].role == "user"
    assert "[llama]" in hits[0].snippet
    assert db.search("llama", limit=1)[0].message_id == ids["dense"]
    marked = db.search("egg", marks=("<b>", "</b>"))
    assert [h.message_id for h in marked] == [ids["other"]] and "<b>egg</b>" in marked[0].snippet


def test_words_all_required_prefix_and_diacritics(db: Database) -> None:
    ids = _seed(db)
    assert [h.message_id for h in db.search("llama once")] == [ids["once"]]
    assert [h.message_id for h in db.search("cam")] == [ids["dense"]]  # prefix: camelid
    assert [h.message_id for h in db.search("creme brulee")] == [ids["accent"]]
    assert [h.message_id for h in db.search("LLAMA ONCE")] == [ids["once"]]
    assert db.search("zebra") == [] and db.search("") == [] and db.search("   ") == []


def test_search_follows_edits_deletes_and_archive(db: Database) -> None:
    ids = _seed(db)
    c = db.create_conversation()
    u = db.add_message(c.id, "user", "stream")
    r = db.begin_reply(c.id, u.id)
    db.update_reply(r.id, "partial words about quokkas")
    assert [h.message_id for h in db.search("quokkas")] == [r.id]
    db.finish_reply(r.id, "final words about wombats")
    assert db.search("quokkas") == [] and [h.message_id for h in db.search("wombats")] == [r.id]
    db.set_archived(ids["c2"], True)
    assert len(db.search("egg")) == 1 and db.search("egg", include_archived=False) == []
    db.delete_conversation(ids["c1"])
    assert db.search("llama") == []
    db.restore_conversation(ids["c1"])
    assert len(db.search("llama")) == 2
    db.delete_branch(ids["once"])
    assert [h.message_id for h in db.search("llama")] == [ids["dense"]]


def test_fts_syntax_characters_are_plain_text(db: Database) -> None:
    c = db.create_conversation()
    m = db.add_message(
        c.id, "user", 'He said "NEAR(a b)" AND col:value OR x* ^start -minus (paren)'
    )
    for query in [
        '"',
        '""',
        "NEAR(",
        "a AND",
        "OR",
        "*",
        "col:value",
        "(paren",
        "^start",
        "-minus",
        '"NEAR(a',
        "AND OR NOT",
        "x*",
        "{a b}",
        "'",
        "\\",
        "\x00",
        "💥",
    ]:
        hits = db.search(query)
        assert all(h.message_id == m.id for h in hits)
    assert [h.message_id for h in db.search('"NEAR(a b)"')] == [m.id]
    assert [h.message_id for h in db.search("col:value")] == [m.id]
    assert fts_query('a"b cd') == '"a""b" "cd" *'
    assert fts_query("llama c") == '"llama" "c"'  # one letter: no prefix
    assert fts_query("!!! ???") is None


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(max_size=40))
def test_search_never_crashes_on_any_input(db: Database, text: str) -> None:
    db.search(text)


def test_common_words_rank_only_the_most_recent_window(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.storage.conversations.search as conversations

    monkeypatch.setattr(conversations, "SEARCH_WINDOW", 5)
    c = db.create_conversation()
    ids = [db.add_message(c.id, "user", "common " * (20 - i) + "word").id for i in range(12)]
    hits = db.search("common", limit=50)
    # Older messages repeat "common" more (better bm25) but are outside the window.
    assert sorted(h.message_id for h in hits) == ids[-6:]
    assert [h.message_id for h in hits] == ids[-6:]  # within it, best rank first


def test_hits_in_deleted_conversations_do_not_hide_others(db: Database) -> None:
    gone = db.create_conversation()
    for _ in range(40):
        db.add_message(gone.id, "user", "needle needle needle")
    kept = db.create_conversation()
    mine = db.add_message(kept.id, "user", "a needle somewhere in a long haystack of words")
    db.delete_conversation(gone.id)
    assert [h.message_id for h in db.search("needle", limit=1)] == [mine.id]


def test_snippets_mark_folded_and_prefix_matches() -> None:
    from app.storage._snippet import make_snippet, query_terms

    marks = ("[", "]")
    text = "Hello there, how does the llama work? Tell me about llamas"
    assert make_snippet(text, query_terms(["llama"]), True, marks) == (
        "Hello there, how does the [llama] work? Tell me about [llamas]"
    )
    long = "a " * 50 + "Crème brûlée needs a café torch " + "b " * 50
    snip = make_snippet(long, query_terms(["creme", "CAFE"]), False, marks)
    assert snip.startswith("…") and snip.endswith("…") and "[Crème]" in snip and "[café]" in snip
    assert make_snippet("one two three four", ["four"], False, marks, width=2) == "…three [four]"
    assert make_snippet("", ["x"], False, marks) == ""
    assert make_snippet("no match here", ["zebra"], False, marks) == "no match here"
