"""Realistic byte-level BPE vocabularies of real sizes, generated (no download).

Two shapes, with the sizes and the special tokens of the real tokenizers:

* ``"qwen2"``: 151,643 normal tokens, then Qwen's 26 named specials (``<|endoftext|>``,
  ``<|im_start|>``, ``<|im_end|>``, ..., ``<think>``, ``</think>``) and ``[PAD...]``
  fillers up to 151,936 tokens as in Qwen2.5/Qwen3 GGUF files (293 added tokens), one
  merge per multi-character token (151,387), ``tokenizer.ggml.pre = "qwen2"``;
* ``"llama3"``: 128,000 normal tokens then 256 specials (``<|begin_of_text|>``,
  ``<|eot_id|>``, ``<|start_header_id|>``, ``<|end_header_id|>``, reserved ones), 280,147
  merges (as Llama 3: several merges can make the same token), pre ``"llama-bpe"``.

Tokens are GPT-2 byte-to-unicode strings: the 256 byte tokens first, then pieces of common
English words (so that text tokenizes into few tokens), then pieces made by joining two
earlier tokens. Every merge ``"a b"`` has both parts and ``a + b`` in the vocabulary, and
both parts come earlier than the merge's result, so llama.cpp's vocabulary loader accepts
the file and tokenizes text with it. Generation is deterministic and takes about a second;
:func:`bpe_vocab` caches it per process.

    vocab = bpe_vocab("qwen2")
    writer = gguf.GGUFWriter(path, "qwen2")
    ...
    add_bpe_vocab(writer, vocab)
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType

import gguf
import numpy as np

NORMAL, CONTROL = int(gguf.TokenType.NORMAL), int(gguf.TokenType.CONTROL)
UNUSED = int(gguf.TokenType.UNUSED)

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' "
    "+ message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)

QWEN2_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
LLAMA3_NAMED = {
    0: "<|begin_of_text|>",
    1: "<|end_of_text|>",
    4: "<|finetune_right_pad_id|>",
    6: "<|start_header_id|>",
    7: "<|end_header_id|>",
    8: "<|eom_id|>",
    9: "<|eot_id|>",
    10: "<|python_tag|>",
}

# Common English words and code pieces: their prefixes become tokens first, as the most
# frequent merges of a real BPE do.
_WORDS = (
    "the of and to in is was for on that with as by at from his her it an were are which "
    "this be or has had not but been have their they one all two new first more other "
    "time after also who when there world hello what how why where model token chat user "
    "assistant system you your can will would should could about into over only some "
    "people year make like just know take see come think look want give use find tell ask "
    "work seem feel try leave call good great little own old right big high different "
    "small large next early young important few public bad same able def class return "
    "import self print if else elif while for try except none true false function var "
    "const let int string list dict value key data file path name type test result error "
    "number language python llama desk cache state fork stop write read open close run"
).split()

_UNITS = (
    tuple("etaoinshrdlucmfwypvbgkjqxz")
    + tuple("TAOISMCBPDRHFLWNEG")
    + tuple(
        "th he in er an re on at en nd ti es or te of ed is it al ar st to nt ng se ha as ou io "
        "le ve co me de hi ri ro ic ne ea ra ce li ch ll be ma si om ur ca el ta la ns di fo ho "
        "pe ec pr no ct us ac ot il tr ly nc et ut ss so rs un lo wa ge ie wh ee wi em ad ol rt "
        "po we na ul ni ts mo ow pa im mi ai sh ir su id os iv ia am fi ci vi pl ig tu ev ld ry "
        "mp fe bl ab gh ty op wo sa ay ex ke fr oo av ag if ap gr od bo sp rd do uc bu ei ov by "
        "rm ep tt oc fa ef cu rn sc gi da yo cr cl du ga qu ue ff ba ey ls va um pp ua up lu go "
        "ing ion ent the and tio for ati her ter hat tha ere con res ver all ons nce men ith ted "
        "0 1 2 3 4 5 6 7 8 9 . , - _ ' ( ) : ; ! ? = / é è ü ö ä ñ ç и о а е н 的 是 一 不 了 "
        "人 在 有 我 日本 語 🦙".split()
    )
)

_SIZES = {
    # kind: (normal tokens, all tokens, merges, tokenizer.ggml.pre)
    "qwen2": (151_643, 151_936, 151_387, "qwen2"),
    "llama3": (128_000, 128_256, 280_147, "llama-bpe"),
}


@dataclass(frozen=True)
class BpeVocab:
    """A generated vocabulary: what ``add_bpe_vocab`` writes."""

    kind: str
    tokens: tuple[str, ...]
    types: tuple[int, ...]
    merges: tuple[str, ...]
    pre: str
    bos_id: int
    eos_id: int
    specials: Mapping[str, int]  # special token text -> id
    add_bos: bool
    chat_template: str

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character mapping."""
    bs = list(range(ord("!"), ord("~") + 1))
    bs += list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def _encode(text: str, table: dict[int, str]) -> str:
    return "".join(table[b] for b in text.encode("utf-8"))


