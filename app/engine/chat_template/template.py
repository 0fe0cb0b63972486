"""The compiled chat template: probes at construction, :meth:`ChatTemplate.render`.

See :mod:`app.engine.chat_template` for the conventions it reproduces and
:mod:`app.engine.chat_template.thinking` for the thinking rule.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import jinja2
import jinja2.meta

from app.engine.chat_template.choice import (
    HasToken,
    TemplateChoice,
    TemplateSource,
    choose_builtin_choice,
    gguf_choice,
    user_template,
)
from app.engine.chat_template.environment import (
    ENVIRONMENT,
    ChatTemplateError,
    describe,
    sentence,
    sentence_part,
    tojson,
)
from app.engine.chat_template.messages import (
    has_consecutive_roles,
    merge_consecutive,
    merge_system,
    prepare_messages,
)
from app.engine.chat_template.thinking import (
    DEFAULT_REASONING,
    ReasoningDefaults,
    ReasoningEffort,
    ReasoningOptions,
    differs_at_end,
    llama_server_handler,
    reasoning_variables,
    thinking_rule,
)
from app.engine.chat_template.tools import ToolCaps, adapt_tool_messages, probe_tool_caps
from app.engine.reasoning import ReasoningFormat, detect_format, prompt_opens_reasoning
from app.engine.tool_calls.specs import ToolSpec

log = logging.getLogger("app.engine.chat_template")

_BUILTIN_SOURCES: Final = frozenset(
    {
        TemplateSource.BUILTIN_BY_VOCABULARY,
        TemplateSource.BUILTIN_BY_ARCHITECTURE,
        TemplateSource.BUILTIN_DEFAULT,
    }
)

# llama-server's handlers that hand past reasoning to the template as ``thinking``.
_THINKING_FIELD: Final = frozenset({"gpt-oss", "LFM2", "LFM2.5"})

# Needles for the probes; plain words so that no template mangles them.
_SYSTEM_NEEDLE: Final = "LlamaDeskProbeSystemText"
_USER_NEEDLE: Final = "LlamaDeskProbeUserText"
_USER2_NEEDLE: Final = "LlamaDeskProbeSecondUserText"
_ASSISTANT_NEEDLE: Final = "LlamaDeskProbeAssistantText"
_REASONING_NEEDLE: Final = "LlamaDeskProbeReasoningText"

# A special-token-like marker at the start of the text after an assistant message:
# <|im_end|>, <end_of_turn>, </s>, <｜end▁of▁sentence｜>, [/INST] ...
_MARKER_RE: Final = re.compile(r"<[^<>\s]{1,64}>|\[/?[A-Za-z_]{2,32}\]")


class ChatTemplate:
    """A compiled chat template; :meth:`render` turns messages into prompt text.

    Construct with the GGUF's ``tokenizer.chat_template`` (None for a built-in fallback)
    and the BOS/EOS token texts; ``add_bos``/``add_eos`` say whether the model's tokenizer
    adds those tokens itself (``llama_vocab_get_add_bos``/``_eos``): only then does
    :meth:`render` strip their texts, as llama.cpp's ``common_chat`` does (SmolLM2's BOS
    text is ``<|im_start|>`` but it adds no BOS: stripping it lost the first marker).
    Raises :class:`ChatTemplateError` when the template does
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
        choice: TemplateChoice | None = None,
        add_bos: bool = True,
        add_eos: bool = False,
    ) -> None:
        self.bos_token: Final = bos_token or ""
        self.eos_token: Final = eos_token or ""
        #: Whether the tokenizer adds BOS / EOS itself (then render strips their texts).
        self.add_bos: Final = add_bos
        self.add_eos: Final = add_eos
        self._now: Callable[[], datetime] = now or datetime.now
        if choice is None:
            if template and template.strip():
                choice = gguf_choice(template)
            else:
                # Without the vocabulary at hand, the BOS/EOS texts are the tokens we know.
                known = {self.bos_token, self.eos_token} - {""}
                choice = choose_builtin_choice(known.__contains__, architecture, model_name)
        template = choice.template if not (template and template.strip()) else template
        #: Which template is in use, where it came from and why (the window, ``run
        #: --json`` and ``/props`` say it).
        self.choice: Final[TemplateChoice] = choice
        builtin = choice.source in _BUILTIN_SOURCES
        #: True when the template is a built-in one, not the model's own (tell the user).
        self.fallback: Final[bool] = builtin
        #: Name of the built-in template in use ("chatml", "llama3", "gemma"), else None.
        self.builtin_name: Final[str | None] = choice.name if builtin else None
        #: The Jinja source in use.
        self.source: Final[str] = template
        # Past reasoning goes to templates that read it as ``thinking`` under that name too,
        # as llama-server's gpt-oss and LFM2/LFM2.5 handlers copy it.
        handler = llama_server_handler(template)
        self._reasoning_as_thinking: Final = handler is not None and handler[0] in _THINKING_FIELD
        self._thinking_blocks: Final = handler is not None and handler[0] == "Ministral 3"
        try:
            parsed = ENVIRONMENT.parse(template)
            self._compiled = ENVIRONMENT.from_string(
                parsed, globals={"strftime_now": self._strftime_now}
            )
        except jinja2.TemplateSyntaxError as error:
            raise ChatTemplateError(
                sentence(
                    f"The model's chat template has a syntax error on line {error.lineno}: ",
                    sentence_part(error.message or "unknown error"),
                ),
                template_message=error.message,
            ) from error
        except Exception as error:  # a template is foreign code: anything may come out
            raise ChatTemplateError(
                sentence("The model's chat template cannot be compiled: ", describe(error))
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
        self._rule_on = False  # what a default render passes as enable_thinking (below)
        on = self._probe_prompt(ReasoningOptions(enable_thinking=True))
        off = self._probe_prompt(ReasoningOptions(enable_thinking=False))
        #: Whether thinking on/off changes the prompt (show the toggle only then).
        self.supports_thinking_toggle: Final[bool] = (
            on is not None and off is not None and on != off
        )
        self._rule_on = thinking_rule(
            self.reasoning_format,
            template,
            self._shows_past_reasoning,
            lambda: on is not None and off is not None and differs_at_end(on, off),
        )
        #: Whether a default render asks the model to think (the rule, and the template's
        #: own default where it has a switch of its own: Hy3 defaults to no_think).
        self.thinking_by_default: Final[bool] = self._rule_on and (
            not self.supports_thinking_toggle or self._probe_prompt(DEFAULT_REASONING) != off
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
        has_token: HasToken | None = None,
        user_choice: str | None = None,
        add_bos: bool = True,
        add_eos: bool = False,
    ) -> ChatTemplate:
        """The template to use (see :mod:`.choice` for the order); never raises.

        ``has_token`` says whether a text is one special token of the model's vocabulary
        (without it, only the BOS/EOS texts are known); ``user_choice`` is a bundled
        template's name or a Jinja file (empty: automatic); ``add_bos``/``add_eos``: what
        the tokenizer adds (see the class). A choice that cannot be used
        is logged and the next one in the order is taken, its reason saying so.
        """
        known = {bos_token, eos_token} - {""}
        vocabulary: HasToken = has_token or known.__contains__

        def build(choice: TemplateChoice) -> ChatTemplate:
            return cls(
                choice.template,
                bos_token,
                eos_token,
                model_name=model_name,
                architecture=architecture,
                now=now,
                choice=choice,
                add_bos=add_bos,
                add_eos=add_eos,
            )

        refused = ""
        candidates: list[TemplateChoice] = []
        if user_choice and user_choice.strip():
            try:
                candidates.append(user_template(user_choice))
            except ValueError as error:
                log.warning("The chosen chat template cannot be used: %s", error)
                refused = f"{error} "
        if template and template.strip():
            candidates.append(gguf_choice(template))
        for candidate in candidates:
            try:
                return build(candidate)
            except ChatTemplateError as error:
                log.warning("Chat template %s cannot be used: %s", candidate.name, error)
                refused += f"{error} "
            except Exception:  # never let a model's template take the app down
                log.exception("Chat template %s crashed", candidate.name)
                refused += f"The {candidate.name} chat template crashed. "
        fallback = choose_builtin_choice(vocabulary, architecture, model_name)
        if refused:
            fallback = dataclasses.replace(fallback, reason=refused + fallback.reason)
        return build(fallback)

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
            context["functions"] = tojson(tools, indent=2) if tools else ""
            # llama.cpp adds the time of day too; the date alone keeps the prefix stable.
            context["datetime"] = self._now().strftime("%b %d %Y")
        return context

    def _reasoning_variables(self, options: ReasoningOptions) -> dict[str, Any]:
        """Template variables for ``options``, under the names this template reads."""
        return reasoning_variables(self._referenced, self.source, options, self._rule_on)

    def _probe_prompt(self, options: ReasoningOptions) -> str | None:
        """The generation prompt of one user message under ``options`` (None: refused)."""
        probe = [{"role": "user", "content": _USER_NEEDLE}]
        try:
            return self._render_raw(probe, True, self._reasoning_variables(options))
        except Exception as error:
            log.debug("Chat template refuses a reasoning choice: %s", describe(error))
            return None

    def _shows_past_reasoning(self) -> bool:
        """Whether a past turn's ``reasoning_content`` is rendered (thinking on)."""
        turn = [
            {"role": "user", "content": _USER_NEEDLE},
            {
                "role": "assistant",
                "content": _ASSISTANT_NEEDLE,
                "reasoning_content": _REASONING_NEEDLE,
            },
        ]
        variables = self._reasoning_variables(ReasoningOptions(enable_thinking=True))
        try:
            text = self._render_raw(
                prepare_messages(turn, self._reasoning_as_thinking, self._thinking_blocks),
                False,
                variables,
            )
        except Exception as error:
            log.debug("Chat template refuses past reasoning: %s", describe(error))
            return False
        return _REASONING_NEEDLE in text

    @property
    def reasoning_defaults(self) -> ReasoningDefaults:
        """What the window, ``run --json`` and ``/props`` show about this template's reasoning."""
        return ReasoningDefaults(
            self.reasoning_format,
            self._rule_on,
            self.thinking_by_default,
            self.supports_thinking_toggle,
            self.supports_effort,
        )

    def _probe_differs(self, first: ReasoningOptions, second: ReasoningOptions) -> bool:
        """Whether a one-user-message prompt differs between two reasoning choices."""
        probe = [{"role": "user", "content": _USER_NEEDLE}]
        try:
            one = self._render_raw(probe, True, self._reasoning_variables(first))
            two = self._render_raw(probe, True, self._reasoning_variables(second))
        except Exception as error:
            log.debug("Chat template refuses a reasoning choice: %s", describe(error))
            return False
        return one != two

    def opens_reasoning(self, reasoning: ReasoningOptions | None = None) -> bool:
        """Whether the generation prompt opens the reasoning block (``<think>\\n`` at its
        end), so that the reply starts inside the reasoning.

        Found by rendering one user message; for a rendered prompt at hand,
        :func:`app.engine.reasoning.prompt_opens_reasoning` tells from its text.
        """
        options = reasoning or DEFAULT_REASONING
        cached = self._opens_cache.get(options)
        if cached is not None:
            return cached
        probe = [{"role": "user", "content": _USER_NEEDLE}]
        try:
            text = self._render_raw(probe, True, self._reasoning_variables(options))
        except Exception as error:
            log.debug("Chat template cannot render its generation prompt: %s", describe(error))
            opens = False
        else:
            opens = prompt_opens_reasoning(text, self.reasoning_format)
        self._opens_cache[options] = opens
        return opens

    def _render_raw(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool, extra: dict[str, Any]
    ) -> str:
        # Copies: the environment lets a template append to lists (see .environment).
        context: dict[str, Any] = {
            **self._conventions(extra),
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **copy.deepcopy(extra),
            "messages": copy.deepcopy(messages),
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
            log.debug("Chat template refuses a system message: %s", describe(error))
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
                    sentence(
                        "The model's chat template cannot render a simple conversation: ",
                        describe(first_error),
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
            log.debug("No stop strings for this chat template: %s", describe(error))
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
        tool_specs: Sequence[ToolSpec] = (),
        **extra: Any,
    ) -> str:
        """The prompt text for ``messages`` (dicts with "role" and "content", assistant
        messages optionally "reasoning_content" and OpenAI's "tool_calls", "tool" results
        with "tool_call_id").

        ``tool_specs``: the tools the model may call, rendered the template's way or in
        the generic form (:mod:`.tools`).
        ``add_generation_prompt`` appends the header of the assistant's reply.
        ``reasoning`` chooses thinking on/off and the effort (default: thinking on, the
        template's effort). ``extra`` becomes template variables (``tools``,
        ``date_string`` ...) and wins over those that ``reasoning`` sets.
        With ``strip_bos`` (the default) one leading BOS token text is removed where the
        tokenizer adds BOS (``add_bos``), because the engine tokenizes with
        ``add_special=True`` and llama.cpp adds BOS itself; a trailing EOS text likewise
        where it adds EOS. That is llama.cpp's ``common_chat_template_direct_apply``.

        Raises :class:`ChatTemplateError` when the template refuses the conversation even
        after the system prompt has been merged into the first user message and repeated
        roles have been joined.
        """
        if tool_specs or any(m.get("tool_calls") or m.get("role") == "tool" for m in messages):
            messages, tool_extra = adapt_tool_messages(messages, tool_specs, self.tool_caps)
            extra = {**tool_extra, **extra}
        given = prepare_messages(messages, self._reasoning_as_thinking, self._thinking_blocks)
        extra = {**self._reasoning_variables(reasoning or DEFAULT_REASONING), **extra}
        has_system = any(message.get("role") == "system" for message in given)
        first = merge_system(given) if has_system and not self.supports_system_role else given
        candidates = [first]
        if has_system:
            candidates.append(merge_system(given))
        if has_consecutive_roles(candidates[-1]):
            candidates.append(merge_consecutive(candidates[-1]))

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
            if strip_bos:
                text = self._strip_added_tokens(text)
            return text
        assert error is not None
        raise ChatTemplateError(
            sentence(
                "The model's chat template failed: ",
                describe(error),
                "The conversation could not be put into the form this model expects.",
            ),
            template_message=error.template_message
            if isinstance(error, ChatTemplateError)
            else None,
        ) from error

    def _strip_added_tokens(self, text: str) -> str:
        """``text`` without the BOS/EOS texts the tokenizer will add itself (only those)."""
        if self.add_bos and self.bos_token and text.startswith(self.bos_token):
            text = text[len(self.bos_token) :]
        if self.add_eos and self.eos_token and text.endswith(self.eos_token):
            text = text[: -len(self.eos_token)]
        return text

    @functools.cached_property
    def tool_caps(self) -> ToolCaps:
        """How this template takes tools and past calls (probed at first use)."""
        return probe_tool_caps(self._render_raw, self.source)

    def __repr__(self) -> str:
        kind = f"builtin={self.builtin_name!r}" if self.fallback else "from model"
        return (
            f"<ChatTemplate {kind} system_role={self.supports_system_role}"
            f" reasoning={self.reasoning_format.value}>"
        )
