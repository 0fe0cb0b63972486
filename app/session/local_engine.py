"""llama.cpp in this process as a :class:`~app.session.engine_port.ConversationEngine`.

:class:`LocalEngine` adapts :class:`app.engine.Engine` (one model, one context, many
sequences) to the session's protocol; it can do everything (``Capability.ALL``).
:class:`LocalLoader` loads one, falling back to the default context settings when the
saved ones do not suit the model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from app import crash_record
from app.engine import ContextSettings, SamplingParams, read_model_info
from app.engine import Event as EngineEvent
from app.engine import RestoreOutcome as EngineRestore
from app.engine.context_policy import ContextFullPolicy
from app.engine.prefix import common_prefix
from app.engine.settings import ModelSettings
from app.engine.tool_calls.specs import ToolSpec
from app.errors import LlamaDeskError
from app.session.engine_port import (
    Capability,
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
from app.session.types import ChatMessage, LoadedModel

if TYPE_CHECKING:
    from app.engine import Engine

log = logging.getLogger(__name__)

T = TypeVar("T")

ENGINE_NAME = "llama.cpp"


class LocalEngine:
    """See the module docstring."""

    capabilities = Capability.ALL

    def __init__(self, engine: Engine, crash_model: str = "") -> None:
        self.engine = engine
        self.crash_model = crash_model  # the path its crash record names (app.crash_record)
        # The tools each sequence's last chat turn listed: a fork renders them too, so its
        # point falls where the cache's text does.
        self._tools: dict[int, tuple[ToolSpec, ...]] = {}

    @property
    def ready(self) -> bool:
        return self.engine.context is not None

    @property
    def fingerprint(self) -> str:
        return self.engine.model_fingerprint

    def describe(self) -> LoadedModel:
        engine = self.engine
        model = engine.model
        assert model is not None
        memory = engine.memory()
        template = engine.template
        return LoadedModel(
            info=engine.model_info,
            settings=engine.settings,
            fingerprint=engine.model_fingerprint,
            model_bytes=model.size_bytes,
            kv_bytes=int(memory["kv_bytes"]),
            n_ctx=int(memory["n_ctx"]),
            n_ctx_seq=engine.n_ctx_seq,
            supports_thinking_toggle=bool(getattr(template, "supports_thinking_toggle", False)),
            supports_effort=bool(getattr(template, "supports_effort", False)),
            engine=ENGINE_NAME,
            chat_template=engine.template_choice,
            batching=engine.batching,
            reasoning=engine.reasoning_defaults,
            notice=model.load_notice,
        )

    def memory(self) -> EngineMemory:
        memory = self.engine.memory()
        return EngineMemory(
            model_bytes=int(memory.get("model_bytes", 0)),
            kv_bytes=int(memory.get("kv_bytes", 0)),
            kv_tokens_held=int(memory.get("kv_tokens_held", 0)),
            n_ctx=int(memory.get("n_ctx", 0)),
        )

    def set_default_policy(self, policy: ContextFullPolicy) -> None:
        self.engine.context_full_policy = policy

    def set_policy(self, key: int, policy: ContextFullPolicy | None) -> None:
        self.engine.set_policy(key, policy)

    # ---------------------------------------------------------------- conversations

    def open(self) -> int:
        return self.engine.open_sequence()

    def close(self, key: int) -> None:
        self._tools.pop(key, None)
        self.engine.close_sequence(key)

    def cut(self, key: int) -> None:
        self.engine.clear_sequence(key)

    def tokens(self, key: int) -> tuple[int, ...]:
        return tuple(self.engine.tokens(key))

    def holds_anything(self, key: int) -> bool:
        return bool(self.engine.tokens(key) or self.engine.pending_tokens(key))

    def status(self, key: int) -> SequenceView:
        info = self.engine.info(key)
        return SequenceView(
            n_tokens=info.n_tokens,
            n_ctx=info.n_ctx,
            resident=info.resident,
            busy=info.busy,
            generating=info.generating,
            n_reserved=info.n_reserved,
            n_dropped=info.n_dropped,
        )

    def is_busy(self, key: int) -> bool:
        return self.engine.is_busy(key)

    def has_work(self) -> bool:
        return self.engine.has_work()

    # ---------------------------------------------------------------- turns

    def start(self, key: int, prompt: Prompt, sampling: SamplingParams) -> int:
        engine = self.engine
        match prompt:
            case ChatPrompt():
                self._tools[key] = prompt.tools.tools if prompt.tools is not None else ()
                n = engine.set_chat(
                    key,
                    [m.to_engine() for m in prompt.messages],
                    system=prompt.system or None,
                    reserve=sampling.max_tokens if sampling.max_tokens > 0 else None,
                    reasoning=prompt.reasoning,
                    tools=prompt.tools,
                )
            case TextPrompt(append=False):
                n = engine.set_prompt(key, prompt.text, raw=True)
            case TextPrompt():
                if prompt.text:
                    engine.append_text(key, prompt.text)
                n = len(engine.pending_tokens(key))
            case TokenPrompt():
                n = engine.set_tokens(key, list(prompt.tokens))
        engine.start(key, sampling)
        return n

    def stop(self, key: int | None) -> None:
        self.engine.stop(key)

    def step(self) -> list[EngineEvent]:
        return self.engine.step()

    def take_events(self) -> list[EngineEvent]:
        return self.engine.take_events()

    def fork(self, key: int, messages: tuple[ChatMessage, ...], system: str) -> Forked:
        n = self._fork_point(key, messages, system)
        return Forked(self.engine.fork(key, n), n)

    def _fork_point(self, key: int, messages: tuple[ChatMessage, ...], system: str) -> int:
        """How many of the source's cached tokens are the fork's messages (a message
        boundary): the rendered history's common prefix with what the cache holds."""
        engine = self.engine
        history = [m.to_engine() for m in messages if m.role != "system"]
        if system:
            history.insert(0, {"role": "system", "content": system})
        template = engine.template
        tools = self._tools.get(key, ())
        if template is not None and tools:
            text = template.render(history, add_generation_prompt=False, tool_specs=tools)
        else:
            text = engine.render_chat(history, add_generation_prompt=False)
        wanted = engine.tokenize(text, add_special=True, parse_special=True)
        return common_prefix(wanted, engine.tokens(key))

    # ---------------------------------------------------------------- states

    def save(self, key: int) -> bytes:
        return self.engine.save_state(key)

    def parked_state(self, key: int) -> bytes | None:
        return self.engine.parked_state(key)

    def restore(self, key: int, data: bytes) -> Restored:
        return self._restored(lambda: self.engine.restore_state_outcome(key, data))

    def save_file(self, key: int, path: str) -> int:
        return self.engine.save_state_file(key, path)

    def restore_file(self, key: int, path: str) -> Restored:
        return self._restored(lambda: self.engine.restore_state_file_outcome(key, path))

    def _restored(self, restore: Callable[[], EngineRestore]) -> Restored:
        try:
            outcome = restore()
        except LlamaDeskError as exc:
            return Restored(EngineRestore.REFUSED, str(exc))
        return Restored(outcome, self.engine.last_restore_error)

    # ---------------------------------------------------------------- the whole engine

    def reconfigure(self, settings: ContextSettings) -> None:
        self.engine.reconfigure(settings)

    def call(self, fn: Callable[[Engine], T]) -> T:
        return fn(self.engine)

    def shutdown(self) -> None:
        self.engine.close()
        crash_record.clear(self.crash_model)


