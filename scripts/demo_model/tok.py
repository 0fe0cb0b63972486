"""Byte-level BPE tokenizer for the demo model, compatible with llama.cpp's "qwen2" pre-tokenizer."""

from __future__ import annotations

from collections.abc import Iterable

from corpus import IM_END, IM_START, SPECIAL_TOKENS
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

# llama.cpp (src/llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_QWEN2): the same expression, with the
# case-insensitive contraction group expanded.  Digits are split one by one.
QWEN2_REGEX = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GGUF_PRE = "qwen2"


def new_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def _plain(text: str) -> str:
    for special in SPECIAL_TOKENS:
        text = text.replace(special, "\n")
    return text


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator((_plain(t) for t in texts), trainer)
    return tok


def vocab_list(tok: Tokenizer) -> list[str]:
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [""] * len(vocab)
    for piece, idx in vocab.items():
        tokens[idx] = piece
    if "" in tokens:
        raise ValueError("tokenizer ids are not contiguous")
    return tokens


def merges_list(tok: Tokenizer) -> list[str]:
    import json

    model = json.loads(tok.to_str())["model"]
    merges = model["merges"]
    return [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in merges]


def special_ids(tok: Tokenizer) -> dict[str, int]:
    ids = {s: tok.token_to_id(s) for s in SPECIAL_TOKENS}
    assert ids[IM_START] is not None and ids[IM_END] is not None
    return ids  # type: ignore[return-value]


def encode(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids
