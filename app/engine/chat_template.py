"""Render a conversation into the prompt text a model was trained on.

A GGUF file carries its chat template as Jinja2 source in ``tokenizer.chat_template``.
Model authors write these templates for the Hugging Face ``apply_chat_template``
conventions, which this module reproduces:

* an ``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and ``lstrip_blocks`` and the
  ``loopcontrols`` extension;
* the globals ``raise_exception(message)`` and ``strftime_now(format)``;
* a ``tojson`` filter that keeps non-ASCII text and accepts ``indent``, ``separators``
  and ``sort_keys`` (Jinja's own filter HTML-escapes and takes only ``indent``);
* the ``{% generation %}`` block tag of transformers (rendered as its plain body);
* the variables ``messages``, ``add_generation_prompt``, ``bos_token``, ``eos_token``,
  ``tools=None`` and ``documents=None`` (left undefined instead, as llama.cpp does, for
  templates that only render that way); ``date_string`` (today, for Llama 3.x) and
  ``functions``/``datetime`` (firefunction-v2) when the template uses them, as llama.cpp
  does; anything else (``tools``, ...) is passed through ``render(**extra)`` and wins
  over these defaults.

Reasoning (thinking) is rendered as llama.cpp's server does where templates leave a choice:

* **Thinking on by default.** :class:`ReasoningOptions` (``render(reasoning=...)``) becomes
  ``enable_thinking`` and, for templates that use other names, ``thinking`` (DeepSeek
  V3.x/V4, Granite 3.3, Kimi K3), ``thinking_mode`` (MiniMax-M3), ``reasoning`` (Cohere2
  MoE), ``thinking_budget=0`` when off (Seed-OSS), ``reasoning_effort`` /
  ``reasoning_strength`` / ``thinking_effort`` for an effort. Only the names a template
  reads are passed. :attr:`ChatTemplate.supports_thinking_toggle` and
  :attr:`ChatTemplate.supports_effort` say whether the choice changes the prompt at all
  (found by rendering), :attr:`ChatTemplate.reasoning_format` which markers the model
  writes (:mod:`app.engine.reasoning`) and :meth:`ChatTemplate.opens_reasoning` whether
  the generation prompt opens the reasoning block (the reply starts inside it).
* **Past reasoning.** An assistant message may carry ``reasoning_content``; it reaches the
  template under that name (Qwen3, GLM, Laguna... read it; most drop it), and as
  ``thinking`` for gpt-oss, as llama.cpp does. Empty reasoning is left out, so templates
  that split ``content`` on ``</think>`` see the bare answer.

On top of that it smooths over what real templates get wrong for a chat app:

* **System prompts.** Some templates refuse a system message (gemma-2 raises "System
  role not supported") and some silently drop it. A probe at construction finds out
  (:attr:`ChatTemplate.supports_system_role`); when the role is not supported, the system
  text is merged into the first user message (``system + "\\n" + user``), as llama.cpp's
  server does (``common/chat.cpp``, ``system_message_not_supported``). A render that still raises with a system message present is retried with
  the merge, and then with consecutive same-role messages joined (for templates that demand
  strict user/assistant alternation).
* **BOS.** The engine tokenizes the rendered text with ``add_special=True``, so llama.cpp
  adds the BOS token itself when the model wants one. Templates that start with
  ``{{ bos_token }}`` would double it; :meth:`ChatTemplate.render` therefore strips one
  leading ``bos_token`` text by default (``strip_bos=True``), exactly like llama.cpp's
  server.
* **Stop strings.** :attr:`ChatTemplate.stop_strings` is the special-token-like marker the
  template writes right after a finished assistant message (``<|im_end|>``,
  ``<|eot_id|>``, ``<end_of_turn>``, ``</s>`` ...), found by rendering a probe; empty when
  there is none (e.g. RWKV's plain "\\n\\n").
* **No template / a broken one.** :meth:`ChatTemplate.for_model` never raises: a model
  without a template, or with one that does not compile or cannot render a simple
  conversation, gets a built-in template (ChatML unless the special tokens say otherwise)
  and :attr:`ChatTemplate.fallback` is True so the UI can say so.

The engine reuses the KV cache by the longest common token prefix between turns, so the
rendering must be deterministic: nothing volatile is inserted here. ``strftime_now`` reads
the clock (templates put today's date in the system header); the clock is injectable
(``now=``) for tests.
"""

