"""Render a conversation into the prompt text a model was trained on.

A GGUF file carries its chat template as Jinja2 source in ``tokenizer.chat_template``.
Model authors write these templates for the Hugging Face ``apply_chat_template``
conventions, which this module reproduces:

* an ``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and ``lstrip_blocks`` and the
  ``loopcontrols`` extension;
* the globals ``raise_exception(message)`` and ``strftime_now(format)``;
* a ``tojson`` filter that keeps non-ASCII text and accepts ``indent``, ``separators``
  and ``sort_keys`` (Jinja's own filter HTML-escapes and takes only ``indent``);
* the ``{% generation %}`` block tag of transformers (rendered as its plain body);
* the variables ``messages``, ``add_generation_prompt``, ``bos_token``, ``eos_token``,
  ``tools=None`` and ``documents=None`` (left undefined instead, as llama.cpp does, for
  templates that only render that way); ``date_string`` (today, for Llama 3.x) and
  ``functions``/``datetime`` (firefunction-v2) when the template uses them, as llama.cpp
  does; anything else (``tools``, ...) is passed through ``render(**extra)`` and wins
  over these defaults.

Reasoning (thinking) is rendered as llama.cpp's server renders it:

* **Thinking default.** One rule, llama-server's (see :mod:`.thinking`): thinking is on
  by default where the template's model writes a reasoning format the splitter knows and
  the template shows it; a default render then passes ``enable_thinking`` and no other
  reasoning variable. An explicit :class:`ReasoningOptions` choice becomes
  ``enable_thinking`` and, for templates that use other names, ``thinking`` (DeepSeek
  V3.x/V4, Granite 3.3, Kimi K3), ``thinking_mode`` (MiniMax-M3), ``reasoning`` (Cohere2
  MoE), ``thinking_budget=0`` when off (Seed-OSS), ``reasoning_effort`` /
  ``reasoning_strength`` / ``thinking_effort`` for an effort. Only the names a template
  reads are passed. :attr:`ChatTemplate.reasoning_defaults` says what applies (format,
  thinking on by default, toggle, effort); :meth:`ChatTemplate.opens_reasoning` whether
  the generation prompt opens the reasoning block (the reply starts inside it).
* **Past reasoning.** An assistant message may carry ``reasoning_content``; it reaches the
  template under that name (Qwen3, GLM, Laguna... read it; most drop it), as ``thinking``
  for gpt-oss and LFM2/LFM2.5 and as a thinking block for Ministral 3, as llama-server's
  handlers give it. Empty reasoning is left out, so templates that split ``content`` on
  ``</think>`` see the bare answer. llama.cpp's default ``preserve_reasoning`` is passed
  too (``drop_thinking=false`` ...): DeepSeek V4 writes an earlier reply ``<think></think>``.

On top of that it smooths over what real templates get wrong for a chat app:

* **System prompts.** Some templates refuse a system message (gemma-2 raises "System
  role not supported") and some silently drop it. A probe at construction finds out
  (:attr:`ChatTemplate.supports_system_role`); when the role is not supported, the system
  text is merged into the first user message (``system + "\\n" + user``), as llama.cpp's
  server does (``common/chat.cpp``, ``system_message_not_supported``). A render that still raises with a system message present is retried with
  the merge, and then with consecutive same-role messages joined (for templates that demand
  strict user/assistant alternation).
* **BOS.** The engine tokenizes the rendered text with ``add_special=True``, so llama.cpp
  adds the BOS token itself when the model wants one. Templates that start with
  ``{{ bos_token }}`` would double it; :meth:`ChatTemplate.render` therefore strips one
  leading ``bos_token`` text by default (``strip_bos=True``) when the tokenizer adds BOS
  (``add_bos``; a trailing ``eos_token`` likewise with ``add_eos``), exactly like
  llama.cpp's server. A model that adds none keeps it (SmolLM2: ``<|im_start|>``).
* **Stop strings.** :attr:`ChatTemplate.stop_strings` is the special-token-like marker the
  template writes right after a finished assistant message (``<|im_end|>``,
  ``<|eot_id|>``, ``<end_of_turn>``, ``</s>`` ...), found by rendering a probe; empty when
  there is none (e.g. RWKV's plain "\\n\\n").
* **No template / a broken one / the user's choice.** :meth:`ChatTemplate.for_model` never
  raises: the user's choice (a bundled name or a file) first, then the model's own
  template, then a built-in one chosen by the vocabulary's special tokens and the
  architecture (:mod:`.choice`). :attr:`ChatTemplate.choice` says which one and why
  (:class:`TemplateChoice`); :attr:`ChatTemplate.fallback` is True for a built-in one.

Rooms: :mod:`.environment` (the Jinja environment, errors), :mod:`.builtins` (built-in
templates), :mod:`.choice` (which template, and why), :mod:`.messages` (what the template is given), :mod:`.thinking` (the thinking
rule and variables), :mod:`.template` (:class:`ChatTemplate`: probes and rendering).

The engine reuses the KV cache by the longest common token prefix between turns, so the
rendering must be deterministic: nothing volatile is inserted here. ``strftime_now`` reads
the clock (templates put today's date in the system header); the clock is injectable
(``now=``) for tests.
"""

from __future__ import annotations

from app.engine.chat_template.builtins import BUILTIN_TEMPLATES, CHATML_TEMPLATE
from app.engine.chat_template.choice import (
    TemplateChoice,
    TemplateSource,
    bundled_templates,
    user_template_problem,
)
from app.engine.chat_template.environment import ChatTemplateError
from app.engine.chat_template.template import ChatTemplate
from app.engine.chat_template.thinking import (
    THINKING_RULE,
    ReasoningDefaults,
    ReasoningEffort,
    ReasoningOptions,
)

__all__ = [
    "BUILTIN_TEMPLATES",
    "CHATML_TEMPLATE",
    "THINKING_RULE",
    "ChatTemplate",
    "ChatTemplateError",
    "ReasoningDefaults",
    "ReasoningEffort",
    "ReasoningOptions",
    "TemplateChoice",
    "TemplateSource",
    "bundled_templates",
    "user_template_problem",
]