@cache
def bpe_vocab(kind: str) -> BpeVocab:
    """The ``"qwen2"`` or ``"llama3"`` vocabulary (cached)."""
    if kind not in _SIZES:
        raise ValueError(f"unknown vocabulary kind {kind!r}; use 'qwen2' or 'llama3'")
    n_normal, n_total, n_merges, pre = _SIZES[kind]
    rng = random.Random(f"bpe-{kind}")
    table = byte_to_unicode()
    tokens: list[str] = list(table.values())  # GPT-2's order: the printable bytes first
    index: dict[str, int] = {t: i for i, t in enumerate(tokens)}
    split: list[tuple[str, str] | None] = [None] * len(tokens)

    def add(a: str, b: str) -> None:
        t = a + b
        if t not in index and len(tokens) < n_normal:
            index[t] = len(tokens)
            tokens.append(t)
            split.append((a, b))

    space = table[ord(" ")]
    newline = table[ord("\n")]
    # Frequent words: every prefix, with and without the leading space (as "Ġthe").
    for word in _WORDS:
        for spelled in (space + _encode(word, table), _encode(word, table)):
            for i in range(2, len(spelled) + 1):
                add(spelled[: i - 1], spelled[i - 1])
    for a, b in ((newline, newline), (space, space), (space + space, space + space)):
        add(a, b)
    # Then pieces made of "units" (letters, the space marker, frequent letter groups):
    # every two-unit piece, then pieces grown by one unit from an earlier one. A piece of
    # k units can then be made in several ways (its prefix + last unit, two shorter
    # pieces...), which gives Llama 3's ~2.2 merges per token.
    units: list[str] = []
    for text in _UNITS:
        spelled = _encode(text, table)
        for i in range(2, len(spelled) + 1):
            add(spelled[: i - 1], spelled[i - 1])
        if spelled in index and spelled not in units:
            units.append(spelled)
    units.append(space)
    frequent = [*units[: 130 if kind == "qwen2" else 200], space]
    for a in frequent:
        for b in frequent:
            add(a, b)
    grown: list[str] = [a + b for a in frequent for b in frequent if (a + b) in index]
    while len(tokens) < n_normal:
        # Short pieces are extended more often (Zipf-like), up to 16 characters.
        a = grown[int(len(grown) * rng.random() ** 1.3)]
        b = units[int(len(units) * rng.random() ** 1.5)]
        if len(a) + len(b) <= 16 and (a + b) not in index:
            add(a, b)
            grown.append(a + b)

    merges: list[str] = []
    extra = n_merges - (n_normal - 256)
    for t_id in range(256, n_normal):
        pair = split[t_id]
        assert pair is not None
        merges.append(f"{pair[0]} {pair[1]}")
        if extra > 0:
            # Other ways to make the same token from two earlier ones (Llama 3 has them).
            t = tokens[t_id]
            for cut in range(1, len(t)):
                if cut == len(pair[0]) or extra <= 0:
                    continue
                a, b = t[:cut], t[cut:]
                if index.get(a, n_normal) < t_id and index.get(b, n_normal) < t_id:
                    merges.append(f"{a} {b}")
                    extra -= 1
    types = [NORMAL] * n_normal
    assert not index.keys() & set(QWEN2_SPECIALS) and not index.keys() & set(LLAMA3_NAMED.values())
    specials: dict[str, int] = {}
    if kind == "qwen2":
        for text in QWEN2_SPECIALS:
            specials[text] = len(tokens)
            tokens.append(text)
            types.append(CONTROL)
        while len(tokens) < n_total:
            tokens.append(f"[PAD{len(tokens)}]")
            types.append(UNUSED)
        bos, eos, add_bos, template = (
            specials["<|endoftext|>"],
            specials["<|im_end|>"],
            False,
            CHATML_TEMPLATE,
        )
    else:
        reserved = 0
        for k in range(n_total - n_normal):
            named = LLAMA3_NAMED.get(k)
            if named is None:
                named = f"<|reserved_special_token_{reserved}|>"
                reserved += 1
            text = named
            specials[text] = len(tokens)
            tokens.append(text)
            types.append(CONTROL)
        bos, eos, add_bos, template = (
            specials["<|begin_of_text|>"],
            specials["<|eot_id|>"],
            True,
            LLAMA3_TEMPLATE,
        )
    return BpeVocab(
        kind=kind,
        tokens=tuple(tokens),
        types=tuple(types),
        merges=tuple(merges),
        pre=pre,
        bos_id=bos,
        eos_id=eos,
        specials=MappingProxyType(specials),
        add_bos=add_bos,
        chat_template=template,
    )


