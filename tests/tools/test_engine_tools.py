"""Tool calls through the real engine on tiny models written with each family's template:
the tools rendered into the prompt, a forced call (tool_choice required / named) sampled
under the family's grammar, parsed while it streams (name first, arguments that only grow),
valid against the schema, and the turn ending with finish reason ``tool_calls``."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]
import pytest

from app.engine import (
    Completion,
    Engine,
    Event,
    SamplingParams,
    TokenText,
    ToolCallArguments,
    ToolCallStarted,
)
from app.engine.chat_template import ReasoningOptions
from app.engine.tool_calls import ToolCallFormat, ToolSpec
from app.engine.tool_calls.request import ToolChoiceMode, ToolRequest
from tests.support.gguf_models import TinySpec, write_tiny_model
from tests.support.settings import small_settings

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat-templates"
# Values a random-weight model can only finish under the grammar: a tagged family writes
# a string parameter as free text up to its closing tag, which the noise never writes.
WEATHER = ToolSpec(
    "get_weather",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city.", "enum": ["Paris", "Rome"]},
            "days": {"type": "integer", "description": "How many days."},
        },
        "required": ["city", "days"],
        "additionalProperties": False,
    },
    "The weather in a city.",
)
TIME = ToolSpec(
    "get_time",
    {
        "type": "object",
        "properties": {
            "zone": {"type": "string", "description": "A zone.", "enum": ["UTC", "CET"]}
        },
        "required": ["zone"],
        "additionalProperties": False,
    },
    "The time in a zone.",
)

# One template per family (each parses its own template's history: tests/tools/test_formats.py).
FAMILIES = {
    ToolCallFormat.GENERIC: "google-gemma-2-2b-it",
    ToolCallFormat.HERMES: "Qwen-Qwen2.5-7B-Instruct",
    ToolCallFormat.QWEN3_CODER: "Qwen3-Coder",
    ToolCallFormat.SEED_OSS: "ByteDance-Seed-OSS",
    ToolCallFormat.GLM: "GLM-4.6",
    ToolCallFormat.HY3: "tencent-Hy3",
    ToolCallFormat.MINIMAX_M2: "MiniMax-M2",
    ToolCallFormat.DEEPSEEK_DSML: "deepseek-ai-DeepSeek-V3.2",
    ToolCallFormat.MINICPM5: "openbmb-MiniCPM5-1B",
    ToolCallFormat.LLAMA3_JSON: "meta-llama-Llama-3.1-8B-Instruct",
    ToolCallFormat.MISTRAL_JSON: "mistralai-Mistral-Nemo-Instruct-2407",
    ToolCallFormat.MISTRAL_ARGS: "unsloth-mistral-Devstral-Small-2507",
    ToolCallFormat.MISTRAL_CALL_ID: "Mistral-Small-3.2-24B-Instruct-2506",
    ToolCallFormat.HARMONY: "openai-gpt-oss-120b",
    ToolCallFormat.DEEPSEEK_R1: "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    ToolCallFormat.DEEPSEEK_V31: "deepseek-ai-DeepSeek-V3.1",
    ToolCallFormat.KIMI_K2: "moonshotai-Kimi-K2",
    ToolCallFormat.KIMI_K3: "Kimi-K3",
    ToolCallFormat.GRANITE: "ibm-granite-granite-3.3-2B-Instruct",
    ToolCallFormat.LFM2: "LFM2.5-Instruct",
    ToolCallFormat.GEMMA4: "google-gemma-4-31B-it",
    ToolCallFormat.FUNCTIONARY_V31: "meetkai-functionary-medium-v3.1",
    ToolCallFormat.FIREFUNCTION: "fireworks-ai-llama-3-firefunction-v2",
    ToolCallFormat.COMMAND_ACTION: "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
    ToolCallFormat.COMMAND_R_PLUS: "CohereForAI-c4ai-command-r-plus-tool_use",
    ToolCallFormat.APRIEL: "unsloth-Apriel-1.5",
    ToolCallFormat.MINIMAX_M1: "MiniMax-M1",
    ToolCallFormat.NEMOTRON_V2: "NVIDIA-Nemotron-Nano-v2",
    ToolCallFormat.GIGACHAT: "GigaChat3.1-10B-A1.8B",
    ToolCallFormat.SOLAR: "upstage-Solar-Open-100B",
    ToolCallFormat.APERTUS: "Apertus-8B-Instruct",
}


# Thinking off: a forced call starts at once (a random-weight model never ends reasoning).
THINKING_OFF = ReasoningOptions(enable_thinking=False)


def test_every_family_has_a_model_here() -> None:
    assert set(FAMILIES) == set(ToolCallFormat)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tool-models")
    return {
        name: write_tiny_model(
            folder / f"{name}.gguf",
            TinySpec(chat_template=(TEMPLATES / f"{name}.jinja").read_text(), n_ctx_train=16384),
        )
        for name in FAMILIES.values()
    }


def _forced_turn(
    engine: Engine, request: ToolRequest, max_tokens: int = 400
) -> tuple[list[Event], Completion]:
    key = engine.open_sequence()
    engine.set_chat(
        key,
        [{"role": "user", "content": "the weather in Paris"}],
        tools=request,
        reasoning=THINKING_OFF,
    )
    events: list[Event] = []
    completion = engine.complete(
        key, SamplingParams(temperature=0.0, max_tokens=max_tokens), on_event=events.append
    )
    return events, completion


@pytest.mark.parametrize("fmt", list(FAMILIES), ids=lambda f: f.value)
def test_a_forced_call_parses_and_fits_its_schema(
    fmt: ToolCallFormat, models: dict[str, Path]
) -> None:
    name = FAMILIES[fmt]
    with Engine.open(models[name], small_settings(n_ctx=8192)) as engine:
        assert engine.template is not None
        assert engine.template.tool_caps.fmt is fmt
        if engine.template.opens_reasoning(THINKING_OFF):
            # The call comes after the reasoning the prompt opened, which noise never ends
            # (the grammar's reasoning part: tests/tools/test_grammar.py).
            pytest.skip(f"{name}'s prompt opens the reasoning even with thinking off")
        request = ToolRequest((WEATHER, TIME), ToolChoiceMode.NAMED, "get_weather", parallel=False)
        events, completion = _forced_turn(engine, request)
    assert completion.finish_reason == "tool_calls", (completion.finish_reason, completion.text)
    assert completion.tool_errors == []
    [call] = completion.tool_calls
    assert call.name == "get_weather"
    jsonschema.validate(call.arguments, WEATHER.parameters)
    # Streamed: announced once with its name, then arguments that join to the call's.
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    assert [(e.index, e.name, e.call_id) for e in started] == [(0, "get_weather", call.call_id)]
    first = events.index(started[0])
    fragments = [e for e in events if isinstance(e, ToolCallArguments)]
    assert all(events.index(f) > first for f in fragments)
    assert json.loads("".join(f.fragment for f in fragments)) == call.arguments
    # The call's markup is not answer text.
    answer = "".join(
        e.text for e in events if isinstance(e, TokenText) and e.channel.value == "answer"
    )
    assert "get_weather" not in answer


def test_required_picks_among_the_tools_and_none_parses_nothing(models: dict[str, Path]) -> None:
    with Engine.open(models["Qwen-Qwen2.5-7B-Instruct"], small_settings(n_ctx=8192)) as engine:
        _, completion = _forced_turn(engine, ToolRequest((WEATHER, TIME), ToolChoiceMode.REQUIRED))
        assert completion.finish_reason == "tool_calls"
        assert completion.tool_calls and completion.tool_calls[0].name in {
            "get_weather",
            "get_time",
        }
        assert completion.tool_errors == []
        _, free = _forced_turn(engine, ToolRequest((WEATHER,), ToolChoiceMode.NONE), max_tokens=24)
        assert free.tool_calls == [] and free.finish_reason in ("eog", "length", "stop")


def test_auto_builds_the_lazy_grammar_and_the_reply_runs(models: dict[str, Path]) -> None:
    """llama.cpp gets the lazy grammar and its trigger patterns (an invalid pattern would
    abort the process); a reply that never opens a call is plain text."""
    with Engine.open(models["Qwen-Qwen2.5-7B-Instruct"], small_settings(n_ctx=8192)) as engine:
        events, completion = _forced_turn(engine, ToolRequest((WEATHER,)), max_tokens=32)
    assert completion.finish_reason in ("eog", "length", "stop", "tool_calls")
    text = "".join(e.text for e in events if isinstance(e, TokenText))
    assert text == completion.text + completion.reasoning or completion.tool_calls


def test_the_tools_are_in_the_prompt_and_it_is_stable(models: dict[str, Path]) -> None:
    with Engine.open(models["Qwen-Qwen2.5-7B-Instruct"], small_settings(n_ctx=8192)) as engine:
        key = engine.open_sequence()
        messages = [{"role": "user", "content": "hello"}]
        n_with = engine.set_chat(key, messages, tools=ToolRequest((WEATHER,)))
        held = engine.pending_tokens(key)
        assert "get_weather" in engine.detokenize(held, special=True)
        engine.prefill(key)
        engine.run_until_done(key)
        # The same chat and tools again: everything is in the cache.
        assert engine.set_chat(key, messages, tools=ToolRequest((WEATHER,))) <= 1 < n_with


def test_what_the_definitions_cost(models: dict[str, Path]) -> None:
    from app.engine.tool_calls.cost import tool_definition_tokens

    with Engine.open(models["Qwen-Qwen2.5-7B-Instruct"], small_settings(n_ctx=8192)) as engine:
        one = tool_definition_tokens(engine, [WEATHER])
        two = tool_definition_tokens(engine, [WEATHER, TIME])
        assert 0 < one < two
        assert tool_definition_tokens(engine, []) == 0


@pytest.mark.parametrize("pattern", ["(", "[a-", "(?P<x>a)", "(?<=a)b", "a\x00b"])
def test_a_bad_trigger_pattern_is_refused_before_llama_cpp(pattern: str) -> None:
    """llama.cpp's std::regex throws through the C API on a bad pattern (the process
    aborts): the sampler refuses it with a sentence first."""
    from app.engine.errors import ContextError
    from app.engine.sampling import _check_patterns

    with pytest.raises(ContextError, match="pattern"):
        _check_patterns((pattern,))
    with pytest.raises(ContextError, match="at least one"):
        _check_patterns(())


def test_the_demo_model_makes_a_forced_call_and_the_round_trip_hits_the_cache() -> None:
    """The demo model (ChatML, no tools in its template: the generic JSON form, a real BPE
    vocabulary): a forced call parses and fits, and the history re-sent with the call and
    its result is read from the cache (the prompt at least)."""
    from app.paths import demo_model_path

    with Engine.open(demo_model_path(), small_settings(n_ctx=512)) as engine:
        assert engine.template is not None
        assert engine.template.tool_caps.fmt is ToolCallFormat.GENERIC
        # (a small tool: the model's context is 512 tokens)
        tool = ToolSpec(
            "weather",
            {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}},
            "The weather.",
        )
        request = ToolRequest((tool,), ToolChoiceMode.REQUIRED, parallel=False)
        key = engine.open_sequence()
        messages: list[dict[str, object]] = [{"role": "user", "content": "Weather in Paris?"}]
        engine.set_chat(key, messages, tools=request)
        completion = engine.complete(key, SamplingParams(temperature=0.0, max_tokens=120))
        assert completion.finish_reason == "tool_calls", completion.text
        [call] = completion.tool_calls
        jsonschema.validate(call.arguments, tool.parameters)
        n_held = len(engine.tokens(key))
        messages += [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments_text},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.call_id, "name": call.name, "content": "sunny"},
        ]
        # (a small reply reserve: the default quarter of 512 would drop the first message)
        n_new = engine.set_chat(key, messages, tools=ToolRequest((tool,)), reserve=16)
        reused = len(engine.tokens(key)) + len(engine.pending_tokens(key)) - n_new
        # The prompt comes back from the cache; the call from where the model's sampled
        # tokens differ from its text's tokenization on (the grammar lets it spell
        # '{"tool_call' as '{"tool_ca' + 'll'...: processed again, as app/engine/chat_fit
        # does for any reply).
        assert completion.n_prompt <= reused < n_held + 1, (reused, completion.n_prompt, n_held)
