"""Light and dark: follow the system, or force one with a Fusion palette.

:func:`apply_theme` is called at start and from the View menu (``AppSettings.theme``).
Widgets that draw their own colours (the chat's HTML, code highlighting, coloured labels)
ask :func:`is_dark` and :func:`colors` and redo them on ``QEvent.PaletteChange``, which
every widget receives when the theme changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory, QWidget

THEMES = ("system", "light", "dark")
THEME_LABELS = {"system": "System", "light": "Light", "dark": "Dark"}

_current = "system"
_system_style: str | None = None  # the style the platform chose, restored for "system"


@dataclass(frozen=True)
class Colors:
    """Text colours that read well on the theme's window and base colours."""

    error: str
    ok: str
    warn: str


LIGHT_COLORS = Colors(error="#b00020", ok="#2e7d32", warn="#8a6d00")
DARK_COLORS = Colors(error="#ff6b6b", ok="#7bd389", warn="#e0b84a")


# the code blocks' backgrounds (markdown.Theme), named here for tests and docs
LIGHT_CODE_BG = "#f3f4f6"
DARK_CODE_BG = "#1e1f22"


@dataclass(frozen=True)
class ChatColors:
    """The chat's own colours: the user's bubble, the edit highlight, avatars, and the
    Markdown details (inline code, quote bar, table lines) that Qt's palette lacks."""

    user_bubble: str
    user_border: str
    editing_fill: str
    editing_border: str
    avatar_user: str
    avatar_assistant: str
    avatar_fg: str
    inline_code_bg: str
    quote_bar: str
    table_border: str
    table_header_bg: str


# The user's bubble is a tint of the link blue: told apart from the assistant's plain
# card at a glance, with the text contrast of the base colour kept (WCAG AA both themes).
LIGHT_CHAT = ChatColors(
    user_bubble="#e8f0fc",
    user_border="#c9d9f2",
    editing_fill="#fff6dc",
    editing_border="#d4a017",
    avatar_user="#3b6fc9",
    avatar_assistant="#4f8a5b",
    avatar_fg="#ffffff",
    inline_code_bg="#eceef1",
    quote_bar="#c3c8d0",
    table_border="#c8ccd2",
    table_header_bg="#f0f2f5",
)
DARK_CHAT = ChatColors(
    user_bubble="#24324a",
    user_border="#34466a",
    editing_fill="#3a3320",
    editing_border="#e0b84a",
    avatar_user="#5b8def",
    avatar_assistant="#5fa36e",
    avatar_fg="#0f1115",
    inline_code_bg="#2f3237",
    quote_bar="#5a6070",
    table_border="#4a4f57",
    table_header_bg="#2a2d32",
)


# Secondary text (a reply's figures line, the new chat's intro): muted but readable, at
# least 4.5:1 on the base colour (WCAG AA). The palette's disabled text was used before:
# about 2:1, "very faint".
LIGHT_MUTED = "#5f6670"
DARK_MUTED = "#a0a6ae"


def set_muted(widget: QWidget, dark: bool) -> None:
    """Give ``widget``'s text the theme's muted colour (again after a theme switch)."""
    palette = widget.palette()
    palette.setColor(QPalette.ColorRole.WindowText, QColor(DARK_MUTED if dark else LIGHT_MUTED))
    widget.setPalette(palette)


def chat_colors(dark: bool) -> ChatColors:
    return DARK_CHAT if dark else LIGHT_CHAT


def current_theme() -> str:
    return _current


