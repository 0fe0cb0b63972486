"""How much memory a context takes, by what each architecture family really allocates.

llama.cpp gives K/V cells only to attention layers, and a recurrent state of fixed size per
sequence to recurrent layers (Mamba-2, gated delta nets, short convolutions, RWKV); the
formulas follow ``llama_hparams::n_embd_r`` / ``n_embd_s`` in the vendored
``src/llama-hparams.cpp`` (states are f32). Checkpoints (:mod:`app.engine.checkpoints`) of
recurrent state add up to their per-tab bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.checkpoints import DEFAULT_MAX_BYTES, DEFAULT_MAX_COUNT
from app.engine.metadata import ArchParams, ModelInfo, Raw

_STATE_BYTES = 4  # llama.cpp keeps recurrent states in f32


def _int(value: Raw, default: int = 0) -> int:
    if isinstance(value, bool) or value is None or isinstance(value, tuple):
        return default
    return int(value)


@dataclass(frozen=True)
class LayerPlan:
    """Which layers hold K/V cells (with how many KV heads) and which a recurrent state."""

    kv_heads: tuple[int, ...]  # per attention layer
    recurrent_layers: int

    @classmethod
    def of(cls, info: ModelInfo) -> LayerPlan:
        p: ArchParams = info.arch_params
        n_layer = info.n_layer
        if isinstance(p.head_count_kv, tuple):  # per-layer: 0 marks a recurrent layer
            heads = [int(h) for h in p.head_count_kv[:n_layer]]
            kv = tuple(h for h in heads if h > 0)
            recurrent = len(heads) - len(kv) if _has_recurrent_keys(p) else 0
            return cls(kv, recurrent)
        interval = _int(p.full_attention_interval)
        if interval > 0 and _has_recurrent_keys(p):  # qwen35, qwen3next: every n-th attends
            n_attn = sum(1 for i in range(n_layer) if (i + 1) % interval == 0)
            return cls((info.n_head_kv,) * n_attn, n_layer - n_attn)
        if _has_recurrent_keys(p) and not _int(p.head_count):  # mamba2, rwkv7
            return cls((), n_layer)
        if p.wkv_head_size is not None:
            return cls((), n_layer)
        return cls((info.n_head_kv,) * n_layer, 0)


def _has_recurrent_keys(p: ArchParams) -> bool:
    return any(
        v is not None
        for v in (p.ssm_state_size, p.ssm_inner_size, p.wkv_head_size, p.shortconv_l_cache)
    )


def recurrent_state_bytes(info: ModelInfo) -> int:
    """Bytes of recurrent state one sequence holds (0 for attention-only models)."""
    plan = LayerPlan.of(info)
    if not plan.recurrent_layers:
        return 0
    p = info.arch_params
    n_embd = _int(p.embedding_length, info.n_embd)
    d_conv, d_inner = _int(p.ssm_conv_kernel), _int(p.ssm_inner_size)
    d_state, n_group = _int(p.ssm_state_size), _int(p.ssm_group_count)
    if p.wkv_head_size is not None:  # RWKV: token shift + wkv state
        r = _int(p.token_shift_count, 2) * n_embd
        s = n_embd * _int(p.wkv_head_size)
    elif p.shortconv_l_cache is not None:  # LFM2 short convolutions
        r = n_embd * max(0, _int(p.shortconv_l_cache) - 1)
        s = d_state * d_inner
    else:  # Mamba-2, gated delta nets: conv state + SSM state
        r = max(0, d_conv - 1) * (d_inner + 2 * n_group * d_state)
        s = d_state * d_inner
    return plan.recurrent_layers * (r + s) * _STATE_BYTES


def kv_bytes_per_token(info: ModelInfo, k_bytes: float, v_bytes: float) -> float:
    """Bytes of K and V per cached token, over the attention layers only."""
    plan = LayerPlan.of(info)
    return sum(h * (info.head_dim_k * k_bytes + info.head_dim_v * v_bytes) for h in plan.kv_heads)


@dataclass(frozen=True)
class MemoryEstimate:
    kv_bytes: int  # attention K/V cells for the whole context
    recurrent_bytes: int  # recurrent state of every resident sequence
    checkpoint_bytes: int  # checkpoints of the resident tabs, at most

    @property
    def total(self) -> int:
        return self.kv_bytes + self.recurrent_bytes + self.checkpoint_bytes


def estimate(
    info: ModelInfo, kv_bytes: int, n_seq_max: int, needs_checkpoints: bool
) -> MemoryEstimate:
    """The context's memory besides the weights: ``kv_bytes`` from the settings' cache types."""
    per_seq = recurrent_state_bytes(info)
    n_seq = max(1, n_seq_max)
    checkpoints = 0
    if needs_checkpoints or per_seq:
        one = per_seq + 4 * info.n_vocab  # the state and the logits kept with it
        checkpoints = n_seq * min(DEFAULT_MAX_BYTES, DEFAULT_MAX_COUNT * one)
    return MemoryEstimate(kv_bytes, per_seq * n_seq, checkpoints)
