"""Two conversations generating at once get tokens at the same rate, whatever the lengths of
their replies; a long prompt started meanwhile is processed in chunks between the other's
tokens, not in one stall (issue 14, item 6). The real engine on the session thread."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine import ContextSettings, SamplingParams
from app.engine.scheduler import PROMPT_TOKENS_WHILE_GENERATING
from app.session import ChatMessage, Session, TurnResult
from app.session import events as ev
from tests.session.test_session import ENDLESS, Recorder
from tests.support.gguf_models import TinySpec, write_tiny_model

CONTEXT = ContextSettings(
    n_ctx=2048, n_batch=512, n_ubatch=512, n_seq_max=4, n_threads=1, n_threads_batch=1
)


@pytest.fixture(scope="module")
def weighty_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 60 MB of weights: a step takes milliseconds, as a real model's does, so the
    machine's jitter is small beside it (the tiny model's steps take microseconds)."""
    spec = TinySpec(n_embd=512, n_head=8, n_head_kv=2, n_layer=6, n_ff=1024)
    return write_tiny_model(tmp_path_factory.mktemp("models") / "weighty.gguf", spec)


@pytest.fixture
def session(weighty_model: Path) -> Iterator[tuple[Session, Recorder]]:
    # Every step's text handed out at once: the test sees each token when it was sampled.
    session = Session(None, None, stream_interval_s=0.0)
    recorder = Recorder(session)
    session.load_model(str(weighty_model), CONTEXT)
    recorder.wait(lambda: bool(recorder.session_of(ev.ModelLoaded)))
    yield session, recorder
    session.shutdown()
    assert session.join(10.0)


def _endless(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0.8, seed=3, max_tokens=max_tokens, grammar=ENDLESS)


def test_short_replies_beside_a_long_one_get_the_same_rate(
    session: tuple[Session, Recorder],
) -> None:
    """The issue's case: one-line replies in one tab while the other writes a long one."""
    s, rec = session
    shorts: list[TurnResult] = []
    sampled: dict[int, list[tuple[float, int]]] = {1: [], 2: []}  # (when, tokens) per step
    short_spans: list[tuple[int, int]] = []  # each short reply's slice of sampled[1]

    def on_event(event: ev.ConversationEvent) -> None:
        # Runs on the session thread: the next short reply is queued at once.
        if isinstance(event, ev.TextStreamed):
            sampled[event.conversation_id].append((event.sampled_at, event.n_tokens))
        elif isinstance(event, ev.TurnFinished) and event.conversation_id == 1:
            start = short_spans[-1][1] if short_spans else 0
            short_spans.append((start, len(sampled[1])))
            shorts.append(event.result)
            if len(shorts) < 3:
                s.submit(1, [ChatMessage("user", f"one line {len(shorts)}")], sampling=_endless(16))
            else:
                s.stop(2)  # the long reply is not measured alone

    rec.follow(1)
    rec.follow(2)
    s.subscribe(1, on_event)
    s.subscribe(2, on_event)
    with s.batch():  # both start in the same step
        s.submit(1, [ChatMessage("user", "one line 0")], sampling=_endless(16))
        s.submit(2, [ChatMessage("user", "now a long story")], sampling=_endless(1000))
    long = rec.finish(2)
    rec.wait(lambda: len(shorts) == 3)
    assert all(r.n_tokens == 16 and r.n_sampled == 16 and r.stream_ms > 0 for r in shorts)
    assert long.n_tokens >= 3 * 15  # it wrote all along
    for short, (lo, hi) in zip(shorts, short_spans, strict=True):
        # The rate counts from the first token on: neither the prompt nor the wait before
        # the first token (``prompt_ms``) lowers a short reply's figure.
        assert short.tokens_per_second == pytest.approx(15 / (short.stream_ms / 1000.0))
        # While both write, the long reply gets its tokens at the short one's rate: one a
        # step each (the steps that read the next short prompt are outside this window).
        first, last = sampled[1][lo][0], sampled[1][hi - 1][0]
        beside = [n for t, n in sampled[2] if first <= t <= last]
        long_rate = (sum(beside) - beside[0]) / (last - first)
        ratio = short.tokens_per_second / long_rate
        assert 0.8 <= ratio <= 1.2, (short.tokens_per_second, long_rate)


def test_a_long_prompt_is_interleaved_with_the_other_conversations_tokens(
    session: tuple[Session, Recorder],
) -> None:
    s, rec = session
    arrivals: list[tuple[str, float, int]] = []  # (what, when, tokens or prompt done)

    def on_event(event: ev.ConversationEvent) -> None:
        if isinstance(event, ev.TextStreamed) and event.conversation_id == 1:
            arrivals.append(("token", time.perf_counter(), event.n_tokens))
        elif isinstance(event, ev.PromptProgressed) and event.conversation_id == 2:
            arrivals.append(("prompt", time.perf_counter(), event.done))

    for cid in (1, 2):
        rec.follow(cid)
        s.subscribe(cid, on_event)
    s.submit(1, [ChatMessage("user", "keep talking")], sampling=_endless(400))
    rec.wait(lambda: sum(1 for a in arrivals if a[0] == "token") >= 5)
    long_prompt = " ".join(["hello world this is a tab with a llama"] * 60)
    s.submit(2, [ChatMessage("user", long_prompt)], sampling=_endless(4))
    second = rec.finish(2)
    s.stop(1)
    rec.finish(1)
    assert second.n_prompt_processed > 4 * PROMPT_TOKENS_WHILE_GENERATING
    prompt_steps = [i for i, a in enumerate(arrivals) if a[0] == "prompt"]
    # Processed in chunks no larger than the cap while the other generates ...
    done = [arrivals[i][2] for i in prompt_steps]
    chunks = [b - a for a, b in zip([0, *done], done, strict=False)]
    assert len(chunks) >= second.n_prompt_processed // PROMPT_TOKENS_WHILE_GENERATING
    assert max(chunks) <= PROMPT_TOKENS_WHILE_GENERATING
    # ... and between two chunks the generating conversation got its token.
    for before, after in itertools.pairwise(prompt_steps):
        tokens = [a for a in arrivals[before:after] if a[0] == "token"]
        assert tokens, "the generating conversation waited for the whole prompt"
