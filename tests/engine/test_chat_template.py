"""Chat-template rendering: the real templates in tests/data/chat-templates and the rules."""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from app.engine.chat_template import (
    CHATML_TEMPLATE,
    ChatTemplate,
    ChatTemplateError,
    ReasoningEffort,
    ReasoningOptions,
)
from app.engine.reasoning import ReasoningFormat, split_reasoning
from app.errors import LlamaDeskError

# Real templates, copied into the repository so that every clone runs every test.
TEMPLATES_DIR = Path(__file__).resolve().parents[1] / "data" / "chat-templates"

BOS = "<BOS>"
EOS = "<EOS>"
FIXED_NOW = datetime(2025, 3, 4, 5, 6, 7)

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are SYSTEM-alpha, be brief."},
    {"role": "user", "content": "USER-one asks a question?"},
    {"role": "assistant", "content": "ASSISTANT-two answers."},
    {"role": "user", "content": "USER-three follows up."},
]


def _fixed_now() -> datetime:
    return FIXED_NOW


def _template_files() -> list[Any]:
    return [pytest.param(path, id=path.stem) for path in sorted(TEMPLATES_DIR.glob("*.jinja"))]


def _real(name: str, bos: str = BOS, eos: str = EOS) -> ChatTemplate:
    path = TEMPLATES_DIR / f"{name}.jinja"
    return ChatTemplate(path.read_text(encoding="utf-8"), bos, eos, now=_fixed_now)


# --------------------------------------------------------------------------- all templates


@pytest.mark.parametrize("path", _template_files())
def test_real_template_renders_whole_conversation(path: Path) -> None:
    template = ChatTemplate(path.read_text(encoding="utf-8"), BOS, EOS, now=_fixed_now)
    assert not template.fallback

    text = template.render(CONVERSATION, add_generation_prompt=True)

    # Every template keeps every message's text. Templates that refuse a system message
    # (gemma-2) or drop it get it merged into the first user message; Mistral-Nemo puts it
    # into the LAST user message itself (its own convention), so the text is still there.
    for message in CONVERSATION:
        assert message["content"] in text, f"{message['role']} text missing from {path.name}"
    assert not text.startswith(BOS)
    assert text == template.render(CONVERSATION, add_generation_prompt=True)
    if not template.supports_system_role:  # folded as llama.cpp does: "system\nuser"
        assert f"{CONVERSATION[0]['content']}\n{CONVERSATION[1]['content']}" in text


def test_all_seventy_templates_are_present() -> None:
    assert len(list(TEMPLATES_DIR.glob("*.jinja"))) >= 70


# --------------------------------------------------------------------------- well-known ones


