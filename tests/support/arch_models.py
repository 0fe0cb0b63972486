"""Tiny random-weight GGUF models of every architecture family the app must handle.

Each architecture is described by one function returning its header keys and its tensors
as ``(name, ggml shape)`` pairs: the shapes are written in llama.cpp's order (``ne``, the
input dimension first), exactly as ``load_arch_tensors`` in the vendored
``src/models/<arch>.cpp`` creates them, so a reader can check one against the other line
by line. :func:`write_arch_model` turns such a description into a file with random f32
weights, scaled so that greedy decoding wanders over many tokens instead of repeating one.

The cache family of each architecture (see DESIGN.md section 2b) is in :data:`FAMILIES`;
``tests/engine/test_arch_models.py`` measures it with real llama.cpp calls.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import gguf
import numpy as np

from tests.support.gguf_models import CHATML_TEMPLATE, IM_END_ID, vocabulary


class CacheFamily(enum.Enum):
    """How an architecture's memory behaves when a conversation is cut back or shifted."""

    ATTENTION = "attention"  # plain KV cache: any suffix can go, positions can shift
    SLIDING_WINDOW = "sliding-window"  # iSWA cache: with swa_full off, old positions are gone
    HYBRID = "hybrid"  # recurrent layers + attention layers: only whole sequences can go
    RECURRENT = "recurrent"  # recurrent state only, one cell per sequence


FAMILIES: dict[str, CacheFamily] = {
    "llama": CacheFamily.ATTENTION,
    "qwen3": CacheFamily.ATTENTION,
    "qwen3moe": CacheFamily.ATTENTION,
    "gemma3": CacheFamily.SLIDING_WINDOW,
    "gemma4": CacheFamily.SLIDING_WINDOW,
    "gpt-oss": CacheFamily.SLIDING_WINDOW,
    "qwen35": CacheFamily.HYBRID,
    "qwen35moe": CacheFamily.HYBRID,
    "qwen3next": CacheFamily.HYBRID,
    "granitehybrid": CacheFamily.HYBRID,
    "lfm2": CacheFamily.HYBRID,
    "mamba2": CacheFamily.RECURRENT,
    "rwkv7": CacheFamily.RECURRENT,
}

ARCHITECTURES: tuple[str, ...] = tuple(FAMILIES)

SLIDING_WINDOW = 32  # tokens; small so that a short conversation goes past it


def family(arch: str) -> CacheFamily:
    return FAMILIES[arch]


# -- vocabularies -----------------------------------------------------------------------------


class Vocab(Protocol):
    """What a model file needs from a vocabulary."""

    @property
    def n_tokens(self) -> int: ...

    @property
    def eog_ids(self) -> tuple[int, ...]: ...

    @property
    def chat_template(self) -> str: ...

    def add_to_writer(self, writer: gguf.GGUFWriter) -> None: ...


@dataclass(frozen=True)
class SmallVocab:
    """The ~370-token SentencePiece vocabulary of ``gguf_models`` (ChatML, eos = <|im_end|>)."""

    tokens: list[str]
    scores: list[float]
    types: list[int]
    chat_template: str = CHATML_TEMPLATE

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def eog_ids(self) -> tuple[int, ...]:
        return (2, IM_END_ID)

    def add_to_writer(self, writer: gguf.GGUFWriter) -> None:
        writer.add_tokenizer_model("llama")
        writer.add_token_list(self.tokens)
        writer.add_token_scores(self.scores)
        writer.add_token_types(self.types)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(IM_END_ID)
        writer.add_add_bos_token(True)
        writer.add_add_eos_token(False)


def small_vocab() -> SmallVocab:
    return SmallVocab(*vocabulary())


# Realistic byte-level BPE vocabularies of ``tests/support/big_vocab.py``, by name.
BIG_VOCABS = {"qwen2-152k": "qwen2", "llama3-128k": "llama3"}
_EOG_SPECIALS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")


