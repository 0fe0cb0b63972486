"""Request bodies checked and turned into typed requests; every problem is a 400 sentence.

Sampling parameters are built from the app's one settings schema
(:data:`app.settings_schema.SAMPLING_FIELDS`): their names, types and ranges, and the
schema's sentence when a value is out of range.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.engine import SamplingParams
from app.engine.chat_template import ReasoningEffort, ReasoningOptions
from app.engine.grammar_bounds import GrammarBoundsError, GrammarSyntaxError, check_grammar
from app.engine.json_grammar import SchemaGrammarError, json_object_grammar, schema_grammar
from app.engine.speculative import SpecMode
from app.engine.tool_calls import ToolSpecError
from app.engine.tool_calls.request import ToolChoiceMode, ToolRequest
from app.server.errors import ApiError, bad_request
from app.session import ChatMessage, MessageToolCall
from app.settings_schema import SAMPLING_FIELDS

MAX_MESSAGES = 4096
MAX_STOP = 16
MAX_NAME = 128
# Tool definitions are prompt text the server renders and grammars it builds: bounded like
# the other inputs (a request of 10,000 tools is refused, not rendered).
MAX_TOOLS = 128
MAX_TOOLS_CHARS = 256_000
MAX_CALLS = 64  # calls in one assistant message of the history
MAX_CALL_ID = 128
ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}
# Request names of the schema's sampling fields (OpenAI's and llama-server's spellings).
SAMPLING_NAMES: dict[str, str] = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repeat_penalty": "repeat_penalty",
    "repeat_last_n": "repeat_last_n",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "seed": "seed",
    # speculative decoding: ours, and llama-server's per-request names
    "speculative": "speculative",
    "draft_max": "draft_max",
    "speculative.n_max": "draft_max",
}
# Fields that change what a reply means: refused rather than silently ignored.
UNSUPPORTED: dict[str, str] = {
    "functions": "Function calls are not supported by this server.",
    "logprobs": "Log probabilities are not supported by this server.",
    "top_logprobs": "Log probabilities are not supported by this server.",
    "logit_bias": "logit_bias is not supported by this server.",
    "audio": "Audio output is not supported by this server.",
    "prediction": "Predicted outputs are not supported by this server.",
    "suffix": "suffix (fill-in-the-middle) is not supported by this server.",
    "echo": "echo is not supported by this server.",
}


@dataclass(frozen=True)
class GenerationRequest:
    """What both completion endpoints share."""

    model: str | None
    sampling: SamplingParams
    max_tokens_given: bool
    stream: bool
    include_usage: bool
    conversation: str | None


@dataclass(frozen=True)
class ChatRequest(GenerationRequest):
    messages: tuple[ChatMessage, ...] = ()
    system: str = ""
    reasoning: ReasoningOptions = field(default_factory=ReasoningOptions)
    tools: ToolRequest | None = None  # tools, tool_choice, parallel_tool_calls


@dataclass(frozen=True)
class CompletionRequest(GenerationRequest):
    prompt: str | None = None
    prompt_tokens: tuple[int, ...] | None = None


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string"}.get(
        type(value), "an array" if isinstance(value, list) else "an object"
    )


def expect_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request(f"The request body must be a JSON object, not {_type_name(body)}.")
    return body


def get_bool(body: dict[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"'{name}' must be true or false, not {_type_name(value)}.", name)
    return value


def get_str(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad_request(f"'{name}' must be a string, not {_type_name(value)}.", name)
    return value


def get_int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer() and math.isfinite(value):
            return int(value)
        raise bad_request(f"'{name}' must be a whole number, not {_type_name(value)}.", name)
    return value


def conversation_name(body: dict[str, Any], header: str | None) -> str | None:
    """The client's conversation name (body ``conversation`` or ``X-Conversation-Id``)."""
    name = get_str(body, "conversation")
    if name is None and header is not None:
        name = header
    if name is None:
        return None
    name = name.strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise bad_request(
            f"A conversation id must be 1 to {MAX_NAME} printable characters.", "conversation"
        )
    return name


