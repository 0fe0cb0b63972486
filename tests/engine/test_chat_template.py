"""Chat-template rendering: the real templates in ../shared/chat-templates and the rules."""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from app.engine.chat_template import CHATML_TEMPLATE, ChatTemplate, ChatTemplateError
from app.errors import LlamaDeskError

TEMPLATES_DIR = Path(__file__).resolve().parents[3] / "shared" / "chat-templates"
MISSING_REASON = f"the shared chat templates are not beside the repository ({TEMPLATES_DIR})"

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
    if not TEMPLATES_DIR.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=MISSING_REASON), id="missing")]
    return [pytest.param(path, id=path.stem) for path in sorted(TEMPLATES_DIR.glob("*.jinja"))]


def _real(name: str, bos: str = BOS, eos: str = EOS) -> ChatTemplate:
    path = TEMPLATES_DIR / f"{name}.jinja"
    if not path.is_file():
        pytest.skip(MISSING_REASON)
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


def test_all_seventy_templates_are_present() -> None:
    if not TEMPLATES_DIR.is_dir():
        pytest.skip(MISSING_REASON)
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
        "<start_of_turn>user\nYou are SYSTEM-alpha, be brief.\n\nUSER-one asks a question?"
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
        "<start_of_turn>user\nYou are SYSTEM-alpha, be brief.\n\nUSER-one asks a question?"
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
        "<user>You are SYSTEM-alpha, be brief.\n\nUSER-one asks a question?"
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
    templates = [ChatTemplate.for_model(None, "", "")]
    if TEMPLATES_DIR.is_dir():
        templates.append(_real("Qwen-Qwen2.5-7B-Instruct"))
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
