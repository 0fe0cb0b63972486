"""Export conversations to Markdown (to read) and JSON (complete, to import again).

The JSON format (``FORMAT``/``FORMAT_VERSION``)::

    {"format": "llamadesk-conversations", "version": 1, "exported_at": <unix s>,
     "app_version": "0.1.0",
     "conversations": [
       {"title": str, "title_source": "default" | "auto" | "user",
        "created_at": float, "updated_at": float, "model_path": str | null,
        "system_prompt": str, "sampling": {...}, "pinned": bool, "archived": bool,
        "current_leaf": <message id> | null,
        "messages": [                       # every branch; parents before children
          {"id": int, "parent": int | null, "role": str, "content": str, "status": str,
           "created_at": float, "updated_at": float, "token_count": int | null,
           "prompt_tokens": int | null, "tokens_per_second": float | null,
           "model_path": str | null, "meta": {...},
           "reasoning": str, "reasoning_ms": float | null}]}]}

Writing files (the window's Export/Import): :func:`write_bundle` puts one document in one
file (a JSON bundle imports again in one go); :func:`write_each` writes one file per
conversation into a folder, never over an existing file; :func:`import_files` imports
several files all or nothing.

Message ids are local to the file (1, 2, ... in creation order), so
export -> import -> export gives the same ``conversations`` list. ``reasoning`` (a
reasoning model's thinking before the answer in ``content``) and ``reasoning_ms`` (how long
it took) came later within version 1: files without them import as "" and null, and an
older LlamaDesk imports newer files without them (they are optional additions).
"""

from __future__ import annotations

import enum
import heapq
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from app import __version__
from app.fsutil import atomic_write_bytes
from app.storage.conversations.rows import NewMessage, insert_message_row, json_dump
from app.storage.database import Database
from app.storage.errors import ImportValidationError, StorageError
from app.storage.models import ROLES, STATUSES, TITLE_SOURCES, Conversation

FORMAT = "llamadesk-conversations"
FORMAT_VERSION = 1
_MAX_INT = 2**63 - 1
_MAX_JSON_DEPTH = 64


def _conversations(db: Database, ids: Sequence[int] | None) -> list[Conversation]:
    if ids is None:
        found = db.list_conversations(include_archived=True)
        return sorted(found, key=lambda c: (c.created_at, c.id))
    return [db.get_conversation(i) for i in ids]


def export_json(db: Database, ids: Sequence[int] | None = None) -> dict[str, Any]:
    """The conversations ``ids`` (all not deleted, oldest first, when None) as a JSON-ready
    dict with every branch and setting. NotFoundError for an unknown id."""
    out: list[dict[str, Any]] = []
    for conv in _conversations(db, ids):
        messages = db.messages(conv.id)
        local = {m.id: n for n, m in enumerate(messages, start=1)}
        out.append(
            {
                "title": conv.title if conv.title_source != "default" else "",
                "title_source": conv.title_source,
                "created_at": conv.created_at,
                "updated_at": conv.updated_at,
                "model_path": conv.model_path,
                "system_prompt": conv.system_prompt,
                "sampling": conv.sampling,
                "pinned": conv.pinned,
                "archived": conv.archived,
                "current_leaf": local.get(conv.current_leaf_id)
                if conv.current_leaf_id is not None
                else None,
                "messages": [
                    {
                        "id": local[m.id],
                        "parent": local[m.parent_id] if m.parent_id is not None else None,
                        "role": m.role,
                        "content": m.content,
                        "status": m.status,
                        "created_at": m.created_at,
                        "updated_at": m.updated_at,
                        "token_count": m.token_count,
                        "prompt_tokens": m.prompt_tokens,
                        "tokens_per_second": m.tokens_per_second,
                        "model_path": m.model_path,
                        "meta": m.meta,
                        "reasoning": m.reasoning,
                        "reasoning_ms": m.reasoning_ms,
                    }
                    for m in messages
                ],
            }
        )
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "exported_at": time.time(),
        "app_version": __version__,
        "conversations": out,
    }


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _duration(ms: float) -> str:
    seconds = ms / 1000
    if round(seconds, 1) < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    return f"{whole // 60} min {whole % 60} s"


_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # CommonMark's line endings (not str.splitlines')