def dark_palette() -> QPalette:
    p = QPalette()
    text = QColor("#e6e6e6")
    muted = QColor("#8c8c8c")
    roles = {
        QPalette.ColorRole.Window: QColor("#2b2b2b"),
        QPalette.ColorRole.WindowText: text,
        QPalette.ColorRole.Base: QColor("#1e1e1e"),
        QPalette.ColorRole.AlternateBase: QColor("#262626"),
        QPalette.ColorRole.ToolTipBase: QColor("#363636"),
        QPalette.ColorRole.ToolTipText: text,
        QPalette.ColorRole.PlaceholderText: muted,
        QPalette.ColorRole.Text: text,
        QPalette.ColorRole.Button: QColor("#353535"),
        QPalette.ColorRole.ButtonText: text,
        QPalette.ColorRole.BrightText: QColor("#ff6b6b"),
        QPalette.ColorRole.Light: QColor("#4a4a4a"),
        QPalette.ColorRole.Midlight: QColor("#3c3c3c"),
        QPalette.ColorRole.Mid: QColor("#2f2f2f"),
        QPalette.ColorRole.Dark: QColor("#1a1a1a"),
        QPalette.ColorRole.Shadow: QColor("#0a0a0a"),
        QPalette.ColorRole.Highlight: QColor("#3d6fd1"),
        QPalette.ColorRole.HighlightedText: QColor("#ffffff"),
        QPalette.ColorRole.Link: QColor("#7ab7ff"),
        QPalette.ColorRole.LinkVisited: QColor("#c3a6ff"),
    }
    for role, color in roles.items():
        p.setColor(role, color)
    disabled = QColor("#7a7a7a")
    for role in (
        QPalette.ColorRole.WindowText,
        QPalette.ColorRole.Text,
        QPalette.ColorRole.ButtonText,
    ):
        p.setColor(QPalette.ColorGroup.Disabled, role, disabled)
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Base, QColor("#262626"))
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Button, QColor("#2e2e2e"))
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Highlight, QColor("#4a4a4a"))
    return p


def light_palette() -> QPalette:
    style = QStyleFactory.create("Fusion")
    p = QPalette(style.standardPalette()) if style is not None else QPalette()
    p.setColor(QPalette.ColorRole.Link, QColor("#1a5fb4"))
    p.setColor(QPalette.ColorRole.LinkVisited, QColor("#6b3fa0"))
    return p


def apply_theme(theme: str, app: QApplication | None = None) -> None:
    """Switch the whole application to ``theme`` ("system", "light" or "dark") at once."""
    global _current, _system_style
    instance = app if app is not None else QApplication.instance()
    if not isinstance(instance, QApplication):
        return
    if theme not in THEMES:
        theme = "system"
    if _system_style is None:
        style = instance.style()
        _system_style = style.name() if style is not None else "Fusion"
    hints = instance.styleHints()
    _current = theme
    if theme == "system":
        if hints is not None:
            hints.unsetColorScheme()
        instance.setStyle(_system_style)
        instance.setPalette(QPalette())  # back to the platform's palette
    else:
        if hints is not None:
            hints.setColorScheme(Qt.ColorScheme.Dark if theme == "dark" else Qt.ColorScheme.Light)
        instance.setStyle("Fusion")
        instance.setPalette(dark_palette() if theme == "dark" else light_palette())
    restyle(instance)


def restyle(instance: QApplication) -> None:
    """Re-apply the style sheets that name palette colours. Qt resolves ``palette(base)``
    in a style sheet when the sheet is applied, not when the palette changes: a notice
    shown before a switch to dark kept the light base colour (a white strip along the
    bottom of the dark window)."""
    sheet = instance.styleSheet()
    if "palette(" in sheet:
        instance.setStyleSheet(sheet)
    for widget in instance.allWidgets():
        own = widget.styleSheet()
        if "palette(" in own:
            widget.setStyleSheet(own)


def is_dark(widget: QWidget | None = None) -> bool:
    """Whether text is drawn light on dark: the chosen theme, else the system's scheme,
    else the palette's window colour."""
    if _current in ("light", "dark"):
        return _current == "dark"
    hints = QGuiApplication.styleHints()
    scheme = hints.colorScheme() if hints is not None else Qt.ColorScheme.Unknown
    if scheme == Qt.ColorScheme.Dark:
        return True
    if scheme == Qt.ColorScheme.Light:
        return False
    palette = widget.palette() if widget is not None else QGuiApplication.palette()
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def colors(widget: QWidget | None = None) -> Colors:
    return DARK_COLORS if is_dark(widget) else LIGHT_COLORS