def _sampling(body: dict[str, Any], param_names: dict[str, str]) -> tuple[SamplingParams, bool]:
    values: dict[str, Any] = {}
    for request_name, field_name in param_names.items():
        if body.get(request_name) is None:
            continue
        value = body[request_name]
        spec = SAMPLING_FIELDS[field_name]
        if spec.kind == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if spec.kind == "int" and isinstance(value, float) and value.is_integer():
            value = int(value)
        problem = spec.problem(value)
        if problem is not None:
            raise bad_request(f"'{request_name}': {problem}", request_name)
        values[field_name] = value
    # max_tokens: OpenAI's two names and llama-server's n_predict
    given = None
    for name in ("max_completion_tokens", "max_tokens", "n_predict"):
        if body.get(name) is not None:
            given = name
            break
    max_tokens = -1  # until the reply ends or the context is full
    if given is not None:
        value = get_int(body, given)
        assert value is not None
        if given == "n_predict" and value == -1:
            value = -1
        elif value < 1:
            raise bad_request(f"'{given}' must be at least 1, not {value}.", given)
        problem = SAMPLING_FIELDS["max_tokens"].problem(value)
        if problem is not None:
            raise bad_request(f"'{given}': {problem}", given)
        max_tokens = value
    values["max_tokens"] = max_tokens
    stop = body.get("stop")
    if stop is not None:
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise bad_request("'stop' must be a string or an array of strings.", "stop")
        stop = [s for s in stop if s]
        if len(stop) > MAX_STOP:
            raise bad_request(f"'stop' may hold at most {MAX_STOP} strings.", "stop")
        values["stop"] = stop
    values["grammar"] = _grammar(body)
    kind = body.get("speculative.type")
    if kind is not None:  # llama-server's names: none, draft..., ngram, ngram-simple, ...
        if isinstance(kind, str) and (kind == "draft" or kind.startswith("draft-")):
            raise bad_request(
                "Speculation with a draft model is not available in LlamaDesk; use an n-gram "
                "kind (ngram-simple...) or none.",
                "speculative.type",
            )
        if not isinstance(kind, str) or not (
            kind in ("none", "ngram") or kind.startswith("ngram-")
        ):
            raise bad_request(
                "'speculative.type' must be none or an n-gram kind (ngram-simple...).",
                "speculative.type",
            )
        # Every n-gram kind is this app's one prompt lookup (app.engine.speculative).
        mode = SpecMode.OFF if kind == "none" else SpecMode.NGRAM
        values["speculative"] = mode.value
    params = SamplingParams(**values)
    return params, given is not None


def _grammar(body: dict[str, Any]) -> str | None:
    """``response_format`` (json_object, json_schema) or llama-server's ``grammar`` /
    ``json_schema`` extensions as a GBNF grammar, checked against what llama.cpp can parse
    without crashing (app/engine/grammar_bounds.py): beyond it, a 400 naming the limit."""
    grammar = get_str(body, "grammar")
    fmt = body.get("response_format")
    schema: Any = body.get("json_schema")
    source = "json_schema"
    if fmt is not None:
        if not isinstance(fmt, dict):
            raise bad_request("'response_format' must be an object.", "response_format")
        kind = fmt.get("type")
        if kind == "text":
            pass
        elif kind == "json_object":
            schema = fmt.get("schema", True)  # llama-server also takes a schema here
            source = "response_format"
        elif kind == "json_schema":
            spec = fmt.get("json_schema")
            if not isinstance(spec, dict) or "schema" not in spec:
                raise bad_request(
                    "'response_format.json_schema' must be an object with a 'schema'.",
                    "response_format",
                )
            schema = spec["schema"]
            source = "response_format"
        else:
            raise bad_request(
                f"'response_format.type' must be text, json_object or json_schema, not {kind!r}.",
                "response_format",
            )
    if schema is None:
        text = grammar.strip() if grammar is not None else ""
        if not text:
            return None
        try:
            check_grammar(text)
        except (GrammarBoundsError, GrammarSyntaxError) as exc:
            raise bad_request(str(exc), "grammar", "invalid_grammar") from None
        return text
    if grammar is not None:
        raise bad_request("Give either a grammar or a JSON schema, not both.", "grammar")
    try:
        return json_object_grammar() if schema is True else schema_grammar(schema)
    except SchemaGrammarError as exc:
        raise bad_request(str(exc), source, "invalid_json_schema") from None