class LocalLoader:
    """Loads GGUF files into a :class:`LocalEngine`."""

    def check(self, path: str) -> None:
        read_model_info(path)

    def load(
        self,
        path: str,
        settings: ContextSettings,
        progress: Progress,
        fallback: bool,
        *,
        model_settings: ModelSettings | None = None,
    ) -> Loaded:
        from app.engine import Engine  # loads llama.cpp: only when a model is

        engine = Engine()
        warning: str | None = None
        try:
            # What a crash in llama.cpp was doing, said after it (app.crash_record).
            crash_record.mark(crash_record.Phase.LOADING, path)
            engine.load_model(path, model_settings, progress=progress)
            # The context's first decodes (its batching measure) come next.
            crash_record.mark(crash_record.Phase.DECODING, path)
            try:
                engine.create_context(settings)
            except LlamaDeskError as exc:
                if not fallback:
                    raise
                # The saved settings do not suit this model: fall back to the defaults.
                engine.create_context(
                    ContextSettings(
                        n_threads=settings.n_threads, n_threads_batch=settings.n_threads_batch
                    )
                )
                warning = f"{exc} LlamaDesk used the default context settings instead."
        except BaseException:
            engine.close()
            crash_record.clear(path)
            raise
        notice = engine.model.load_notice if engine.model is not None else ""
        if notice:  # the slower path was chosen: the window and `run` show the warning
            warning = f"{notice} {warning}" if warning else notice
        return Loaded(LocalEngine(engine, path), warning)
