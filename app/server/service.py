"""The endpoints, independent of HTTP: requests in, response objects or streams out.

One :class:`ApiService` is a client of one :class:`~app.session.Session`:
generation goes through the session's conversations (so API requests and the window's tabs
share the one batched engine step); tokenizing, templates and embeddings run on the
session thread through :meth:`Session.call`.
"""

from __future__ import annotations

import base64
import logging
import queue
import threading
import time
import uuid
from array import array
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app import __version__
from app.engine import Engine, SamplingParams
from app.engine.reasoning import Channel
from app.errors import LlamaDeskError
from app.server.config import ServerConfig
from app.server.errors import ApiError, bad_request, server_error, unavailable
from app.server.params import (
    ChatRequest,
    CompletionRequest,
    GenerationRequest,
    expect_object,
    get_bool,
    get_str,
    parse_chat,
)
from app.server.pool import ApiConversation, ConversationPool
from app.server.slots import SlotActions
from app.server.store import ConversationStore
from app.session import ChatMessage, FinishReason, LoadedModel, NoModelError, Session, TurnResult
from app.session import events as ev
from app.settings_schema import api_parameters

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 60.0
STOP_WAIT_S = 10.0
MAX_EMBED_INPUTS = 2048
MAX_TOKENS_IN = 1 << 20
LOG_SIZE = 500

Gone = Callable[[], bool]


class ClientGone(Exception):
    """The client closed its connection."""


@dataclass(frozen=True)
class Piece:
    text: str
    channel: Channel


@dataclass(frozen=True)
class Done:
    result: TurnResult
    conversation: str | None


@dataclass(frozen=True)
class Failed:
    error: ApiError


Item = Piece | Done | Failed


@dataclass(frozen=True)
class RequestRecord:
    """One generation request, for a live request log (``ApiService.subscribe_log``)."""

    at: float  # time.time() at the end
    client: str
    endpoint: str
    conversation: str | None
    status: int  # HTTP status; 499: the client went away
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    tokens_per_second: float = 0.0
    seconds: float = 0.0
    finish_reason: str | None = None
    error: str | None = None


def finish_reason(reason: FinishReason) -> str:
    if reason in (FinishReason.LENGTH, FinishReason.CONTEXT_FULL):
        return "length"
    return "stop"


class Admission:
    """At most ``slots`` requests generating and ``queue`` waiting; 503 beyond."""

    def __init__(self, slots: int, queue_size: int) -> None:
        self.slots = slots
        self.queue_size = queue_size
        self._sem = threading.Semaphore(slots)
        self._lock = threading.Lock()
        self.active = 0
        self.waiting = 0

    def enter(self, gone: Gone) -> None:
        with self._lock:
            if self.active + self.waiting >= self.slots + self.queue_size:
                raise unavailable(
                    f"The server is busy: {self.active} requests are generating and "
                    f"{self.waiting} are waiting (at most {self.queue_size}). Retry shortly.",
                    "server_busy",
                )
            self.waiting += 1
        try:
            while not self._sem.acquire(timeout=0.05):
                if gone():
                    raise ClientGone
        finally:
            with self._lock:
                self.waiting -= 1
        with self._lock:
            self.active += 1

    def leave(self) -> None:
        with self._lock:
            self.active -= 1
        self._sem.release()


