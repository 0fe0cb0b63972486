"""The chat-completion request a turn sends, and what each streamed chunk says.

The messages are sent as the conversation holds them, in the same order, with the same
system prompt first: the server renders them with the same template each turn, so the
prompt of a turn begins with the byte-identical rendering of the last one and the
server's prompt cache (``cache_prompt``, on a slot of its own with ``id_slot``) holds it.

:func:`read_chunk` takes one ``chat.completion.chunk`` apart: reasoning
(``reasoning_content``, or vLLM's ``reasoning``), answer text, the finish reason, prompt
progress (llama-server's ``prompt_progress``) and the figures (``usage`` with
``prompt_tokens_details.cached_tokens``, llama-server's ``timings``, Ollama's
``prompt_eval_cached_count``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.engine import SamplingParams
from app.engine.chat_template.tools import openai_tools
from app.engine.tool_calls.request import ToolChoiceMode, ToolRequest
from app.remote.probe import ServerKind, ServerTraits
from app.session.engine_port import ChatPrompt

OLLAMA_KEEP_ALIVE = "30m"  # the model stays loaded between the turns of a conversation


def chat_body(
    traits: ServerTraits, prompt: ChatPrompt, sampling: SamplingParams, slot: int | None
) -> dict[str, Any]:
    """The JSON body of a streamed chat completion for ``prompt``."""
    messages: list[dict[str, Any]] = []
    if prompt.system:
        messages.append({"role": "system", "content": prompt.system})
    messages += [m.to_engine() for m in prompt.messages]
    body: dict[str, Any] = {
        "model": traits.model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
    }
    if prompt.tools is not None:
        body.update(tool_fields(prompt.tools))
    if sampling.max_tokens > 0:
        body["max_tokens"] = sampling.max_tokens
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if sampling.seed >= 0:
        body["seed"] = sampling.seed
    if sampling.frequency_penalty:
        body["frequency_penalty"] = sampling.frequency_penalty
    if sampling.presence_penalty:
        body["presence_penalty"] = sampling.presence_penalty
    if prompt.reasoning.enable_thinking is not None:  # None: the model's default
        body["chat_template_kwargs"] = {"enable_thinking": prompt.reasoning.enable_thinking}
    if prompt.reasoning.effort is not None:
        body["reasoning_effort"] = prompt.reasoning.effort.value
    if traits.kind in (ServerKind.LLAMA_SERVER, ServerKind.LLAMADESK):
        body.update(
            top_k=sampling.top_k,
            min_p=sampling.min_p,
            repeat_penalty=sampling.repeat_penalty,
            repeat_last_n=sampling.repeat_last_n,
            cache_prompt=True,
        )
        if sampling.grammar:
            body["grammar"] = sampling.grammar
    if traits.kind is ServerKind.LLAMA_SERVER:
        body["return_progress"] = True
        if slot is not None:
            body["id_slot"] = slot
    if traits.kind is ServerKind.VLLM:
        body.update(top_k=sampling.top_k, min_p=sampling.min_p)
    if traits.kind is ServerKind.OLLAMA:
        body["keep_alive"] = OLLAMA_KEEP_ALIVE
    return body


def tool_fields(request: ToolRequest) -> dict[str, Any]:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` as OpenAI's request has them."""
    choice: str | dict[str, Any]
    if request.mode is ToolChoiceMode.NAMED:
        choice = {"type": "function", "function": {"name": request.function}}
    else:
        choice = request.mode.value
    fields: dict[str, Any] = {"tool_choice": choice, "parallel_tool_calls": request.parallel}
    if request.tools:  # (an empty list is refused by some servers: none means none)
        fields["tools"] = openai_tools(request.tools)
    return fields


@dataclass(frozen=True)
class CallPiece:
    """One ``delta.tool_calls`` entry: the call at ``index``; its id and name where this
    piece carries them (the first one does on every server seen), and more arguments."""

    index: int
    call_id: str = ""
    name: str = ""
    fragment: str = ""


