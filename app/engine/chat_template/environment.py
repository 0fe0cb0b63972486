"""The Jinja environment model authors write chat templates for (Hugging Face's
``apply_chat_template`` conventions), and the errors a template's render raises.

* an ``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and ``lstrip_blocks`` and the
  ``loopcontrols`` extension;
* the global ``raise_exception(message)`` (``strftime_now`` is bound per template, since
  its clock is injectable);
* a ``tojson`` filter that keeps non-ASCII text and accepts ``indent``, ``separators``
  and ``sort_keys`` (Jinja's own filter HTML-escapes and takes only ``indent``);
* the ``{% generation %}`` block tag of transformers (rendered as its plain body).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.engine.errors import EngineError

_MAX_MESSAGE_CHARS: Final = 300


class ChatTemplateError(EngineError):
    """The model's chat template does not compile or refuses the conversation.

    ``template_message`` is the template's own text when it called ``raise_exception``.
    """

    def __init__(self, message: str, *, template_message: str | None = None) -> None:
        super().__init__(message)
        self.template_message = template_message


def sentence_part(text: str) -> str:
    """``text`` on one line and shortened, to be embedded in a sentence."""
    text = " ".join(str(text).split())
    if len(text) > _MAX_MESSAGE_CHARS:
        text = text[: _MAX_MESSAGE_CHARS - 1].rstrip() + "…"
    return text or "unknown error"


def sentence(prefix: str, part: str, suffix: str = "") -> str:
    """``prefix + part`` ended with a full stop (unless ``part`` has one), then ``suffix``."""
    text = prefix + part
    if not text.endswith((".", "!", "?", "…")):
        text += "."
    return f"{text} {suffix}" if suffix else text


def _raise_exception(message: Any) -> None:
    text = str(message)
    raise ChatTemplateError(
        sentence("The model's chat template refused the conversation: ", sentence_part(text)),
        template_message=text,
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, jinja2.Undefined):
        return None
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: Sequence[str] | None = None,
    sort_keys: bool = False,
) -> str:
    """The ``tojson`` of Hugging Face templates: ``json.dumps`` keeping non-ASCII text."""
    seps: tuple[str, str] | None = None
    if separators is not None:
        first, second = separators
        seps = (str(first), str(second))
    return json.dumps(
        value,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=seps,
        sort_keys=sort_keys,
        default=_json_default,
    )


class _GenerationExtension(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: renders its body unchanged.

    Transformers marks the assistant's tokens with this block (for training masks); some
    templates (LFM2.5, poolside Laguna) use it and fail to compile without it.
    """

    tags = {"generation"}  # noqa: RUF012 - jinja2 declares it as an instance variable

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


class _ChatSandbox(ImmutableSandboxedEnvironment):
    """Immutable, but for a list's ``append``/``extend``: templates build lists of their
    own with them (Kimi K2 collects a call's pieces), as llama.cpp's minja allows. What
    a template is given are copies made per render, so nothing of the caller's changes."""

    _LIST_GROWTH: Final = frozenset({"append", "extend"})

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if isinstance(obj, list) and attr in self._LIST_GROWTH:
            return True
        return bool(super().is_safe_attribute(obj, attr, value))


def _new_environment() -> ImmutableSandboxedEnvironment:
    env = _ChatSandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols", _GenerationExtension],
        autoescape=False,
        keep_trailing_newline=False,
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = _raise_exception
    return env


ENVIRONMENT: Final = _new_environment()


def describe(error: Exception) -> str:
    if isinstance(error, ChatTemplateError) and error.template_message is not None:
        return sentence_part(error.template_message)
    if isinstance(error, jinja2.TemplateError):
        return sentence_part(error.message or type(error).__name__)
    return sentence_part(f"{type(error).__name__}: {error}")
