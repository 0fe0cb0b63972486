"""Markdown to the HTML subset Qt's rich text understands, safely.

* markdown-it-py with ``html=False``: raw HTML in model output is escaped, shown as text.
* Images are never emitted (no ``<img>``): an image becomes a plain link with its alt text,
  so no resource, remote or local, is ever loaded by rendering a message.
* Links other than http(s)/mailto are shown as text only (no ``file:`` or ``javascript:``).
* Code blocks are highlighted with Pygments (inline styles, light or dark) and get a
  "Copy" link ``llamadesk:copy-code/<n>``; :func:`render` returns the blocks' texts.
* Bare http(s) URLs become links (never other schemes). Qt's rich text knows no
  ``border-left`` and no padding on ``<code>``: a quote's bar is a one-cell table column,
  inline code a shaded ``<code>`` span, tables get ``border``/``cellpadding`` attributes.
* :func:`render_user` is for what the user typed: shown as typed (line breaks kept, no
  Markdown reading of ``*`` or ``#``) except code spans and fences, in monospace.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name, guess_lexer
from pygments.util import ClassNotFound

from app.ui.theme import DARK_CODE_BG, LIGHT_CODE_BG, ChatColors, chat_colors

COPY_CODE_PREFIX = "llamadesk:copy-code/"
_SAFE_SCHEMES = ("http://", "https://", "mailto:")
_MAX_HIGHLIGHT = 60_000  # characters: longer blocks are shown without colours
# A bare URL: http(s) only; trailing punctuation belongs to the sentence, not the link.
_BARE_URL = re.compile(r"https?://[^\s<>\"'`]+", re.IGNORECASE)
_URL_TRAIL = ".,;:!?)]}*_"
_USER_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^`\n]*)$")
_CODE_SPAN = re.compile(r"(`+)([^`\n]|[^`\n].*?[^`\n])\1(?!`)")


@dataclass
class Rendered:
    html: str
    code_blocks: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Theme:
    dark: bool = False

    @property
    def code_bg(self) -> str:
        return DARK_CODE_BG if self.dark else LIGHT_CODE_BG

    @property
    def code_border(self) -> str:
        return "#3a3d41" if self.dark else "#d0d4da"

    @property
    def muted(self) -> str:
        return "#9aa0a6" if self.dark else "#6b7280"

    @property
    def pygments_style(self) -> str:
        return "monokai" if self.dark else "default"

    @property
    def chat(self) -> ChatColors:
        return chat_colors(self.dark)

    def inline_code(self, code_html: str) -> str:
        bg = self.chat.inline_code_bg
        # the spaces pad the shading (Qt ignores padding on inline elements)
        return (
            f'<code style="background-color:{bg}; font-family: monospace;">'
            f"&#8239;{code_html}&#8239;</code>"
        )


def linkify(text: str) -> str:
    """``text`` escaped, with its bare http(s) URLs as links."""
    out: list[str] = []
    at = 0
    for m in _BARE_URL.finditer(text):
        url = m.group(0).rstrip(_URL_TRAIL)
        if len(url) <= len("https://"):
            continue
        out.append(html.escape(text[at : m.start()]))
        out.append(f'<a href="{html.escape(url, quote=True)}">{html.escape(url)}</a>')
        at = m.start() + len(url)
    out.append(html.escape(text[at:]))
    return "".join(out)


_formatters: dict[bool, Any] = {}


def _formatter(theme: Theme) -> Any:
    fmt = _formatters.get(theme.dark)
    if fmt is None:
        fmt = HtmlFormatter(noclasses=True, nowrap=True, style=theme.pygments_style)
        _formatters[theme.dark] = fmt
    return fmt


def _highlight(code: str, lang: str, theme: Theme) -> str:
    if len(code) > _MAX_HIGHLIGHT:
        return html.escape(code)
    lexer = None
    if lang:
        try:
            lexer = get_lexer_by_name(lang, stripall=False)
        except ClassNotFound:
            lexer = None
    if lexer is None:
        if len(code) < 4000:
            try:
                lexer = guess_lexer(code)
            except ClassNotFound:
                lexer = None
            if lexer is not None and lexer.name == "Text only":
                lexer = None
    if lexer is None:
        return html.escape(code)
    return str(highlight(code, lexer, _formatter(theme))).rstrip("\n")


class _Renderer:
    def __init__(self) -> None:
        md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
        md.enable(["table", "strikethrough"])
        # markdown-it binds rule functions to its renderer: wrap our methods in functions.
        for name, method in (
            ("fence", self._fence),
            ("code_block", self._fence),
            ("image", self._image),
            ("link_open", self._link_open),
            ("link_close", self._link_close),
            ("code_inline", self._code_inline),
            ("text", self._text),
            ("table_open", self._table_open),
            ("th_open", self._th_open),
            ("blockquote_open", self._blockquote_open),
            ("blockquote_close", self._blockquote_close),
        ):
            md.add_render_rule(name, _rule(method))
        self.md = md
        self.theme = Theme()
        self.blocks: list[str] = []
        self._link_stack: list[bool] = []

    def _fence(self, tokens: Sequence[Any], idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        lang = (token.info or "").strip().split(" ")[0] if token.type == "fence" else ""
        return self.code_block(token.content, lang)

    def code_block(self, code: str, lang: str) -> str:
        index = len(self.blocks)
        self.blocks.append(code.rstrip("\n"))
        body = _highlight(code.rstrip("\n"), lang, self.theme)
        t = self.theme
        label = html.escape(lang) if lang else "code"
        return (
            f'<table width="100%" cellspacing="0" cellpadding="6" '
            f'style="background-color:{t.code_bg}; border: 1px solid {t.code_border}; margin: 4px 0px;">'
            f'<tr><td><span style="color:{t.muted}; font-size:small;">{label}</span>'
            f'&nbsp;&nbsp;<a href="{COPY_CODE_PREFIX}{index}" style="font-size:small;">Copy</a>'
            f'<pre style="white-space: pre-wrap; margin: 0px;">{body}</pre></td></tr></table>\n'
        )

    def _image(self, tokens: Sequence[Any], idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        alt = html.escape(token.content or "image")
        src = str(token.attrGet("src") or "")
        if src.startswith(_SAFE_SCHEMES[:2]):
            return f'[image: <a href="{html.escape(src, quote=True)}">{alt}</a>]'
        return f"[image: {alt}]"

    def _link_open(self, tokens: Sequence[Any], idx: int, options: Any, env: Any) -> str:
        href = str(tokens[idx].attrGet("href") or "")
        safe = href.lower().startswith(_SAFE_SCHEMES)
        self._link_stack.append(safe)
        return f'<a href="{html.escape(href, quote=True)}">' if safe else ""

    def _link_close(self, tokens: Sequence[Any], idx: int, options: Any, env: Any) -> str:
        safe = self._link_stack.pop() if self._link_stack else False
        return "</a>" if safe else ""

    def _code_inline(self, tokens: Sequence[Any], idx: int, options: Any, env: Any) -> str:
        return self.theme.inline_code(html.escape(tokens[idx].content))

    def _text(self, tokens: Sequence[Any], idx: int, options: Any, env: Any) -> str:
        content = str(tokens[idx].content)
        if self._link_stack:  # already inside a link (or a link shown as text)
            return html.escape(content)
        return linkify(content)

    def _table_open(self, tokens: Sequence[Any], idx: int, options: Any, env: Any) -> str:
        c = self.theme.chat
        return (
            f'<table border="1" cellspacing="0" cellpadding="6" style="border-collapse: '
            f'collapse; border-color: {c.table_border}; border-style: solid; margin: 6px 0px;">\n'
        )

    def _th_open(self, tokens: Sequence[Any], idx: int, options: Any, env: Any) -> str:
        align = str(tokens[idx].attrGet("style") or "").removeprefix("text-align:")
        attr = f' align="{html.escape(align, quote=True)}"' if align else ""
        return f'<th{attr} style="background-color: {self.theme.chat.table_header_bg};">'

    def _blockquote_open(self, tokens: Sequence[Any], idx: int, options: Any, env: Any) -> str:
        bar = self.theme.chat.quote_bar
        # the bar is a narrow coloured cell beside the quote
        return (
            '<table cellspacing="0" cellpadding="0" style="margin: 4px 0px;"><tr>'
            f'<td width="3" style="background-color: {bar};"></td>'
            f'<td style="padding-left: 10px; color: {self.theme.muted};">\n'
        )

    def _blockquote_close(self, tokens: Sequence[Any], idx: int, options: Any, env: Any) -> str:
        return "</td></tr></table>\n"

    def render_user(self, text: str, theme: Theme) -> Rendered:
        self.theme = theme
        self.blocks = []
        parts: list[str] = []
        lines = text.split("\n")
        plain: list[str] = []
        i = 0
        while i < len(lines):
            m = _USER_FENCE.match(lines[i])
            close = _closing_fence(lines, i + 1, m.group(1)) if m else None
            if m is None or close is None:
                plain.append(lines[i])
                i += 1
                continue
            if plain:
                parts.append(_user_text("\n".join(plain), theme))
                plain = []
            lang = m.group(2).strip().split(" ")[0]
            parts.append(self.code_block("\n".join(lines[i + 1 : close]), lang))
            i = close + 1
        if plain or not parts:
            parts.append(_user_text("\n".join(plain), theme))
        return Rendered("".join(parts), list(self.blocks))

    def render(self, text: str, theme: Theme) -> Rendered:
        self.theme = theme
        self.blocks = []
        self._link_stack = []
        out = self.md.render(text)
        return Rendered(out, list(self.blocks))


def _closing_fence(lines: list[str], start: int, marker: str) -> int | None:
    """The line that closes a fence opened with ``marker``; an unclosed fence runs to the
    end (as CommonMark reads it) when it is the last thing typed."""
    for j in range(start, len(lines)):
        closing = lines[j].strip()
        if closing and set(closing) == {marker[0]} and len(closing) >= len(marker):
            return j
    return len(lines) if start < len(lines) else None


def _user_text(text: str, theme: Theme) -> str:
    """Typed text as typed: escaped, line breaks kept, code spans in monospace, bare URLs
    as links."""
    out: list[str] = []
    at = 0
    for m in _CODE_SPAN.finditer(text):
        out.append(linkify(text[at : m.start()]))
        out.append(theme.inline_code(html.escape(m.group(2))))
        at = m.end()
    out.append(linkify(text[at:]))
    body = "".join(out).replace("\n", "<br>")
    return f'<p style="white-space: pre-wrap;">{body}</p>'


def _rule(method: Any) -> Any:
    def rule(_renderer: Any, tokens: Sequence[Any], idx: int, options: Any, env: Any) -> str:
        return str(method(tokens, idx, options, env))

    return rule


_renderer: _Renderer | None = None


def render(text: str, theme: Theme | None = None) -> Rendered:
    """Render Markdown ``text``; see the module docstring for what is allowed."""
    global _renderer
    if _renderer is None:
        _renderer = _Renderer()
    return _renderer.render(text, theme or Theme())


def render_user(text: str, theme: Theme | None = None) -> Rendered:
    """What the user typed (see the module docstring)."""
    global _renderer
    if _renderer is None:
        _renderer = _Renderer()
    return _renderer.render_user(text, theme or Theme())


def render_plain(text: str) -> str:
    """Text shown as typed (user messages): escaped, line breaks kept."""
    return '<p style="white-space: pre-wrap;">' + html.escape(text).replace("\n", "<br>") + "</p>"