@dataclass(frozen=True)
class Figures:
    """A reply's figures from the server (None: it did not say)."""

    n_prompt: int | None = None
    n_cached: int | None = None
    n_generated: int | None = None
    prompt_ms: float | None = None
    gen_ms: float | None = None


@dataclass(frozen=True)
class Chunk:
    reasoning: str = ""
    answer: str = ""
    finish_reason: str | None = None
    progress: tuple[int, int] | None = None  # (done, total) prompt tokens
    figures: Figures | None = None
    error: str | None = None  # an error object in the stream
    calls: tuple[CallPiece, ...] = ()


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _figures(data: dict[str, Any]) -> Figures | None:
    usage = data.get("usage")
    timings = data.get("timings")
    usage = usage if isinstance(usage, dict) else {}
    timings = timings if isinstance(timings, dict) else {}
    if not usage and not timings:
        return None
    details = usage.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
    if cached is None:
        cached = _int(timings.get("cache_n"))
    if cached is None:  # Ollama's own name
        cached = _int(usage.get("prompt_eval_cached_count"))
    n_prompt = _int(usage.get("prompt_tokens"))
    if n_prompt is None and _int(timings.get("prompt_n")) is not None:
        n_prompt = (_int(timings.get("prompt_n")) or 0) + (cached or 0)
    return Figures(
        n_prompt=n_prompt,
        n_cached=cached,
        n_generated=_int(usage.get("completion_tokens")) or _int(timings.get("predicted_n")),
        prompt_ms=_float(timings.get("prompt_ms")),
        gen_ms=_float(timings.get("predicted_ms")),
    )


def read_chunk(data: Any) -> Chunk | None:
    """One streamed chunk (None: not a chunk of a chat completion)."""
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if error is not None:
        message = error.get("message") if isinstance(error, dict) else error
        return Chunk(error=str(message))
    reasoning = answer = ""
    finish: str | None = None
    calls: tuple[CallPiece, ...] = ()
    choices = data.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice = choices[0]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            # a whole reply's ``message`` (a server that sends the non-streamed shape)
            delta = choice.get("message")
        if isinstance(delta, dict):
            calls = _call_pieces(delta.get("tool_calls"))
            for name in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(name), str):
                    reasoning = delta[name]
                    break
            if isinstance(delta.get("content"), str):
                answer = delta["content"]
        if isinstance(choice.get("finish_reason"), str):
            finish = choice["finish_reason"]
    elif choices is not None and not isinstance(choices, list):
        return None
    progress = None
    raw = data.get("prompt_progress")
    if isinstance(raw, dict):
        done, total = _int(raw.get("processed")), _int(raw.get("total"))
        if done is not None and total is not None:
            progress = (done, total)
    return Chunk(reasoning, answer, finish, progress, _figures(data), calls=calls)


def _call_pieces(value: Any) -> tuple[CallPiece, ...]:
    """``delta.tool_calls`` (or ``message.tool_calls``) as pieces; entries that are no
    call are skipped, an entry without ``index`` is placed by its position (older Ollama)."""
    if not isinstance(value, list):
        return ()
    pieces = []
    for position, entry in enumerate(value):
        if not isinstance(entry, dict):
            continue
        index = _int(entry.get("index"))
        function = entry.get("function")
        function = function if isinstance(function, dict) else {}
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # (Ollama's own API gives an object)
            arguments = json.dumps(arguments)
        call_id, name = entry.get("id"), function.get("name")
        pieces.append(
            CallPiece(
                position if index is None else index,
                call_id if isinstance(call_id, str) else "",
                name if isinstance(name, str) else "",
                arguments if isinstance(arguments, str) else "",
            )
        )
    return tuple(pieces)


def finish_reason(value: str | None) -> str:
    """An OpenAI finish reason as the engine's (``Completion.finish_reason``)."""
    return {"stop": "eog", "length": "length", "tool_calls": "tool_calls"}.get(value or "", "eog")
