"""What the loaded model and its context hold now (the estimate before loading is
:mod:`app.engine.memory_estimate`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.engine.context import Context
    from app.engine.model import Model
    from app.engine.sequence import Sequence


def memory_in_use(model: Model, ctx: Context | None, seqs: Iterable[Sequence]) -> dict[str, int]:
    """Bytes used by the weights, the KV cache, recurrent states and checkpoints, and the
    tokens the cache holds (``Engine.memory``: the status bar shows these)."""
    held = list(seqs)
    kv = int(ctx.settings.kv_bytes_per_token(model.info) * ctx.n_ctx) if ctx is not None else 0
    recurrent = ctx.settings.memory_estimate(model.info).recurrent_bytes if ctx is not None else 0
    return {
        "model_bytes": model.size_bytes,
        "kv_bytes": kv,
        "recurrent_bytes": recurrent,
        "checkpoint_bytes": sum(s.checkpoints.nbytes for s in held),
        "kv_tokens_held": sum(len(s.tokens) for s in held if s.seq_id is not None),
        "n_ctx": ctx.n_ctx if ctx is not None else 0,
    }
