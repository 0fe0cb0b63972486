"""The loaded model's chat template and its end markers, chosen with its vocabulary.

:func:`choose` asks :meth:`ChatTemplate.for_model` for the template (the user's choice,
the GGUF's, else a built-in one named by the vocabulary's special tokens: see
:mod:`app.engine.chat_template.choice`) and works out how a reply ends: each end-of-turn
marker the template writes is either a token of the vocabulary (an EOG token ends the
reply already; another special token is added to :attr:`EndMarkers.tokens`) or text the
model can only spell out, which becomes a stop string (:attr:`EndMarkers.strings`), so
that a marker is never shown and a reply never runs to the token limit past it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np

from app.engine.chat_template import ChatTemplate, TemplateChoice
from app.engine.chat_template.choice import HasToken
from app.engine.gguf_header import T_STRING, GGUFArray, GGUFHeader
from app.engine.metadata import ModelInfo
from app.engine.model import Model

# llama.cpp parses a text as a special token when the token's type is one of these
# (llama-vocab.cpp, cache_special_tokens: CONTROL, USER_DEFINED, UNKNOWN).
_SPECIAL_TYPES: Final = (2, 3, 4)  # gguf TokenType UNKNOWN, CONTROL, USER_DEFINED


@dataclass(frozen=True)
class EndMarkers:
    """How a chat reply ends besides the vocabulary's EOG tokens."""

    strings: tuple[str, ...] = ()  # stop strings: markers that are not one token
    tokens: frozenset[int] = field(default_factory=frozenset)  # special, non-EOG markers


class ModelVocabulary:
    """Answers "is this text one token of the model?" by tokenizing it with special
    tokens parsed (the markers looked up are never ordinary words)."""

    def __init__(self, model: Model) -> None:
        self._model = model
        self._cache: dict[str, int | None] = {}

    def token_of(self, text: str) -> int | None:
        """The id of the single special token spelled ``text``, else None."""
        if text in self._cache:
            return self._cache[text]
        ids = self._model.tokenize(text, add_special=False, parse_special=True)
        found: int | None = None
        # One token spelled exactly so (control or user-defined: added tokens such as
        # <|im_start|> are either, depending on the converter).
        if len(ids) == 1 and self._model.piece(ids[0], special=True) == text.encode("utf-8"):
            found = ids[0]
        self._cache[text] = found
        return found

    def has_token(self, text: str) -> bool:
        return self.token_of(text) is not None


class HeaderVocabulary:
    """Answers "is this text one special token of the model?" from the GGUF header's
    token list and types, without loading the model (``inspect``): the tokens llama.cpp
    parses as special, plus the BOS/EOS texts."""

    def __init__(self, header: GGUFHeader, info: ModelInfo) -> None:
        self._special = {info.bos_token, info.eos_token} - {""}
        tokens = header.fields.get("tokenizer.ggml.tokens")
        types = header.fields.get("tokenizer.ggml.token_type")
        if not (isinstance(tokens, GGUFArray) and tokens.type == T_STRING):
            return
        if not (isinstance(types, GGUFArray) and types.type != T_STRING):
            return
        kinds = types.numpy()[: len(tokens)]
        for index in np.flatnonzero(np.isin(kinds, _SPECIAL_TYPES)):
            self._special.add(tokens.raw(int(index)).decode("utf-8", errors="replace"))

    def has_token(self, text: str) -> bool:
        return text in self._special


def _template(
    info: ModelInfo,
    has_token: HasToken,
    user_choice: str,
    add_bos: bool = True,
    add_eos: bool = False,
) -> ChatTemplate:
    """The one place the template is chosen: the loaded model's and ``inspect``'s."""
    return ChatTemplate.for_model(
        info.chat_template,
        info.bos_token,
        info.eos_token,
        model_name=info.name or None,
        architecture=info.architecture or None,
        has_token=has_token,
        user_choice=user_choice,
        add_bos=add_bos,
        add_eos=add_eos,
    )


def choose_for_file(info: ModelInfo, header: GGUFHeader, user_choice: str = "") -> TemplateChoice:
    """Which template a load of this file would use and why, read from its header
    (``inspect``): the same choice as :func:`choose`, with the header's vocabulary."""
    return _template(info, HeaderVocabulary(header, info).has_token, user_choice).choice


def choose(model: Model, user_choice: str = "") -> tuple[ChatTemplate, EndMarkers]:
    """The template for ``model`` (``user_choice``: a bundled name or a file, "" automatic)
    and its end markers."""
    vocabulary = ModelVocabulary(model)
    # Strip a BOS/EOS text only where the tokenizer adds that token (llama.cpp's rule).
    template = _template(
        model.info, vocabulary.has_token, user_choice, model.add_bos, model.add_eos
    )
    strings: list[str] = []
    tokens: set[int] = set()
    for marker in template.stop_strings:
        token = vocabulary.token_of(marker)
        if token is None:
            strings.append(marker)
        elif not model.is_eog(token):
            tokens.add(token)
    return template, EndMarkers(tuple(strings), frozenset(tokens))
