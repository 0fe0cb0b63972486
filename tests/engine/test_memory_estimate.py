"""The memory estimate counts what llama.cpp really allocates, family by family."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from app.engine import Engine
from app.engine.memory_estimate import LayerPlan, recurrent_state_bytes
from app.engine.metadata import read_model_info
from tests.support.arch_models import ARCHITECTURES, CacheFamily, family, write_arch_model
from tests.support.settings import small_settings


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("estimate")
    return {a: write_arch_model(folder / f"{a}.gguf", a) for a in ARCHITECTURES}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_estimate_matches_llama_cpp(
    arch: str, models: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    info = read_model_info(models[arch])
    plan = LayerPlan.of(info)
    kind = family(arch)
    recurrent = kind in (CacheFamily.HYBRID, CacheFamily.RECURRENT)
    assert (plan.recurrent_layers > 0) == recurrent
    assert (len(plan.kv_heads) > 0) == (kind is not CacheFamily.RECURRENT)
    settings = small_settings(n_threads=1, n_threads_batch=1)
    caplog.set_level(logging.INFO, logger="llama.cpp")
    with Engine.open(models[arch], settings) as engine:
        # What llama.cpp says it allocated: K/V layers (two caches for sliding windows)
        # and recurrent layers, one state cell per sequence.
        said = caplog.text
        kv_layers = sum(
            int(m) for m in re.findall(r"llama_kv_cache: size = .*?cells, +(\d+) layers", said)
        )
        assert kv_layers == len(plan.kv_heads)
        rs = re.search(r"llama_memory_recurrent: size = .*?\( *(\d+) cells, +(\d+) layers", said)
        if recurrent:
            assert rs is not None
            # (it reports every layer; only the recurrent ones get state: see the size below)
            assert int(rs[1]) == settings.n_seq_max and int(rs[2]) == info.n_layer
        else:
            assert rs is None
        ctx = engine.context
        assert ctx is not None
        key = engine.open_sequence()
        sizes = {}
        for n in (100, 200):
            engine.set_tokens(key, [1] + [300 + (i % 50) for i in range(n - 1)])
            engine.prefill(key)
            engine.run_until_done(key)
            sid = engine._seqs[key].seq_id  # measuring the real state
            assert sid is not None
            sizes[n] = (len(ctx.state_get(sid)), len(ctx.partial_state_get(sid)))
        growth = (sizes[200][0] - sizes[100][0]) / 100
        per_token = settings.kv_bytes_per_token(info)
        if kind is not CacheFamily.SLIDING_WINDOW:  # (a saved SWA layer holds its window only)
            # K/V of the attention layers only, plus llama.cpp's bytes of cell metadata.
            assert per_token <= growth <= per_token + 32
        if recurrent:
            # The partial state is the recurrent part: the estimate's, plus a small header.
            assert 0 <= sizes[200][1] - recurrent_state_bytes(info) < 512
        else:
            assert recurrent_state_bytes(info) == 0
        estimate = settings.memory_estimate(info)
        assert estimate.recurrent_bytes == recurrent_state_bytes(info) * settings.n_seq_max
