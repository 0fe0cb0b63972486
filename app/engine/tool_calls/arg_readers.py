"""Arguments not written as JSON (tagged parameters, Python calls, Gemma 4's dictionaries),
turned into JSON text while they stream: each parameter's ``"key": `` as soon as the key is
complete, string values as they grow when the schema says they are strings, other values
once complete, the closing brace at the end."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from app.engine.tool_calls.scan import Cursor, NeedMore, NoMatch, json_value_end, stable_prefix
from app.engine.tool_calls.syntax import TagParams

if TYPE_CHECKING:
    from app.engine.tool_calls.draft import Draft

__all__ = ["read_gemma_args", "read_py_call", "read_tag_params"]

_GEMMA_QUOTE: Final = '<|"|>'
_BARE: Final = re.compile(r"[^,}\]\s]+")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


class _Builder:
    """The JSON text of the arguments, written as parameters complete."""

    def __init__(self, draft: Draft) -> None:
        self.draft = draft
        self.text = "{"
        self.values: dict[str, Any] = {}
        draft.args = self.text

    def key(self, key: str) -> None:
        self.text += ("" if self.text == "{" else ", ") + _dumps(key) + ": "
        self.draft.args = self.text

    def partial_string(self, part: str) -> None:
        self.draft.args = self.text + _dumps(part)[:-1]

    def value(self, key: str, value: Any) -> None:
        self.text += _dumps(value)
        self.values[key] = value
        self.draft.args = self.text

    def close(self) -> None:
        self.text += "}"
        self.draft.args = self.text
        self.draft.arguments = self.values


def _is_string(schema: Mapping[str, Any], key: str) -> bool:
    props = schema.get("properties")
    prop = props.get(key) if isinstance(props, Mapping) else None
    kind = prop.get("type") if isinstance(prop, Mapping) else None
    return kind == "string" or (isinstance(kind, list) and kind == ["string"])


def _json_or_string(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def read_tag_params(cur: Cursor, piece: TagParams, draft: Draft, schema: Mapping[str, Any]) -> None:
    out = _Builder(draft)
    while cur.try_literal(piece.open):
        key = cur.until(piece.key_end)
        attrs = cur.until(piece.attrs_end) if piece.attrs_end else ""
        if piece.value_open:
            cur.literal(piece.value_open)
        string = _is_string(schema, key) or bool(
            piece.string_attrs and piece.string_attrs.strip() in attrs
        )
        out.key(key)
        closer = piece.value_end.strip()
        end = cur.text.find(closer, cur.pos)
        if end < 0:
            if string:
                out.partial_string(stable_prefix(cur.text[cur.pos :].lstrip(), closer))
            raise NeedMore
        raw = cur.text[cur.pos : end].strip()
        cur.pos = end
        cur.literal(closer)
        out.value(key, raw if string else _json_or_string(raw))
    out.close()


def _py_value_end(text: str, pos: int) -> int:
    """Where a Python literal starting at ``pos`` ends (at ``,`` or ``)`` outside brackets)."""
    depth = 0
    i = pos
    while i < len(text):
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < len(text) and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            if j >= len(text):
                raise NeedMore
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return i
            depth -= 1
        elif c == "," and depth == 0:
            return i
        i += 1
    raise NeedMore


def _py_value(raw: str) -> Any:
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        pass
    try:
        return json.loads(raw)  # JSON literals (true/false/null) are allowed too
    except ValueError:
        raise NoMatch from None


def read_py_call(cur: Cursor, draft: Draft) -> None:
    """``name(key=value, ...)``: the name, then the arguments."""
    draft.name = cur.word()
    draft.started = True
    cur.literal("(")
    out = _Builder(draft)
    while True:
        if cur.peek() == ")":
            cur.pos += 1
            break
        key = cur.word()
        cur.literal("=")
        out.key(key)
        cur.skip_ws()
        end = _py_value_end(cur.text, cur.pos)
        out.value(key, _py_value(cur.text[cur.pos : end].strip()))
        cur.pos = end
        if cur.peek() == ",":
            cur.pos += 1
    out.close()


def _gemma_value(cur: Cursor) -> Any:
    cur.skip_ws()
    text = cur.text
    if text.startswith(_GEMMA_QUOTE, cur.pos):
        end = text.find(_GEMMA_QUOTE, cur.pos + len(_GEMMA_QUOTE))
        if end < 0:
            raise NeedMore
        value = text[cur.pos + len(_GEMMA_QUOTE) : end]
        cur.pos = end + len(_GEMMA_QUOTE)
        return value
    if _GEMMA_QUOTE.startswith(text[cur.pos : cur.pos + len(_GEMMA_QUOTE)]) and len(
        text
    ) - cur.pos < len(_GEMMA_QUOTE):
        raise NeedMore
    first = cur.peek()
    if first == "{":
        return _gemma_dict(cur)
    if first == "[":
        cur.pos += 1
        items: list[Any] = []
        while cur.peek() != "]":
            items.append(_gemma_value(cur))
            if cur.peek() == ",":
                cur.pos += 1
        cur.pos += 1
        return items
    if first == '"':
        end = json_value_end(text, cur.pos)
        value = json.loads(text[cur.pos : end])
        cur.pos = end
        return value
    match = _BARE.match(text, cur.pos)
    if match is None or match.end() >= len(text):
        raise NeedMore
    cur.pos = match.end()
    return _json_or_string(match.group())


def _gemma_dict(cur: Cursor) -> dict[str, Any]:
    cur.literal("{")
    value: dict[str, Any] = {}
    while cur.peek() != "}":
        key = cur.until(":")
        value[key] = _gemma_value(cur)
        if cur.peek() == ",":
            cur.pos += 1
    cur.pos += 1
    return value


def read_gemma_args(cur: Cursor, draft: Draft) -> None:
    """``{key:value,...}``, each top-level value sent once complete."""
    out = _Builder(draft)
    cur.literal("{")
    while cur.peek() != "}":
        key = cur.until(":")
        out.key(key)
        out.value(key, _gemma_value(cur))
        if cur.peek() == ",":
            cur.pos += 1
    cur.pos += 1
    out.close()
