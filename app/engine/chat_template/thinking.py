"""Thinking on or off, and the effort: what a template is given, and the default rule.

**The rule (as llama-server applies it).** llama-server turns thinking on by default only
where its chat parser recognises the template's reasoning format
(``common_chat_templates_support_enable_thinking`` in the vendored ``common/chat.cpp``:
a specialised handler says so, or the template analysis of ``chat-diff-analyzer.cpp``
finds reasoning markers), and then gives the template ``enable_thinking`` and nothing
else: no ``thinking``, ``thinking_mode`` or effort unless the request names one. We do the
same with probes of our own: **thinking is on by default when the template's model writes
a reasoning format the splitter knows (:func:`app.engine.reasoning.detect_format`) and
the template shows it**, that is

* llama-server hands the template to a dedicated parser that reasons (gpt-oss, Kimi,
  DeepSeek V3.2/V4, MiniMax-M3, Gemma 4, LFM2...: :func:`llama_server_handler`; one that
  does not, GigaChat 3 or Functionary, leaves thinking off), else
* it renders a past turn's ``reasoning_content`` (the analysis' first probe), or
* its generation prompt differs at the end between thinking on and off (the second probe,
  made here with every switch the template reads: the prompt opens or closes the
  reasoning block, not only a header further up), or
* it is one of the old Qwen/DeepSeek templates that split ``content`` on ``</think>``, or
  Granite 3.3 (the analysis' own patches for those).

A default render (:class:`ReasoningOptions` with ``enable_thinking=None``) passes
``enable_thinking`` per that rule and leaves every other reasoning variable to the
template, so a template with a switch of its own renders its own default exactly as
llama-server does (Apertus writes "Deliberation: disabled", Tencent Hy3 ``no_think``,
DeepSeek V4 derives ``thinking`` from ``enable_thinking``, MiniMax-M3 leaves
``thinking_mode`` unset). An explicit choice (``True`` or ``False``) sets every name the
template reads for it (``thinking``, ``thinking_mode``, ``reasoning``, ``thinking_budget``,
Hy3's ``reasoning_effort``); an effort sets ``reasoning_effort``, ``reasoning_strength``
and ``thinking_effort`` where the template reads them, as llama-server does.

:class:`ReasoningDefaults` is what the engine reports about the loaded model's template:
its format, whether the rule turns thinking on, and whether a default render thinks.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Final

from app.engine.reasoning import ReasoningFormat


class ReasoningEffort(enum.Enum):
    """How hard a reasoning model should think (for templates that take an effort)."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


@dataclass(frozen=True, slots=True)
class ReasoningOptions:
    """The reasoning choices of one render.

    ``enable_thinking=None`` is the model's default (the rule of this module's docstring);
    ``True``/``False`` is the user's explicit choice. ``effort=None`` leaves the
    template's own default ("medium" for gpt-oss).
    """

    enable_thinking: bool | None = None
    effort: ReasoningEffort | None = None


DEFAULT_REASONING: Final = ReasoningOptions()

#: The name of the rule, for the window, ``run --json`` and ``/props``.
THINKING_RULE: Final = "llama-server"


@dataclass(frozen=True, slots=True)
class ReasoningDefaults:
    """How the loaded model's template reasons, and what its default render does."""

    format: ReasoningFormat  # the markers the model writes (NONE: no reasoning)
    thinking_enabled_by_rule: bool  # ``enable_thinking`` of a default render
    thinking_by_default: bool  # whether a default render asks the model to think
    supports_thinking_toggle: bool  # thinking on/off changes the prompt
    supports_effort: bool  # the effort changes the prompt
    rule: str = THINKING_RULE

    def to_dict(self) -> dict[str, object]:
        return {
            "format": self.format.value,
            "thinking_enabled_by_rule": self.thinking_enabled_by_rule,
            "thinking_by_default": self.thinking_by_default,
            "supports_thinking_toggle": self.supports_thinking_toggle,
            "supports_effort": self.supports_effort,
            "rule": self.rule,
        }


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


# llama-server's dedicated parsers, in the order ``common_chat_try_specialized_template``
# (common/chat.cpp) tries them: the needles that pick one (all of ``needles``, none of
# ``absent``) and whether that parser reasons (``supports_thinking``; Qwen3-Coder's does
# where the template names ``<think>``). The first that matches decides.
@dataclass(frozen=True, slots=True)
class _Handler:
    name: str
    needles: tuple[str, ...]
    thinks: bool
    absent: tuple[str, ...] = ()
    any_of: tuple[str, ...] = ()


