"""What a turn asks of tools: the functions, ``tool_choice`` and ``parallel_tool_calls``
(:class:`ToolRequest`), checked from OpenAI's request values with a sentence for each way
they can be wrong; and what the engine makes of it for one reply (:class:`ToolTurn`: the
family to parse, the grammar that forces or lazily constrains the calls)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from app.engine.reasoning import ReasoningFormat
from app.engine.tool_calls.events import ToolCall
from app.engine.tool_calls.formats import ToolCallFormat
from app.engine.tool_calls.grammar import CallGrammar, ToolChoice, call_grammar
from app.engine.tool_calls.specs import ToolSpec, ToolSpecError, check_arguments, tool_specs

if TYPE_CHECKING:
    from app.engine.chat_template import ChatTemplate

__all__ = [
    "ToolChoiceMode",
    "ToolRequest",
    "ToolTurn",
    "call_errors",
    "plan_tool_turn",
    "tool_turn",
]


class ToolChoiceMode(enum.Enum):
    AUTO = "auto"  # the model may call (a lazy grammar from the call's opening on)
    NONE = "none"  # the tools are shown, calls are not parsed (the reply is text)
    REQUIRED = "required"  # the reply is calls (a grammar forces them)
    NAMED = "named"  # the reply is a call to :attr:`ToolRequest.function`


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """The tools a turn offers and how they may be called."""

    tools: tuple[ToolSpec, ...]
    mode: ToolChoiceMode = ToolChoiceMode.AUTO
    function: str = ""  # the named function (NAMED)
    parallel: bool = True  # several calls in one reply

    def __post_init__(self) -> None:
        if self.mode is ToolChoiceMode.NAMED and self.function not in {t.name for t in self.tools}:
            raise ToolSpecError(
                f"The tool_choice names the function '{self.function}', which is not among the tools."
            )
        if self.mode in (ToolChoiceMode.REQUIRED, ToolChoiceMode.NAMED) and not self.tools:
            raise ToolSpecError("A tool call cannot be required without tools.")

    @classmethod
    def from_openai(
        cls, tools: Any, tool_choice: Any = None, parallel_tool_calls: Any = None
    ) -> ToolRequest:
        """From a chat request's values (raises :class:`ToolSpecError` with a sentence)."""
        specs = tool_specs(tools)
        mode, function = _choice(tool_choice)
        if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
            raise ToolSpecError("parallel_tool_calls must be true or false.")
        # Off unless asked, as llama-server has it: a forced grammar that allows more
        # calls lets a small model call again and again.
        return cls(specs, mode, function, parallel_tool_calls is True)

    def spec(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)


def _choice(value: Any) -> tuple[ToolChoiceMode, str]:
    if value is None:
        return ToolChoiceMode.AUTO, ""
    if isinstance(value, str):
        try:
            mode = ToolChoiceMode(value)
        except ValueError:
            mode = ToolChoiceMode.NAMED
        if mode is not ToolChoiceMode.NAMED:
            return mode, ""
    elif isinstance(value, Mapping) and value.get("type", "function") == "function":
        function = value.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        if isinstance(name, str) and name:
            return ToolChoiceMode.NAMED, name
    raise ToolSpecError(
        "tool_choice must be 'auto', 'none', 'required' or "
        '{"type": "function", "function": {"name": ...}}.'
    )


@dataclass(frozen=True, slots=True)
class ToolTurn:
    """One reply's tools as the engine runs them: parse calls of ``fmt`` (unless
    ``parse`` is False: tool_choice none), constrained by ``grammar`` (None: free)."""

    request: ToolRequest
    fmt: ToolCallFormat
    grammar: CallGrammar | None
    parse: bool = True
    # How the reply's reasoning is marked (the parser splits it off first).
    reasoning: ReasoningFormat = ReasoningFormat.NONE
    starts_in_reasoning: bool = False


def plan_tool_turn(
    request: ToolRequest,
    fmt: ToolCallFormat,
    reasoning: ReasoningFormat,
    starts_in_reasoning: bool,
) -> ToolTurn:
    """The grammar for ``request`` in family ``fmt`` (raises ToolGrammarError with a
    sentence where the tools cannot be forced)."""
    parse = request.mode is not ToolChoiceMode.NONE
    if not parse or not request.tools:
        return ToolTurn(request, fmt, None, parse, reasoning, starts_in_reasoning)
    choice = ToolChoice.AUTO if request.mode is ToolChoiceMode.AUTO else ToolChoice.REQUIRED
    grammar = call_grammar(
        fmt,
        request.tools,
        choice,
        only=request.function if request.mode is ToolChoiceMode.NAMED else None,
        parallel=request.parallel,
        reasoning=reasoning,
        starts_in_reasoning=starts_in_reasoning,
    )
    return ToolTurn(request, fmt, grammar, True, reasoning, starts_in_reasoning)


def tool_turn(
    template: ChatTemplate | None,
    request: ToolRequest | None,
    reasoning: ReasoningFormat,
    starts_in_reasoning: bool,
    thinking_off: bool = False,
) -> ToolTurn | None:
    """How a chat's reply runs ``request`` with ``template``'s family (None: no tools).
    With thinking turned off, a forced call starts at once (no reasoning first) unless the
    prompt itself opened the reasoning."""
    if request is None or template is None:
        return None
    turn = plan_tool_turn(
        request,
        template.tool_caps.fmt,
        ReasoningFormat.NONE if thinking_off and not starts_in_reasoning else reasoning,
        starts_in_reasoning,
    )
    return replace(turn, reasoning=reasoning, starts_in_reasoning=starts_in_reasoning)


def call_errors(request: ToolRequest, calls: tuple[ToolCall, ...]) -> tuple[str, ...]:
    """A sentence per call that names no offered tool or whose arguments do not fit its
    schema (what the model is told back, what a client shows)."""
    errors = []
    for call in calls:
        spec = request.spec(call.name)
        if spec is None:
            errors.append(f"The model called '{call.name}', which is not among the tools.")
            continue
        problem = check_arguments(spec, call.arguments)
        if problem:
            errors.append(problem)
    return tuple(errors)