class ApiService:
    def __init__(
        self,
        session: Session,
        config: ServerConfig,
        store: ConversationStore | None,
        *,
        model: LoadedModel | None = None,
        attached: bool = False,
        in_use_elsewhere: Callable[[int], bool] | None = None,
        slots_dir: Path | None = None,
    ) -> None:
        """``model``: the model the session already holds (a service attached to a running
        session learns no ``ModelLoaded`` for it); ``attached``: the session is someone
        else's (the window's), which loads models itself, so no model means "load one",
        not "loading"; ``in_use_elsewhere(storage id)``: True
        while a window tab has that conversation open (its requests get a 409; called on
        request threads); ``slots_dir``: where ``/slots`` save and restore files go."""
        self.session = session
        self.config = config
        self.store = store
        self.loaded: LoadedModel | None = None
        self.load_error: str | None = None
        self.model_event = threading.Event()
        self.created = int(time.time())
        self.admission = Admission(config.parallel, config.max_queue)
        self.pool = ConversationPool(session, store, config.resident, in_use_elsewhere)
        self.slot_actions = SlotActions(session, self.pool, slots_dir)
        self.log: deque[RequestRecord] = deque(maxlen=LOG_SIZE)
        self._log_listeners: list[Callable[[RequestRecord], None]] = []
        self._attached = False  # attached to a window's session (not loading a model itself)
        if attached or model is not None:
            self.attach(model)
        # Subscribed after attach: a ModelLoaded/ModelUnloaded that follows wins.
        self._unsubscribe = session.subscribe_session(self._on_session)

    def attach(self, model: LoadedModel | None) -> None:
        """The model the session holds now (None: none)."""
        self._attached = True
        self.loaded = model
        if model is not None:
            self.load_error = None
            self.model_event.set()

    def subscribe_log(self, callback: Callable[[RequestRecord], None]) -> Callable[[], None]:
        """Call ``callback`` (on a request thread) with each finished request's record."""
        self._log_listeners.append(callback)
        return lambda: self._log_listeners.remove(callback)

    def _log(self, record: RequestRecord) -> None:
        self.log.append(record)
        for callback in list(self._log_listeners):
            try:
                callback(record)
            except Exception:
                log.exception("a request log listener failed")

    # ---------------------------------------------------------------- model

    def _on_session(self, event: ev.SessionEvent) -> None:
        if isinstance(event, ev.ModelLoaded | ev.Reconfigured):
            self.loaded = event.model
            self.load_error = None
            self.model_event.set()
        elif isinstance(event, ev.ModelLoadFailed):
            self.load_error = event.message
            self.model_event.set()
        elif isinstance(event, ev.ModelUnloaded):
            self.loaded = None

    def wait_loaded(self, timeout: float | None = None) -> LoadedModel:
        self.model_event.wait(timeout)
        if self.loaded is None:
            raise LlamaDeskError(self.load_error or "The model did not load in time.")
        return self.loaded

    @property
    def model_id(self) -> str:
        if self.config.model_alias:
            return self.config.model_alias
        return Path(self.loaded.path).stem if self.loaded is not None else ""

    def model(self, name: str | None = None) -> LoadedModel:
        model = self.loaded
        if model is None:
            if self.load_error:
                raise server_error(f"The model could not be loaded: {self.load_error}")
            if self._attached:
                raise unavailable(
                    "No model is loaded in LlamaDesk: load one in the window, then retry.",
                    "no_model",
                )
            raise unavailable("The model is still loading; retry in a moment.", "loading")
        if name is not None:
            path = Path(model.path)
            if name not in (self.model_id, path.name, path.stem, str(path)):
                raise ApiError(
                    404,
                    f"The model {name!r} does not exist here; this server serves "
                    f"{self.model_id!r} (GET /v1/models).",
                    param="model",
                    code="model_not_found",
                )
        return model

    def _call(self, fn: Callable[[Engine], Any]) -> Any:
        try:
            return self.session.call(fn).result(CALL_TIMEOUT_S)
        except ApiError:
            raise
        except NoModelError as exc:
            raise unavailable(str(exc), "loading") from None
        except TimeoutError:
            raise unavailable("The engine did not answer in time; retry.", "timeout") from None
        except LlamaDeskError as exc:
            raise bad_request(str(exc)) from None

    # ---------------------------------------------------------------- simple endpoints

    def health(self) -> tuple[int, dict[str, Any]]:
        if self.loaded is not None:
            return 200, {"status": "ok"}
        if self.load_error:
            return 500, {"status": "error", "error": {"code": 500, "message": self.load_error}}
        return 503, {
            "error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}
        }

    def models(self) -> dict[str, Any]:
        model = self.model()
        return {"object": "list", "data": [self._model_entry(model)]}

    def model_info(self, name: str) -> dict[str, Any]:
        return self._model_entry(self.model(name))

    def _model_entry(self, model: LoadedModel) -> dict[str, Any]:
        return {
            "id": self.model_id,
            "object": "model",
            "created": self.created,
            "owned_by": "llamadesk",
            "meta": {
                "path": model.path,
                "n_ctx": model.n_ctx,
                "n_ctx_seq": model.n_ctx_seq,
                "n_ctx_train": model.info.n_ctx_train,
                "n_params": model.info.n_params,
                "n_vocab": model.info.n_vocab,
                "size": model.model_bytes,
            },
        }

    def props(self) -> dict[str, Any]:
        model = self.model()
        return {
            "default_generation_settings": {
                "n_ctx": model.n_ctx_seq,
                "params": SamplingParams().to_dict(),
            },
            "total_slots": self.config.parallel,
            "model_path": str(Path(model.path).absolute()),
            "model_alias": self.model_id,
            "chat_template": model.info.chat_template or "",
            "modalities": {"vision": False, "audio": False},
            "embeddings": model.settings.embeddings,
            "build_info": f"LlamaDesk {__version__}",
            "api_parameters": api_parameters(),
        }

    def slots(self) -> list[dict[str, Any]]:
        model = self.model()
        return [
            {
                "id": i,
                "conversation": conv.name,
                "conversation_id": conv.cid,
                "is_processing": conv.busy,
                "resident": conv.open,
                "n_ctx": model.n_ctx_seq,
                "n_prompt_tokens": len(conv.tokens),
                "last_finish_reason": conv.last_finish,
            }
            for i, conv in enumerate(self.pool.conversations())
        ]

    def slot_action(self, index: int, action: str | None, body: Any) -> dict[str, Any]:
        self.model()
        return self.slot_actions.run(index, action, body)

    def tokenize(self, body: Any) -> dict[str, Any]:
        body = expect_object(body)
        content = get_str(body, "content")
        if content is None:
            raise bad_request("'content' (the text to tokenize) is required.", "content")
        add_special = get_bool(body, "add_special", False)
        parse_special = get_bool(body, "parse_special", True)
        with_pieces = get_bool(body, "with_pieces", False)
        self.model()

        def work(engine: Engine) -> list[Any]:
            tokens = engine.tokenize(content, add_special=add_special, parse_special=parse_special)
            if not with_pieces:
                return list(tokens)
            return [{"id": t, "piece": engine.detokenize([t], special=True)} for t in tokens]

        return {"tokens": self._call(work)}

    def _checked_tokens(self, value: Any, param: str) -> list[int]:
        model = self.model()
        if not isinstance(value, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in value
        ):
            raise bad_request(f"'{param}' must be an array of token ids.", param)
        if len(value) > MAX_TOKENS_IN:
            raise bad_request(f"'{param}' holds too many tokens.", param)
        n_vocab = model.info.n_vocab
        bad = next((t for t in value if not 0 <= t < n_vocab), None)
        if bad is not None:
            raise bad_request(
                f"Token id {bad} is not in the vocabulary (0 to {n_vocab - 1}).", param
            )
        return list(value)

    def detokenize(self, body: Any) -> dict[str, Any]:
        body = expect_object(body)
        tokens = self._checked_tokens(body.get("tokens"), "tokens")
        return {"content": self._call(lambda e: e.detokenize(tokens, special=True))}

    def apply_template(self, body: Any) -> dict[str, Any]:
        req = parse_chat(body)
        self.model()
        return {"prompt": self._call(lambda e: _render(e, req))}

    def embeddings(self, body: Any, gone: Gone) -> dict[str, Any]:
        body = expect_object(body)
        model = self.model(get_str(body, "model"))
        if not model.settings.embeddings:
            raise bad_request(
                "This server's context does not compute embeddings: start it with "
                "`llamadesk serve --embeddings` (a context for embeddings).",
                "input",
                "embeddings_disabled",
            )
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise bad_request("'input' must be a string or a non-empty array of strings.", "input")
        if len(texts) > MAX_EMBED_INPUTS:
            raise bad_request(f"At most {MAX_EMBED_INPUTS} inputs per request.", "input")
        if any(not t for t in texts):
            raise bad_request("An input is empty.", "input")
        fmt = get_str(body, "encoding_format") or "float"
        if fmt not in ("float", "base64"):
            raise bad_request("'encoding_format' must be float or base64.", "encoding_format")
        n_ctx = model.n_ctx_seq

        def work(engine: Engine) -> tuple[list[list[float]], int]:
            counts = [len(engine.tokenize(t, add_special=True, parse_special=False)) for t in texts]
            longest = max(counts)
            if longest > n_ctx:
                raise ApiError(
                    400,
                    f"An input has {longest} tokens; the context holds {n_ctx}.",
                    param="input",
                    code="context_length_exceeded",
                )
            if engine.has_work():
                raise unavailable(
                    "Embeddings are computed between generations and the model is generating; "
                    "retry shortly.",
                    "busy",
                )
            vectors = engine.embed(list(texts), normalize=True)
            return [[float(x) for x in v] for v in vectors], sum(counts)

        self.admission.enter(gone)
        try:
            vectors, n_tokens = self._call(work)
        finally:
            self.admission.leave()
        data = []
        for i, vector in enumerate(vectors):
            embedding: Any = vector
            if fmt == "base64":
                embedding = base64.b64encode(array("f", vector).tobytes()).decode("ascii")
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        return {
            "object": "list",
            "data": data,
            "model": self.model_id,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        }

    # ---------------------------------------------------------------- generation

    def _prompt_tokens(self, req: GenerationRequest) -> tuple[int, ...]:
        if isinstance(req, ChatRequest):
            return self._call(lambda e: tuple(_tokenize_chat(e, req)))
        assert isinstance(req, CompletionRequest)
        if req.prompt_tokens is not None:
            return tuple(self._checked_tokens(list(req.prompt_tokens), "prompt"))
        text = req.prompt or ""
        return self._call(lambda e: tuple(e.tokenize(text, add_special=True, parse_special=True)))

    def generate(
        self, req: GenerationRequest, gone: Gone, client: str = "", endpoint: str = ""
    ) -> Iterator[Item]:
        """The reply to ``req``: its pieces then :class:`Done` (or :class:`Failed` after
        the first piece). Errors before anything was generated are raised (ApiError).
        Closing the iterator early (a client gone) stops the turn and waits for its end."""
        t0 = time.monotonic()
        outcome: dict[str, Any] = {"status": 200}
        try:
            yield from self._generate(req, gone, outcome)
        except ApiError as exc:
            outcome.update(status=exc.status, error=exc.message)
            raise
        except (ClientGone, GeneratorExit):
            outcome["status"] = 499
            raise
        except Exception as exc:
            outcome.update(status=500, error=str(exc))
            raise
        finally:
            result: TurnResult | None = outcome.get("result")
            self._log(
                RequestRecord(
                    at=time.time(),
                    client=client,
                    endpoint=endpoint,
                    conversation=req.conversation,
                    status=outcome["status"],
                    prompt_tokens=result.n_prompt if result else 0,
                    cached_tokens=max(0, result.n_prompt - result.n_prompt_processed)
                    if result
                    else 0,
                    completion_tokens=result.n_tokens if result else 0,
                    tokens_per_second=result.tokens_per_second if result else 0.0,
                    seconds=time.monotonic() - t0,
                    finish_reason=finish_reason(result.finish_reason) if result else None,
                    error=outcome.get("error"),
                )
            )

    def _generate(
        self, req: GenerationRequest, gone: Gone, outcome: dict[str, Any]
    ) -> Iterator[Item]:
        model = self.model(req.model)
        self.admission.enter(gone)
        conv: ApiConversation | None = None
        finished = False
        tokens: tuple[int, ...] | None = None
        try:
            tokens = self._prompt_tokens(req)
            n_ctx = model.n_ctx_seq
            n_prompt = len(tokens)
            if n_prompt >= n_ctx:
                raise ApiError(
                    400,
                    f"The prompt has {n_prompt} tokens; this server's context holds {n_ctx} "
                    "per request. Shorten the prompt.",
                    param="messages" if isinstance(req, ChatRequest) else "prompt",
                    code="context_length_exceeded",
                )
            max_tokens = req.sampling.max_tokens
            if req.max_tokens_given and n_prompt + max_tokens > n_ctx:
                raise ApiError(
                    400,
                    f"The context holds {n_ctx} tokens; the request asks for {n_prompt + max_tokens} "
                    f"({n_prompt} in the prompt, {max_tokens} to generate). Lower max_tokens.",
                    param="max_tokens",
                    code="context_length_exceeded",
                )
            conv, _ = self.pool.acquire(req.conversation, tokens)
            events: queue.SimpleQueue[ev.ConversationEvent] = queue.SimpleQueue()
            conv.sink = events.put
            if isinstance(req, ChatRequest):
                turn = self.session.submit(
                    conv.cid, req.messages, req.system, req.sampling, req.reasoning
                )
            else:
                turn = self.session.submit_tokens(conv.cid, tokens, req.sampling)
            started = False
            deadline = time.monotonic() + self.config.turn_timeout_s
            answer: list[str] = []
            reasoning: list[str] = []
            while True:
                try:
                    event = events.get(timeout=0.02)
                except queue.Empty:
                    if gone():
                        raise ClientGone from None
                    if time.monotonic() > deadline:
                        raise server_error("The reply took too long and was stopped.") from None
                    continue
                if getattr(event, "turn_id", turn) != turn:
                    continue
                if isinstance(event, ev.TurnStarted):
                    started = True
                elif isinstance(event, ev.TextStreamed):
                    (answer if event.channel is Channel.ANSWER else reasoning).append(event.text)
                    yield Piece(event.text, event.channel)
                    if gone():
                        raise ClientGone
                elif isinstance(event, ev.TurnFinished):
                    finished = True
                    result = event.result
                    outcome["result"] = result
                    conv.last_finish = result.finish_reason.value
                    if result.finish_reason is FinishReason.ERROR:
                        message = result.error or "The reply failed."
                        if not started:
                            tokens = None
                            raise bad_request(message)
                        yield Failed(server_error(message))
                        return
                    if result.finish_reason is FinishReason.ABORTED:
                        raise ClientGone
                    self._record(conv, req, model, result, "".join(answer), "".join(reasoning))
                    yield Done(result, conv.name)
                    return
        finally:
            if conv is not None:
                if not finished:
                    self._stop_and_wait(conv)
                self.pool.release(conv, tokens)
            self.admission.leave()

    def _stop_and_wait(self, conv: ApiConversation) -> None:
        """Stop the conversation's turn (a client gone) and wait for its end (one step)."""
        done = threading.Event()

        def sink(event: ev.ConversationEvent) -> None:
            if isinstance(event, ev.TurnFinished):
                done.set()

        conv.sink = sink
        self.session.stop(conv.cid)
        snapshot = self.session.inspect(conv.cid)
        try:
            busy = snapshot.result(STOP_WAIT_S).busy
        except Exception:
            busy = True
        if busy:
            done.wait(STOP_WAIT_S)
        conv.last_finish = FinishReason.ABORTED.value

    def _record(
        self,
        conv: ApiConversation,
        req: GenerationRequest,
        model: LoadedModel,
        result: TurnResult,
        answer: str,
        reasoning: str,
    ) -> None:
        if conv.name is None or self.store is None or not isinstance(req, ChatRequest):
            return
        reply = ChatMessage("assistant", answer, reasoning)
        self.store.record(
            conv.cid,
            req.system,
            req.messages,
            reply,
            model.path,
            result.n_tokens,
            result.tokens_per_second,
            result=result,  # the reply's ReplyMeta, as a window's reply gets
            engine=model.engine,
        )

    def close(self) -> None:
        self._unsubscribe()
        self.pool.close_all()


