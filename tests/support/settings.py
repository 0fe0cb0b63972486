"""Context settings small enough for tiny test models and a 2-core machine."""

from __future__ import annotations

from app.engine import ContextSettings


def small_settings(**overrides: object) -> ContextSettings:
    values: dict[str, object] = dict(
        n_ctx=1024, n_batch=64, n_ubatch=64, n_seq_max=4, n_threads=1, n_threads_batch=1
    )
    values.update(overrides)
    return ContextSettings(**values)  # type: ignore[arg-type]
