"""Built-in chat templates, for models without one or with one that cannot be used.

The choice follows the model's special tokens (its EOS text names the family), then its
name and architecture; ChatML otherwise: readable, and widely trained on.
"""

from __future__ import annotations

import re
from typing import Final

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
BUILTIN_TEMPLATES: Final[dict[str, str]] = {
    "chatml": CHATML_TEMPLATE,
    "llama3": _LLAMA3_TEMPLATE,
    "gemma": _GEMMA_TEMPLATE,
}
_EOS_HINTS: Final[dict[str, str]] = {
    "<|im_end|>": "chatml",
    "<|eot_id|>": "llama3",
    "<end_of_turn>": "gemma",
}


def choose_builtin(
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
