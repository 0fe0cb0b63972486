"""Pure-Python parts: UTF-8 streaming, stop strings, settings validation and estimates."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.engine import ContextError, ContextSettings, SamplingParams
from app.engine.metadata import ModelInfo
from app.engine.text import StopMatcher, Utf8Stream


@given(st.text(), st.lists(st.integers(min_value=1, max_value=7), max_size=50))
def test_utf8_stream_emits_whole_characters(text: str, cuts: list[int]) -> None:
    data = text.encode("utf-8")
    stream = Utf8Stream()
    out, i = [], 0
    for cut in cuts:
        out.append(stream.feed(data[i : i + cut]))
        i += cut
    out.append(stream.feed(data[i:]))
    out.append(stream.flush())
    assert "".join(out) == text
    assert "\ufffd" not in "".join(out[:-1]) or "\ufffd" in text


def test_utf8_stream_holds_a_split_emoji() -> None:
    stream = Utf8Stream()
    llama = "🦙".encode()
    assert stream.feed(llama[:2]) == ""
    assert stream.feed(llama[2:]) == "🦙"


@given(st.text(min_size=0, max_size=40), st.integers(min_value=1, max_value=5))
def test_stop_string_spanning_pieces(prefix: str, piece: int) -> None:
    stop = "<|end|>"
    text = prefix.replace("<", "") + stop + "after"
    matcher = StopMatcher([stop])
    shown = ""
    for i in range(0, len(text), piece):
        shown += matcher.feed(text[i : i + piece])
        if matcher.stopped:
            break
    assert matcher.stopped == stop
    assert shown == prefix.replace("<", "")


def test_stop_matcher_releases_false_alarm() -> None:
    matcher = StopMatcher(["STOP"])
    assert matcher.feed("ST") == ""
    assert matcher.feed("AR") == "STAR"
    assert matcher.feed("S") == ""
    assert matcher.flush() == "S"
    assert matcher.stopped is None


def _info(head_dim: int = 64, n_ctx_train: int = 4096) -> ModelInfo:
    return ModelInfo(
        path="m.gguf",
        size_bytes=1,
        architecture="llama",
        name="m",
        n_params=1,
        file_type="Q4_0",
        n_ctx_train=n_ctx_train,
        n_layer=22,
        n_embd=2048,
        n_head=32,
        n_head_kv=4,
        head_dim_k=head_dim,
        head_dim_v=head_dim,
        n_vocab=32000,
        tokenizer="llama",
        chat_template=None,
        bos_token="<s>",
        eos_token="</s>",
        bos_token_id=1,
        eos_token_id=2,
        has_encoder=False,
    )


def test_kv_estimate_matches_the_formula() -> None:
    info = _info()
    s = ContextSettings(n_ctx=2048)
    # n_layer x 2 (K and V) x n_head_kv x head_dim x 2 bytes (f16)
    assert s.kv_bytes(info) == 22 * 2 * 4 * 64 * 2 * 2048
    q8 = ContextSettings(n_ctx=2048, type_k="q8_0", type_v="q8_0")
    assert q8.kv_bytes(info) == pytest.approx(22 * 2 * 4 * 64 * (34 / 32) * 2048)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"n_ubatch": 1024, "n_batch": 512}, "cannot exceed the batch size"),
        ({"n_seq_max": 0}, r"Resident tabs \(n_seq_max\)"),
        ({"n_seq_max": 1000}, "between 1 and 256"),
        ({"n_ctx": 10}, "at least 64"),
        ({"n_threads": 0}, r"\(n_threads\) must be between 1 and 512"),
        ({"type_k": "q3"}, r"K cache type \(type_k\) must be one of"),
        ({"type_v": "q8_0", "flash_attn": "off"}, "needs flash attention"),
        ({"flash_attn": "maybe"}, "Flash attention"),
        ({"rope_freq_scale": -1.0}, "rope_freq_scale"),
        ({"n_batch": 1.5}, "whole number"),
        ({"kv_unified": False, "n_ctx": 256, "n_seq_max": 8}, "split cache"),
    ],
)
def test_invalid_settings_are_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ContextError, match=message):
        ContextSettings(**changes).validate()  # type: ignore[arg-type]


def test_quantized_cache_needs_a_fitting_head_size() -> None:
    with pytest.raises(ContextError, match="divisible by 32"):
        ContextSettings(type_k="q8_0").validate(_info(head_dim=16))
    ContextSettings(type_k="q8_0").validate(_info(head_dim=64))


def test_live_and_rebuild_changes() -> None:
    base = ContextSettings(n_threads=2, n_threads_batch=2)
    assert not base.needs_rebuild(ContextSettings(n_threads=4, n_threads_batch=1))
    assert base.needs_rebuild(ContextSettings(n_threads=2, n_threads_batch=2, n_ctx=8192))
    assert ContextSettings.from_dict({**base.to_dict(), "unknown": 1}) == base


@pytest.mark.parametrize(
    "changes",
    [
        {"temperature": -1},
        {"top_p": 2},
        {"min_p": -0.1},
        {"repeat_penalty": 0},
        {"max_tokens": 0},
        {"seed": -5},
        {"stop": [""]},
    ],
)
def test_invalid_sampling_is_refused(changes: dict[str, object]) -> None:
    with pytest.raises(ContextError):
        SamplingParams(**changes).validate()  # type: ignore[arg-type]


def test_context_never_exceeds_training_length_without_rope_scaling() -> None:
    info = _info(n_ctx_train=2048)
    assert ContextSettings(n_ctx=8192).effective_n_ctx(info) == 2048
    assert ContextSettings(n_ctx=0).effective_n_ctx(info) == 2048
    assert ContextSettings(n_ctx=1024).effective_n_ctx(info) == 1024
    assert ContextSettings(n_ctx=8192, rope_scaling_type="yarn").effective_n_ctx(info) == 8192
    assert ContextSettings(n_ctx=8192).kv_bytes(info) == ContextSettings(n_ctx=2048).kv_bytes(info)