def _messages(req: ChatRequest) -> list[dict[str, Any]]:
    messages = [m.to_engine() for m in req.messages]
    if req.system:
        messages.insert(0, {"role": "system", "content": req.system})
    return messages


def _render(engine: Engine, req: ChatRequest) -> str:
    return engine.render_chat(_messages(req), add_generation_prompt=True, reasoning=req.reasoning)


def _tokenize_chat(engine: Engine, req: ChatRequest) -> list[int]:
    return engine.tokenize(_render(engine, req), add_special=True, parse_special=True)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(result: TurnResult) -> dict[str, Any]:
    return {
        "prompt_tokens": result.n_prompt,
        "completion_tokens": result.n_tokens,
        "total_tokens": result.n_prompt + result.n_tokens,
        "prompt_tokens_details": {
            "cached_tokens": max(0, result.n_prompt - result.n_prompt_processed)
        },
    }


def timings(result: TurnResult) -> dict[str, Any]:
    """llama-server's ``timings`` object."""
    return {
        "cache_n": max(0, result.n_prompt - result.n_prompt_processed),
        "prompt_n": result.n_prompt_processed,
        "prompt_ms": round(result.prompt_ms, 3),
        "predicted_n": result.n_tokens,
        "predicted_ms": round(result.gen_ms, 3),
        "predicted_per_second": round(result.tokens_per_second, 3),
    }