_HANDLERS: Final = (
    _Handler("Ministral 3", ("[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]"), True, ("[CALL_ID]",)),
    _Handler("gpt-oss", ("<|channel|>",), True),
    _Handler("Muse Glimmer", ("<atem:function_calls>", "<|eom|>"), True),
    _Handler("Functionary v3.2", (">>>all", ">>>${recipient}"), False),
    _Handler("Kimi K2", ("<|tool_calls_section_begin|>", "<|tool_call_begin|>"), True),
    _Handler("Kimi K3", ("<|open|>", "<|close|>", "<|end_of_msg|>"), True),
    _Handler("Ling 3", ("<role>ASSISTANT</role>", "<arg_key>"), True),
    _Handler("Cohere2 MoE", ("<|START_TEXT|>", "<|START_ACTION|>"), True),
    _Handler("LFM2", ("<|tool_list_start|>", "<|tool_list_end|>"), True),
    _Handler("LFM2.5", ("List of tools: [",), True, ("<|tool_list_start|>",)),
    _Handler("GigaChat 3", ("<|role_sep|>", "<|message_sep|>"), False, ("<|function_call|>",)),
    _Handler("MiniMax-M3", ("]<]minimax[>[", "<tool_call>", "<invoke name="), True),
    _Handler(
        "DeepSeek V3.2/V4", ("dsml_token", "DSML"), True, any_of=("function_calls", "tool_calls")
    ),
    _Handler("Gemma 4", ("'<|tool_call>call:'",), True),
    _Handler("MiniCPM5", ("Tool usage guidelines:", '<function name="', '<param name="'), True),
    _Handler(
        "Qwen3-Coder",
        ("<tool_call>", "<function=", "<parameter=", "<think>"),
        True,
        ("'<tool_call><function=' ~ tool_call.name ~ '>'",),
    ),
    _Handler(
        "Qwen3-Coder",
        ("<tool_call>", "<function=", "<parameter="),
        False,
        ("'<tool_call><function=' ~ tool_call.name ~ '>'",),
    ),
)


def llama_server_handler(source: str) -> tuple[str, bool] | None:
    """The dedicated parser llama-server uses for this template, and whether it reasons
    (None: the template analysis decides)."""
    for handler in _HANDLERS:
        if (
            all(n in source for n in handler.needles)
            and not any(n in source for n in handler.absent)
            and (not handler.any_of or any(n in source for n in handler.any_of))
        ):
            return handler.name, handler.thinks
    return None


# The template analysis' patches (chat-diff-analyzer.cpp, ``workarounds``).
_OLD_QWEN_SPLIT: Final = "content.split('</think>')"
_GRANITE_33: Final = (
    "Write your thoughts between <think></think> and write your response between "
    "<response></response>"
)


#: The variables llama.cpp's default ``preserve_reasoning=true`` sets.
PRESERVE_REASONING: Final[tuple[tuple[str, bool], ...]] = (
    ("preserve_thinking", True),
    ("clear_thinking", False),
    ("truncate_history_thinking", False),
    ("drop_thinking", False),
)


def reasoning_variables(
    names: Collection[str], source: str, options: ReasoningOptions, rule_on: bool
) -> dict[str, Any]:
    """Template variables for ``options``, under the names this template reads.

    ``rule_on`` is ``enable_thinking`` of a default render (:func:`thinking_rule`).
    """
    explicit = options.enable_thinking is not None
    thinking = options.enable_thinking if options.enable_thinking is not None else rule_on
    effort = options.effort
    # llama.cpp always passes enable_thinking.
    variables: dict[str, Any] = {"enable_thinking": thinking}
    # llama-server and llama-cli pass preserve_reasoning=true unless told otherwise
    # (common/arg.cpp), which sets these four (jinja caps_apply_preserve_reasoning): an
    # earlier turn keeps its reasoning block (DeepSeek V4 renders it <think></think>...,
    # not </think>...; GLM-4.7, Nemotron 3, LFM2.5, Laguna keep past reasoning).
    for name, value in PRESERVE_REASONING:
        if name in names:
            variables[name] = value
    if explicit:
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
            if explicit and not thinking:
                variables["reasoning_effort"] = "no_think"
            elif explicit or effort is not None:
                variables["reasoning_effort"] = _HY3_EFFORTS[effort or ReasoningEffort.HIGH]
        elif explicit and not thinking and '"minimal"' in source and "<|think|>" in source:
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


def thinking_rule(
    fmt: ReasoningFormat,
    source: str,
    shows_past_reasoning: Callable[[], bool],
    prompt_end_toggles: Callable[[], bool],
) -> bool:
    """Whether a default render enables thinking (the rule of the module docstring).

    The probes are callables so that a template without a reasoning format renders none.
    """
    if fmt is ReasoningFormat.NONE:
        return False
    handler = llama_server_handler(source)
    if handler is not None:
        return handler[1]
    if _OLD_QWEN_SPLIT in source or _GRANITE_33 in source:
        return True
    return shows_past_reasoning() or prompt_end_toggles()


def differs_at_end(first: str, second: str) -> bool:
    """Whether two generation prompts differ at their end (within the last
    :data:`_END_CHARS` characters): the prompt opens or closes the reasoning block, rather
    than only a header further up changing ("Deliberation: enabled")."""
    a, b = first.rstrip(), second.rstrip()
    if a == b:
        return False
    n = 0
    limit = min(len(a), len(b))
    while n < limit and a[-1 - n] == b[-1 - n]:
        n += 1
    return n < _END_CHARS


# Longer than the markers of the generation prompts ("<|im_start|>assistant\n"), shorter
# than a probe user message and the header after it.
_END_CHARS: Final = 24
