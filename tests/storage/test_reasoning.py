"""A reasoning model's thinking, stored apart from its answer: API, export, import."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from app.storage import Database, ImportValidationError, Message
from app.storage.export import (
    FORMAT,
    dumps,
    export_json,
    export_markdown,
    import_json,
    reasoning_block,
)

NASTY = (
    "Is it </details> yet?\n"
    "</details>\n"
    "<script>alert('x')</script>\n"
    "\n"
    "```python\n"
    "print('a fence never closed')\n"
)


def _reasoned(db: Database) -> tuple[int, Message]:
    c = db.create_conversation("Thinking")
    u = db.add_message(c.id, "user", "Which camelid is smallest?")
    a = db.add_message(
        c.id,
        "assistant",
        "The vicuña.",
        u.id,
        reasoning="Alpaca, llama, guanaco, vicuña... the vicuña is lightest.",
        reasoning_ms=12_300.0,
    )
    return c.id, a


def test_add_message_keeps_reasoning_apart_from_content(db: Database) -> None:
    cid, a = _reasoned(db)
    assert (a.content, a.reasoning, a.reasoning_ms) == (
        "The vicuña.",
        "Alpaca, llama, guanaco, vicuña... the vicuña is lightest.",
        12_300.0,
    )
    thread = db.get_thread(cid)
    assert thread[1] == a and db.get_message(a.id) == a
    assert (thread[0].reasoning, thread[0].reasoning_ms) == ("", None)
    assert db.messages(cid)[1] == a and db.children(thread[0].id) == [a]
    assert db.siblings(a.id) == [a]
    plain = db.add_message(cid, "assistant", "no thinking", thread[0].id)
    assert (plain.reasoning, plain.reasoning_ms) == ("", None)


def test_search_covers_the_answer_not_the_reasoning(db: Database) -> None:
    _, a = _reasoned(db)
    assert [h.message_id for h in db.search("vicuña")] == [a.id]
    assert db.search("guanaco") == [] and db.search("lightest") == []


def test_streaming_reply_saves_both_parts(db: Database) -> None:
    c = db.create_conversation()
    u = db.add_message(c.id, "user", "think")
    r = db.begin_reply(c.id, u.id)
    assert (r.reasoning, r.reasoning_ms) == ("", None)
    assert db.update_reply(r.id, "", reasoning="Let me")
    partial = db.get_message(r.id)
    assert (partial.status, partial.content, partial.reasoning) == ("partial", "", "Let me")
    assert db.update_reply(r.id, "", reasoning="Let me think.")
    assert db.update_reply(r.id, "It", reasoning_ms=2500.0)  # thinking over: reasoning kept
    assert db.update_reply(r.id, "It is 4.")  # an old-style call keeps both as well
    partial = db.get_message(r.id)
    assert (partial.content, partial.reasoning, partial.reasoning_ms) == (
        "It is 4.",
        "Let me think.",
        2500.0,
    )
    done = db.finish_reply(r.id, "It is 4.", token_count=9)
    assert (done.status, done.reasoning, done.reasoning_ms, done.token_count) == (
        "complete",
        "Let me think.",
        2500.0,
        9,
    )
    assert db.update_reply(r.id, "late", reasoning="late") is False
    assert db.get_message(r.id).reasoning == "Let me think."


def test_finish_reply_sets_the_final_reasoning(db: Database) -> None:
    c = db.create_conversation()
    u = db.add_message(c.id, "user", "q")
    r = db.begin_reply(c.id, u.id)
    db.update_reply(r.id, "", reasoning="Hmm")
    done = db.finish_reply(r.id, "", "stopped", reasoning="Hmm, so", reasoning_ms=800)
    assert (done.status, done.content, done.reasoning, done.reasoning_ms) == (
        "stopped",
        "",
        "Hmm, so",
        800.0,
    )
    r2 = db.begin_reply(c.id, u.id)  # regenerated: a sibling with its own reasoning
    assert db.finish_reply(r2.id, "a", reasoning="").reasoning == ""
    assert db.get_message(r.id).reasoning == "Hmm, so"


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, "12", True])
def test_bad_reasoning_duration_is_refused(db: Database, bad: object) -> None:
    c = db.create_conversation()
    u = db.add_message(c.id, "user", "q")
    r = db.begin_reply(c.id, u.id)
    with pytest.raises(ValueError, match="reasoning_ms"):
        db.add_message(c.id, "assistant", "x", u.id, reasoning_ms=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reasoning_ms"):
        db.update_reply(r.id, "x", reasoning_ms=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reasoning_ms"):
        db.finish_reply(r.id, "x", reasoning_ms=bad)  # type: ignore[arg-type]
    assert db.get_message(r.id).status == "partial" and len(db.messages(c.id)) == 2


def test_fork_copies_reasoning(db: Database) -> None:
    cid, a = _reasoned(db)
    f = db.fork_conversation(cid, a.id)
    copied = db.get_thread(f.id)[1]
    assert copied.id != a.id
    assert (copied.content, copied.reasoning, copied.reasoning_ms) == (
        a.content,
        a.reasoning,
        a.reasoning_ms,
    )


# -- Markdown ------------------------------------------------------------------------------


def test_markdown_puts_reasoning_in_a_collapsed_block_above_the_answer(db: Database) -> None:
    cid, _ = _reasoned(db)
    md = export_markdown(db, [cid])
    block = (
        "<details><summary>Thought for 12 s</summary>\n\n"
        "> Alpaca, llama, guanaco, vicuña... the vicuña is lightest.\n\n"
        "</details>\n\n"
        "The vicuña."
    )
    assert block in md
    assert md.index("## Assistant") < md.index("<details>")
    assert md.count("<details>") == 1  # the user message has no reasoning


@pytest.mark.parametrize(
    ("ms", "summary"),
    [
        (None, "Reasoning"),
        (0.0, "Thought for 0.0 s"),
        (420.0, "Thought for 0.4 s"),
        (9_949.0, "Thought for 9.9 s"),
        (9_960.0, "Thought for 10 s"),
        (12_300.0, "Thought for 12 s"),
        (59_400.0, "Thought for 59 s"),
        (125_000.0, "Thought for 2 min 5 s"),
    ],
)
def test_reasoning_summary_names_the_duration(ms: float | None, summary: str) -> None:
    assert reasoning_block("x", ms).startswith(f"<details><summary>{summary}</summary>\n\n")


def test_reasoning_cannot_close_the_block_or_inject_html(db: Database) -> None:
    c = db.create_conversation("Nasty")
    u = db.add_message(c.id, "user", "q")
    db.add_message(c.id, "assistant", "The answer.", u.id, reasoning=NASTY)
    md = export_markdown(db, [c.id])
    start = md.index("<details>")
    end = md.index("\n</details>\n")
    inside = md[start:end]
    assert md.count("</details>") == 1 and "<script" not in md
    assert "&lt;/details>" in inside and "&lt;script>alert('x')&lt;/script>" in inside
    # Every line of the reasoning is quoted, so the block quote (and the code fence left
    # open inside it) ends before </details>; the answer follows outside the block.
    body = inside.split("\n")[2:]
    assert body[-1] == "" and all(line.startswith(">") for line in body[:-1])
    assert "> ```python" in body and "> print('a fence never closed')" in body
    assert md[end:].startswith("\n</details>\n\nThe answer.")


def test_reasoning_block_quotes_every_kind_of_line_break() -> None:
    block = reasoning_block("\n\none\rtwo\r\nthree\n\n  \nfour <b>\n\n", None)
    assert block.split("\n") == [
        "<details><summary>Reasoning</summary>",
        "",
        "> one",
        "> two",
        "> three",
        ">",
        ">",
        "> four &lt;b>",
        "",
        "</details>",
    ]
    assert "\r" not in block


def test_markdown_of_a_reply_stopped_while_thinking(db: Database) -> None:
    c = db.create_conversation()
    u = db.add_message(c.id, "user", "q")
    r = db.begin_reply(c.id, u.id)
    db.finish_reply(r.id, "", "stopped", reasoning="I was still")
    md = export_markdown(db, [c.id])
    assert "## Assistant (stopped)" in md
    assert "<summary>Reasoning</summary>\n\n> I was still\n\n</details>\n\n*(empty)*" in md


def _html(md: str) -> str:
    markdown_it = pytest.importorskip("markdown_it")
    return str(markdown_it.MarkdownIt("commonmark").render(md))


def test_rendered_markdown_keeps_the_reasoning_inside_its_block(db: Database) -> None:
    c = db.create_conversation("Nasty")
    u = db.add_message(c.id, "user", "q")
    db.add_message(c.id, "assistant", "The **answer**.", u.id, reasoning=NASTY)
    html = _html(export_markdown(db, [c.id]))
    assert "<script" not in html
    assert len(re.findall(r"</details>", html)) == 1
    inside, after = html.split("</details>")
    assert "&lt;/details&gt; yet?" in inside and "a fence never closed" in inside
    assert "<strong>answer</strong>" in after  # the answer is Markdown again, not code


# -- JSON ----------------------------------------------------------------------------------


def test_json_export_has_reasoning_fields_and_round_trips(db: Database) -> None:
    cid, _ = _reasoned(db)
    c = db.create_conversation()
    u = db.add_message(c.id, "user", "q")
    db.add_message(c.id, "assistant", "a", u.id, reasoning=NASTY)  # duration unknown
    data = json.loads(dumps(export_json(db, [cid, c.id])))
    first, second = data["conversations"]
    assert [(m["reasoning"], m["reasoning_ms"]) for m in first["messages"]] == [
        ("", None),
        ("Alpaca, llama, guanaco, vicuña... the vicuña is lightest.", 12_300.0),
    ]
    assert second["messages"][1]["reasoning"] == NASTY
    assert second["messages"][1]["reasoning_ms"] is None
    new = import_json(db, data)
    assert export_json(db, new)["conversations"] == data["conversations"]
    copied = db.get_thread(new[0])[1]
    assert (copied.reasoning, copied.reasoning_ms) == (
        "Alpaca, llama, guanaco, vicuña... the vicuña is lightest.",
        12_300.0,
    )


def test_older_files_without_reasoning_import_as_empty(db: Database) -> None:
    data = {
        "format": FORMAT,
        "version": 1,
        "conversations": [
            {
                "title": "old file",
                "messages": [
                    {"id": 1, "role": "user", "content": "q"},
                    {"id": 2, "parent": 1, "role": "assistant", "content": "a"},
                ],
            }
        ],
    }
    [cid] = import_json(db, data)
    assert [(m.reasoning, m.reasoning_ms) for m in db.get_thread(cid)] == [("", None)] * 2


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("reasoning", None, '"reasoning" must be text'),
        ("reasoning", 5, '"reasoning" must be text'),
        ("reasoning", "bad \ud800", "invalid Unicode"),
        ("reasoning_ms", "12 s", '"reasoning_ms" must be a number'),
        ("reasoning_ms", -1, '"reasoning_ms" must not be negative'),
        ("reasoning_ms", True, '"reasoning_ms" must be a number'),
    ],
)
def test_invalid_reasoning_is_refused(
    db: Database, field: str, value: object, expected: str
) -> None:
    message = {"id": 1, "role": "assistant", "content": "a", field: value}
    data = {"format": FORMAT, "version": 1, "conversations": [{"messages": [message]}]}
    with pytest.raises(ImportValidationError, match=re.escape(expected)):
        import_json(db, data)
    assert db.list_conversations(include_archived=True) == []


def test_cli_export_and_import_keep_reasoning(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.storage.test_cli import run

    with Database.open() as db:
        cid, _ = _reasoned(db)
    out = home / "out.json"
    assert run(["export", str(cid), "-o", str(out)]) == 0
    saved = json.loads(out.read_text(encoding="utf-8"))
    assert saved["conversations"][0]["messages"][1]["reasoning_ms"] == 12_300.0
    assert run(["import", str(out)]) == 0
    assert "Imported 1 conversation" in capsys.readouterr().out
    md = home / "out.md"
    assert run(["export", str(cid), "-o", str(md)]) == 0
    assert "<summary>Thought for 12 s</summary>" in md.read_text(encoding="utf-8")
    with Database.open() as db:
        copies = [c for c in db.list_conversations() if c.id != cid]
        [copy] = copies
        thread = db.get_thread(copy.id)
        assert (thread[1].reasoning, thread[1].reasoning_ms) == (
            "Alpaca, llama, guanaco, vicuña... the vicuña is lightest.",
            12_300.0,
        )
