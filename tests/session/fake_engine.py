"""A fake :class:`~app.session.ConversationEngine`: turn logic without llama.cpp.

Each sequence answers a turn with the words of ``FakeEngine.reply``, one per step (every
busy sequence gets one per step, as the real scheduler's continuous batching does); a
prompt "costs" its token count, which the fake takes to be its number of characters, and a
sequence's cache holds the characters of the prompts it answered. Stops take effect at the
next step, as in the real engine. Faults can be set to test the session's error paths.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.engine import (
    Completion,
    ContextSettings,
    Event,
    Finished,
    ModelInfo,
    ModelSettings,
    SamplingParams,
    SequenceFailed,
    TokenText,
)
from app.engine import RestoreOutcome as EngineRestore
from app.engine.context_policy import ContextFullPolicy
from app.engine.reasoning import Channel
from app.errors import LlamaDeskError
from app.session import Capability, ChatMessage, LoadedModel
from app.session.engine_port import (
    ChatPrompt,
    EngineMemory,
    Forked,
    Loaded,
    Progress,
    Prompt,
    Restored,
    SequenceView,
    TextPrompt,
    TokenPrompt,
)

N_CTX = 4096


def fake_info(path: str) -> ModelInfo:
    return ModelInfo(
        path=path,
        size_bytes=1000,
        architecture="fake",
        name="fake",
        n_params=1,
        file_type="F32",
        n_ctx_train=N_CTX,
        n_layer=1,
        n_embd=8,
        n_head=1,
        n_head_kv=1,
        head_dim_k=8,
        head_dim_v=8,
        n_vocab=256,
        tokenizer="fake",
        chat_template=None,
        bos_token="",
        eos_token="",
        bos_token_id=0,
        eos_token_id=1,
        has_encoder=False,
    )


@dataclass
class _Seq:
    tokens: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    policy: ContextFullPolicy | None = None
    words: list[str] = field(default_factory=list)  # still to stream this turn
    busy: bool = False
    completion: Completion = field(default_factory=Completion)


def _render(prompt: Prompt) -> list[int]:
    match prompt:
        case ChatPrompt():
            text = prompt.system + "".join(f"<{m.role}>{m.content}" for m in prompt.messages)
            return [ord(c) % 256 for c in text]
        case TextPrompt():
            return [ord(c) % 256 for c in prompt.text]
        case TokenPrompt():
            return list(prompt.tokens)


class FakeEngine:
    """See the module docstring."""

    def __init__(
        self,
        capabilities: Capability = Capability.ALL,
        reply: tuple[str, ...] = ("Hel", "lo", " there"),
        *,
        endless: bool = False,
    ) -> None:
        self.capabilities = capabilities
        self.reply = reply
        self.endless = endless  # answer "x" until stopped
        self.default_policy = ContextFullPolicy.SHIFT
        self.seqs: dict[int, _Seq] = {}
        self._next_key = 0
        self._lock = threading.Lock()
        self._stops: set[int] = set()
        self.closed = False
        self.fail_start: str | None = None  # start() raises this
        self.fail_step: str | None = None  # the next step() raises this
        self.fail_sequence: str | None = None  # the next step reports a SequenceFailed
        self.side_events: list[Event] = []
        self.calls: list[str] = []  # which protocol methods the session used

    # the protocol ---------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return not self.closed

    @property
    def fingerprint(self) -> str:
        return "fake-fingerprint"

    def describe(self) -> LoadedModel:
        return LoadedModel(
            info=fake_info("/models/fake.gguf"),
            settings=ContextSettings(),
            fingerprint=self.fingerprint,
            model_bytes=1000,
            kv_bytes=0,
            n_ctx=N_CTX,
            n_ctx_seq=N_CTX,
            supports_thinking_toggle=False,
            supports_effort=False,
            engine="fake",
        )

    def memory(self) -> EngineMemory:
        held = sum(len(s.tokens) for s in self.seqs.values())
        return EngineMemory(model_bytes=1000, kv_tokens_held=held, n_ctx=N_CTX)

    def set_default_policy(self, policy: ContextFullPolicy) -> None:
        self.default_policy = policy

    def set_policy(self, key: int, policy: ContextFullPolicy | None) -> None:
        self.seqs[key].policy = policy

    def open(self) -> int:
        self.calls.append("open")
        self._next_key += 1
        self.seqs[self._next_key] = _Seq()
        return self._next_key

    def close(self, key: int) -> None:
        self.calls.append("close")
        del self.seqs[key]

    def cut(self, key: int) -> None:
        self.calls.append("cut")
        seq = self.seqs[key]
        seq.tokens.clear()
        seq.pending.clear()

    def tokens(self, key: int) -> tuple[int, ...]:
        return tuple(self.seqs[key].tokens)

    def holds_anything(self, key: int) -> bool:
        seq = self.seqs[key]
        return bool(seq.tokens or seq.pending)

    def status(self, key: int) -> SequenceView:
        seq = self.seqs[key]
        return SequenceView(
            n_tokens=len(seq.tokens) + len(seq.pending),
            n_ctx=N_CTX,
            resident=True,
            busy=seq.busy,
            generating=seq.busy,
        )

    def is_busy(self, key: int) -> bool:
        return self.seqs[key].busy

    def has_work(self) -> bool:
        return any(s.busy for s in self.seqs.values())

    def start(self, key: int, prompt: Prompt, sampling: SamplingParams) -> int:
        self.calls.append("start")
        if self.fail_start is not None:
            raise LlamaDeskError(self.fail_start)
        seq = self.seqs[key]
        if isinstance(prompt, TextPrompt) and prompt.append:
            wanted = seq.tokens + _render(prompt)
        else:
            wanted = _render(prompt)
        n_cached = 0
        for a, b in zip(seq.tokens, wanted, strict=False):
            if a != b:
                break
            n_cached += 1
        seq.tokens = wanted[:n_cached]
        seq.pending = wanted[n_cached:]
        words = list(self.reply)
        if sampling.max_tokens > 0:
            words = words[: sampling.max_tokens]
        seq.words = words
        seq.completion = Completion(n_prompt=len(wanted), n_prompt_processed=len(seq.pending))
        seq.busy = True
        return len(seq.pending)

    def stop(self, key: int | None) -> None:
        with self._lock:
            self._stops.update(self.seqs if key is None else (key,))

    def step(self) -> list[Event]:
        self.calls.append("step")
        if self.fail_step is not None:
            message, self.fail_step = self.fail_step, None
            raise LlamaDeskError(message)
        with self._lock:
            stops, self._stops = self._stops, set()
        events: list[Event] = []
        for key, seq in self.seqs.items():
            if not seq.busy:
                continue
            if self.fail_sequence is not None:
                events.append(SequenceFailed(key, self.fail_sequence))
                self.fail_sequence = None
                self._finish(key, seq, "error", events)
                continue
            seq.tokens += seq.pending
            seq.pending = []
            if key in stops:
                self._finish(key, seq, "aborted", events)
                continue
            if not seq.words and not self.endless:
                self._finish(key, seq, "length", events)
                continue
            word = "x" if self.endless else seq.words.pop(0)
            token = len(seq.completion.tokens) + 2
            seq.completion.tokens.append(token)
            seq.completion.text += word
            seq.completion.n_sampled += 1
            now = time.perf_counter()
            if not seq.completion.first_token_at:
                seq.completion.first_token_at = now
            seq.completion.last_token_at = now
            events.append(TokenText(key, word, token, Channel.ANSWER))
            if not seq.words and not self.endless:
                self._finish(key, seq, "eog", events)
        return events

    def _finish(self, key: int, seq: _Seq, reason: str, events: list[Event]) -> None:
        seq.busy = False
        seq.completion.finish_reason = reason
        seq.tokens += seq.completion.tokens
        events.append(Finished(key, seq.completion))

    def take_events(self) -> list[Event]:
        events, self.side_events = self.side_events, []
        return events

    def fork(self, key: int, messages: tuple[ChatMessage, ...], system: str) -> Forked:
        self.calls.append("fork")
        wanted = _render(ChatPrompt(messages, system))
        held = self.seqs[key].tokens
        n = 0
        for a, b in zip(wanted, held, strict=False):
            if a != b:
                break
            n += 1
        new = self.open()
        self.seqs[new].tokens = held[:n]
        return Forked(new, n)

    def save(self, key: int) -> bytes:
        self.calls.append("save")
        return bytes(self.seqs[key].tokens)

    def parked_state(self, key: int) -> bytes | None:
        return None

    def restore(self, key: int, data: bytes) -> Restored:
        self.calls.append("restore")
        self.seqs[key].tokens = list(data)
        return Restored(EngineRestore.RESTORED)

    def save_file(self, key: int, path: str) -> int:
        data = self.save(key)
        with open(path, "wb") as f:
            f.write(data)
        return len(data)

    def restore_file(self, key: int, path: str) -> Restored:
        try:
            with open(path, "rb") as f:
                return self.restore(key, f.read())
        except OSError as exc:
            return Restored(EngineRestore.REFUSED, str(exc))

    def reconfigure(self, settings: ContextSettings) -> None:
        self.calls.append("reconfigure")

    def call(self, fn: Callable[[Any], Any]) -> Any:
        return fn(self)

    def shutdown(self) -> None:
        self.closed = True


class FakeLoader:
    """Loads a :class:`FakeEngine` for any path but ``"missing.gguf"``."""

    def __init__(self, engine: FakeEngine | None = None) -> None:
        self.engine = engine if engine is not None else FakeEngine()

    def check(self, path: str) -> None:
        if path.endswith("missing.gguf"):
            raise LlamaDeskError(f"{path} does not exist.")

    def load(
        self,
        path: str,
        settings: ContextSettings,
        progress: Progress,
        fallback: bool,
        *,
        model_settings: ModelSettings | None = None,
    ) -> Loaded:
        progress(1.0)
        self.engine.closed = False
        return Loaded(self.engine)
