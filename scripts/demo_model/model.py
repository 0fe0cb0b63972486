"""A tiny llama in PyTorch, laid out exactly as llama.cpp's LLM_ARCH_LLAMA computes it.

RoPE is the "normal" (interleaved pairs) variant llama.cpp uses for llama, so Q/K need no
permutation on export.  Weights are stored as ``nn.Linear`` (out, in) like GGUF expects.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Config:
    vocab_size: int = 3072
    d_model: int = 256
    n_layer: int = 4
    n_head: int = 8
    n_kv_head: int = 4
    d_ff: int = 768
    context_length: int = 512
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(
    positions: torch.Tensor, head_dim: int, base: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin of shape positions.shape + (head_dim // 2,)."""
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = positions.to(torch.float64)[..., None] * inv
    return ang.cos().float(), ang.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, H, T, D); cos/sin: (B, 1, T, D/2). Rotates pairs (x[2i], x[2i+1])."""
    x2 = x.unflatten(-1, (-1, 2))
    a, b = x2[..., 0], x2[..., 1]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.d_model, cfg.head_dim
        self.attn_norm = RMSNorm(d, cfg.norm_eps)
        self.wq = nn.Linear(d, cfg.n_head * hd, bias=False)
        self.wk = nn.Linear(d, cfg.n_kv_head * hd, bias=False)
        self.wv = nn.Linear(d, cfg.n_kv_head * hd, bias=False)
        self.wo = nn.Linear(cfg.n_head * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, cfg.norm_eps)
        self.w_gate = nn.Linear(d, cfg.d_ff, bias=False)
        self.w_up = nn.Linear(d, cfg.d_ff, bias=False)
        self.w_down = nn.Linear(cfg.d_ff, d, bias=False)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        cfg = self.cfg
        bsz, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(bsz, t, cfg.n_head, cfg.head_dim).transpose(1, 2)
        k = self.wk(h).view(bsz, t, cfg.n_kv_head, cfg.head_dim).transpose(1, 2)
        v = self.wv(h).view(bsz, t, cfg.n_kv_head, cfg.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = cfg.n_head // cfg.n_kv_head
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if mask is None:
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.wo(att.transpose(1, 2).reshape(bsz, t, -1))
        h = self.ffn_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class TinyLlama(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embd = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.output_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self._init()
        # Tied embeddings: copying a token (names, lists) then needs no per-token mapping from
        # input to output embedding, so it generalizes to rare and unseen name pieces. The GGUF
        # still gets both token_embd and output (same values).
        self.output.weight = self.tok_embd.weight

    def _init(self) -> None:
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                s = (
                    std / math.sqrt(2 * self.cfg.n_layer)
                    if name.endswith(("wo.weight", "w_down.weight"))
                    else std
                )
                nn.init.normal_(p, mean=0.0, std=s)

    def hidden(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """ids (B, T) -> final normed hidden states (B, T, d). mask: bool (B, 1, T, T), True = attend."""
        bsz, t = ids.shape
        if positions is None:
            positions = torch.arange(t).expand(bsz, t)
        cos, sin = rope_tables(positions, self.cfg.head_dim, self.cfg.rope_base)
        cos, sin = cos[:, None], sin[:, None]
        x = self.tok_embd(ids)
        for blk in self.blocks:
            x = blk(x, cos, sin, mask)
        return self.output_norm(x)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Plain causal logits (B, T, V) for a single sequence per row starting at position 0."""
        return self.output(self.hidden(ids))

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # counts the tied matrix once