def reasoning_block(reasoning: str, reasoning_ms: float | None) -> str:
    """A reasoning as a collapsed HTML ``<details>`` block for Markdown.

    The text inside is a block quote, with every ``<`` written as ``&lt;``: so no HTML can
    be formed from it (no ``</details>`` closing the block early, no ``<script>``), and the
    block quote ends before ``</details>``, which closes whatever Markdown the reasoning
    left open (an unclosed code fence would otherwise swallow the rest of the document).
    The price: a ``<`` inside inline code or a code block of the reasoning shows as
    ``&lt;``."""
    summary = "Reasoning" if reasoning_ms is None else f"Thought for {_duration(reasoning_ms)}"
    lines = _LINE_BREAK.split(reasoning.strip("\r\n").rstrip())
    quoted = [(f"> {line}" if line.strip() else ">").replace("<", "&lt;") for line in lines]
    return "\n".join([f"<details><summary>{summary}</summary>", "", *quoted, "", "</details>"])


def export_markdown(db: Database, ids: Sequence[int] | None = None) -> str:
    """A readable Markdown document: for each conversation its title, details, system
    prompt and the branch currently shown (other branches are only in JSON exports); a
    reasoning model's thinking is a collapsed block above its answer."""
    parts: list[str] = []
    for conv in _conversations(db, ids):
        lines = [f"# {conv.title}", ""]
        lines.append(f"- Created: {_when(conv.created_at)}; updated: {_when(conv.updated_at)}")
        if conv.model_path:
            lines.append(f"- Model: `{Path(conv.model_path).name}`")
        thread = db.get_thread(conv.id)
        on_thread = {m.id for m in thread}
        others = sum(
            1 for m in db.messages(conv.id) if m.id not in on_thread and m.parent_id in on_thread
        )
        if others:
            lines.append(
                f"- This conversation has {others} other branch{'es' if others > 1 else ''}; "
                "export it as JSON to keep them."
            )
        lines.append("")
        if conv.system_prompt.strip():
            lines += ["## System prompt", "", conv.system_prompt.strip(), ""]
        for m in thread:
            note = "" if m.status == "complete" else f" ({m.status})"
            lines += [f"## {m.role.capitalize()}{note}", f"*{_when(m.created_at)}*", ""]
            if m.reasoning.strip():
                lines += [reasoning_block(m.reasoning, m.reasoning_ms), ""]
            chat = m.chat()
            if chat.tool_call_id:
                lines += [f"Result of `{chat.name or 'a tool'}` (call `{chat.tool_call_id}`):", ""]
            if m.content.strip() or not chat.tool_calls:
                lines += [m.content.rstrip() if m.content.strip() else "*(empty)*", ""]
            for call in chat.tool_calls:  # what the reply called, with the full arguments
                lines += [f"Called `{call.name}` (call `{call.call_id}`):", "", "```json"]
                lines += [call.arguments, "```", ""]
        parts.append("\n".join(lines).rstrip() + "\n")
    return "\n---\n\n".join(parts)


# -- import ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _MessageSpec(NewMessage):
    """An imported message: its row plus the file's own id for it and for its parent."""

    key: int | str
    parent: int | str | None


@dataclass
class _ConversationSpec:
    title: str
    title_source: str
    created_at: float
    updated_at: float
    model_path: str | None
    system_prompt: str
    sampling: dict[str, Any]
    pinned: bool
    archived: bool
    current_leaf: int | str | None
    messages: list[_MessageSpec]  # parents before children


