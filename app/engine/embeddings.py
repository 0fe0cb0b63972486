"""Pooled embeddings, one decode per text, in a scratch sequence of their own."""

from __future__ import annotations

import llama_cpp
import numpy as np

from app.engine.errors import ContextFullError, EngineError
from app.engine.handles import Handles
from app.engine.residency import Residency
from app.engine.sequence import Sequence


def embed(
    handles: Handles, residency: Residency, scratch: Sequence, texts: list[str], normalize: bool
) -> list[np.ndarray]:
    """Embed ``texts`` through ``scratch`` (the caller opens and closes it)."""
    ctx = handles.need_ctx()
    model = handles.need_model()
    n_embd = int(llama_cpp.llama_model_n_embd(model.handle))
    residency.ensure_resident(scratch, handles.side_events, protect={scratch.key})
    if scratch.seq_id is None:
        raise EngineError("No free sequence slot for embeddings.")
    results = []
    for text in texts:
        tokens = model.tokenize(text, add_special=True, parse_special=False)
        if not tokens:
            raise EngineError("Cannot embed empty text.")
        if len(tokens) > min(ctx.batch.capacity, ctx.n_ctx_seq):
            raise ContextFullError(
                f"The text is {len(tokens)} tokens; embeddings take at most {ctx.batch.capacity} at once (raise the micro-batch size)."
            )
        ctx.batch.clear()
        ctx.batch.add_span(tokens, 0, scratch.seq_id, True)
        ctx.batch.mark_all_outputs()
        result = ctx.decode()
        if not result.ok:
            raise EngineError(f"llama.cpp could not compute the embedding (error {result.code}).")
        vector = ctx.embeddings_seq(scratch.seq_id, n_embd)
        ctx.seq_rm(scratch.seq_id, -1, -1)
        if normalize:
            norm = float(np.linalg.norm(vector))
            vector = vector / norm if norm > 0 else vector
        results.append(vector)
    return results