from __future__ import annotations

import enum
import itertools
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes
import jinja2.parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.engine.errors import EngineError
from app.engine.reasoning import ReasoningFormat, detect_format, prompt_opens_reasoning

__all__ = [
    "CHATML_TEMPLATE",
    "ChatTemplate",
    "ChatTemplateError",
    "ReasoningEffort",
    "ReasoningOptions",
]

log = logging.getLogger(__name__)

#: The fallback for models without a template: readable, and widely trained on.
CHATML_TEMPLATE: Final = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_LLAMA3_TEMPLATE: Final = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)

# Gemma has no system role; the probe finds that out and the system text is merged.
_GEMMA_TEMPLATE: Final = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}"
    "{% endif %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

# Built-in templates by name, and the special-token texts that identify their family.
_BUILTIN_TEMPLATES: Final[dict[str, str]] = {
    "chatml": CHATML_TEMPLATE,
    "llama3": _LLAMA3_TEMPLATE,
    "gemma": _GEMMA_TEMPLATE,
}
_EOS_HINTS: Final[dict[str, str]] = {
    "<|im_end|>": "chatml",
    "<|eot_id|>": "llama3",
    "<end_of_turn>": "gemma",
}

# Needles for the probes; plain words so that no template mangles them.
_SYSTEM_NEEDLE: Final = "LlamaDeskProbeSystemText"
_USER_NEEDLE: Final = "LlamaDeskProbeUserText"
_USER2_NEEDLE: Final = "LlamaDeskProbeSecondUserText"
_ASSISTANT_NEEDLE: Final = "LlamaDeskProbeAssistantText"

# A special-token-like marker at the start of the text after an assistant message:
# <|im_end|>, <end_of_turn>, </s>, <｜end▁of▁sentence｜>, [/INST] ...
_MARKER_RE: Final = re.compile(r"<[^<>\s]{1,64}>|\[/?[A-Za-z_]{2,32}\]")

_MAX_MESSAGE_CHARS: Final = 300

#: How llama.cpp joins a folded system message with the first user message.
_SYSTEM_JOIN: Final = "\n"


