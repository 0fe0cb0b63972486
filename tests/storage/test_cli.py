"""``llamadesk export / import / chats`` on a real database in LLAMADESK_HOME."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from app.errors import LlamaDeskError
from app.storage import Database
from app.storage import cli as storage_cli


def run(argv: Sequence[str]) -> int:
    """What ``app.cli.main`` does with the storage subcommands."""
    parser = argparse.ArgumentParser(prog="llamadesk")
    sub = parser.add_subparsers(dest="command")
    storage_cli.register(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LlamaDeskError as exc:
        print(f"llamadesk: {exc}", file=sys.stderr)
        return 2


@pytest.fixture
def chats(home: Path) -> list[int]:
    with Database.open() as db:
        a = db.create_conversation("Alpacas")
        u = db.add_message(a.id, "user", "Tell me about alpaca wool")
        db.add_message(a.id, "assistant", "Alpaca wool is soft.", u.id)
        b = db.create_conversation("Pinned chat")
        db.add_message(b.id, "user", "hello")
        db.set_pinned(b.id, True)
        c = db.create_conversation("Old")
        db.set_archived(c.id, True)
        return [a.id, b.id, c.id]


def test_chats_lists_one_line_per_conversation(
    chats: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["chats"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    first = lines[0].split("\t")
    assert first[0] == str(chats[1]) and first[2].startswith("*") and first[3] == "Pinned chat"
    assert first[4] == "1 messages"
    assert lines[1].split("\t")[3:] == ["Alpacas", "2 messages"]
    assert run(["chats", "--archived"]) == 0
    assert "Old" in capsys.readouterr().out


def test_chats_search_prints_hits(chats: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["chats", "--search", "wool"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all(line.startswith(f"{chats[0]}\t") for line in out)
    assert "[wool]" in out[0]
    assert run(["chats", "--search", '"unbalanced (NEAR']) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "No messages match" in captured.err


def test_export_json_and_markdown(
    chats: list[int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "all.json"
    assert run(["export", "--all", "--format", "json", "-o", str(out)]) == 0
    data = json.loads(out.read_text("utf-8"))
    assert len(data["conversations"]) == 3 and data["format"] == "llamadesk-conversations"
    assert run(["export", str(chats[0]), "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("# Alpacas") and "Alpaca wool is soft." in md
    assert run(["export", str(chats[0]), "-o", str(tmp_path / "one.md")]) == 0  # format from suffix
    assert (tmp_path / "one.md").read_text("utf-8").startswith("# Alpacas")


def test_import_round_trip(
    chats: list[int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "a.json"
    assert run(["export", str(chats[0]), "--format", "json", "-o", str(out)]) == 0
    assert run(["import", str(out)]) == 0
    assert capsys.readouterr().out.startswith("Imported 1 conversation: ")
    with Database.open() as db:
        assert [c.title for c in db.list_conversations(include_archived=True)].count("Alpacas") == 2


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["export", "--format", "json"], "Give either a conversation id or --all"),
        (["export", "12345", "--format", "json"], "Conversation 12345 does not exist"),
        (["import", "/nonexistent/file.json"], "There is no file"),
    ],
)
def test_errors_are_one_line_and_exit_2(
    chats: list[int], argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("llamadesk: ") and expected in err and err.count("\n") == 1


def test_invalid_import_file(
    chats: list[int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json", "utf-8")
    assert run(["import", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "is not valid JSON" in err and err.count("\n") == 1
    bad.write_text(
        json.dumps(
            {
                "format": "llamadesk-conversations",
                "version": 1,
                "conversations": [{"messages": [{"role": "x"}]}],
            }
        )
    )
    assert run(["import", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "conversation 1, message 1" in err and "nothing was imported" in err


def test_damaged_database_is_one_line(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "llamadesk.sqlite3").write_bytes(b"garbage" * 1000)
    assert run(["chats"]) == 2
    err = capsys.readouterr().err
    assert "is damaged" in err and err.count("\n") == 1


@pytest.mark.skipif(
    importlib.util.find_spec("app.engine_cli") is None, reason="app.engine_cli not written yet"
)
def test_through_the_real_llamadesk_command(
    chats: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    from app.cli import main

    assert main(["chats"]) == 0
    assert "Alpacas" in capsys.readouterr().out
    assert main(["export", "999", "--format", "md"]) == 2