class _Validator:
    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, problem: str) -> ImportValidationError:
        return ImportValidationError(self.where, problem)

    def text(self, value: Any, name: str) -> str:
        if not isinstance(value, str):
            raise self.fail(f'"{name}" must be text, not {_kind(value)}')
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise self.fail(f'"{name}" contains invalid Unicode (a lone surrogate)') from None
        return value

    def opt_text(self, obj: Mapping[str, Any], name: str) -> str | None:
        value = obj.get(name)
        return None if value is None else self.text(value, name)

    def number(self, obj: Mapping[str, Any], name: str, default: float | None) -> float | None:
        value = obj.get(name, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(f'"{name}" must be a number, not {_kind(value)}')
        if not math.isfinite(value) or abs(value) > 1e300:
            raise self.fail(f'"{name}" must be a finite number')
        return float(value)

    def duration(self, obj: Mapping[str, Any], name: str) -> float | None:
        value = self.number(obj, name, None)
        if value is not None and value < 0:
            raise self.fail(f'"{name}" must not be negative')
        return value

    def integer(self, obj: Mapping[str, Any], name: str) -> int | None:
        value = obj.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f'"{name}" must be a whole number, not {_kind(value)}')
        if not 0 <= value <= _MAX_INT:
            raise self.fail(f'"{name}" is out of range')
        return value

    def boolean(self, obj: Mapping[str, Any], name: str) -> bool:
        value = obj.get(name, False)
        if not isinstance(value, bool):
            raise self.fail(f'"{name}" must be true or false, not {_kind(value)}')
        return value

    def obj(self, value: Any, name: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(f'"{name}" must be an object, not {_kind(value)}')
        self.json_value(value, name, 0)
        return value

    def json_value(self, value: Any, name: str, depth: int) -> None:
        if depth > _MAX_JSON_DEPTH:
            raise self.fail(f'"{name}" is nested too deeply')
        if isinstance(value, str):
            self.text(value, name)
        elif isinstance(value, bool) or value is None:
            return
        elif isinstance(value, int):
            if abs(value) > _MAX_INT:
                raise self.fail(f'"{name}" holds a number that is too large')
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise self.fail(f'"{name}" holds a number that is not finite')
        elif isinstance(value, list):
            for item in value:
                self.json_value(item, name, depth + 1)
        elif isinstance(value, dict):
            for key, item in value.items():
                self.text(key, name)
                self.json_value(item, name, depth + 1)
        else:
            raise self.fail(f'"{name}" holds {_kind(value)}, which JSON cannot represent')

    def key(self, value: Any, name: str) -> int | str:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise self.fail(f'"{name}" must be a number or text, not {_kind(value)}')
        return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "true/false",
        int: "a number",
        float: "a number",
        str: "text",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)


def validate(data: Any) -> list[_ConversationSpec]:
    """Check a parsed export completely; ImportValidationError names the first problem."""
    top = _Validator("")
    if not isinstance(data, dict):
        raise top.fail("it is not a LlamaDesk export (expected a JSON object)")
    if data.get("format") != FORMAT:
        raise top.fail(f'it is not a LlamaDesk export (missing "format": "{FORMAT}")')
    version = data.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise top.fail('"version" must be a positive whole number')
    if version > FORMAT_VERSION:
        raise top.fail(
            f"it was made by a newer LlamaDesk (format version {version}; this one reads up "
            f"to {FORMAT_VERSION}), update LlamaDesk to import it"
        )
    conversations = data.get("conversations")
    if not isinstance(conversations, list):
        raise top.fail('"conversations" must be a list')
    return [_validate_conversation(raw, n) for n, raw in enumerate(conversations, start=1)]