def _common(body: dict[str, Any], header_conversation: str | None) -> dict[str, Any]:
    for name, message in UNSUPPORTED.items():
        value = body.get(name)
        if value is None or value is False or value == [] or value == {} or value == 0:
            continue
        if name == "echo" and value is False:
            continue
        raise bad_request(message, name, "unsupported_parameter")
    n = get_int(body, "n")
    if n is not None and n != 1:
        if n < 1:
            raise bad_request(f"'n' must be at least 1, not {n}.", "n")
        raise bad_request(
            f"'n' = {n}: this server gives one choice per request; send {n} requests instead.",
            "n",
            "unsupported_parameter",
        )
    best_of = get_int(body, "best_of")
    if best_of is not None and best_of != 1:
        raise bad_request("'best_of' other than 1 is not supported.", "best_of")
    model = get_str(body, "model")
    stream = get_bool(body, "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise bad_request("'stream_options' must be an object.", "stream_options")
        include_usage = get_bool(options, "include_usage")
    sampling, given = _sampling(body, SAMPLING_NAMES)
    return {
        "model": model,
        "sampling": sampling,
        "max_tokens_given": given,
        "stream": stream,
        "include_usage": include_usage,
        "conversation": conversation_name(body, header_conversation),
    }


def _content(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, list):
        parts = []
        for part in value:
            if not isinstance(part, dict) or part.get("type") not in ("text", "input_text"):
                kind = part.get("type") if isinstance(part, dict) else _type_name(part)
                raise bad_request(
                    f"{where}: only text content parts are supported, not {kind!r}.", "messages"
                )
            text = part.get("text")
            if not isinstance(text, str):
                raise bad_request(f"{where}: a text part needs a string 'text'.", "messages")
            parts.append(text)
        return "".join(parts)
    raise bad_request(f"{where}: 'content' must be a string or an array of parts.", "messages")


def parse_chat(body: Any, header_conversation: str | None = None) -> ChatRequest:
    body = expect_object(body)
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise bad_request("'messages' must be a non-empty array of messages.", "messages")
    if len(raw) > MAX_MESSAGES:
        raise bad_request(f"At most {MAX_MESSAGES} messages per request.", "messages")
    messages: list[ChatMessage] = []
    # The calls of the assistant message the tool messages that follow it answer (None:
    # no such message right before: a tool message here answers nothing).
    answering: dict[str, str] | None = None
    for i, item in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"{where} must be an object.", "messages")
        role = item.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise bad_request(
                f"{where}: 'role' must be system, developer, user, assistant or tool, not {role!r}.",
                "messages",
            )
        reasoning = item.get("reasoning_content")
        if reasoning is not None and not isinstance(reasoning, str):
            raise bad_request(f"{where}: 'reasoning_content' must be a string.", "messages")
        content = _content(item.get("content"), where)
        if role == "tool":
            messages.append(_tool_result(item, content, where, answering))
            continue
        calls = _tool_calls(item.get("tool_calls"), where) if role == "assistant" else ()
        answering = {c.call_id: c.name for c in calls} if calls else None
        if item.get("tool_calls") and role != "assistant":
            raise bad_request(f"{where}: only an assistant message has tool_calls.", "messages")
        messages.append(ChatMessage(ROLES[role], content, reasoning or "", tool_calls=calls))
    system_parts = []
    while messages and messages[0].role == "system":
        system_parts.append(messages.pop(0).content)
    if not messages:
        raise bad_request("'messages' needs at least one user message.", "messages")
    common = _common(body, header_conversation)
    tools = _tools(body)
    if tools is not None and tools.mode is not ToolChoiceMode.NONE and common["sampling"].grammar:
        raise bad_request(
            "A grammar or response_format and tools cannot both constrain a reply; send "
            "tool_choice 'none' or leave out the grammar.",
            "tools",
        )
    return ChatRequest(
        **common,
        messages=tuple(messages),
        system="\n\n".join(system_parts),
        reasoning=_reasoning(body),
        tools=tools,
    )


def _tool_result(
    item: dict[str, Any], content: str, where: str, answering: Mapping[str, str] | None
) -> ChatMessage:
    """A tool message, which must answer a call of the assistant message before it (only
    tool messages between them, as OpenAI has it). Standard clients send no ``name``: it
    is the matching call's, for the prompt and the stored conversation."""
    call_id = item.get("tool_call_id")
    if not isinstance(call_id, str) or not 0 < len(call_id) <= MAX_CALL_ID:
        raise bad_request(
            f"{where}: a tool message needs the 'tool_call_id' (a string) of the call it answers.",
            "messages",
        )
    name = item.get("name")
    if name is not None and not isinstance(name, str):
        raise bad_request(f"{where}: 'name' must be a string.", "messages")
    if answering is None:
        raise bad_request(
            f"{where}: a tool message must follow the assistant message whose tool_calls it "
            "answers.",
            "messages",
        )
    called = answering.get(call_id)
    if called is None:
        shown = json.dumps(call_id)[:80]
        raise bad_request(
            f"{where}: the tool_call_id {shown} matches no call of the assistant message "
            f"before it ({', '.join(json.dumps(k) for k in list(answering)[:8])}).",
            "messages",
        )
    return ChatMessage("tool", content, tool_call_id=call_id, name=name or called)


