"""Every architecture family loads, generates deterministically, and has the cache it claims.

The models come from ``tests/support/arch_models.py``; the cache facts are measured here
with real llama.cpp calls (DESIGN.md section 2b) rather than assumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from app.engine import Engine, SamplingParams
from app.engine.backend import ensure_backend
from app.engine.context import Context
from app.engine.model import Model
from tests.support.arch_models import (
    ARCHITECTURES,
    SLIDING_WINDOW,
    CacheFamily,
    family,
    write_arch_model,
)
from tests.support.settings import small_settings

PROMPT = "hello world, what is my name?"
# One thread: the models are tiny, and llama.cpp's spinning thread barrier crawls when
# other processes share the machine's cores.
ONE_THREAD = dict(n_threads=1, n_threads_batch=1)
N_FILL = 400  # tokens decoded before measuring: past the SWA cache (256 cells here)


@pytest.fixture(scope="session")
def arch_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("arch-models")
    return {arch: write_arch_model(folder / f"{arch}.gguf", arch) for arch in ARCHITECTURES}


@pytest.fixture(params=ARCHITECTURES)
def arch(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_architectures_and_families_agree() -> None:
    assert len(ARCHITECTURES) == 13
    counts = {f: sum(family(a) is f for a in ARCHITECTURES) for f in CacheFamily}
    assert counts == {
        CacheFamily.ATTENTION: 3,
        CacheFamily.SLIDING_WINDOW: 3,
        CacheFamily.HYBRID: 5,
        CacheFamily.RECURRENT: 2,
    }


def test_model_is_tiny(arch: str, arch_models: dict[str, Path]) -> None:
    assert arch_models[arch].stat().st_size < 1_000_000


def test_greedy_generation_is_varied_and_deterministic(
    arch: str, arch_models: dict[str, Path]
) -> None:
    with Engine.open(arch_models[arch], small_settings(**ONE_THREAD)) as engine:
        assert engine.model_info.architecture == arch
        key = engine.open_sequence()
        runs = []
        for _ in range(2):
            engine.set_prompt(key, PROMPT)
            runs.append(engine.complete(key, SamplingParams(temperature=0, max_tokens=16)).tokens)
    assert len(runs[0]) == 16
    assert len(set(runs[0])) >= 3, f"{arch} logits are degenerate: {runs[0]}"
    assert runs[0] == runs[1]


@dataclass(frozen=True)
class CacheFacts:
    """Measured on one sequence after N_FILL tokens."""

    can_shift: bool
    pos_min: int
    restored_pos_min: int  # of a copy made with state_get / state_set
    suffix_rm: bool  # seq_rm of the last 10 positions
    whole_rm: bool  # seq_rm of the whole sequence
    state_half: int  # llama_state_seq_get_size after N_FILL // 2 tokens
    state_full: int  # ... and after N_FILL tokens


def _fill(ctx: Context, tokens: list[int], start: int) -> None:
    step = ctx.batch.capacity
    for begin in range(0, len(tokens), step):
        chunk = tokens[begin : begin + step]
        ctx.batch.clear()
        ctx.batch.add_span(chunk, start + begin, 0, want_last_logits=True)
        assert ctx.decode().ok


def _state_size(ctx: Context) -> int:
    return int(llama_cpp.llama_state_seq_get_size(ctx.handle, 0))


def measure(model: Model, swa_full: bool) -> CacheFacts:
    tokens = (model.tokenize(PROMPT * 100, add_special=False))[:N_FILL]
    assert len(tokens) == N_FILL
    half = N_FILL // 2
    ctx = Context(model, small_settings(swa_full=swa_full, **ONE_THREAD))
    try:
        _fill(ctx, tokens[:half], 0)
        state_half = _state_size(ctx)
        _fill(ctx, tokens[half:], half)
        assert ctx.seq_pos_max(0) == N_FILL - 1
        pos_min = ctx.seq_pos_min(0)
        assert ctx.state_set(1, ctx.state_get(0))
        restored_pos_min = ctx.seq_pos_min(1)
        assert ctx.seq_rm(1, -1, -1)
        return CacheFacts(
            can_shift=ctx.can_shift,
            pos_min=pos_min,
            restored_pos_min=restored_pos_min,
            state_half=state_half,
            state_full=_state_size(ctx),
            suffix_rm=ctx.seq_rm(0, N_FILL - 10, -1),
            whole_rm=ctx.seq_rm(0, -1, -1),
        )
    finally:
        ctx.close()


@pytest.fixture(scope="session")
def cache_facts(arch_models: dict[str, Path]) -> dict[str, tuple[CacheFacts, CacheFacts]]:
    """Per architecture: facts with swa_full=True (the default), then with swa_full=False."""
    facts = {}
    for arch, path in arch_models.items():
        model = Model(path)
        try:
            facts[arch] = (measure(model, swa_full=True), measure(model, swa_full=False))
        finally:
            model.close()
    return facts


def test_cache_family_facts(
    arch: str, cache_facts: dict[str, tuple[CacheFacts, CacheFacts]]
) -> None:
    full, swa_off = cache_facts[arch]
    f = family(arch)
    last = N_FILL - 1
    for facts in (full, swa_off):
        assert facts.whole_rm
        # attention cells grow with the conversation; a pure recurrent state does not
        assert (facts.state_full > facts.state_half) == (f is not CacheFamily.RECURRENT), facts
    if f is CacheFamily.ATTENTION:
        assert full == swa_off  # swa_full means nothing without SWA layers
        assert (full.can_shift, full.pos_min, full.suffix_rm) == (True, 0, True)
        assert full.restored_pos_min == 0
    elif f is CacheFamily.SLIDING_WINDOW:
        # swa_full=True: like attention
        assert (full.can_shift, full.pos_min, full.suffix_rm) == (True, 0, True)
        # swa_full=False: the SWA layers reuse cells older than the window once their
        # cache (window * n_seq_max + n_ubatch, padded to 256 cells) is full; no shifts
        assert 0 < swa_off.pos_min <= N_FILL - SLIDING_WINDOW
        assert (swa_off.can_shift, swa_off.suffix_rm) == (False, True)
        # a sequence's state keeps only the window of the SWA layers, whatever swa_full says
        assert full.restored_pos_min == swa_off.restored_pos_min == N_FILL - SLIDING_WINDOW
        assert full.state_full == swa_off.state_full
    else:  # recurrent and hybrid: one recurrent cell per sequence, at the last position
        assert full == swa_off
        assert (full.pos_min, full.restored_pos_min, full.suffix_rm) == (last, last, False)
        assert full.can_shift == (arch not in ("qwen35", "qwen35moe"))


def test_report_cache_facts(cache_facts: dict[str, tuple[CacheFacts, CacheFacts]]) -> None:
    """Not a check: prints the measured table (run with -s to see it)."""
    print()
    for arch, pair in cache_facts.items():
        for swa_full, facts in zip((True, False), pair, strict=True):
            print(f"{arch:14} {family(arch).value:15} swa_full={swa_full!s:5} {facts}")


# -- realistic vocabularies -------------------------------------------------------------------

# One architecture per cache family, with Qwen2's 151,936-token BPE vocabulary.
BIG_VOCAB_ARCHS = ("llama", "gemma3", "qwen35", "mamba2")


@pytest.fixture(scope="session")
def big_vocab_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("tests.support.big_vocab")
    folder = tmp_path_factory.mktemp("arch-models-152k")
    return {
        arch: write_arch_model(folder / f"{arch}.gguf", arch, vocab="qwen2-152k")
        for arch in BIG_VOCAB_ARCHS
    }


def _raw_greedy(path: Path, prompt: str, n: int) -> list[int]:
    """Greedy tokens with bare llama.cpp calls (the engine's metadata reader is slow on a
    152k vocabulary; see test_realistic_vocabulary_through_the_engine)."""
    ensure_backend()
    model = llama_cpp.llama_model_load_from_file(
        str(path).encode(), llama_cpp.llama_model_default_params()
    )
    assert model, f"llama.cpp could not load {path.name}"
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 256, 64, 64
    params.n_threads = params.n_threads_batch = 1
    ctx = llama_cpp.llama_init_from_model(model, params)
    try:
        assert ctx
        vocab = llama_cpp.llama_model_get_vocab(model)
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        data = prompt.encode()
        buf = (llama_cpp.llama_token * 64)()
        tokens = list(buf[: llama_cpp.llama_tokenize(vocab, data, len(data), buf, 64, True, True)])
        out: list[int] = []
        while len(out) < n:
            arr = (llama_cpp.llama_token * len(tokens))(*tokens)
            assert llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(arr, len(tokens))) == 0
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), (n_vocab,))
            tokens = [int(np.argmax(logits))]
            out += tokens
        return out
    finally:
        if ctx:
            llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)


@pytest.mark.parametrize("big_arch", BIG_VOCAB_ARCHS)
def test_realistic_vocabulary_models_load_and_run(
    big_arch: str, big_vocab_models: dict[str, Path]
) -> None:
    path = big_vocab_models[big_arch]
    assert path.stat().st_size < 50_000_000
    first = _raw_greedy(path, PROMPT, 12)
    assert len(set(first)) >= 3, first
    assert _raw_greedy(path, PROMPT, 12) == first


@pytest.mark.slow
def test_realistic_vocabulary_through_the_engine(big_vocab_models: dict[str, Path]) -> None:
    with Engine.open(big_vocab_models["qwen35"], small_settings(**ONE_THREAD)) as engine:
        assert engine.model_info.n_vocab == 151_936
        key = engine.open_sequence()
        engine.set_chat(key, [{"role": "user", "content": PROMPT}])
        completion = engine.complete(key, SamplingParams(temperature=0, max_tokens=8))
    assert len(set(completion.tokens)) >= 3