def _validate_conversation(raw: Any, n: int) -> _ConversationSpec:
    v = _Validator(f"conversation {n}")
    if not isinstance(raw, dict):
        raise v.fail(f"expected an object, not {_kind(raw)}")
    title = v.text(raw.get("title", ""), "title")
    v.where = f"conversation {n}" + (f" “{title[:40]}”" if title else "")
    title_source = raw.get("title_source", "user" if title.strip() else "default")
    if title_source not in TITLE_SOURCES:
        raise v.fail(f'"title_source" must be one of {", ".join(sorted(TITLE_SOURCES))}')
    if title_source != "default" and not title.strip():
        raise v.fail('"title" is empty although "title_source" is not "default"')
    now = time.time()
    created = cast(float, v.number(raw, "created_at", now))
    updated = cast(float, v.number(raw, "updated_at", created))
    messages_raw = raw.get("messages", [])
    if not isinstance(messages_raw, list):
        raise v.fail('"messages" must be a list')
    messages: dict[int | str, _MessageSpec] = {}
    order: list[int | str] = []
    for i, m in enumerate(messages_raw, start=1):
        mv = _Validator(f"{v.where}, message {i}")
        if not isinstance(m, dict):
            raise mv.fail(f"expected an object, not {_kind(m)}")
        key = mv.key(m.get("id", i), "id")
        if key in messages:
            raise mv.fail(f"the id {key!r} is used twice")
        parent = m.get("parent")
        if parent is not None:
            parent = mv.key(parent, "parent")
        role = m.get("role")
        if role not in ROLES:
            raise mv.fail(f'"role" must be one of {", ".join(sorted(ROLES))}')
        status = m.get("status", "complete")
        if status not in STATUSES:
            raise mv.fail(f'"status" must be one of {", ".join(sorted(STATUSES))}')
        m_created = cast(float, mv.number(m, "created_at", created))
        messages[key] = _MessageSpec(
            key=key,
            parent=parent,
            role=role,
            content=mv.text(m.get("content"), "content"),
            status=status,
            created_at=m_created,
            updated_at=cast(float, mv.number(m, "updated_at", m_created)),
            token_count=mv.integer(m, "token_count"),
            prompt_tokens=mv.integer(m, "prompt_tokens"),
            tokens_per_second=mv.number(m, "tokens_per_second", None),
            model_path=mv.opt_text(m, "model_path"),
            meta=mv.obj(m.get("meta"), "meta"),
            reasoning=mv.text(m.get("reasoning", ""), "reasoning"),
            reasoning_ms=mv.duration(m, "reasoning_ms"),
        )
        order.append(key)
    ordered = _parents_first(order, messages, v)
    leaf = raw.get("current_leaf")
    if leaf is not None:
        leaf = v.key(leaf, "current_leaf")
        if leaf not in messages:
            raise v.fail(f'"current_leaf" refers to message {leaf!r}, which is not in it')
    return _ConversationSpec(
        title=title,
        title_source=title_source,
        created_at=created,
        updated_at=updated,
        model_path=v.opt_text(raw, "model_path"),
        system_prompt=v.text(raw.get("system_prompt", ""), "system_prompt"),
        sampling=v.obj(raw.get("sampling"), "sampling"),
        pinned=v.boolean(raw, "pinned"),
        archived=v.boolean(raw, "archived"),
        current_leaf=leaf,
        messages=ordered,
    )


def _parents_first(
    order: list[int | str], messages: dict[int | str, _MessageSpec], v: _Validator
) -> list[_MessageSpec]:
    """Messages with every parent before its children, otherwise in file order (Kahn's
    algorithm, iterative so any depth works); rejects unknown parents and loops."""
    children: dict[int | str | None, list[int | str]] = {}
    for key in order:
        parent = messages[key].parent
        if parent is not None and parent not in messages:
            raise v.fail(f"message {key!r} has parent {parent!r}, which is not in it")
        children.setdefault(parent, []).append(key)
    position = {k: n for n, k in enumerate(order)}
    heap = [position[k] for k in children.get(None, [])]
    heapq.heapify(heap)
    result: list[_MessageSpec] = []
    while heap:
        key = order[heapq.heappop(heap)]
        result.append(messages[key])
        for child in children.get(key, []):
            heapq.heappush(heap, position[child])
    if len(result) != len(order):
        raise v.fail("its messages' parents form a loop")
    return result


def import_json(db: Database, data: Any) -> list[int]:
    """Validate everything, then import all conversations in one transaction (all or
    nothing); returns the new conversation ids in file order. ImportValidationError names
    the problem; the database is unchanged then."""
    return _insert(db, validate(data))


def _insert(db: Database, specs: Sequence[_ConversationSpec]) -> list[int]:
    new_ids: list[int] = []
    with db.transaction() as conn:
        for spec in specs:
            cur = conn.execute(
                "INSERT INTO conversations (title, title_source, created_at, updated_at,"
                " model_path, system_prompt, sampling, pinned, archived)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    spec.title if spec.title_source != "default" else "",
                    spec.title_source,
                    spec.created_at,
                    spec.updated_at,
                    spec.model_path,
                    spec.system_prompt,
                    json_dump(spec.sampling),
                    int(spec.pinned),
                    int(spec.archived),
                ),
            )
            conversation_id = int(cast(int, cur.lastrowid))
            ids: dict[int | str, int] = {}
            for m in spec.messages:
                parent = ids[m.parent] if m.parent is not None else None
                ids[m.key] = insert_message_row(conn, conversation_id, parent, m)
            if spec.current_leaf is not None:
                conn.execute(
                    "UPDATE conversations SET current_leaf_id = ? WHERE id = ?",
                    (ids[spec.current_leaf], conversation_id),
                )
            new_ids.append(conversation_id)
    return new_ids


