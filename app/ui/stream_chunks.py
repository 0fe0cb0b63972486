"""Where a message's long text is cut into several labels (see :class:`MessageWidget`).

A QLabel lays out its whole text on every change, so a long text is split at block
boundaries and only the last (short) label changes while a reply streams. While a reply
streams, a long paragraph is also cut, at the start of one of its lines as laid out at the
label's width (the labels then show the very lines the paragraph has).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QLabel

CHUNK_CHARS = 700  # a streamed message's last label holds at most about this much text
SOFT_CUT_MIN = 200  # a cut inside a paragraph leaves at least this much in the frozen label
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# What must not start the text after a cut inside a paragraph (Markdown would read a block)
_BLOCK_START = re.compile(r"^(?:[#>+\-*=|~`_\s]|\d+[.)])")
_JOIN_BOTTOM = '<p style="margin-bottom:0px;">'
_JOIN_TOP = '<p style="margin-top:0px;">'


def cut_point(text: str, start: int) -> int | None:
    """Where to end a frozen chunk of ``text[start:]``: after a blank line (else a line
    break) between 200 and CHUNK_CHARS characters in; None when there is none."""
    window = text[start : start + CHUNK_CHARS]
    for sep in ("\n\n", "\n"):
        i = window.rfind(sep)
        if i >= 100:
            return start + i + len(sep)
    return None


def fence_after(fence: str, piece: str) -> str:
    """The code fence line still open after ``piece`` (which starts inside ``fence``
    when that is not empty)."""
    for line in piece.split("\n"):
        m = _FENCE.match(line)
        if not m:
            continue
        if not fence:
            fence = line.strip()
            continue
        opening = _FENCE.match(fence)
        marker = opening.group(1) if opening else "```"
        closing = line.strip()
        if set(closing) == {marker[0]} and len(closing) >= len(marker):
            fence = ""
    return fence


def join_html(html: str, joined: bool, bottom: bool) -> str:
    """Remove the paragraph spacing where a paragraph goes on in the next label (after
    a soft cut: at the top when the frozen boundary is one, ``joined``, at the bottom when
    ``bottom``)."""
    if joined and html.startswith("<p>"):
        html = _JOIN_TOP + html[3:]
    if bottom:
        i = html.rfind("<p")
        if i >= 0 and html.startswith("<p>", i):
            html = html[:i] + _JOIN_BOTTOM + html[i + 3 :]
        elif i >= 0 and html.startswith(_JOIN_TOP, i):
            html = (
                html[:i]
                + '<p style="margin-top:0px; margin-bottom:0px;">'
                + html[i + len(_JOIN_TOP) :]
            )
    return html


def soft_cut_point(
    text: str,
    start: int,
    label: QLabel,
    soft_width: int,
    joined: bool,
    render: Callable[[str], tuple[str, list[str]]],
) -> int | None:
    """While a reply streams: where to end a frozen chunk inside a long paragraph, at
    the start of one of its lines as ``label`` lays it out now; None when there is
    none. Lines are broken greedily, so a line's start does not move when text is
    added after the next line. Without a line break in sight (a paragraph with inline
    markup the laid-out text does not match), a cut at a space once the tail is two
    chunks long: its ragged line lasts until the reply ends.

    ``soft_width``: the label width the soft cuts so far were made for (0: none);
    ``joined``: the frozen boundary is a soft cut; ``render``: Markdown source to HTML
    (and its code blocks)."""
    width = label.contentsRect().width()
    window = text[start : start + CHUNK_CHARS]
    if width >= 80 and (not soft_width or width == soft_width):
        cut = _line_start_cut(text, start, window, width, label, joined, render)
        if cut is not None:
            return cut
    if len(text) - start < 2 * CHUNK_CHARS:
        return None
    at = window.rfind(" ", SOFT_CUT_MIN)
    while at > SOFT_CUT_MIN and _BLOCK_START.match(window[at + 1 :]):
        at = window.rfind(" ", SOFT_CUT_MIN, at)
    return start + at + 1 if at > SOFT_CUT_MIN else None


def _line_start_cut(
    text: str,
    start: int,
    window: str,
    width: int,
    label: QLabel,
    joined: bool,
    render: Callable[[str], tuple[str, list[str]]],
) -> int | None:
    """The start of one of the window's laid-out lines, when its last paragraph is
    plain text (None otherwise)."""
    para = window.rfind("\n") + 1
    html = render(window)[0]
    if joined and html.startswith("<p>"):
        html = _JOIN_TOP + html[3:]
    doc = QTextDocument()
    doc.setDocumentMargin(0)
    doc.setDefaultFont(label.font())
    doc.setHtml(html)
    doc.setTextWidth(width)
    doc.size()  # lays the document out
    block = doc.lastBlock()
    while block.isValid() and not block.text() and block != doc.firstBlock():
        block = block.previous()
    if block.text().rstrip() == window[para:].rstrip():
        layout = block.layout()
        # the window's last line (maybe cut in a word) and the one before may change
        for i in range(layout.lineCount() - 2, 0, -1):
            at = para + layout.lineAt(i).textStart()
            if at < SOFT_CUT_MIN:
                break
            cut = start + at
            if text[cut - 1] == " " and not _BLOCK_START.match(text[cut:]):
                return cut
    return None
