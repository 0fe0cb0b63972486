"""Tiny GGUF models written on the spot, so tests never download weights.

The models are real llama-architecture files with random weights: llama.cpp loads and
runs them like any other model, which is all the engine tests need (same greedy tokens in
a batch as alone, state round trips, shifts...). Text they produce is noise; tests that
need text that makes sense use the project's demo model.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# A small vocabulary of whole words so that prompts tokenize into few tokens and
# detokenized output contains multi-byte characters split across byte tokens.
_WORDS = (
    "the a an and or but if then is are was be to of in on at for with hello world "
    "chat tab model llama desk token cache state fork stop user assistant system you "
    "I me my name what how why when where who yes no one two three four five six seven "
    "eight nine ten . , ! ? : ; - ( ) 0 1 2 3 4 5 6 7 8 9 é ü 日本 語 🦙"
).split()


@dataclass(frozen=True)
class TinySpec:
    """Shape of a generated model. Defaults give a ~0.5 MB model that runs in microseconds."""

    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_layer: int = 2
    n_ff: int = 128
    n_ctx_train: int = 2048
    seed: int = 0
    weight_std: float = 0.35
    chat_template: str | None = CHATML_TEMPLATE
    architecture: str = "llama"
    name: str = "tiny-test-llama"
    vocab_only: bool = False

    def with_seed(self, seed: int) -> TinySpec:
        return replace(self, seed=seed)


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """SentencePiece-style vocab: specials, 256 byte tokens, ChatML markers, words."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    tokens += ["<|im_start|>", "<|im_end|>"]
    types += [gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    pieces = ["▁", "\n"] + ["▁" + w for w in _WORDS] + list(dict.fromkeys(_WORDS))
    for piece in pieces:
        if piece not in tokens:
            tokens.append(piece)
            types.append(gguf.TokenType.NORMAL)
    # Longer pieces score higher so the tokenizer prefers whole words.
    scores = [
        0.0 if t != gguf.TokenType.NORMAL else -100.0 + len(tok)
        for tok, t in zip(tokens, types, strict=True)
    ]
    return tokens, scores, [int(t) for t in types]


IM_END_ID = 260  # index of "<|im_end|>" in vocabulary()


def llama_tensor_shapes(
    n_vocab: int, n_embd: int, n_head: int, n_head_kv: int, n_layer: int, n_ff: int
) -> Iterator[tuple[str, tuple[int, ...]]]:
    """A llama's tensor names and numpy shapes (rows = output features), in file order."""
    d, hd = n_embd, n_embd // n_head
    yield "token_embd.weight", (n_vocab, d)
    for i in range(n_layer):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", (d,)
        yield p + "attn_q.weight", (n_head * hd, d)
        yield p + "attn_k.weight", (n_head_kv * hd, d)
        yield p + "attn_v.weight", (n_head_kv * hd, d)
        yield p + "attn_output.weight", (d, n_head * hd)
        yield p + "ffn_norm.weight", (d,)
        yield p + "ffn_gate.weight", (n_ff, d)
        yield p + "ffn_up.weight", (n_ff, d)
        yield p + "ffn_down.weight", (d, n_ff)
    yield "output_norm.weight", (d,)
    yield "output.weight", (n_vocab, d)


def add_llama_header(
    writer: gguf.GGUFWriter,
    *,
    name: str,
    n_ctx_train: int,
    n_embd: int,
    n_layer: int,
    n_ff: int,
    n_head: int,
    n_head_kv: int,
    file_type: gguf.LlamaFileType,
    vocab: tuple[list[str], list[float], list[int]],
    chat_template: str | None = CHATML_TEMPLATE,
) -> None:
    """Hyper-parameters and the SentencePiece-style vocabulary of a generated llama."""
    tokens, scores, types = vocab
    writer.add_name(name)
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(file_type)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(IM_END_ID)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)


def write_tiny_model(path: Path, spec: TinySpec = TinySpec()) -> Path:
    """Write a llama GGUF with random weights to ``path`` and return it."""
    vocab = vocabulary()
    rng = np.random.default_rng(spec.seed)
    writer = gguf.GGUFWriter(str(path), spec.architecture)
    add_llama_header(
        writer,
        name=spec.name,
        n_ctx_train=spec.n_ctx_train,
        n_embd=spec.n_embd,
        n_layer=spec.n_layer,
        n_ff=spec.n_ff,
        n_head=spec.n_head,
        n_head_kv=spec.n_head_kv,
        file_type=gguf.LlamaFileType.ALL_F32,
        vocab=vocab,
        chat_template=spec.chat_template,
    )
    if not spec.vocab_only:
        shapes = llama_tensor_shapes(
            len(vocab[0]), spec.n_embd, spec.n_head, spec.n_head_kv, spec.n_layer, spec.n_ff
        )
        for name, shape in shapes:
            if len(shape) == 1:  # norms
                writer.add_tensor(name, np.ones(shape, np.float32))
            else:
                data = rng.standard_normal(shape) * spec.weight_std / np.sqrt(shape[-1]) * 8
                writer.add_tensor(name, data.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tiny_t5(
    path: Path, seed: int = 0, n_embd: int = 64, n_head: int = 4, n_layer: int = 2, n_ff: int = 128
) -> Path:
    """A tiny encoder-decoder (T5 architecture) with random weights and the same vocabulary."""
    tokens, scores, types = vocabulary()
    n_vocab = len(tokens)
    head_dim = n_embd // n_head
    n_buckets = 32
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 2.8 / math.sqrt(shape[-1])).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "t5")
    writer.add_name("tiny-test-t5")
    writer.add_context_length(512)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(n_ff)
    writer.add_block_count(n_layer)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_relative_attn_buckets_count(n_buckets)
    writer.add_decoder_start_token_id(0)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(True)
    writer.add_tensor("token_embd.weight", w(n_vocab, n_embd))
    for i in range(n_layer):
        e = f"enc.blk.{i}."
        writer.add_tensor(e + "attn_norm.weight", np.ones(n_embd, np.float32))
        writer.add_tensor(e + "attn_rel_b.weight", w(n_buckets, n_head))
        for name in ("attn_q", "attn_k", "attn_v", "attn_o"):
            writer.add_tensor(e + name + ".weight", w(n_embd, n_embd))
        writer.add_tensor(e + "ffn_norm.weight", np.ones(n_embd, np.float32))
        writer.add_tensor(e + "ffn_up.weight", w(n_ff, n_embd))
        writer.add_tensor(e + "ffn_down.weight", w(n_embd, n_ff))
        d = f"dec.blk.{i}."
        writer.add_tensor(d + "attn_norm.weight", np.ones(n_embd, np.float32))
        writer.add_tensor(d + "attn_rel_b.weight", w(n_buckets, n_head))
        for name in (
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_o",
            "cross_attn_q",
            "cross_attn_k",
            "cross_attn_v",
            "cross_attn_o",
        ):
            writer.add_tensor(d + name + ".weight", w(n_embd, n_embd))
        writer.add_tensor(d + "cross_attn_norm.weight", np.ones(n_embd, np.float32))
        writer.add_tensor(d + "ffn_norm.weight", np.ones(n_embd, np.float32))
        writer.add_tensor(d + "ffn_up.weight", w(n_ff, n_embd))
        writer.add_tensor(d + "ffn_down.weight", w(n_embd, n_ff))
    writer.add_tensor("enc.output_norm.weight", np.ones(n_embd, np.float32))
    writer.add_tensor("dec.output_norm.weight", np.ones(n_embd, np.float32))
    writer.add_tensor("output.weight", w(n_vocab, n_embd))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