def test_qwen25_is_exact_chatml() -> None:
    template = _real("Qwen-Qwen2.5-7B-Instruct")
    assert template.supports_system_role
    assert template.stop_strings == ("<|im_end|>",)
    assert template.render(CONVERSATION) == (
        "<|im_start|>system\nYou are SYSTEM-alpha, be brief.<|im_end|>\n"
        "<|im_start|>user\nUSER-one asks a question?<|im_end|>\n"
        "<|im_start|>assistant\nASSISTANT-two answers.<|im_end|>\n"
        "<|im_start|>user\nUSER-three follows up.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # Without a system message Qwen2.5 writes its default one.
    no_system = template.render(CONVERSATION[1:2], add_generation_prompt=False)
    assert no_system.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")
    assert no_system.endswith("<|im_start|>user\nUSER-one asks a question?<|im_end|>\n")


def test_llama3_headers_date_and_bos() -> None:
    template = _real("meta-llama-Llama-3.1-8B-Instruct", bos="<|begin_of_text|>", eos="<|eot_id|>")
    text = template.render(CONVERSATION)
    assert text.startswith("<|start_header_id|>system<|end_header_id|>\n\n")
    assert "Today Date: 04 Mar 2025\n" in text  # date_string from the (injected) clock
    assert (
        "<|start_header_id|>user<|end_header_id|>\n\nUSER-one asks a question?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nASSISTANT-two answers.<|eot_id|>"
    ) in text
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert template.stop_strings == ("<|eot_id|>",)
    assert template.render(CONVERSATION, strip_bos=False).startswith("<|begin_of_text|><|start")


def test_llama32_uses_strftime_now() -> None:
    template = _real("meta-llama-Llama-3.2-3B-Instruct", bos="<|begin_of_text|>")
    assert "Today Date: 04 Mar 2025\n" in template.render(CONVERSATION)


def test_gemma_merges_system_into_first_user_message() -> None:
    template = _real("google-gemma-2-2b-it", bos="<bos>", eos="<eos>")
    assert not template.supports_system_role  # it raises "System role not supported"
    assert template.render(CONVERSATION) == (
        "<start_of_turn>user\nYou are SYSTEM-alpha, be brief.\nUSER-one asks a question?"
        "<end_of_turn>\n"
        "<start_of_turn>model\nASSISTANT-two answers.<end_of_turn>\n"
        "<start_of_turn>user\nUSER-three follows up.<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    assert template.stop_strings == ("<end_of_turn>",)


def test_gemma_joins_repeated_roles_for_strict_alternation() -> None:
    template = _real("google-gemma-2-2b-it", bos="<bos>", eos="<eos>")
    messages = [
        {"role": "user", "content": "first"},
        {"role": "user", "content": "second"},
    ]
    assert "<start_of_turn>user\nfirst\n\nsecond<end_of_turn>\n" in template.render(messages)


def test_mistral_inst_markers() -> None:
    template = _real("Mistral-Small-3.2-24B-Instruct-2506", bos="<s>", eos="</s>")
    assert template.render(CONVERSATION) == (
        "[SYSTEM_PROMPT]You are SYSTEM-alpha, be brief.[/SYSTEM_PROMPT]"
        "[INST]USER-one asks a question?[/INST]ASSISTANT-two answers.</s>"
        "[INST]USER-three follows up.[/INST]"
    )
    assert template.stop_strings == ("</s>",)


def test_tool_use_template_that_needs_tools_undefined() -> None:
    # Hermes' tool_use template loops over `tools` unguarded: tools=None (the HF
    # convention) raises, llama.cpp's convention (undefined) works.
    template = _real("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use")
    assert "USER-three follows up." in template.render(CONVERSATION)


def test_firefunction_gets_functions_and_date() -> None:
    template = _real("fireworks-ai-llama-3-firefunction-v2")
    assert "Today is Mar 04 2025." in template.render(CONVERSATION)


def test_generation_block_tag_is_supported() -> None:
    template = ChatTemplate(
        "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}",
        "",
        "",
    )
    assert template.render([{"role": "user", "content": "x"}]) == "[x]"


def test_thinking_flag_is_passed_through() -> None:
    template = _real("Qwen-Qwen3-0.6B")
    off = template.render(CONVERSATION[1:2], enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not template.render(CONVERSATION[1:2]).endswith("</think>\n\n")


# --------------------------------------------------------------------------- rules


def test_bos_is_stripped_once() -> None:
    template = ChatTemplate(
        "{{ bos_token }}{{ bos_token }}{{ messages[0]['content'] }}", "<s>", "</s>"
    )
    messages = [{"role": "user", "content": "hi"}]
    assert template.render(messages) == "<s>hi"
    assert template.render(messages, strip_bos=False) == "<s><s>hi"
    no_bos = ChatTemplate("{{ bos_token }}{{ messages[0]['content'] }}", "", "</s>")
    assert no_bos.render(messages) == "hi"


def test_tojson_keeps_non_ascii_and_takes_hf_keywords() -> None:
    template = ChatTemplate(
        "{{ tools | tojson }}|{{ tools | tojson(indent=2) }}|"
        "{{ tools | tojson(separators=(',', ':'), sort_keys=true) }}",
        "",
        "",
    )
    tools = [{"name": "météo", "b": "<日本>", "a": 1}]
    text = template.render([{"role": "user", "content": "x"}], tools=tools)
    compact, indented, sorted_compact = text.split("|")
    assert compact == '[{"name": "météo", "b": "<日本>", "a": 1}]'
    assert indented.startswith('[\n  {\n    "name": "météo",')
    assert sorted_compact == '[{"a":1,"b":"<日本>","name":"météo"}]'


def test_tools_reach_a_real_template_unescaped() -> None:
    template = _real("Qwen-Qwen2.5-7B-Instruct")
    tools = [{"type": "function", "function": {"name": "météo", "description": "Température"}}]
    text = template.render(CONVERSATION[1:2], tools=tools)
    assert '"name": "météo"' in text
    assert "<tools>" in text


def test_fallback_without_template_is_chatml() -> None:
    for source in (None, "", "   \n"):
        template = ChatTemplate.for_model(source, "<s>", "</s>")
        assert template.fallback
        assert template.builtin_name == "chatml"
        assert template.source == CHATML_TEMPLATE
        assert template.supports_system_role
        assert template.stop_strings == ("<|im_end|>",)
        assert template.render(CONVERSATION[:2]) == (
            "<|im_start|>system\nYou are SYSTEM-alpha, be brief.<|im_end|>\n"
            "<|im_start|>user\nUSER-one asks a question?<|im_end|>\n"
            "<|im_start|>assistant\n"
        )


def test_fallback_follows_the_special_tokens() -> None:
    llama3 = ChatTemplate.for_model(None, "<|begin_of_text|>", "<|eot_id|>")
    assert llama3.builtin_name == "llama3"
    assert llama3.render(CONVERSATION[1:2]) == (
        "<|start_header_id|>user<|end_header_id|>\n\nUSER-one asks a question?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    gemma = ChatTemplate.for_model(None, "<bos>", "<eos>", architecture="gemma3")
    assert gemma.builtin_name == "gemma"
    assert not gemma.supports_system_role
    assert gemma.render(CONVERSATION[:2]).startswith(
        "<start_of_turn>user\nYou are SYSTEM-alpha, be brief.\nUSER-one asks a question?"
    )


def test_broken_template_raises_and_for_model_falls_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = "{% for message in messages %}{{ message['content'] }}"  # no endfor
    with pytest.raises(ChatTemplateError, match="syntax error") as caught:
        ChatTemplate(broken, "<s>", "</s>")
    assert isinstance(caught.value, LlamaDeskError)

    with caplog.at_level(logging.WARNING, logger="app.engine.chat_template"):
        template = ChatTemplate.for_model(broken, "<s>", "</s>")
    assert template.fallback
    assert template.builtin_name == "chatml"
    assert "syntax error" in caplog.text


def test_template_that_cannot_render_anything_falls_back() -> None:
    refusing = "{{ raise_exception('This template is for training only') }}"
    with pytest.raises(ChatTemplateError, match="training only"):
        ChatTemplate(refusing, "", "")
    assert ChatTemplate.for_model(refusing, "", "").fallback
    crashing = "{{ messages[0]['content'] + 1 }}"
    assert ChatTemplate.for_model(crashing, "", "").fallback


def test_raise_exception_carries_the_templates_message() -> None:
    template = ChatTemplate(
        "{% if messages | length > 1 %}{{ raise_exception('Only one message, please') }}"
        "{% endif %}{{ messages[0]['content'] }}",
        "",
        "",
    )
    with pytest.raises(ChatTemplateError) as caught:
        template.render([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    assert caught.value.template_message == "Only one message, please"
    assert str(caught.value).startswith(
        "The model's chat template failed: Only one message, please."
    )


def test_template_dropping_the_system_message_gets_it_merged() -> None:
    template = ChatTemplate(
        "{% for m in messages if m.role != 'system' %}<{{ m.role }}>{{ m.content }}{% endfor %}",
        "",
        "",
    )
    assert not template.supports_system_role
    assert template.render(CONVERSATION[:2]) == (
        "<user>You are SYSTEM-alpha, be brief.\nUSER-one asks a question?"
    )
    # A system prompt with no user message yet becomes a user message of its own.
    assert template.render(CONVERSATION[:1]) == "<user>You are SYSTEM-alpha, be brief."


def test_template_errors_become_readable_sentences() -> None:
    template = ChatTemplate(
        "{% if messages | length > 1 %}{{ messages[1].content.nope() }}{% endif %}x", "", ""
    )
    with pytest.raises(ChatTemplateError, match=r"^The model's chat template failed: "):
        template.render(CONVERSATION[1:3])


def test_strftime_now_is_injectable() -> None:
    template = ChatTemplate("{{ strftime_now('%Y-%m-%d') }}", "", "", now=_fixed_now)
    assert template.render([{"role": "user", "content": "x"}]) == "2025-03-04"


def test_rendering_is_deterministic_and_prefix_stable_across_turns() -> None:
    templates = [ChatTemplate.for_model(None, "", ""), _real("Qwen-Qwen2.5-7B-Instruct")]
    for template in templates:
        turn1 = [CONVERSATION[0], CONVERSATION[1]]
        turn2 = [*turn1, CONVERSATION[2], CONVERSATION[3]]
        first = template.render(turn1, add_generation_prompt=True)
        assert first == template.render(turn1, add_generation_prompt=True)
        second = template.render(turn2, add_generation_prompt=True)
        assert second.startswith(first)
        assert second[len(first) :].startswith("ASSISTANT-two answers.<|im_end|>\n")


def test_messages_are_not_mutated() -> None:
    template = _real("google-gemma-2-2b-it", bos="<bos>")
    messages = [dict(message) for message in CONVERSATION]
    template.render(messages)
    assert messages == CONVERSATION


# --------------------------------------------------------------------------- reasoning

# Every reasoning-capable template of the set: its format, and whether its generation
# prompt opens the reasoning block with thinking explicitly on and off.
REASONING_TEMPLATES: dict[str, tuple[ReasoningFormat, bool, bool]] = {
    "Apertus-8B-Instruct": (ReasoningFormat.APERTUS, False, False),
    "Apriel-1.6-15b-Thinker-fixed": (ReasoningFormat.APRIEL, True, True),
    "Bielik-11B-v3.0-Instruct": (ReasoningFormat.THINK_TAGS, True, False),
    "ByteDance-Seed-OSS": (ReasoningFormat.SEED_THINK, False, False),
    "Cohere2MoE": (ReasoningFormat.COHERE, True, False),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": (ReasoningFormat.COHERE, False, False),
    "GLM-4.6": (ReasoningFormat.THINK_TAGS, False, False),
    "GLM-4.7-Flash": (ReasoningFormat.THINK_TAGS, True, False),
    "HuggingFaceTB-SmolLM3-3B": (ReasoningFormat.THINK_TAGS, False, False),
    "Kimi-K2-Thinking": (ReasoningFormat.THINK_TAGS, False, False),
    "Kimi-K3": (ReasoningFormat.KIMI_K3, True, False),
    "LFM2.5-8B-A1B": (ReasoningFormat.THINK_TAGS, False, False),
    "LFM2.5-Instruct": (ReasoningFormat.THINK_TAGS, False, False),
    "MiniMax-M2": (ReasoningFormat.THINK_TAGS, True, True),
    "MiniMax-M3": (ReasoningFormat.MINIMAX_M3, True, False),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": (ReasoningFormat.THINK_TAGS, True, False),
    "NVIDIA-Nemotron-Nano-v2": (ReasoningFormat.THINK_TAGS, True, True),
    "Qwen-QwQ-32B": (ReasoningFormat.THINK_TAGS, True, False),
    "Qwen-Qwen3-0.6B": (ReasoningFormat.THINK_TAGS, False, False),
    "Qwen3.5-4B": (ReasoningFormat.THINK_TAGS, True, False),
    "Reka-Edge": (ReasoningFormat.THINK_TAGS, True, False),
    "Spark2.5": (ReasoningFormat.THINK_TAGS, True, False),
    "StepFun3.5-Flash": (ReasoningFormat.THINK_TAGS, True, True),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": (ReasoningFormat.THINK_TAGS, True, True),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": (ReasoningFormat.THINK_TAGS, True, False),
    "deepseek-ai-DeepSeek-V3.1": (ReasoningFormat.THINK_TAGS, True, False),
    "deepseek-ai-DeepSeek-V3.2": (ReasoningFormat.THINK_TAGS, True, False),
    "deepseek-ai-DeepSeek-V4": (ReasoningFormat.THINK_TAGS, True, False),
    "deepseek-ai-DeepSeek-V4-Flash-0731": (ReasoningFormat.THINK_TAGS, True, False),
    "google-gemma-4-31B-it": (ReasoningFormat.GEMMA4, False, False),
    "google-gemma-4-31B-it-interleaved": (ReasoningFormat.GEMMA4, False, False),
    "ibm-granite-granite-3.3-2B-Instruct": (ReasoningFormat.GRANITE, False, False),
    "inclusionai-ling-3.0-flash": (ReasoningFormat.THINK_TAGS, True, False),
    "llama-cpp-deepseek-r1": (ReasoningFormat.THINK_TAGS, True, True),
    "llama-cpp-rwkv-world": (ReasoningFormat.THINK_TAGS, True, False),
    "mistralai-Ministral-3-14B-Reasoning-2512": (ReasoningFormat.THINK_BRACKETS, False, False),
    "muse-glimmer": (ReasoningFormat.GLIMMER, False, False),
    "openai-gpt-oss-120b": (ReasoningFormat.HARMONY, False, False),
    "openbmb-MiniCPM5-1B": (ReasoningFormat.THINK_TAGS, True, False),
    "poolside-Laguna-S-2.1": (ReasoningFormat.THINK_TAGS, True, False),
    "poolside-Laguna-XS-2.1": (ReasoningFormat.THINK_TAGS, True, False),
    "poolside-Laguna-XS.2": (ReasoningFormat.THINK_TAGS, True, False),
    "tencent-Hy3": (ReasoningFormat.HY3, True, False),
    "unsloth-Apriel-1.5": (ReasoningFormat.APRIEL, False, False),
    "upstage-Solar-Open-100B": (ReasoningFormat.SOLAR, False, False),
}

# Templates whose prompt changes with thinking on/off (the UI shows the toggle for them).
THINKING_TOGGLE_TEMPLATES = [
    "Apertus-8B-Instruct",
    "Bielik-11B-v3.0-Instruct",
    "ByteDance-Seed-OSS",
    "Cohere2MoE",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
    "GLM-4.6",
    "GLM-4.7-Flash",
    "HuggingFaceTB-SmolLM3-3B",
    "Kimi-K3",
    "MiniMax-M3",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    "Qwen-QwQ-32B",
    "Qwen-Qwen3-0.6B",
    "Qwen3.5-4B",
    "Reka-Edge",
    "Spark2.5",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    "deepseek-ai-DeepSeek-V3.1",
    "deepseek-ai-DeepSeek-V3.2",
    "deepseek-ai-DeepSeek-V4",
    "deepseek-ai-DeepSeek-V4-Flash-0731",
    "google-gemma-4-31B-it",
    "google-gemma-4-31B-it-interleaved",
    "ibm-granite-granite-3.3-2B-Instruct",
    "inclusionai-ling-3.0-flash",
    "llama-cpp-rwkv-world",
    "openbmb-MiniCPM5-1B",
    "poolside-Laguna-S-2.1",
    "poolside-Laguna-XS-2.1",
    "poolside-Laguna-XS.2",
    "tencent-Hy3",
    "upstage-Solar-Open-100B",
]
EFFORT_TEMPLATES = [
    "Kimi-K3",
    "deepseek-ai-DeepSeek-V4-Flash-0731",
    "muse-glimmer",
    "openai-gpt-oss-120b",
    "tencent-Hy3",
    "upstage-Solar-Open-100B",
]
USER_ONLY = CONVERSATION[1:2]
THINKING_OFF = ReasoningOptions(enable_thinking=False)
THINKING_ON = ReasoningOptions(enable_thinking=True)


@pytest.mark.parametrize("path", _template_files())
def test_reasoning_format_detection(path: Path) -> None:
    template = _real(path.stem)
    expected = REASONING_TEMPLATES.get(path.stem, (ReasoningFormat.NONE, False, False))
    fmt, opens_on, opens_off = expected
    assert template.reasoning_format is fmt
    assert template.opens_reasoning(THINKING_ON) is opens_on
    assert template.opens_reasoning(THINKING_OFF) is opens_off
    assert template.supports_thinking_toggle is (path.stem in THINKING_TOGGLE_TEMPLATES)
    assert template.supports_effort is (path.stem in EFFORT_TEMPLATES)


@pytest.mark.parametrize("name", THINKING_TOGGLE_TEMPLATES)
def test_thinking_off_changes_the_prompt(name: str) -> None:
    template = _real(name)
    assert template.supports_thinking_toggle
    # (Granite 3.3 puts its thinking instruction in place of a default system prompt.)
    conversation = CONVERSATION[1:]
    on = template.render(conversation, reasoning=THINKING_ON)
    off = template.render(conversation, reasoning=THINKING_OFF)
    assert on != off


@pytest.mark.parametrize(
    ("name", "on_tail", "off_tail"),
    [
        (
            "Qwen-Qwen3-0.6B",
            "<|im_start|>assistant\n",
            "<|im_start|>assistant\n<think>\n\n</think>\n\n",
        ),
        ("Qwen3.5-4B", "<|im_start|>assistant\n<think>\n", "<think>\n\n</think>\n\n"),
        ("deepseek-ai-DeepSeek-V3.1", "<｜Assistant｜><think>", "<｜Assistant｜><think></think>"),
        ("GLM-4.7-Flash", "<|assistant|><think>", "<|assistant|></think>"),
        ("HuggingFaceTB-SmolLM3-3B", "<|im_start|>assistant\n", "<think>\n\n</think>\n"),
        ("MiniMax-M3", "ai\n<mm:think>", "ai\n</mm:think>"),
        ("tencent-Hy3", "<think:opensource>", "<think:opensource></think:opensource>"),
        ("Kimi-K3", "<|open|>think<|sep|>", "<|open|>response<|sep|>"),
    ],
)
def test_thinking_toggle_generation_prompts(name: str, on_tail: str, off_tail: str) -> None:
    template = _real(name)
    assert template.render(USER_ONLY, reasoning=THINKING_ON).endswith(on_tail)
    assert template.render(USER_ONLY, reasoning=THINKING_OFF).endswith(off_tail)


def test_smollm3_says_its_reasoning_mode_in_the_system_header() -> None:
    template = _real("HuggingFaceTB-SmolLM3-3B")
    assert "Reasoning Mode: /think" in template.render(USER_ONLY)  # the default: on
    assert "Reasoning Mode: /think" in template.render(USER_ONLY, reasoning=THINKING_ON)
    assert "Reasoning Mode: /no_think" in template.render(USER_ONLY, reasoning=THINKING_OFF)


def test_gpt_oss_effort() -> None:
    template = _real("openai-gpt-oss-120b")
    assert template.supports_effort
    assert not template.supports_thinking_toggle  # gpt-oss always reasons
    assert "Reasoning: medium\n" in template.render(USER_ONLY)  # the template's default
    for effort in ReasoningEffort:
        text = template.render(USER_ONLY, reasoning=ReasoningOptions(effort=effort))
        assert f"Reasoning: {effort.value}\n" in text
    assert template.render(USER_ONLY).endswith("<|start|>assistant")


def test_explicit_template_variables_win_over_reasoning_options() -> None:
    template = _real("openai-gpt-oss-120b")
    text = template.render(
        USER_ONLY, reasoning=ReasoningOptions(effort=ReasoningEffort.LOW), reasoning_effort="high"
    )
    assert "Reasoning: high\n" in text


def test_past_reasoning_reaches_templates_that_read_it() -> None:
    turn = [
        CONVERSATION[1],
        {"role": "assistant", "content": "ANSWER-x", "reasoning_content": "REASONING-y"},
    ]
    qwen3 = _real("Qwen-Qwen3-0.6B")  # shows the reasoning of the last turn only
    assert qwen3.render(turn, add_generation_prompt=False).endswith(
        "<|im_start|>assistant\n<think>\nREASONING-y\n</think>\n\nANSWER-x<|im_end|>\n"
    )
    laguna = _real("poolside-Laguna-S-2.1")  # keeps it in the history
    text = laguna.render([*turn, CONVERSATION[3]])
    assert "<think>REASONING-y</think>ANSWER-x" in text
    gpt_oss = _real("openai-gpt-oss-120b")  # reads it as `thinking`
    text = gpt_oss.render(turn, add_generation_prompt=False)
    assert "<|channel|>analysis<|message|>REASONING-y<|end|>" in text
    assert "<|channel|>final<|message|>ANSWER-x" in text


@pytest.mark.parametrize(
    "name",
    ["Qwen-QwQ-32B", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "Qwen-Qwen3-0.6B", "GLM-4.6"],
)
def test_templates_splitting_content_on_think_take_the_bare_answer(name: str) -> None:
    template = _real(name)
    for reasoning in (None, "", "REASONING-y"):
        answer: dict[str, Any] = {"role": "assistant", "content": "ANSWER-x"}
        if reasoning is not None:
            answer["reasoning_content"] = reasoning
        text = template.render([CONVERSATION[1], answer, CONVERSATION[3]])
        assert "ANSWER-x" in text
        assert "REASONING-y" not in text  # past turns' reasoning is dropped


def test_reasoning_options_do_not_leak_into_the_messages() -> None:
    template = _real("Qwen-Qwen3-0.6B")
    messages = [
        CONVERSATION[1],
        {"role": "assistant", "content": "a", "reasoning_content": ""},
        CONVERSATION[3],
    ]
    before = [dict(m) for m in messages]
    template.render(messages, reasoning=THINKING_OFF)
    assert messages == before


# The templates that render the reasoning of a last assistant turn right after their
# generation prompt (the others drop it, or render it elsewhere: see test_reasoning.py).
ROUND_TRIP_TEMPLATES = [
    "Bielik-11B-v3.0-Instruct",
    "ByteDance-Seed-OSS",
    "Cohere2MoE",
    "GLM-4.6",
    "GLM-4.7-Flash",
    "Kimi-K3",
    "MiniMax-M2",
    "MiniMax-M3",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    "Qwen-Qwen3-0.6B",
    "Qwen3.5-4B",
    "Reka-Edge",
    "Spark2.5",
    "StepFun3.5-Flash",
    "deepseek-ai-DeepSeek-V3.2",
    "deepseek-ai-DeepSeek-V4",
    "deepseek-ai-DeepSeek-V4-Flash-0731",
    "inclusionai-ling-3.0-flash",
    "muse-glimmer",
    "openai-gpt-oss-120b",
    "openbmb-MiniCPM5-1B",
    "poolside-Laguna-S-2.1",
    "poolside-Laguna-XS-2.1",
    "poolside-Laguna-XS.2",
    "tencent-Hy3",
]


@pytest.mark.parametrize("name", ROUND_TRIP_TEMPLATES)
def test_rendered_past_reasoning_splits_back(name: str) -> None:
    """A reply written in the template's own format (as it renders a past turn with
    reasoning) splits into that reasoning and answer, from where the generation prompt
    ends."""
    template = _real(name)
    turn = [
        {"role": "user", "content": "USER-one"},
        {"role": "assistant", "content": "ANSWER-x", "reasoning_content": "REASONING-y"},
    ]
    prompt = template.render(turn[:1], reasoning=THINKING_ON)
    full = template.render(turn, add_generation_prompt=False, reasoning=THINKING_ON)
    assert full.startswith(prompt)
    assert "REASONING-y" in full
    reply = full[len(prompt) :]
    reply = reply[: reply.index("ANSWER-x") + len("ANSWER-x")]
    reasoning, answer = split_reasoning(
        reply, template.reasoning_format, template.opens_reasoning(THINKING_ON)
    )
    assert (reasoning, answer) == ("REASONING-y", "ANSWER-x")