class ReasoningEffort(enum.Enum):
    """How hard a reasoning model should think (for templates that take an effort)."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


@dataclass(frozen=True, slots=True)
class ReasoningOptions:
    """The reasoning choices of one render.

    ``effort=None`` leaves the template's own default ("medium" for gpt-oss).
    """

    enable_thinking: bool = True
    effort: ReasoningEffort | None = None


_DEFAULT_REASONING: Final = ReasoningOptions()

# Kimi K3 takes low/high/max.
_KIMI_EFFORTS: Final = {
    ReasoningEffort.LOW: "low",
    ReasoningEffort.MEDIUM: "high",
    ReasoningEffort.HIGH: "max",
}
# Tencent Hy3 takes no_think/low/high (and defaults to no_think).
_HY3_EFFORTS: Final = {
    ReasoningEffort.LOW: "low",
    ReasoningEffort.MEDIUM: "high",
    ReasoningEffort.HIGH: "high",
}


class ChatTemplateError(EngineError):
    """The model's chat template does not compile or refuses the conversation.

    ``template_message`` is the template's own text when it called ``raise_exception``.
    """

    def __init__(self, message: str, *, template_message: str | None = None) -> None:
        super().__init__(message)
        self.template_message = template_message


def _sentence_part(text: str) -> str:
    """``text`` on one line and shortened, to be embedded in a sentence."""
    text = " ".join(str(text).split())
    if len(text) > _MAX_MESSAGE_CHARS:
        text = text[: _MAX_MESSAGE_CHARS - 1].rstrip() + "…"
    return text or "unknown error"


def _sentence(prefix: str, part: str, suffix: str = "") -> str:
    """``prefix + part`` ended with a full stop (unless ``part`` has one), then ``suffix``."""
    text = prefix + part
    if not text.endswith((".", "!", "?", "…")):
        text += "."
    return f"{text} {suffix}" if suffix else text


def _raise_exception(message: Any) -> None:
    text = str(message)
    raise ChatTemplateError(
        _sentence("The model's chat template refused the conversation: ", _sentence_part(text)),
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


def _tojson(
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


def _new_environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols", _GenerationExtension],
        autoescape=False,
        keep_trailing_newline=False,
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    return env


_ENVIRONMENT: Final = _new_environment()


def _merge_system(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """System messages folded into the next user message (``system + "\\n" + user``, the
    join of llama.cpp's ``system_message_not_supported``).

    System text with no user message after it becomes a user message of its own (llama.cpp
    drops it; keeping it loses nothing).
    """
    merged: list[dict[str, Any]] = []
    pending: list[str] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            pending.append(str(message.get("content") or ""))
        elif role == "user" and pending:
            content = _SYSTEM_JOIN.join([*pending, str(message.get("content") or "")])
            merged.append({**message, "content": content})
            pending = []
        else:
            merged.append(dict(message))
    if pending:
        merged.append({"role": "user", "content": _SYSTEM_JOIN.join(pending)})
    return merged


def _merge_consecutive(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive messages of the same role joined with a blank line."""
    merged: list[dict[str, Any]] = []
    for message in messages:
        if merged and merged[-1].get("role") == message.get("role"):
            previous = merged[-1]
            content = f"{previous.get('content') or ''}\n\n{message.get('content') or ''}"
            merged[-1] = {**previous, "content": content}
        else:
            merged.append(dict(message))
    return merged


def _has_consecutive_roles(messages: Sequence[Mapping[str, Any]]) -> bool:
    return any(a.get("role") == b.get("role") for a, b in itertools.pairwise(messages))


def _describe(error: Exception) -> str:
    if isinstance(error, ChatTemplateError) and error.template_message is not None:
        return _sentence_part(error.template_message)
    if isinstance(error, jinja2.TemplateError):
        return _sentence_part(error.message or type(error).__name__)
    return _sentence_part(f"{type(error).__name__}: {error}")


def _choose_builtin(
    bos_token: str, eos_token: str, model_name: str | None, architecture: str | None
) -> str:
    """The name of the built-in template that most likely fits the model."""
    for hint, name in _EOS_HINTS.items():
        if eos_token == hint:
            return name
    words = f"{architecture or ''} {model_name or ''}".lower()
    if "gemma" in words:
        return "gemma"
    if re.search(r"llama[-_ ]?3", words) or bos_token == "<|begin_of_text|>":
        return "llama3"
    return "chatml"


class ChatTemplate:
    """A compiled chat template; :meth:`render` turns messages into prompt text.

    Construct with the GGUF's ``tokenizer.chat_template`` (None for a built-in fallback)
    and the BOS/EOS token texts. Raises :class:`ChatTemplateError` when the template does
    not compile or cannot render even a single user message; :meth:`for_model` never raises.
    """

    def __init__(
        self,
        template: str | None,
        bos_token: str = "",
        eos_token: str = "",
        *,
        model_name: str | None = None,
        architecture: str | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.bos_token: Final = bos_token or ""
        self.eos_token: Final = eos_token or ""
        self._now: Callable[[], datetime] = now or datetime.now
        builtin_name: str | None = None
        if not (template and template.strip()):
            builtin_name = _choose_builtin(self.bos_token, self.eos_token, model_name, architecture)
            template = _BUILTIN_TEMPLATES[builtin_name]
        #: True when the template is a built-in one, not the model's own (tell the user).
        self.fallback: Final[bool] = builtin_name is not None
        #: Name of the built-in template in use ("chatml", "llama3", "gemma"), else None.
        self.builtin_name: Final[str | None] = builtin_name
        #: The Jinja source in use.
        self.source: Final[str] = template
        try:
            parsed = _ENVIRONMENT.parse(template)
            self._compiled = _ENVIRONMENT.from_string(
                parsed, globals={"strftime_now": self._strftime_now}
            )
        except jinja2.TemplateSyntaxError as error:
            raise ChatTemplateError(
                _sentence(
                    f"The model's chat template has a syntax error on line {error.lineno}: ",
                    _sentence_part(error.message or "unknown error"),
                ),
                template_message=error.message,
            ) from error
        except Exception as error:  # a template is foreign code: anything may come out
            raise ChatTemplateError(
                _sentence("The model's chat template cannot be compiled: ", _describe(error))
            ) from error
        self._referenced: Final = frozenset(jinja2.meta.find_undeclared_variables(parsed))
        # Hugging Face passes tools=None and documents=None; llama.cpp leaves them
        # undefined. Templates for HF handle None; some "tool_use" templates loop over
        # `tools` unguarded and only work when it is undefined. The probe picks.
        self._defaults: dict[str, Any] = {"tools": None, "documents": None}
        self.supports_system_role: Final[bool] = self._probe_system_role()
        self.stop_strings: Final[tuple[str, ...]] = self._probe_stop_strings()
        #: The markers the model writes its reasoning in (NONE: no reasoning).
        self.reasoning_format: Final[ReasoningFormat] = detect_format(template)
        self._opens_cache: dict[ReasoningOptions, bool] = {}
        #: Whether thinking on/off changes the prompt (show the toggle only then).
        self.supports_thinking_toggle: Final[bool] = self._probe_differs(
            ReasoningOptions(enable_thinking=True), ReasoningOptions(enable_thinking=False)
        )
        #: Whether the reasoning effort changes the prompt (show the control only then).
        self.supports_effort: Final[bool] = self._probe_differs(
            ReasoningOptions(effort=ReasoningEffort.LOW),
            ReasoningOptions(effort=ReasoningEffort.HIGH),
        )

    # ------------------------------------------------------------------ construction

    @classmethod
    def for_model(
        cls,
        template: str | None,
        bos_token: str = "",
        eos_token: str = "",
        *,
        model_name: str | None = None,
        architecture: str | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> ChatTemplate:
        """The model's template, or a built-in fallback (logged) when it is unusable."""
        if template and template.strip():
            try:
                return cls(
                    template,
                    bos_token,
                    eos_token,
                    model_name=model_name,
                    architecture=architecture,
                    now=now,
                )
            except ChatTemplateError as error:
                log.warning("Using a built-in chat template instead of the model's: %s", error)
            except Exception:  # never let a model's template take the app down
                log.exception("Using a built-in chat template: the model's template crashed")
        return cls(
            None,
            bos_token,
            eos_token,
            model_name=model_name,
            architecture=architecture,
            now=now,
        )

    def _strftime_now(self, fmt: str) -> str:
        return self._now().strftime(str(fmt))

    def _conventions(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        """Variables some template families expect that the caller did not pass."""
        context: dict[str, Any] = dict(self._defaults)
        names = self._referenced
        if "date_string" in names:  # Llama 3.x: "Today Date: 26 Jul 2024" otherwise
            context["date_string"] = self._now().strftime("%d %b %Y")
        if "functions" in names and "datetime" in names:  # firefunction-v2 (as llama.cpp)
            tools = extra.get("tools")
            context["functions"] = _tojson(tools, indent=2) if tools else ""
            # llama.cpp adds the time of day too; the date alone keeps the prefix stable.
            context["datetime"] = self._now().strftime("%b %d %Y")
        return context

    def _reasoning_variables(self, options: ReasoningOptions) -> dict[str, Any]:
        """Template variables for ``options``, under the names this template reads."""
        names = self._referenced
        source = self.source
        thinking = options.enable_thinking
        effort = options.effort
        # llama.cpp always passes enable_thinking.
        variables: dict[str, Any] = {"enable_thinking": thinking}
        if "thinking" in names:  # DeepSeek V3.x/V4, Granite 3.3, Kimi K3
            variables["thinking"] = thinking
        if "thinking_mode" in names:  # MiniMax-M3: enabled / disabled / adaptive
            variables["thinking_mode"] = "enabled" if thinking else "disabled"
        if "reasoning" in names and "<|START_THINKING|>" in source:  # Cohere2 MoE
            variables["reasoning"] = thinking
        if "thinking_budget" in names and not thinking:  # Seed-OSS: 0 answers directly
            variables["thinking_budget"] = 0
        if "reasoning_effort" in names:
            if "'no_think'" in source:  # Tencent Hy3: no_think / low / high
                if not thinking:
                    variables["reasoning_effort"] = "no_think"
                else:
                    variables["reasoning_effort"] = _HY3_EFFORTS[effort or ReasoningEffort.HIGH]
            elif not thinking and '"minimal"' in source and "<|think|>" in source:
                # Solar Open closes the reasoning block for a minimal effort.
                variables["reasoning_effort"] = "minimal"
            elif effort is not None:
                variables["reasoning_effort"] = effort.value
        if effort is not None:
            if "reasoning_strength" in names:  # Muse Glimmer (llama.cpp sets both)
                variables["reasoning_strength"] = effort.value
            if "thinking_effort" in names:  # Kimi K3
                variables["thinking_effort"] = _KIMI_EFFORTS[effort]
        return variables

    def _probe_differs(self, first: ReasoningOptions, second: ReasoningOptions) -> bool:
        """Whether a one-user-message prompt differs between two reasoning choices."""
        probe = [{"role": "user", "content": _USER_NEEDLE}]
        try:
            one = self._render_raw(probe, True, self._reasoning_variables(first))
            two = self._render_raw(probe, True, self._reasoning_variables(second))
        except Exception as error:
            log.debug("Chat template refuses a reasoning choice: %s", _describe(error))
            return False
        return one != two

    def opens_reasoning(self, reasoning: ReasoningOptions | None = None) -> bool:
        """Whether the generation prompt opens the reasoning block (``<think>\\n`` at its
        end), so that the reply starts inside the reasoning.

        Found by rendering one user message; for a rendered prompt at hand,
        :func:`app.engine.reasoning.prompt_opens_reasoning` tells from its text.
        """
        options = reasoning or _DEFAULT_REASONING
        cached = self._opens_cache.get(options)
        if cached is not None:
            return cached
        probe = [{"role": "user", "content": _USER_NEEDLE}]
        try:
            text = self._render_raw(probe, True, self._reasoning_variables(options))
        except Exception as error:
            log.debug("Chat template cannot render its generation prompt: %s", _describe(error))
            opens = False
        else:
            opens = prompt_opens_reasoning(text, self.reasoning_format)
        self._opens_cache[options] = opens
        return opens

    def _prepare_messages(self, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Copies of ``messages`` with past reasoning where this template looks for it."""
        harmony = "<|channel|>" in self.source
        prepared: list[dict[str, Any]] = []
        for message in messages:
            copy = dict(message)
            reasoning = copy.get("reasoning_content")
            if "reasoning_content" in copy and not (isinstance(reasoning, str) and reasoning):
                del copy["reasoning_content"]  # templates test `is string` or truthiness
            elif harmony and isinstance(reasoning, str) and "thinking" not in copy:
                copy["thinking"] = reasoning  # gpt-oss reads `thinking` (as llama.cpp maps)
            prepared.append(copy)
        return prepared

    def _render_raw(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool, extra: dict[str, Any]
    ) -> str:
        context: dict[str, Any] = {
            **self._conventions(extra),
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **extra,
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
        }
        return self._compiled.render(context)

    def _probe_system_role(self) -> bool:
        """Whether a system message renders as such (not refused, not dropped)."""
        self._check_renders_user_message()
        probe = [
            {"role": "system", "content": _SYSTEM_NEEDLE},
            {"role": "user", "content": _USER_NEEDLE},
        ]
        try:
            text = self._render_raw(probe, True, {})
        except Exception as error:
            log.debug("Chat template refuses a system message: %s", _describe(error))
            return False
        if _SYSTEM_NEEDLE not in text:
            log.debug("Chat template drops the system message; it will be merged")
            return False
        return True

    def _check_renders_user_message(self) -> None:
        """Raise unless a lone user message renders (with tools=None, else undefined)."""
        probe = [{"role": "user", "content": _USER_NEEDLE}]
        try:
            self._render_raw(probe, True, {})
        except Exception as first_error:
            self._defaults = {}
            try:
                self._render_raw(probe, True, {})
            except Exception:
                self._defaults = {"tools": None, "documents": None}
                raise ChatTemplateError(
                    _sentence(
                        "The model's chat template cannot render a simple conversation: ",
                        _describe(first_error),
                    )
                ) from first_error
            log.debug("Chat template needs `tools` undefined rather than None")

    def _probe_stop_strings(self) -> tuple[str, ...]:
        """The marker the template writes after a finished assistant message, if any."""
        probe = [
            {"role": "user", "content": _USER_NEEDLE},
            {"role": "assistant", "content": _ASSISTANT_NEEDLE},
            {"role": "user", "content": _USER2_NEEDLE},
        ]
        try:
            text = self._render_raw(probe, True, {})
        except Exception as error:
            log.debug("No stop strings for this chat template: %s", _describe(error))
            return ()
        start = text.find(_ASSISTANT_NEEDLE)
        end = text.find(_USER2_NEEDLE)
        if start < 0 or end < 0 or end < start:
            return ()
        between = text[start + len(_ASSISTANT_NEEDLE) : end].lstrip()
        match = _MARKER_RE.match(between)
        if match is None:
            return ()
        return (match.group(0),)

    # ------------------------------------------------------------------ rendering

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        *,
        strip_bos: bool = True,
        reasoning: ReasoningOptions | None = None,
        **extra: Any,
    ) -> str:
        """The prompt text for ``messages`` (dicts with "role" and "content", assistant
        messages optionally "reasoning_content").

        ``add_generation_prompt`` appends the header of the assistant's reply.
        ``reasoning`` chooses thinking on/off and the effort (default: thinking on, the
        template's effort). ``extra`` becomes template variables (``tools``,
        ``date_string`` ...) and wins over those that ``reasoning`` sets.
        With ``strip_bos`` (the default) one leading BOS token text is removed, because the
        engine tokenizes with ``add_special=True`` and llama.cpp adds BOS itself.

        Raises :class:`ChatTemplateError` when the template refuses the conversation even
        after the system prompt has been merged into the first user message and repeated
        roles have been joined.
        """
        given = self._prepare_messages(messages)
        extra = {**self._reasoning_variables(reasoning or _DEFAULT_REASONING), **extra}
        has_system = any(message.get("role") == "system" for message in given)
        first = _merge_system(given) if has_system and not self.supports_system_role else given
        candidates = [first]
        if has_system:
            candidates.append(_merge_system(given))
        if _has_consecutive_roles(candidates[-1]):
            candidates.append(_merge_consecutive(candidates[-1]))

        error: Exception | None = None
        tried: list[list[dict[str, Any]]] = []
        for candidate in candidates:
            if candidate in tried:
                continue
            tried.append(candidate)
            try:
                text = self._render_raw(candidate, add_generation_prompt, extra)
            except Exception as caught:  # a template is foreign code: anything may come out
                error = caught
                continue
            if strip_bos and self.bos_token and text.startswith(self.bos_token):
                text = text[len(self.bos_token) :]
            return text
        assert error is not None
        raise ChatTemplateError(
            _sentence(
                "The model's chat template failed: ",
                _describe(error),
                "The conversation could not be put into the form this model expects.",
            ),
            template_message=error.template_message
            if isinstance(error, ChatTemplateError)
            else None,
        ) from error

    def __repr__(self) -> str:
        kind = f"builtin={self.builtin_name!r}" if self.fallback else "from model"
        return (
            f"<ChatTemplate {kind} system_role={self.supports_system_role}"
            f" reasoning={self.reasoning_format.value}>"
        )