def _tool_calls(value: Any, where: str) -> tuple[MessageToolCall, ...]:
    """An assistant message's ``tool_calls`` (OpenAI's shape; ``arguments`` a JSON string,
    or an object, which some clients send)."""
    if value is None or value == []:
        return ()
    if not isinstance(value, list) or len(value) > MAX_CALLS:
        raise bad_request(
            f"{where}: 'tool_calls' must be an array of at most {MAX_CALLS} calls.", "messages"
        )
    calls = []
    for k, call in enumerate(value):
        here = f"{where}.tool_calls[{k}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad_request(f"{here} needs a 'function' with a 'name'.", "messages")
        call_id = call.get("id") or f"call_{k}"
        if not isinstance(call_id, str) or len(call_id) > MAX_CALL_ID:
            raise bad_request(f"{here}: 'id' must be a string.", "messages")
        arguments = function.get("arguments", "{}")
        if isinstance(arguments, str):
            _check_arguments(arguments, here)
        else:
            try:
                arguments = json.dumps(arguments, ensure_ascii=False)
            except (TypeError, ValueError):
                raise bad_request(
                    f"{here}: 'arguments' must be a JSON string.", "messages"
                ) from None
        calls.append(MessageToolCall(call_id, function["name"], arguments))
    return tuple(calls)


def _check_arguments(arguments: str, here: str) -> None:
    """A call's arguments are a JSON object (the template writes them back as one; text
    that is not JSON would be re-rendered as ``{}``); empty text is no arguments."""
    if not arguments.strip():
        return
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        raise bad_request(
            f"{here}: 'arguments' is not JSON (a JSON object as a string is expected).",
            "messages",
        ) from None
    if not isinstance(value, dict):
        raise bad_request(
            f"{here}: 'arguments' must be a JSON object, not {_type_name(value)}.", "messages"
        )


def _tools(body: dict[str, Any]) -> ToolRequest | None:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` (None: no tools)."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools is None or tools == []:
        if choice not in (None, "none", "auto"):
            raise bad_request(
                "'tool_choice' asks for a call, but the request has no tools.", "tool_choice"
            )
        return None
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise bad_request(f"'tools' must be an array of at most {MAX_TOOLS} tools.", "tools")
    try:
        size = len(json.dumps(tools))
    except (TypeError, ValueError, RecursionError):
        raise bad_request("'tools' must be JSON function definitions.", "tools") from None
    if size > MAX_TOOLS_CHARS:
        raise bad_request(
            f"The tool definitions are too large ({size:,} characters; at most {MAX_TOOLS_CHARS:,}).",
            "tools",
        )
    try:
        return ToolRequest.from_openai(tools, choice, body.get("parallel_tool_calls"))
    except ToolSpecError as exc:
        raise bad_request(str(exc), "tools", "invalid_tools") from None


def _reasoning(body: dict[str, Any]) -> ReasoningOptions:
    # Nothing asked: None, the model's own default (the rule in
    # app/engine/chat_template/thinking.py, llama-server's), not "thinking on".
    enable: bool | None = None
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            raise bad_request("'chat_template_kwargs' must be an object.", "chat_template_kwargs")
        if kwargs.get("enable_thinking") is not None:
            enable = get_bool(kwargs, "enable_thinking")
    effort_name = get_str(body, "reasoning_effort")
    effort = None
    if effort_name is not None:
        if effort_name in ("none", "minimal"):
            enable = False
        else:
            try:
                effort = ReasoningEffort(effort_name)
            except ValueError:
                raise bad_request(
                    f"'reasoning_effort' must be none, minimal, low, medium or high, not {effort_name!r}.",
                    "reasoning_effort",
                ) from None
    return ReasoningOptions(enable_thinking=enable, effort=effort)


def parse_completion(body: Any, header_conversation: str | None = None) -> CompletionRequest:
    body = expect_object(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and not isinstance(prompt[0], int):
        prompt = prompt[0]
    text: str | None = None
    tokens: tuple[int, ...] | None = None
    if isinstance(prompt, str):
        text = prompt
    elif (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        tokens = tuple(prompt)
    elif isinstance(prompt, list) and len(prompt) > 1:
        raise bad_request(
            "'prompt' may be one string (or one array of tokens); send several requests for "
            "several prompts.",
            "prompt",
            "unsupported_parameter",
        )
    else:
        raise bad_request("'prompt' must be a string or an array of token ids.", "prompt")
    common = _common(body, header_conversation)
    return CompletionRequest(**common, prompt=text, prompt_tokens=tokens)


def check_error(exc: Exception) -> ApiError:
    """An engine's refusal of a request (settings, grammar...) as a 400."""
    return bad_request(str(exc))
