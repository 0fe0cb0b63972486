"""What llama.cpp asserts on while it loads a vocabulary and hyper-parameters, checked first.

llama.cpp refuses most broken files with an exception (``llama_model_load_from_file``
returns NULL and the log says why), but a few checks of its loader are ``GGML_ASSERT``s
that abort the whole process. These are the ones a damaged header reaches, found in the
vendored sources (llama-cpp-python 0.3.36, llama.cpp commit 0c1e570):

- ``src/llama-vocab.cpp`` ``llama_vocab::impl::load``: ``GGML_ASSERT(id_to_token.size() ==
  token_to_id.size())`` when two token strings are equal. The strings are compared as C
  strings (``gguf_get_arr_str`` returns ``c_str()``), so a zero byte ends a token, and an
  empty token is renamed ``[EMPTY_<id>]``: a damaged byte makes two tokens equal easily.
- ``token_to_byte`` aborts for a byte-type token in a WordPiece (BERT) vocabulary, which the
  load reaches when it builds the token-to-piece cache.
- ``src/llama-model.cpp`` ``load_hparams``: ``block_count`` in 1..512, ``nextn_predict_layers``
  at most ``block_count``, the expert counts (at most 1024 experts, as many used as exist,
  groups dividing them), and a known ``rope.scaling.type``.

The checks that end in an exception are repeated here too where a sentence helps the user
more than llama.cpp's log line (scores and token types shorter than the vocabulary, BPE
merges missing, per-layer arrays of the wrong length, an unknown tokenizer). Whatever is not
here is caught by :mod:`app.engine.load_check`, which tries the load in a child process.
Each function returns a sentence, or None when the file passes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.engine.gguf_header import (
    T_FLOAT32,
    T_INT8,
    T_INT32,
    T_STRING,
    T_UINT8,
    GGUFArray,
    GGUFHeader,
)

# tokenizer.ggml.model values llama_vocab::impl::load accepts; any other is "unknown tokenizer".
KNOWN_TOKENIZERS = frozenset(
    {
        "no_vocab",
        "none",
        "llama",
        "bert",
        "gpt2",
        "hybriddna",
        "whitespace",
        "t5",
        "rwkv",
        "test",
        "plamo2",
        "gemma4",
    }
)
# Tokenizers whose load reads tokenizer.ggml.merges (gpt2's family unless the pre-tokenizer
# is kimi-k2, and gemma4 always).
_MERGE_TOKENIZERS = frozenset({"gpt2", "hybriddna", "whitespace"})
LLAMA_MAX_LAYERS = 512  # src/llama-hparams.h
LLAMA_MAX_EXPERTS = 1024
ROPE_SCALING_TYPES = frozenset({"none", "linear", "yarn", "longrope"})
_TOKEN_TYPE_BYTE = 6  # LLAMA_TOKEN_TYPE_BYTE

_AGAIN = "download it again"


def vocabulary_problem(header: GGUFHeader, name: str) -> str | None:
    """Why llama.cpp would fail (or abort) loading the vocabulary of ``header``."""
    fields = header.fields
    damaged = f"The model file {name} is damaged"
    model = fields.get("tokenizer.ggml.model")
    if model is None:
        return (
            f"{damaged}: it does not say which tokenizer it uses (tokenizer.ggml.model is "
            f"missing); {_AGAIN}."
        )
    if not isinstance(model, str):
        return f"{damaged}: its tokenizer name (tokenizer.ggml.model) is not text; {_AGAIN}."
    if model not in KNOWN_TOKENIZERS:
        return (
            f"{name} uses the tokenizer '{_show(model)}', which this version of llama.cpp does "
            "not know (the file is damaged, or newer than LlamaDesk). Download it again or "
            "update LlamaDesk."
        )
    if model in ("no_vocab", "none"):
        return None
    tokens = fields.get("tokenizer.ggml.tokens")
    if tokens is None:
        return None  # said by metadata.load_problem ("has no vocabulary")
    if not isinstance(tokens, GGUFArray) or tokens.type != T_STRING:
        return (
            f"{damaged}: its vocabulary (tokenizer.ggml.tokens) is not a list of strings; {_AGAIN}."
        )
    n_tokens = len(tokens)
    for key, what, allowed in (
        ("tokenizer.ggml.scores", "token scores", (T_FLOAT32, T_INT32)),
        ("tokenizer.ggml.token_type", "token types", (T_INT32,)),
    ):
        value = fields.get(key)
        if value is None:
            continue
        if not isinstance(value, GGUFArray) or value.type not in allowed:
            return f"{damaged}: its {what} ({key}) are not a list of numbers; {_AGAIN}."
        if len(value) < n_tokens:
            return (
                f"{damaged}: it has {len(value):,} {what} for {n_tokens:,} tokens ({key} is "
                f"too short); {_AGAIN}."
            )
    pre = fields.get("tokenizer.ggml.pre")
    if (model in _MERGE_TOKENIZERS and pre != "kimi-k2") or model == "gemma4":
        merges = fields.get("tokenizer.ggml.merges")
        if merges is None:
            return f"{damaged}: its BPE merges (tokenizer.ggml.merges) are missing; {_AGAIN}."
        if not isinstance(merges, GGUFArray) or merges.type != T_STRING:
            return (
                f"{damaged}: its BPE merges (tokenizer.ggml.merges) are not a list of strings; "
                f"{_AGAIN}."
            )
    if model == "t5":
        problem = _charsmap_problem(fields.get("tokenizer.ggml.precompiled_charsmap"), damaged)
        if problem:
            return problem
    if model == "bert":
        types = fields.get("tokenizer.ggml.token_type")
        if isinstance(types, GGUFArray) and types.type == T_INT32:
            byte_ids = np.flatnonzero(types.numpy()[:n_tokens] == _TOKEN_TYPE_BYTE)
            if len(byte_ids):
                return (
                    f"{damaged}: token {int(byte_ids[0])} is marked as a byte token, which a "
                    f"WordPiece vocabulary cannot have; {_AGAIN}."
                )
    return _duplicate_problem(tokens, damaged)


def _charsmap_problem(value: Any, damaged: str) -> str | None:
    if value is None:
        return None
    key = "tokenizer.ggml.precompiled_charsmap"
    if not isinstance(value, GGUFArray) or value.type not in (T_INT8, T_UINT8):
        return f"{damaged}: its normalization table ({key}) is not a list of bytes; {_AGAIN}."
    raw = value.numpy().astype(np.uint8).tobytes()
    blob = int.from_bytes(raw[:4], "little") if len(raw) >= 4 else None
    if blob is None or blob + 4 >= len(raw):
        return f"{damaged}: its normalization table ({key}) is cut short; {_AGAIN}."
    return None


def llama_token_texts(tokens: GGUFArray) -> list[bytes]:
    """The token strings as llama.cpp's vocabulary holds them: each ends at its first zero
    byte (it reads them as C strings) and an empty one becomes ``[EMPTY_<id>]``."""
    buf, starts, lengths = tokens.spans()
    if not len(starts):
        return []
    tlen = _c_lengths(buf, starts, lengths)
    return [
        buf[s : s + n] if n else b"[EMPTY_%d]" % i
        for i, (s, n) in enumerate(zip(starts.tolist(), tlen.tolist(), strict=True))
    ]


def _duplicate_problem(tokens: GGUFArray, damaged: str) -> str | None:
    pair = duplicate_tokens(tokens)
    if pair is None:
        return None
    first, later = pair
    text = _llama_text(tokens, later).decode("utf-8", "replace")
    return (
        f"{damaged}: token {later} and token {first} are the same string "
        f"({_show(text)!r}), which llama.cpp cannot load; {_AGAIN}."
    )


# Token strings up to this many bytes are compared as numpy rows, the longer ones (1-10%
# of a byte-level BPE vocabulary) in Python: a 150,000-token vocabulary is checked in a few
# milliseconds, where a Python set of its strings takes ~50 ms.
_WIDTH = 16
_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F], np.uint64)


def duplicate_tokens(tokens: GGUFArray) -> tuple[int, int] | None:
    """Two token ids (first, later) that llama.cpp would read as the same string (see
    :func:`llama_token_texts`), the pair with the smallest later id; None if all differ.

    The quick pass proves the usual case (no zero byte or empty string, all keys differ);
    anything else is decided exactly from :func:`llama_token_texts`.
    """
    buf, starts, lengths = tokens.spans()
    if len(starts) < 2 or not _quick_all_differ(buf, starts, lengths):
        return _exact_duplicate(tokens)
    return None


def _quick_all_differ(buf: bytes, starts: np.ndarray, lengths: np.ndarray) -> bool:
    """True when the strings certainly differ as C strings; False when unsure."""
    win = np.frombuffer(buf, np.uint8)
    short = (lengths <= _WIDTH) & (starts + _WIDTH <= len(win))
    ids = np.flatnonzero(short)
    rows = np.lib.stride_tricks.sliding_window_view(win, _WIDTH)[starts[ids]]
    n = lengths[ids]
    inside = np.arange(_WIDTH)[None, :] < n[:, None]
    if not n.all() or (rows[inside] == 0).any():
        return False  # an empty string or a zero byte: llama.cpp renames or cuts it
    rows[~inside] = 0
    with np.errstate(over="ignore"):
        keys = (np.ascontiguousarray(rows).view("<u8") * _MIX).sum(axis=1, dtype=np.uint64)
        keys ^= n.astype(np.uint64) * np.uint64(0xFF51AFD7ED558CCD)
    keys.sort()
    if (keys[1:] == keys[:-1]).any():
        return False  # equal strings, or (rarely) equal keys: the exact pass tells
    rest: set[bytes] = set()
    for start, length in zip(starts[~short].tolist(), lengths[~short].tolist(), strict=True):
        text = buf[start : start + length]
        if length <= _WIDTH or b"\0" in text or text in rest:
            return False  # a short one at the buffer's end may equal a row
        rest.add(text)
    return True


def _exact_duplicate(tokens: GGUFArray) -> tuple[int, int] | None:
    first: dict[bytes, int] = {}
    for i, text in enumerate(llama_token_texts(tokens)):
        j = first.setdefault(text, i)
        if j != i:
            return j, i
    return None


def _c_lengths(buf: bytes, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Each string's length up to its first zero byte."""
    ends = starts + lengths
    lo, hi = int(starts.min()), int(ends.max())
    zeros = np.flatnonzero(np.frombuffer(buf, np.uint8, hi - lo, lo) == 0) + lo
    if not len(zeros):
        return lengths.astype(np.int64)
    # The first zero at or after each start; where it comes before the end, the C string
    # ends there.
    first = np.append(zeros, hi)[np.searchsorted(zeros, starts)]
    c_lengths: np.ndarray = np.minimum(ends, first) - starts  # numpy's ufuncs return Any
    return c_lengths


