"""Export to Markdown and JSON; JSON import is validated first and all-or-nothing; the
JSON -> import -> JSON round trip is lossless (property-based)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.storage import Database, ImportValidationError, NotFoundError, StorageError
from app.storage.export import (
    FORMAT,
    FORMAT_VERSION,
    ExportFormat,
    dumps,
    export_json,
    export_markdown,
    file_stem,
    import_files,
    import_json,
    write_bundle,
    write_each,
)


def _sample(db: Database) -> int:
    c = db.create_conversation(
        "Llama facts",
        system_prompt="You are a zoologist.",
        sampling={"temperature": 0.3, "stop": ["\n\n"]},
        model_path="/models/tiny.gguf",
    )
    u = db.add_message(c.id, "user", "What is a llama?")
    a = db.add_message(
        c.id,
        "assistant",
        "A **camelid**.",
        parent_id=u.id,
        token_count=4,
        prompt_tokens=20,
        tokens_per_second=12.5,
    )
    db.add_message(c.id, "assistant", "An animal.", parent_id=u.id, status="stopped")  # regenerated
    db.set_current_leaf(c.id, a.id)
    db.set_pinned(c.id, True)
    return c.id


def test_markdown_is_readable(db: Database) -> None:
    cid = _sample(db)
    md = export_markdown(db, [cid])
    assert md.startswith("# Llama facts\n")
    assert "## System prompt\n\nYou are a zoologist." in md
    assert "## User" in md and "What is a llama?" in md
    assert "## Assistant" in md and "A **camelid**." in md
    assert "An animal." not in md and "1 other branch" in md  # current branch only
    assert "Model: `tiny.gguf`" in md
    other = db.create_conversation()
    m = db.add_message(other.id, "user", "second chat")
    r = db.begin_reply(other.id, m.id)
    db.finish_reply(r.id, "oops", "error")
    both = export_markdown(db)
    assert both.count("\n---\n") == 1 and "## Assistant (error)" in both


def test_json_export_is_complete_and_versioned(db: Database) -> None:
    cid = _sample(db)
    data = export_json(db, [cid])
    assert (data["format"], data["version"]) == (FORMAT, FORMAT_VERSION)
    [conv] = data["conversations"]
    assert conv["title"] == "Llama facts" and conv["pinned"] is True
    assert conv["sampling"] == {"temperature": 0.3, "stop": ["\n\n"]}
    assert [(m["id"], m["parent"], m["status"]) for m in conv["messages"]] == [
        (1, None, "complete"),
        (2, 1, "complete"),
        (3, 1, "stopped"),
    ]
    assert conv["current_leaf"] == 2 and conv["messages"][1]["tokens_per_second"] == 12.5
    with pytest.raises(NotFoundError):
        export_json(db, [999])


def test_import_round_trip_and_fresh_ids(db: Database) -> None:
    cid = _sample(db)
    data = json.loads(dumps(export_json(db)))
    new = import_json(db, data)
    assert len(new) == 1 and new[0] != cid
    again = export_json(db, new)
    assert again["conversations"] == data["conversations"]
    assert [m.content for m in db.get_thread(new[0])] == ["What is a llama?", "A **camelid**."]


def _valid(n_messages: int = 2) -> dict[str, Any]:
    messages = [
        {
            "id": i,
            "parent": i - 1 if i > 1 else None,
            "role": "user" if i % 2 else "assistant",
            "content": f"m{i}",
        }
        for i in range(1, n_messages + 1)
    ]
    return {
        "format": FORMAT,
        "version": 1,
        "conversations": [{"title": "ok", "messages": messages}],
    }


def _broken(path: str, value: Any) -> dict[str, Any]:
    data = _valid()
    bad = copy.deepcopy(data["conversations"][0])
    target: Any = bad
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if key.isdigit() else target[key]
    last = keys[-1]
    if value is _DELETE:
        del target[last]
    else:
        target[int(last) if last.isdigit() else last] = value
    data["conversations"].append(bad)  # the first, valid conversation must not be imported
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([], "not a LlamaDesk export"),
        ({"format": "other"}, "not a LlamaDesk export"),
        ({"format": FORMAT, "version": 99, "conversations": []}, "newer LlamaDesk"),
        ({"format": FORMAT, "version": "1", "conversations": []}, '"version"'),
        ({"format": FORMAT, "version": 1, "conversations": {}}, '"conversations" must be a list'),
        (_broken("title", 5), '"title" must be text'),
        (_broken("title_source", "magic"), '"title_source"'),
        (_broken("pinned", "yes"), '"pinned" must be true or false'),
        (_broken("sampling", [1]), '"sampling" must be an object'),
        (_broken("sampling", {"t": float("nan")}), "not finite"),
        (_broken("created_at", "yesterday"), '"created_at" must be a number'),
        (_broken("messages", "none"), '"messages" must be a list'),
        (_broken("messages.1.role", "wizard"), '"role" must be one of'),
        (_broken("messages.1.status", "done"), '"status" must be one of'),
        (_broken("messages.1.content", None), '"content" must be text'),
        (_broken("messages.1.content", "bad \ud800 surrogate"), "invalid Unicode"),
        (_broken("messages.1.parent", 42), "parent 42, which is not in it"),
        (_broken("messages.0.parent", 2), "form a loop"),
        (_broken("messages.1.id", 1), "used twice"),
        (_broken("messages.1.token_count", -1), "out of range"),
        (_broken("messages.1.token_count", 1.5), "whole number"),
        (_broken("messages.1.meta", "x"), '"meta" must be an object'),
        (_broken("current_leaf", 7), '"current_leaf" refers to message 7'),
        (_broken("messages.1", "text"), "expected an object"),
    ],
)
def test_invalid_import_names_the_problem_and_changes_nothing(
    db: Database, data: Any, expected: str
) -> None:
    _sample(db)
    before = export_json(db)["conversations"]
    with pytest.raises(ImportValidationError) as info:
        import_json(db, data)
    message = str(info.value)
    assert expected in message and message.startswith("The file cannot be imported")
    assert message.endswith("nothing was imported.")
    if isinstance(data, dict) and len(data.get("conversations", [])) == 2:
        assert "conversation 2" in message
    assert export_json(db)["conversations"] == before


def test_import_accepts_minimal_files_and_any_message_order(db: Database) -> None:
    data = {
        "format": FORMAT,
        "version": 1,
        "conversations": [
            {
                "messages": [
                    {
                        "id": "b",
                        "parent": "a",
                        "role": "assistant",
                        "content": "child first in file",
                    },
                    {"id": "a", "role": "user", "content": "root"},
                ],
                "current_leaf": "b",
            },
            {},
        ],
    }
    first, second = import_json(db, data)
    assert [m.content for m in db.get_thread(first)] == ["root", "child first in file"]
    assert db.get_conversation(second).message_count == 0


def test_failure_during_insert_rolls_back_everything(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _sample(db)
    before = export_json(db)["conversations"]
    data = _valid(5)
    data["conversations"] *= 3
    import app.storage.export as export_module
    from app.storage.conversations.rows import insert_message_row as real

    calls = {"n": 0}

    def failing(*args: Any) -> int:
        calls["n"] += 1
        if calls["n"] > 10:  # some conversations and messages are already in
            raise OSError("disk on fire")
        return real(*args)

    monkeypatch.setattr(export_module, "insert_message_row", failing)
    with pytest.raises(OSError):
        import_json(db, data)
    assert calls["n"] == 11
    assert export_json(db)["conversations"] == before


# -- files (the window's Export and Import) ----------------------------------------------


@pytest.mark.parametrize(
    ("title", "stem"),
    [
        ("Llama facts", "Llama facts"),
        ('a/b\\c:d*e?f"g<h>i|j', "a b c d e f g h i j"),
        ("  trailing dots... ", "trailing dots"),
        ("con", "Conversation con"),  # a reserved device name on Windows
        ("???", "Conversation"),
        ("line\nbreak\ttab", "line break tab"),
        ("x" * 200, "x" * 80),
    ],
)
def test_file_stem_is_safe_everywhere(title: str, stem: str) -> None:
    assert file_stem(title) == stem


def test_write_each_names_files_after_titles_and_replaces_nothing(
    db: Database, tmp_path: Path
) -> None:
    cid = _sample(db)
    twin = db.create_conversation("Llama facts")
    db.add_message(twin.id, "user", "second")
    (tmp_path / "Llama facts.md").write_text("mine", encoding="utf-8")
    written = write_each(db, [cid, twin.id], ExportFormat.MARKDOWN, tmp_path)
    assert [p.name for p in written] == ["Llama facts (2).md", "Llama facts (3).md"]
    assert (tmp_path / "Llama facts.md").read_text(encoding="utf-8") == "mine"
    assert written[0].read_text(encoding="utf-8") == export_markdown(db, [cid])
    [json_file] = write_each(db, [cid], ExportFormat.JSON, tmp_path)
    assert json_file.name == "Llama facts.json"
    assert (
        json.loads(json_file.read_text(encoding="utf-8"))["conversations"]
        == (export_json(db, [cid])["conversations"])
    )
    with pytest.raises(StorageError, match="There is no folder"):
        write_each(db, [cid], ExportFormat.MARKDOWN, tmp_path / "missing")


def test_write_bundle_replaces_the_chosen_file_atomically(db: Database, tmp_path: Path) -> None:
    cid = _sample(db)
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / "bundle.json"
    path.write_text("old", encoding="utf-8")
    assert write_bundle(db, [cid], ExportFormat.JSON, path) == path
    assert json.loads(path.read_text(encoding="utf-8"))["format"] == FORMAT
    assert [p.name for p in folder.iterdir()] == ["bundle.json"]  # no temp file left
    with pytest.raises(StorageError, match="Could not write"):
        write_bundle(db, [cid], ExportFormat.JSON, path / "inside-a-file.json")


def test_import_files_is_all_or_nothing_across_files(db: Database, tmp_path: Path) -> None:
    cid = _sample(db)
    good = write_bundle(db, [cid], ExportFormat.JSON, tmp_path / "good.json")
    data = json.loads(good.read_text(encoding="utf-8"))
    data["conversations"][0]["current_leaf"] = 99
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    before = export_json(db)["conversations"]
    with pytest.raises(ImportValidationError, match=r"\(bad\.json, conversation 1") as info:
        import_files(db, [good, bad])
    assert "nothing was imported" in str(info.value)
    assert export_json(db)["conversations"] == before
    new = import_files(db, [good, good])
    assert len(new) == 2
    assert [m.content for m in db.get_thread(new[1])] == [m.content for m in db.get_thread(cid)]


def test_search_conversations_gives_one_row_per_conversation(db: Database) -> None:
    a = db.create_conversation("a")
    long = db.append_message(a.id, "user", "a long message about llamas " + "and more " * 30)
    short = db.append_message(a.id, "assistant", "llamas")
    b = db.create_conversation("b")
    db.append_message(b.id, "user", "one llama here")
    gone = db.create_conversation("gone")
    db.append_message(gone.id, "user", "llamas")
    db.delete_conversation(gone.id)
    found = db.search_conversations("llama", marks=("<", ">"))
    assert sorted(m.hit.conversation_id for m in found) == sorted([a.id, b.id])
    best = next(m for m in found if m.hit.conversation_id == a.id)
    assert best.matches == 2 and best.hit.message_id == short.id != long.id
    assert best.hit.snippet == "<llamas>"
    assert db.search_conversations("llama", limit=1)[0].hit.conversation_id == a.id
    assert db.search_conversations("") == [] and db.search_conversations("x", limit=0) == []


# -- property-based round trip -------------------------------------------------------------

_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63) + 1, max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
_json_values = st.recursive(
    _json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
_times = st.floats(min_value=0, max_value=4e9, allow_nan=False)
_long_text = st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=8), st.integers(1, 40_000))
_content = st.one_of(st.text(), st.text(min_size=200, max_size=2000), _long_text)


@st.composite
def _conversation(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 25))
    chain = draw(st.sampled_from([0, 0, 0, 50, 1500]))  # sometimes a very deep branch
    messages: list[dict[str, Any]] = []
    for i in range(1, n + 1):
        parent = draw(st.one_of(st.none(), st.integers(1, i - 1))) if i > 1 else None
        content = draw(_content)
        meta = draw(st.dictionaries(st.text(max_size=8), _json_values, max_size=3))
        reasoning = draw(st.sampled_from(["", "", "</details><script>x</script>"]) | _content)
        messages.append(
            {
                "id": i,
                "parent": parent,
                "role": draw(st.sampled_from(["system", "user", "assistant", "tool"])),
                "content": content,
                "status": draw(st.sampled_from(["complete", "partial", "error", "stopped"])),
                "created_at": draw(_times),
                "updated_at": draw(_times),
                "token_count": draw(st.none() | st.integers(0, 2**40)),
                "prompt_tokens": draw(st.none() | st.integers(0, 2**31)),
                "tokens_per_second": draw(st.none() | st.floats(0, 1e6)),
                "model_path": draw(st.none() | st.text(max_size=30)),
                "meta": meta,
                "reasoning": reasoning,
                "reasoning_ms": draw(st.none() | st.floats(0, 1e9)),
            }
        )
    # The deep branch tests depth, not the fields (the messages above vary those): its
    # fields come from its position, not from a dozen draws each (1,500 messages made of
    # draws took most of the test's time, in Hypothesis, not in the code under test).
    roles, statuses = ("system", "user", "assistant", "tool"), ("complete", "partial", "stopped")
    for i in range(n + 1, n + chain + 1):
        messages.append(
            {
                "id": i,
                "parent": i - 1 if i > 1 else None,
                "role": roles[i % 4],
                "content": f"deep {i} ✓",
                "status": statuses[i % 3],
                "created_at": float(i),
                "updated_at": i + 0.5,
                "token_count": i if i % 2 else None,
                "prompt_tokens": None if i % 3 else i * 7,
                "tokens_per_second": i / 3 if i % 5 else None,
                "model_path": None if i % 2 else f"/m/{i}.gguf",
                "meta": {},
                "reasoning": "",
                "reasoning_ms": None,
            }
        )
    source = draw(st.sampled_from(["default", "auto", "user"]))
    title = "" if source == "default" else draw(st.text(min_size=1, max_size=80).filter(str.strip))
    return {
        "title": title,
        "title_source": source,
        "created_at": draw(_times),
        "updated_at": draw(_times),
        "model_path": draw(st.none() | st.text(max_size=40)),
        "system_prompt": draw(st.text(max_size=300)),
        "sampling": draw(st.dictionaries(st.text(max_size=10), _json_values, max_size=5)),
        "pinned": draw(st.booleans()),
        "archived": draw(st.booleans()),
        "current_leaf": draw(st.none() | st.integers(1, len(messages))) if messages else None,
        "messages": messages,
    }


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(conversations=st.lists(_conversation(), min_size=1, max_size=3))
def test_json_import_export_round_trip_is_lossless(
    db: Database, conversations: list[dict[str, Any]]
) -> None:
    data = {"format": FORMAT, "version": FORMAT_VERSION, "conversations": conversations}
    data = json.loads(dumps(data))  # as read from a file
    ids = import_json(db, data)
    first = export_json(db, ids)
    assert first["conversations"] == data["conversations"]
    ids2 = import_json(db, json.loads(dumps(first)))
    assert export_json(db, ids2)["conversations"] == first["conversations"]
    for cid in ids + ids2:  # keep the shared database small between examples
        db.delete_conversation(cid)
    db.purge_deleted()


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    contents=st.lists(_content, min_size=1, max_size=6),
    shape=st.lists(st.integers(0, 5), min_size=6, max_size=6),
)
def test_round_trip_of_conversations_built_through_the_api(
    db: Database, contents: list[str], shape: list[int]
) -> None:
    c = db.create_conversation()
    made: list[int] = []
    for i, text in enumerate(contents):
        parent = made[shape[i] % len(made)] if made and shape[i] else (made[-1] if made else None)
        made.append(db.add_message(c.id, "user" if i % 2 == 0 else "assistant", text, parent).id)
    exported = export_json(db, [c.id])
    [copy_id] = import_json(db, exported)
    assert export_json(db, [copy_id])["conversations"] == exported["conversations"]
    assert [m.content for m in db.get_thread(copy_id)] == [m.content for m in db.get_thread(c.id)]
    for cid in (c.id, copy_id):
        db.delete_conversation(cid)
    db.purge_deleted()


def test_search_conversations_finds_a_chat_by_its_title(db: Database) -> None:
    named = db.create_conversation()
    db.add_message(named.id, "user", "what do they eat?")
    db.rename(named.id, "Alpacas of Perú")
    other = db.create_conversation()
    ask = db.add_message(other.id, "user", "tell me about camelids")  # its title, auto
    db.add_message(other.id, "assistant", "alpacas are smaller than llamas", parent_id=ask.id)
    both = db.create_conversation()
    db.add_message(both.id, "user", "are alpacas shy?")
    db.rename(both.id, "Shy alpacas")
    empty = db.create_conversation()
    db.rename(empty.id, "Alpacas, not yet written")  # nothing to open: not listed
    gone = db.create_conversation()
    db.add_message(gone.id, "user", "hi")
    db.rename(gone.id, "Alpacas deleted")
    db.delete_conversation(gone.id)
    found = db.search_conversations("alpacas", marks=("<", ">"))
    ids = [m.hit.conversation_id for m in found]
    # title matches first (most recent first), each chat once, then message-only matches
    assert ids == [both.id, named.id, other.id]
    title_only = found[1]
    assert title_only.matches == 0 and title_only.hit.message_id == db.get_thread(named.id)[0].id
    assert found[0].matches == 1 and "<alpacas>" in found[0].hit.snippet
    # accents and case fold as the index folds them; the last word is a prefix
    assert [m.hit.conversation_id for m in db.search_conversations("peru alp")] == [named.id]
    assert db.search_conversations("alpacas", limit=1)[0].hit.conversation_id == both.id