@dataclass(frozen=True)
class BigVocab:
    """A ``big_vocab.BpeVocab`` (151,936 or 128,256 tokens) seen through :class:`Vocab`."""

    bpe: Any  # big_vocab.BpeVocab

    @property
    def n_tokens(self) -> int:
        return int(self.bpe.n_vocab)

    @property
    def eog_ids(self) -> tuple[int, ...]:
        named = (self.bpe.specials[t] for t in _EOG_SPECIALS if t in self.bpe.specials)
        return tuple(sorted({self.bpe.eos_id, *named}))

    @property
    def chat_template(self) -> str:
        return str(self.bpe.chat_template)

    def add_to_writer(self, writer: gguf.GGUFWriter) -> None:
        from tests.support.big_vocab import add_bpe_vocab

        add_bpe_vocab(writer, self.bpe, chat_template=False)


def resolve_vocab(vocab: str | Vocab) -> Vocab:
    """``"small"``, a name of :data:`BIG_VOCABS` (``"qwen2-152k"``), or a vocabulary object."""
    if not isinstance(vocab, str):
        return vocab
    if vocab == "small":
        return small_vocab()
    from tests.support.big_vocab import bpe_vocab

    return BigVocab(bpe_vocab(BIG_VOCABS.get(vocab, vocab)))


# -- architecture descriptions ------------------------------------------------------------------

Shape = tuple[int, ...]
Tensors = Iterator[tuple[str, Shape]]

# Shared dimensions: 64-wide model, 2 query heads of 32, 1 KV head, 2 layers.
D, N_HEAD, N_HEAD_KV, HEAD, N_FF = 64, 2, 1, 32, 128  # 32-wide heads: q8_0 and q4_0 caches fit
N_EXPERT, N_EXPERT_USED, N_FF_EXP = 4, 2, 32


@dataclass(frozen=True)
class ArchSpec:
    header: dict[str, Any]  # keys without the "<arch>." prefix
    tensors: Callable[[int], Tensors]  # n_vocab -> tensors
    n_layer: int = 2
    gain: float = 2.8  # weight std is gain / sqrt(fan_in)


def _ends(n_vocab: int, d: int = D, tied: bool = True, norm: str = "output_norm") -> Tensors:
    yield "token_embd.weight", (d, n_vocab)
    yield f"{norm}.weight", (d,)
    if not tied:
        yield "output.weight", (d, n_vocab)


def _attn(i: int, *, q_mult: int = 1, qk_norm: bool = False, n_q: int = N_HEAD) -> Tensors:
    p = f"blk.{i}."
    yield p + "attn_q.weight", (D, HEAD * n_q * q_mult)
    yield p + "attn_k.weight", (D, HEAD * N_HEAD_KV)
    yield p + "attn_v.weight", (D, HEAD * N_HEAD_KV)
    yield p + "attn_output.weight", (HEAD * n_q, D)
    if qk_norm:
        yield p + "attn_q_norm.weight", (HEAD,)
        yield p + "attn_k_norm.weight", (HEAD,)


def _ffn(i: int, n_ff: int = N_FF) -> Tensors:
    p = f"blk.{i}."
    yield p + "ffn_gate.weight", (D, n_ff)
    yield p + "ffn_up.weight", (D, n_ff)
    yield p + "ffn_down.weight", (n_ff, D)


def _experts(i: int, shared: bool = False) -> Tensors:
    p = f"blk.{i}."
    yield p + "ffn_gate_inp.weight", (D, N_EXPERT)
    yield p + "ffn_gate_exps.weight", (D, N_FF_EXP, N_EXPERT)
    yield p + "ffn_up_exps.weight", (D, N_FF_EXP, N_EXPERT)
    yield p + "ffn_down_exps.weight", (N_FF_EXP, D, N_EXPERT)
    if shared:
        yield p + "ffn_gate_inp_shexp.weight", (D,)
        yield p + "ffn_gate_shexp.weight", (D, N_FF_EXP)
        yield p + "ffn_up_shexp.weight", (D, N_FF_EXP)
        yield p + "ffn_down_shexp.weight", (N_FF_EXP, D)