def read_json_file(path: Path) -> Any:
    """Parse an export file; StorageError with a sentence if it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StorageError(f"There is no file {path}; check the name and try again.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StorageError(f"Could not read {path} ({exc}); check the file and try again.") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ImportValidationError(str(path), f"it is not valid JSON ({exc})") from exc


def dumps(data: Mapping[str, Any]) -> str:
    """The export dict as JSON text (UTF-8, indented)."""
    return json.dumps(data, ensure_ascii=False, indent=1) + "\n"


# -- files (the window's Export and Import) ----------------------------------------------


class ExportFormat(enum.Enum):
    """What an export writes: Markdown to read, JSON to keep everything and import again."""

    MARKDOWN = "markdown"
    JSON = "json"

    @property
    def suffix(self) -> str:
        return ".md" if self is ExportFormat.MARKDOWN else ".json"

    @property
    def label(self) -> str:
        return "Markdown" if self is ExportFormat.MARKDOWN else "JSON"


def render(db: Database, ids: Sequence[int] | None, fmt: ExportFormat) -> str:
    """The conversations ``ids`` (all when None) as one document of the format."""
    if fmt is ExportFormat.JSON:
        return dumps(export_json(db, ids))
    return export_markdown(db, ids)


# Characters no file system (Windows' being the strictest) accepts in a name.
_UNSAFE_NAME = re.compile(r'[\\/:*?"<>|\x00-\x1f]+')
_RESERVED_NAMES = frozenset(
    {
        "con",
        "prn",
        "aux",
        "nul",
        *(f"com{n}" for n in range(1, 10)),
        *(f"lpt{n}" for n in range(1, 10)),
    }
)
_MAX_STEM = 80


def file_stem(title: str) -> str:
    """A file name (without suffix) made from a conversation title, safe on every system."""
    stem = _UNSAFE_NAME.sub(" ", title)
    stem = " ".join(stem.split()).strip(". ")[:_MAX_STEM].rstrip(". ")
    if not stem or stem.lower() in _RESERVED_NAMES:
        stem = f"Conversation {stem}".strip() if stem else "Conversation"
    return stem


def _free_path(folder: Path, stem: str, suffix: str, taken: set[str]) -> Path:
    """``folder/stem+suffix``, or ``stem (2)``... when that exists or is already used by this
    export: exporting never overwrites a file."""
    n = 1
    while True:
        name = f"{stem}{suffix}" if n == 1 else f"{stem} ({n}){suffix}"
        path = folder / name
        if name.casefold() not in taken and not path.exists():
            taken.add(name.casefold())
            return path
        n += 1


def _write(path: Path, text: str) -> None:
    try:
        atomic_write_bytes(path, text.encode("utf-8"))
    except OSError as exc:
        raise StorageError(
            f"Could not write {path} ({exc.strerror or exc}); choose another place."
        ) from exc


def write_bundle(db: Database, ids: Sequence[int] | None, fmt: ExportFormat, path: Path) -> Path:
    """Write the conversations as one file (replacing ``path`` atomically: the user chose
    it in a save dialog, which asked before replacing). StorageError with a sentence."""
    path = Path(path)
    _write(path, render(db, ids, fmt))
    return path


def write_each(
    db: Database, ids: Sequence[int] | None, fmt: ExportFormat, folder: Path
) -> list[Path]:
    """Write one file per conversation into ``folder``, named after its title; an existing
    file is never replaced (the new one gets " (2)"...). Returns the files written, in the
    order of ``ids``. StorageError with a sentence (files written before it stay)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise StorageError(f"There is no folder {folder}; choose another place.")
    taken: set[str] = set()
    written: list[Path] = []
    for conv in _conversations(db, ids):
        path = _free_path(folder, file_stem(conv.title), fmt.suffix, taken)
        _write(path, render(db, [conv.id], fmt))
        written.append(path)
    return written


def import_files(db: Database, files: Sequence[Path]) -> list[int]:
    """Import every conversation of every file, all or nothing: every file is read and
    validated before anything is written, then one transaction imports them all. Returns
    the new ids (files in order, then file order). StorageError / ImportValidationError
    (naming the file) with a sentence; the database is unchanged then."""
    specs: list[_ConversationSpec] = []
    for path in files:
        data = read_json_file(Path(path))
        try:
            specs.extend(validate(data))
        except ImportValidationError as exc:
            where = Path(path).name + (f", {exc.where}" if exc.where else "")
            raise ImportValidationError(where, exc.problem) from None
    return _insert(db, specs)