def _llama_text(tokens: GGUFArray, i: int) -> bytes:
    buf, starts, lengths = tokens.spans()
    n = int(_c_lengths(buf, starts[i : i + 1], lengths[i : i + 1])[0])
    start = int(starts[i])
    return buf[start : start + n] if n else b"[EMPTY_%d]" % i


def hparams_problem(header: GGUFHeader, name: str, arch: str) -> str | None:
    """Why llama.cpp's ``load_hparams`` would abort (or refuse) the file's numbers."""
    fields = header.fields
    damaged = f"The model file {name} is damaged"

    def number(suffix: str) -> int | None:
        value = fields.get(f"{arch}.{suffix}")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    n_layer = number("block_count")
    if n_layer is not None and not 0 < n_layer <= LLAMA_MAX_LAYERS:
        return (
            f"{damaged}: it claims {n_layer:,} layers ({arch}.block_count), where llama.cpp "
            f"loads 1 to {LLAMA_MAX_LAYERS}; {_AGAIN}."
        )
    nextn = number("nextn_predict_layers")
    if n_layer is not None and nextn is not None and not 0 <= nextn <= n_layer:
        return (
            f"{damaged}: it claims {nextn:,} prediction layers for {n_layer} layers "
            f"({arch}.nextn_predict_layers); {_AGAIN}."
        )
    if n_layer is not None:
        for suffix in (
            "feed_forward_length",
            "attention.head_count",
            "attention.head_count_kv",
            "expert_used_count",
        ):
            value = fields.get(f"{arch}.{suffix}")
            if isinstance(value, GGUFArray) and len(value) != n_layer:
                return (
                    f"{damaged}: {arch}.{suffix} has {len(value):,} value(s) for {n_layer} "
                    f"layers; {_AGAIN}."
                )
    problem = _experts_problem(fields, arch, damaged)
    if problem:
        return problem
    rope = fields.get(f"{arch}.rope.scaling.type")
    if isinstance(rope, str) and rope not in ROPE_SCALING_TYPES:
        return (
            f"{damaged}: its rope scaling type '{_show(rope)}' ({arch}.rope.scaling.type) is "
            f"not one llama.cpp knows; {_AGAIN}."
        )
    return None