def add_bpe_vocab(writer: gguf.GGUFWriter, vocab: BpeVocab, *, chat_template: bool = True) -> None:
    """Write the tokenizer keys (``tokenizer.ggml.*``, and the chat template unless
    ``chat_template=False``) of ``vocab`` to ``writer``."""
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(list(vocab.tokens))
    writer.add_token_types(list(vocab.types))
    writer.add_token_merges(list(vocab.merges))
    writer.add_bos_token_id(vocab.bos_id)
    writer.add_eos_token_id(vocab.eos_id)
    if vocab.kind == "qwen2":
        writer.add_pad_token_id(vocab.specials["<|endoftext|>"])
    writer.add_add_bos_token(vocab.add_bos)
    if chat_template:
        writer.add_chat_template(vocab.chat_template)


def write_big_vocab_model(
    path: Path, kind: str, *, n_embd: int = 16, n_layer: int = 1, vocab_only: bool = False
) -> Path:
    """A tiny llama (random weights, tied output) with the ``kind`` vocabulary at
    ``path``: a 150k-vocabulary file of a few MB, quick to write and to read."""
    vocab = bpe_vocab(kind)
    n_head, n_ff = 4, 2 * n_embd
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"tiny-{kind}-vocab")
    writer.add_context_length(32768 if kind == "qwen2" else 131072)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head // 2)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    add_bpe_vocab(writer, vocab)
    if not vocab_only:
        d, kv = n_embd, n_embd // 2

        def w(*shape: int) -> np.ndarray:
            return (rng.standard_normal(shape) * 0.02).astype(np.float16)

        writer.add_tensor("token_embd.weight", w(vocab.n_vocab, d))
        for i in range(n_layer):
            p = f"blk.{i}."
            writer.add_tensor(p + "attn_norm.weight", np.ones(d, np.float32))
            writer.add_tensor(p + "attn_q.weight", w(d, d))
            writer.add_tensor(p + "attn_k.weight", w(kv, d))
            writer.add_tensor(p + "attn_v.weight", w(kv, d))
            writer.add_tensor(p + "attn_output.weight", w(d, d))
            writer.add_tensor(p + "ffn_norm.weight", np.ones(d, np.float32))
            writer.add_tensor(p + "ffn_gate.weight", w(n_ff, d))
            writer.add_tensor(p + "ffn_up.weight", w(n_ff, d))
            writer.add_tensor(p + "ffn_down.weight", w(d, n_ff))
        writer.add_tensor("output_norm.weight", np.ones(d, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
