"""Built-in chat templates, for models without one, with one that cannot be used, or for
a user's choice by name (``--chat-template gemma``).

The formats are llama.cpp's built-in ones (``src/llama-chat.cpp``,
``llm_chat_apply_template``), written as Jinja so that they go through the same renderer,
probes and stop-string detection as a model's own template. Which one a model without a
template gets is :mod:`.choice`'s business.
"""

from __future__ import annotations

from typing import Final

#: ChatML: readable, widely trained on; the choice when nothing points elsewhere.
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

# Mistral v7 (Mistral Small 3, [SYSTEM_PROMPT] in the vocabulary).
_MISTRAL_V7_TEMPLATE: Final = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}"
    "{% elif message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + '[/INST]' }}"
    "{% else %}"
    "{{ ' ' + message['content'] + '</s>' }}"
    "{% endif %}"
    "{% endfor %}"
)

# Mistral v3 ([INST] a special token, no system role: the probe merges it).
_MISTRAL_V3_TEMPLATE: Final = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}"
    "{% elif message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + '[/INST]' }}"
    "{% else %}"
    "{{ ' ' + message['content'] | trim + '</s>' }}"
    "{% endif %}"
    "{% endfor %}"
)

# Llama 2 chat: [INST] is plain text there, so only a user's choice picks it.
_LLAMA2_TEMPLATE: Final = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "{{ '[INST] <<SYS>>\\n' + message['content'] + '\\n<</SYS>>\\n\\n' }}"
    "{% elif message['role'] == 'user' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'system' %}"
    "{{ '[INST] ' }}"
    "{% endif %}"
    "{{ message['content'] + ' [/INST]' }}"
    "{% else %}"
    "{{ ' ' + message['content'] + ' </s>' }}"
    "{% endif %}"
    "{% endfor %}"
)

_PHI3_TEMPLATE: Final = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

_ZEPHYR_TEMPLATE: Final = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|endoftext|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

_COMMAND_R_TEMPLATE: Final = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% set token = {'system': '<|SYSTEM_TOKEN|>', 'user': '<|USER_TOKEN|>'}"
    ".get(message['role'], '<|CHATBOT_TOKEN|>') %}"
    "{{ '<|START_OF_TURN_TOKEN|>' + token + message['content'] | trim"
    " + '<|END_OF_TURN_TOKEN|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}"
    "{% endif %}"
)

#: Built-in templates by name (llama.cpp's names for the same formats).
BUILTIN_TEMPLATES: Final[dict[str, str]] = {
    "chatml": CHATML_TEMPLATE,
    "gemma": _GEMMA_TEMPLATE,
    "llama3": _LLAMA3_TEMPLATE,
    "llama2": _LLAMA2_TEMPLATE,
    "mistral-v3": _MISTRAL_V3_TEMPLATE,
    "mistral-v7": _MISTRAL_V7_TEMPLATE,
    "phi3": _PHI3_TEMPLATE,
    "zephyr": _ZEPHYR_TEMPLATE,
    "command-r": _COMMAND_R_TEMPLATE,
}