def _experts_problem(fields: dict[str, Any], arch: str, damaged: str) -> str | None:
    def count(suffix: str) -> int:
        value = fields.get(f"{arch}.{suffix}")
        if isinstance(value, GGUFArray):
            if value.type == T_STRING or not len(value):
                return 0
            return int(value.numpy().max())
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    n_expert = count("expert_count")
    used = count("expert_used_count")
    groups = count("expert_group_count")
    group_used = count("expert_group_used_count")
    if arch in ("hunyuan-dense", "hunyuan_vl") and n_expert <= 1:
        return None  # llama.cpp resets these to "no experts"
    what = f"{damaged}: its expert counts do not fit together"
    keys = f"{arch}.expert_count {n_expert}, expert_used_count {used}"
    if n_expert > LLAMA_MAX_EXPERTS:
        return (
            f"{damaged}: it claims {n_expert:,} experts ({arch}.expert_count), more than the "
            f"{LLAMA_MAX_EXPERTS} llama.cpp supports; {_AGAIN}."
        )
    if used > n_expert or (n_expert > 0 and used == 0):
        return f"{what} ({keys}); {_AGAIN}."
    if n_expert > 0:
        if groups >= n_expert or (
            groups > 1 and (n_expert % groups or not 0 < group_used < groups)
        ):
            return (
                f"{what} ({keys}, expert_group_count {groups}, expert_group_used_count "
                f"{group_used}); {_AGAIN}."
            )
    elif groups:
        return f"{what} ({keys}, expert_group_count {groups}); {_AGAIN}."
    return None


def _show(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
