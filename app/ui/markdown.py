"""Markdown to the HTML subset Qt's rich text understands, safely.

* markdown-it-py with ``html=False``: raw HTML in model output is escaped, shown as text.
* Images are never emitted (no ``<img>``): an image becomes a plain link with its alt text,
  so no resource, remote or local, is ever loaded by rendering a message.
* Links other than http(s)/mailto are shown as text only (no ``file:`` or ``javascript:``).
* Code blocks are highlighted with Pygments (inline styles, light or dark) and get a
  "Copy" link ``llamadesk:copy-code/<n>``; :func:`render` returns the blocks' texts.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name, guess_lexer
from pygments.util import ClassNotFound

from app.ui.theme import DARK_CODE_BG, LIGHT_CODE_BG

COPY_CODE_PREFIX = "llamadesk:copy-code/"
_SAFE_SCHEMES = ("http://", "https://", "mailto:")
_MAX_HIGHLIGHT = 60_000  # characters: longer blocks are shown without colours


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
        ):
            md.add_render_rule(name, _rule(method))
        self.md = md
        self.theme = Theme()
        self.blocks: list[str] = []
        self._link_stack: list[bool] = []

    def _fence(self, tokens: Sequence[Any], idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        code = token.content
        lang = (token.info or "").strip().split(" ")[0] if token.type == "fence" else ""
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

    def render(self, text: str, theme: Theme) -> Rendered:
        self.theme = theme
        self.blocks = []
        self._link_stack = []
        out = self.md.render(text)
        return Rendered(out, list(self.blocks))


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


def render_plain(text: str) -> str:
    """Text shown as typed (user messages): escaped, line breaks kept."""
    return '<p style="white-space: pre-wrap;">' + html.escape(text).replace("\n", "<br>") + "</p>"
