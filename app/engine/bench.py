"""The measurements behind ``llamadesk bench`` (prompt and generation speed, state costs)."""

from __future__ import annotations

import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.engine.engine import Engine
from app.engine.settings import ContextSettings, ModelSettings, SamplingParams


def _random_tokens(engine: Engine, n: int, seed: int = 0) -> list[int]:
    """Plain vocabulary tokens (no control tokens) so every model accepts them."""
    rng = random.Random(seed)
    model = engine.model
    assert model is not None
    ok = [t for t in range(model.n_vocab) if not model.is_eog(t) and t != model.bos][:5000]
    return [rng.choice(ok) for _ in range(n)]


def run_bench(
    path: Path,
    tabs: int = 4,
    n_prompt: int = 512,
    n_gen: int = 64,
    n_state: int = 2000,
    threads: int | None = None,
    model_settings: ModelSettings | None = None,
    on_step: Callable[[], None] | None = None,
    speculative: str = "off",
    draft_max: int = 8,
) -> dict[str, Any]:
    """``model_settings``: where the layers go (the device flags); ``on_step`` is called
    after every decode step (``bench --rpc``'s heartbeat for its watchdog); ``speculative``
    and ``draft_max``: the generating tabs' speculative decoding (SamplingParams)."""
    n_ctx = max(n_state + 64, n_prompt + n_gen + 16) * max(1, tabs)
    settings = ContextSettings(n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_seq_max=max(2, tabs + 1))
    if threads:
        settings.n_threads = settings.n_threads_batch = threads
    greedy = SamplingParams(
        temperature=0.0, max_tokens=n_gen, speculative=speculative, draft_max=draft_max
    )
    greedy.validate()
    result: dict[str, Any] = {"model": str(path)}
    guessed = {"drafted": 0, "accepted": 0}
    beat = on_step or (lambda: None)

    def on_load(_fraction: float) -> bool:
        beat()
        return True

    with Engine.open(path, settings, model_settings, on_load) as engine:
        placement = engine.model.placement if engine.model is not None else None
        if placement is not None:
            result["plan"] = placement.plan.describe()
        # A model with a short training context (the demo model: 512) gets a smaller test.
        limit = engine.n_ctx_seq
        n_prompt = min(n_prompt, limit // 2)
        n_gen = min(n_gen, max(1, limit // 4))
        n_state = min(n_state, limit - 8)
        result.update(n_prompt=n_prompt, n_gen=n_gen, n_state=n_state)
        prompt = _random_tokens(engine, n_prompt)
        key = engine.open_sequence()
        engine.set_tokens(key, prompt)
        t0 = time.perf_counter()
        engine.prefill(key)
        while engine.has_work():
            engine.step()
            beat()
        result["prompt_tokens_per_s"] = round(n_prompt / (time.perf_counter() - t0), 2)

        def generate(n_tabs: int) -> float:
            keys = [engine.open_sequence() for _ in range(n_tabs)]
            for i, k in enumerate(keys):
                # A shared start and one token of its own each (prompts shorter than 41 wrap).
                engine.set_tokens(k, [*prompt[:32], prompt[(40 + i) % len(prompt)]])
                engine.start(k, greedy)
            # Exclude the prompt: time from the first generated token on.
            while any(not engine._seqs[k].generating for k in keys):
                engine.step()
                beat()
            t = time.perf_counter()
            produced = 0
            while engine.has_work():
                produced += sum(1 for e in engine.step() if type(e).__name__ == "TokenText")
                beat()
            elapsed = time.perf_counter() - t
            for k in keys:
                done = engine._seqs[k].completion
                guessed["drafted"] += done.n_drafted
                guessed["accepted"] += done.n_accepted
                engine.close_sequence(k)
            return produced / elapsed if elapsed > 0 else 0.0

        result["gen_tokens_per_s_1_tab"] = round(generate(1), 2)
        result[f"gen_tokens_per_s_{tabs}_tabs"] = round(generate(tabs), 2)
        result["speculative"] = {"mode": speculative, "draft_max": draft_max, **guessed}

        long = _random_tokens(engine, n_state, seed=1)
        k = engine.open_sequence()
        engine.set_tokens(k, long)
        t = time.perf_counter()
        engine.prefill(k)
        while engine.has_work():
            engine.step()
            beat()
        result["reprocess_s"] = round(time.perf_counter() - t, 4)
        with tempfile.TemporaryDirectory() as tmp:
            f = os.path.join(tmp, "state.bin")
            t = time.perf_counter()
            size = engine.save_state_file(k, f)
            result["save_s"] = round(time.perf_counter() - t, 4)
            result["state_bytes"] = size
            k2 = engine.open_sequence()
            t = time.perf_counter()
            restored = engine.restore_state_file(k2, f)
            result["restore_s"] = round(time.perf_counter() - t, 4)
            result["restored"] = restored
        result["restore_speedup"] = round(result["reprocess_s"] / max(result["restore_s"], 1e-9), 1)
    return result