def _norms(i: int, *names: str) -> Tensors:
    for name in names:
        yield f"blk.{i}.{name}.weight", (D,)


_ATTN_HEADER = {
    "attention.head_count": N_HEAD,
    "attention.head_count_kv": N_HEAD_KV,
    "rope.dimension_count": HEAD,
    "feed_forward_length": N_FF,
}
_MOE_HEADER = {
    "expert_count": N_EXPERT,
    "expert_used_count": N_EXPERT_USED,
    "expert_feed_forward_length": N_FF_EXP,
}
# layer 0 sliding window, layer 1 full attention
_SWA_HEADER = {
    "attention.sliding_window": SLIDING_WINDOW,
    "attention.sliding_window_pattern": [True, False],
}


def _llama(qk_norm: bool = False, moe: bool = False) -> ArchSpec:
    def tensors(n_vocab: int) -> Tensors:
        yield from _ends(n_vocab)
        for i in range(2):
            yield from _norms(i, "attn_norm", "ffn_norm")
            yield from _attn(i, qk_norm=qk_norm)
            yield from (_experts(i) if moe else _ffn(i))

    return ArchSpec({**_ATTN_HEADER, **(_MOE_HEADER if moe else {})}, tensors)


def _gemma(gemma4: bool) -> ArchSpec:
    def tensors(n_vocab: int) -> Tensors:
        yield from _ends(n_vocab, tied=False)
        for i in range(2):
            yield from _norms(i, "attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm")
            yield from _attn(i, qk_norm=True)
            yield from _ffn(i)
        if gemma4:  # proportional rope of the full-attention layers, shared by all of them
            yield "rope_freqs.weight", (HEAD // 2,)

    header = {**_ATTN_HEADER, **_SWA_HEADER}
    if gemma4:
        header |= {
            "embedding_length_per_layer_input": 0,  # no per-layer embeddings
            "attention.key_length_swa": HEAD,
            "attention.value_length_swa": HEAD,
        }
    return ArchSpec(header, tensors)


def _gpt_oss() -> ArchSpec:
    def tensors(n_vocab: int) -> Tensors:
        yield from _ends(n_vocab, tied=False)
        for i in range(2):
            p = f"blk.{i}."
            yield from _norms(i, "attn_norm", "post_attention_norm")
            yield from _attn(i)
            yield p + "attn_output.bias", (D,)
            yield p + "attn_sinks.weight", (N_HEAD,)
            yield from _experts(i)
            yield p + "ffn_gate_inp.bias", (N_EXPERT,)
            yield p + "ffn_gate_exps.bias", (N_FF_EXP, N_EXPERT)
            yield p + "ffn_up_exps.bias", (N_FF_EXP, N_EXPERT)
            yield p + "ffn_down_exps.bias", (D, N_EXPERT)

    return ArchSpec({**_ATTN_HEADER, **_MOE_HEADER, **_SWA_HEADER}, tensors)


# Gated delta net (qwen35, qwen35moe, qwen3next): 2 key heads and 4 value heads of 16.
GDN_STATE, GDN_K_HEADS, GDN_V_HEADS, GDN_CONV = 16, 2, 4, 4
GDN_KEY, GDN_VALUE = GDN_STATE * GDN_K_HEADS, GDN_STATE * GDN_V_HEADS


def _qwen_hybrid(arch: str) -> ArchSpec:
    """Layer 0 is a gated delta net (recurrent), layer 1 full attention with a gated query."""
    moe = arch != "qwen35"

    def tensors(n_vocab: int) -> Tensors:
        yield from _ends(n_vocab)
        p = "blk.0."
        yield from _norms(0, "attn_norm", "post_attention_norm")
        yield p + "attn_qkv.weight", (D, GDN_KEY * 2 + GDN_VALUE)
        yield p + "attn_gate.weight", (D, GDN_VALUE)
        yield p + "ssm_conv1d.weight", (GDN_CONV, GDN_KEY * 2 + GDN_VALUE)
        yield p + "ssm_dt.bias", (GDN_V_HEADS,)
        yield p + "ssm_a", (GDN_V_HEADS,)
        if arch == "qwen3next":
            yield p + "ssm_ba.weight", (D, GDN_V_HEADS * 2)
        else:
            yield p + "ssm_beta.weight", (D, GDN_V_HEADS)
            yield p + "ssm_alpha.weight", (D, GDN_V_HEADS)
        yield p + "ssm_norm.weight", (GDN_STATE,)
        yield p + "ssm_out.weight", (GDN_VALUE, D)
        yield from _norms(1, "attn_norm", "post_attention_norm")
        yield from _attn(1, q_mult=2, qk_norm=True)
        for i in range(2):
            yield from (_experts(i, shared=True) if moe else _ffn(i))

    header: dict[str, Any] = {
        **_ATTN_HEADER,
        "full_attention_interval": 2,
        "ssm.conv_kernel": GDN_CONV,
        "ssm.inner_size": GDN_VALUE,
        "ssm.state_size": GDN_STATE,
        "ssm.time_step_rank": GDN_V_HEADS,
        "ssm.group_count": GDN_K_HEADS,
    }
    if moe:
        header |= {**_MOE_HEADER, "expert_shared_feed_forward_length": N_FF_EXP}
    if arch != "qwen3next":  # interleaved multi-section rope
        header["rope.dimension_sections"] = [6, 6, 4, 0]  # sums to HEAD / 2
    return ArchSpec(header, tensors)


# Mamba-2 mixer (mamba2, granitehybrid): inner 2*D, 4 heads of 32, state 16, one group.
M2_INNER, M2_HEADS, M2_STATE, M2_GROUPS, M2_CONV = 2 * D, 4, 16, 1, 4
_M2_HEADER = {
    "ssm.conv_kernel": M2_CONV,
    "ssm.inner_size": M2_INNER,
    "ssm.state_size": M2_STATE,
    "ssm.time_step_rank": M2_HEADS,
    "ssm.group_count": M2_GROUPS,
}


def _mamba2_mixer(i: int) -> Tensors:
    p = f"blk.{i}."
    conv_dim = M2_INNER + 2 * M2_GROUPS * M2_STATE
    yield p + "ssm_in.weight", (D, M2_INNER + conv_dim + M2_HEADS)
    yield p + "ssm_conv1d.weight", (M2_CONV, conv_dim)
    yield p + "ssm_conv1d.bias", (conv_dim,)
    yield p + "ssm_dt.bias", (M2_HEADS,)
    yield p + "ssm_a", (1, M2_HEADS)
    yield p + "ssm_d", (1, M2_HEADS)
    yield p + "ssm_norm.weight", (M2_INNER // M2_GROUPS, M2_GROUPS)
    yield p + "ssm_out.weight", (M2_INNER, D)


def _mamba2() -> ArchSpec:
    def tensors(n_vocab: int) -> Tensors:
        yield from _ends(n_vocab)
        for i in range(2):
            yield from _norms(i, "attn_norm")
            yield from _mamba2_mixer(i)

    return ArchSpec(dict(_M2_HEADER), tensors)


def _granite_hybrid() -> ArchSpec:
    """Layer 0 Mamba-2 (head_count_kv 0 marks it), layer 1 attention."""

    def tensors(n_vocab: int) -> Tensors:
        yield from _ends(n_vocab)
        yield from _mamba2_mixer(0)
        yield from _attn(1)
        for i in range(2):
            yield from _norms(i, "attn_norm", "ffn_norm")
            yield from _ffn(i)

    header = {
        **_ATTN_HEADER,
        **_M2_HEADER,
        "attention.head_count_kv": [0, N_HEAD_KV],
        "logit_scale": 1.0,
        "residual_scale": 1.0,
        "embedding_scale": 1.0,
        "attention.scale": HEAD**-0.5,
    }
    return ArchSpec(header, tensors)


def _lfm2() -> ArchSpec:
    """Layer 0 a short convolution (head_count_kv 0 marks it), layer 1 attention."""

    def tensors(n_vocab: int) -> Tensors:
        yield from _ends(n_vocab, norm="token_embd_norm")
        yield "blk.0.shortconv.conv.weight", (3, D)
        yield "blk.0.shortconv.in_proj.weight", (D, 3 * D)
        yield "blk.0.shortconv.out_proj.weight", (D, D)
        yield from _attn(1, qk_norm=True)
        for i in range(2):
            yield from _norms(i, "attn_norm", "ffn_norm")
            yield from _ffn(i)

    header = {**_ATTN_HEADER, "attention.head_count_kv": [0, N_HEAD_KV], "shortconv.l_cache": 3}
    return ArchSpec(header, tensors)


# RWKV-7: one 64-wide head (16-wide heads are nondeterministic on AVX2, DESIGN.md 2b).
RWKV_D, RWKV_HEAD, RWKV_LORA, RWKV_FF = D, 64, 16, N_FF


def _rwkv7() -> ArchSpec:
    d = RWKV_D

    def tensors(n_vocab: int) -> Tensors:
        yield from _ends(n_vocab, d=d, tied=False)
        yield "output_norm.bias", (d,)
        yield "token_embd_norm.weight", (d,)
        yield "token_embd_norm.bias", (d,)
        for i in range(2):
            p = f"blk.{i}."
            for name in ("attn_norm", "attn_norm_2", "time_mix_ln"):
                yield p + name + ".weight", (d,)
                yield p + name + ".bias", (d,)
            for x in "wavg":
                if x != "g":
                    yield p + f"time_mix_{x}0.weight", (d,)
                yield p + f"time_mix_{x}1.weight", (d, RWKV_LORA)
                yield p + f"time_mix_{x}2.weight", (RWKV_LORA, d)
            yield p + "time_mix_lerp_fused.weight", (d, 1, 1, 6)
            for name in ("k_k", "k_a", "r_k"):
                yield p + f"time_mix_{name}.weight", (d,)
            for name in ("key", "value", "receptance", "output"):
                yield p + f"time_mix_{name}.weight", (d, d)
            yield p + "channel_mix_lerp_k.weight", (d, 1, 1)
            yield p + "channel_mix_key.weight", (d, RWKV_FF)
            yield p + "channel_mix_value.weight", (RWKV_FF, d)

    header = {
        "embedding_length": d,
        "feed_forward_length": RWKV_FF,
        "attention.layer_norm_epsilon": 1e-5,
        "wkv.head_size": RWKV_HEAD,
        "attention.decay_lora_rank": RWKV_LORA,
        "attention.iclr_lora_rank": RWKV_LORA,
        "attention.value_residual_mix_lora_rank": RWKV_LORA,
        "attention.gate_lora_rank": RWKV_LORA,
        "token_shift_count": 2,
    }
    return ArchSpec(header, tensors)


SPECS: dict[str, Callable[[], ArchSpec]] = {
    "llama": _llama,
    "qwen3": lambda: _llama(qk_norm=True),
    "qwen3moe": lambda: _llama(qk_norm=True, moe=True),
    "gemma3": lambda: _gemma(gemma4=False),
    "gemma4": lambda: _gemma(gemma4=True),
    "gpt-oss": _gpt_oss,
    "qwen35": lambda: _qwen_hybrid("qwen35"),
    "qwen35moe": lambda: _qwen_hybrid("qwen35moe"),
    "qwen3next": lambda: _qwen_hybrid("qwen3next"),
    "granitehybrid": _granite_hybrid,
    "lfm2": _lfm2,
    "mamba2": _mamba2,
    "rwkv7": _rwkv7,
}


# -- writing ------------------------------------------------------------------------------------


def _values(name: str, shape: Shape, rng: np.random.Generator, gain: float) -> np.ndarray:
    """Random weights for one tensor (numpy shape = ggml shape reversed)."""
    np_shape = tuple(reversed(shape))
    if name.endswith(("ssm_a", "ssm_a.weight")):  # -exp(A_log): the state must decay
        return -rng.uniform(0.5, 2.0, np_shape)
    if name.endswith("ssm_dt.bias"):  # softplus(-2) ~ 0.13: a moderate time step
        return np.full(np_shape, -2.0)
    if "lerp" in name:  # token-shift interpolation factors
        return rng.uniform(0.2, 0.8, np_shape)
    if name.endswith(("ssm_d", "rope_freqs.weight", "_ln.weight")) or (
        "norm" in name and name.endswith(".weight")
    ):
        return np.ones(np_shape)
    if name.endswith((".bias", "attn_sinks.weight")):
        return np.zeros(np_shape)
    if len(shape) == 1:  # per-channel vectors (rwkv k_k, w0, ...)
        return rng.uniform(0.0, 1.0, np_shape)
    return rng.standard_normal(np_shape) * gain / math.sqrt(shape[0])


def write_arch_model(
    path: Path,
    arch: str,
    *,
    seed: int = 0,
    vocab: str | Vocab = "small",
    n_ctx_train: int = 4096,
    chat_template: str | None = CHATML_TEMPLATE,
    tied: bool = False,
) -> Path:
    """Write a tiny ``arch`` model with random weights to ``path`` and return it.

    ``vocab`` is ``"small"`` (~370 SentencePiece tokens: files of 0.3-0.6 MB), a realistic
    BPE vocabulary name from :data:`BIG_VOCABS` (then the embedding and output matrices are
    f16, 19 MB each, as the rest of a real file would dwarf them), or a :class:`Vocab`. The
    default template follows the vocabulary (ChatML, or Llama 3's for ``"llama3-128k"``).
    ``tied``: no ``output.weight`` even where the family's description has one (the input
    embedding is then the output matrix too, as in SmolLM2 and Gemma 3).
    """
    spec = SPECS[arch]()
    voc = resolve_vocab(vocab)
    if chat_template == CHATML_TEMPLATE:
        chat_template = voc.chat_template
    big = voc.n_tokens > 65_536
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"tiny-test-{arch}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if big else gguf.LlamaFileType.ALL_F32)
    header: dict[str, Any] = {
        "context_length": n_ctx_train,
        "embedding_length": D,
        "block_count": spec.n_layer,
        "attention.layer_norm_rms_epsilon": 1e-5,
        **spec.header,
    }
    for key, value in header.items():
        if isinstance(value, list):
            writer.add_array(f"{arch}.{key}", value)
        elif isinstance(value, float):
            writer.add_float32(f"{arch}.{key}", value)
        else:
            writer.add_uint32(f"{arch}.{key}", value)
    voc.add_to_writer(writer)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    rng = np.random.default_rng(seed)
    for name, shape in spec.tensors(voc.n_tokens):
        if tied and name == "output.weight":
            continue
        data = _values(name, shape, rng, spec.gain)
        dtype: type[np.floating[Any]] = np.float32
        if name in ("token_embd.weight", "output.weight"):
            # Short end-of-generation rows: random models rarely end, so tests get N tokens.
            data[list(voc.eog_ids)] *= 0.05
            dtype = np.float16 if big else np.float32
        writer.add_tensor(name, data.astype(dtype))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
