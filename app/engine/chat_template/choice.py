"""Which chat template a model gets, and why: :class:`TemplateChoice`.

In order: the user's choice (a bundled name or a Jinja file: ``--chat-template``, the
model's stored setting), the GGUF's own ``tokenizer.chat_template``, then a built-in
template chosen by the vocabulary's special tokens (a vocabulary with
``<start_of_turn>``/``<end_of_turn>`` is Gemma's, ``<|im_start|>`` ChatML, ``[INST]``
Mistral, ``<|start_header_id|>`` Llama 3, ``<|user|>`` Phi/Zephyr ...: the markers
llama.cpp's ``llm_chat_detect_template`` reads in a template's text, looked up here as
tokens of the vocabulary), then by the architecture, then ChatML. A model without a
template used to get ChatML whatever its vocabulary: its end marker was not a token of the
model, so ``<|im_end|>`` was written out as text and every reply ran to the token limit.

This module knows nothing of llama.cpp: the vocabulary is a callable saying whether a
text is one special token of the model (:mod:`app.engine.template_choice` asks the model).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from app import paths
from app.engine.chat_template.builtins import BUILTIN_TEMPLATES

#: Whether a text is one special (control) token of the model's vocabulary.
HasToken = Callable[[str], bool]


class TemplateSource(enum.Enum):
    """Where the template in use came from (``run --json``'s ``chat_template_source``)."""

    GGUF = "gguf"  # the model file's own tokenizer.chat_template
    BUILTIN_BY_VOCABULARY = "builtin-by-vocabulary"  # its special tokens name the family
    BUILTIN_BY_ARCHITECTURE = "builtin-by-architecture"  # its architecture does
    BUILTIN_DEFAULT = "builtin-default"  # nothing points anywhere: ChatML
    USER_FILE = "user-file"  # a Jinja file the user chose
    USER_CHOICE = "user-choice"  # a bundled template the user chose by name


@dataclass(frozen=True)
class TemplateChoice:
    """The template in use: its name, where it came from, and a sentence saying why."""

    name: str  # "gemma", "chatml" ... for built-ins; "gguf" or the file's stem otherwise
    source: TemplateSource
    reason: str
    #: The Jinja source (not shown; :class:`ChatTemplate` compiles it).
    template: str = ""

    def to_dict(self) -> dict[str, Any]:
        """What ``run --json`` and ``/props`` show (not the template text)."""
        return {"name": self.name, "source": self.source.value, "reason": self.reason}


# (built-in name, special tokens that must all be in the vocabulary), most specific first.
_VOCABULARY_RULES: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    ("gemma", ("<start_of_turn>", "<end_of_turn>")),
    ("llama3", ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")),
    ("chatml", ("<|im_start|>", "<|im_end|>")),
    ("mistral-v7", ("[SYSTEM_PROMPT]", "[INST]", "[/INST]")),
    ("mistral-v3", ("[INST]", "[/INST]")),
    ("command-r", ("<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>")),
    ("phi3", ("<|user|>", "<|assistant|>", "<|end|>")),
    ("zephyr", ("<|user|>", "<|assistant|>")),
)


def family_of(template: str) -> str | None:
    """The built-in family a template's text writes (all of its markers appear in it),
    e.g. "chatml" for a model file's own ChatML template; None when none matches."""
    for name, markers in _VOCABULARY_RULES:
        if all(marker in template for marker in markers):
            return name
    return None


# Single tokens that name a family on their own (a model's BOS or EOS, when only those
# are known): tried after the full sets above.
_VOCABULARY_HINTS: Final[tuple[tuple[str, str], ...]] = (
    ("llama3", "<|eot_id|>"),
    ("llama3", "<|begin_of_text|>"),
    ("chatml", "<|im_end|>"),
    ("gemma", "<end_of_turn>"),
)

# (architecture prefix, built-in name): families whose vocabulary did not say.
_ARCHITECTURE_RULES: Final[tuple[tuple[str, str], ...]] = (
    ("gemma", "gemma"),
    ("phi3", "phi3"),
    ("command-r", "command-r"),
    ("cohere", "command-r"),
    ("qwen", "chatml"),
)

# Template files bundled with the app, by name (the stem): resources/chat_templates/*.jinja.
_BUNDLED_DIR: Final = "chat_templates"


def bundled_templates() -> dict[str, str]:
    """Every template a user may choose by name: the built-ins and the bundled files."""
    found = dict(BUILTIN_TEMPLATES)
    folder = paths.resources_dir() / _BUNDLED_DIR
    if folder.is_dir():
        for file in sorted(folder.glob("*.jinja")):
            try:
                found.setdefault(file.stem, file.read_text(encoding="utf-8"))
            except OSError:
                continue
    return found


def choose_builtin_choice(
    has_token: HasToken, architecture: str | None, model_name: str | None = None
) -> TemplateChoice:
    """The built-in template for a model without a usable one of its own."""
    for name, tokens in _VOCABULARY_RULES:
        if all(has_token(token) for token in tokens):
            marks = " and ".join(tokens[:2])
            return TemplateChoice(
                name,
                TemplateSource.BUILTIN_BY_VOCABULARY,
                f"The model has no chat template; its vocabulary has {marks}, "
                f"so it gets the built-in {name} template.",
                BUILTIN_TEMPLATES[name],
            )
    for name, token in _VOCABULARY_HINTS:
        if has_token(token):
            return TemplateChoice(
                name,
                TemplateSource.BUILTIN_BY_VOCABULARY,
                f"The model has no chat template; its vocabulary has {token}, "
                f"so it gets the built-in {name} template.",
                BUILTIN_TEMPLATES[name],
            )
    arch = (architecture or "").lower()
    for prefix, name in _ARCHITECTURE_RULES:
        if arch.startswith(prefix):
            return TemplateChoice(
                name,
                TemplateSource.BUILTIN_BY_ARCHITECTURE,
                f"The model has no chat template and its vocabulary names no chat format; "
                f"its architecture ({architecture}) gets the built-in {name} template.",
                BUILTIN_TEMPLATES[name],
            )
    return TemplateChoice(
        "chatml",
        TemplateSource.BUILTIN_DEFAULT,
        "The model has no chat template and nothing in it names a chat format: it gets "
        "ChatML. If replies run on or show markers, choose its template "
        "(--chat-template NAME|FILE).",
        BUILTIN_TEMPLATES["chatml"],
    )


def user_template(value: str) -> TemplateChoice:
    """The template a user chose: a bundled name or a Jinja file. Raises ``ValueError``
    with a sentence when it is neither."""
    text = value.strip()
    bundled = bundled_templates()
    if text in bundled:
        return TemplateChoice(
            text,
            TemplateSource.USER_CHOICE,
            f"The {text} template was chosen for this model.",
            bundled[text],
        )
    path = Path(text).expanduser()
    if path.is_file():
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"The chat template file {path} cannot be read: {exc}.") from exc
        if not source.strip():
            raise ValueError(f"The chat template file {path} is empty.")
        return TemplateChoice(
            path.stem,
            TemplateSource.USER_FILE,
            f"The chat template was read from {path}.",
            source,
        )
    names = ", ".join(sorted(bundled))
    raise ValueError(f"{text!r} is neither a bundled chat template ({names}) nor a template file.")


def user_template_problem(value: str) -> str | None:
    """Why ``value`` cannot be used as a chat template choice (None: it can, or it is
    empty, which means automatic)."""
    if not value.strip():
        return None
    try:
        user_template(value)
    except ValueError as exc:
        return str(exc)
    return None


def gguf_choice(template: str) -> TemplateChoice:
    return TemplateChoice(
        "gguf",
        TemplateSource.GGUF,
        "The model file's own chat template is used.",
        template,
    )


def choose_builtin(
    bos_token: str, eos_token: str, model_name: str | None, architecture: str | None
) -> str:
    """The built-in template's name from the BOS/EOS texts and the architecture only
    (what was known before the vocabulary was asked)."""
    known = {bos_token, eos_token} - {""}
    return choose_builtin_choice(known.__contains__, architecture, model_name).name
