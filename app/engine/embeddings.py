"""Pooled embeddings, one decode per text, in a scratch sequence of their own; and which
pooling a context for embeddings gets."""

from __future__ import annotations

import os

import llama_cpp
import numpy as np

from app.engine.errors import ContextFullError, EngineError
from app.engine.gguf_header import GGUFHeaderError, read_header
from app.engine.handles import Handles
from app.engine.residency import Residency
from app.engine.sequence import Sequence
from app.settings_schema import POOLING

_POOLING_NAMES = {value: name for name, value in POOLING.items() if value >= 0}


def model_pooling(path: str | os.PathLike[str]) -> str | None:
    """The pooling a GGUF file names (``{arch}.pooling_type``: embedding and reranking
    models have one); None when it names none, or names "none" (generative models)."""
    try:
        header = read_header(path)
    except (OSError, GGUFHeaderError):
        return None  # the load itself reports what is wrong with the file
    value = header.get(f"{header.get('general.architecture')}.pooling_type")
    if not isinstance(value, int):
        return None
    name = _POOLING_NAMES.get(value)
    return None if name in (None, "none") else name


def default_pooling(path: str | os.PathLike[str]) -> str:
    """The pooling for embeddings from ``path`` when none is chosen: the model's own, else
    mean. llama.cpp's own default for a model that names none is no pooling, whose context
    gives no vector per text at all."""
    return model_pooling(path) or "mean"


def embed(
    handles: Handles, residency: Residency, scratch: Sequence, texts: list[str], normalize: bool
) -> list[np.ndarray]:
    """Embed ``texts`` through ``scratch`` (the caller opens and closes it)."""
    ctx = handles.need_ctx()
    model = handles.need_model()
    pooling = int(llama_cpp.llama_pooling_type(ctx.handle))
    if pooling == POOLING["none"]:
        raise EngineError(
            "This context does not pool embeddings (pooling 'none'): choose mean, cls or last."
        )
    if pooling == POOLING["rank"]:
        # Rank pooling gives a relevance score per text, not a vector of n_embd floats.
        raise EngineError(
            "This context ranks (pooling 'rank'), which gives scores, not embeddings: "
            "choose mean, cls or last."
        )
    n_embd = int(llama_cpp.llama_model_n_embd_out(model.handle))
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
