"""The endpoints, independent of HTTP: requests in, response objects or streams out.

One :class:`ApiService` is a client of one :class:`~app.session.Session`: generation
goes through the session's conversations (so API requests and the window's tabs share
the one batched engine step). The rooms:

- :mod:`app.server.served_model` - which model is served, its names, session calls
- :mod:`app.server.prompts` - rendering and tokenizing on the request's thread
- :mod:`app.server.generation` - chat and text completions (a turn per request)
- :mod:`app.server.text_endpoints` - tokenize, detokenize, apply-template, embeddings
- :mod:`app.server.admission` - how many generate and wait at once
- :mod:`app.server.reply_items` - what a generation yields and logs
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from app import __version__
from app.engine import SamplingParams
from app.server.admission import Admission
from app.server.config import ServerConfig
from app.server.errors import unavailable
from app.server.front import RemoteFront
from app.server.generation import Generation
from app.server.heap import limit_heap_growth
from app.server.params import GenerationRequest, expect_object, parse_chat, parse_completion
from app.server.pool import ConversationPool
from app.server.prompts import RequestVocab
from app.server.reply_items import (
    ClientGone,
    Done,
    Failed,
    Gone,
    Item,
    Piece,
    RequestRecord,
    finish_reason,
)
from app.server.served_model import ServedModel
from app.server.slots import SlotActions
from app.server.store import ConversationStore
from app.server.text_endpoints import TextEndpoints
from app.session import LoadedModel, Session
from app.session import events as ev
from app.settings_schema import api_parameters

# Re-exported: the transport, the window's server panel and the formatter import them here.
__all__ = [
    "ApiService",
    "ClientGone",
    "Done",
    "Failed",
    "Item",
    "Piece",
    "RequestRecord",
    "finish_reason",
]

log = logging.getLogger(__name__)

LOG_SIZE = 500


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
        limit_heap_growth()  # before the first large body (see app.server.heap)
        self.session = session
        self.config = config
        self.store = store
        self.served = ServedModel(session, config)
        self.created = int(time.time())
        self.admission = Admission(config.parallel, config.max_queue)
        self.pool = ConversationPool(session, store, config.resident, in_use_elsewhere)
        self.slot_actions = SlotActions(session, self.pool, slots_dir)
        self.vocab = RequestVocab(self.served)
        self.text = TextEndpoints(self.served, self.vocab, self.admission)
        self.log: deque[RequestRecord] = deque(maxlen=LOG_SIZE)
        self._log_listeners: list[Callable[[RequestRecord], None]] = []
        self.generation = Generation(
            self.served, self.vocab, self.admission, self.pool, store, self._log
        )
        # ``serve --remote`` (and ``serve --rpc``'s private server): the remote engine's
        # loader, whose engine answers the routes a session cannot (app.server.front)
        self.remote_loader: Any = None
        # ``serve --rpc``: why the private model process cannot answer now (None: it can)
        self.model_down: Callable[[], str | None] = lambda: None
        # ``serve --rpc``: the remote engine is this server's own private child with the
        # local model, not a remote model: /props is the child's (its template source and
        # path), without the front's "remote" part (the private URL is no user's business)
        self.private_front = False
        self._front: RemoteFront | None = None
        # Fronts of an earlier remote connection (a reload made a new one): a request that
        # took one may still be using its client, so they are closed in close() only.
        self._old_fronts: list[RemoteFront] = []
        self._front_lock = threading.Lock()  # request threads ask for the front at once
        if attached or model is not None:
            self.attach(model)
        # Subscribed after attach: a ModelLoaded/ModelUnloaded that follows wins.
        self._unsubscribe = session.subscribe_session(self._on_session)

    def attach(self, model: LoadedModel | None) -> None:
        """The model the session holds now (None: none)."""
        self.served.attach(model)

    def _on_session(self, event: ev.SessionEvent) -> None:
        self.served.on_session(event)

    @property
    def loaded(self) -> LoadedModel | None:
        return self.served.loaded

    @property
    def model_id(self) -> str:
        return self.served.model_id

    def wait_loaded(self, timeout: float | None = None) -> LoadedModel:
        return self.served.wait_loaded(timeout)

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

    # ---------------------------------------------------------------- about the model

    def health(self) -> tuple[int, dict[str, Any]]:
        down = self.model_down()
        if down is not None:
            return 503, {"error": {"code": 503, "message": down, "type": "unavailable_error"}}
        if self.served.loaded is not None:
            return 200, {"status": "ok"}
        if self.served.load_error:
            message = self.served.load_error
            return 500, {"status": "error", "error": {"code": 500, "message": message}}
        return 503, {
            "error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}
        }

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [self._model_entry(self.served.get())]}

    def model_info(self, name: str) -> dict[str, Any]:
        return self._model_entry(self.served.lookup(name))

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

    @property
    def front(self) -> RemoteFront | None:
        """The forwarder to the remote engine's server (None: the model is in-process)."""
        engine = getattr(self.remote_loader, "engine", None)
        if engine is None:
            return None
        with self._front_lock:
            front = self._front
            if front is None or front.conn is not engine.conn or front.traits is not engine.traits:
                if front is not None:
                    self._old_fronts.append(front)
                front = self._front = RemoteFront(engine.conn, engine.traits)
            return front

    def props(self) -> dict[str, Any]:
        model = self.served.get()
        front = self.front
        if front is not None and self.private_front:
            if (down := self.model_down()) is not None:
                raise unavailable(down, "model_gone")
            own = dict(front.get("/props"))
            own.update(total_slots=self.config.parallel, model_alias=self.model_id)
            own.pop("remote", None)
            return own
        if front is not None:
            return self._front_props(model, front)
        template = self.vocab.get().template
        return {
            "default_generation_settings": {
                "n_ctx": model.n_ctx_seq,
                "params": SamplingParams().to_dict(),
            },
            "total_slots": self.config.parallel,
            "model_path": str(Path(model.path).absolute()),
            "model_alias": self.model_id,
            # The template in use: the GGUF's own, or the built-in one the engine chose
            # when the file has none (or one that does not work).
            "chat_template": template.source if template is not None else "",
            "chat_template_source": "builtin" if template and template.fallback else "model",
            "chat_template_name": (template.builtin_name if template else None) or "model",
            "model_has_chat_template": bool(model.info.chat_template),
            "modalities": {"vision": False, "audio": False},
            "embeddings": model.settings.embeddings,
            "pooling": model.settings.pooling_type if model.settings.embeddings else None,
            "build_info": f"LlamaDesk {__version__}",
            "api_parameters": api_parameters(),
        }

    def _front_props(self, model: LoadedModel, front: RemoteFront) -> dict[str, Any]:
        """A front's /props: the remote model's context and template, this server's build."""
        traits = front.traits
        return {
            "default_generation_settings": {
                "n_ctx": traits.n_ctx or model.n_ctx_seq,
                "params": SamplingParams().to_dict(),
            },
            "total_slots": self.config.parallel,
            "model_path": traits.model,
            "model_alias": self.model_id,
            "chat_template": traits.chat_template or "",
            "chat_template_source": "remote",
            "chat_template_name": "model" if traits.chat_template else None,
            "model_has_chat_template": bool(traits.chat_template),
            "modalities": {"vision": False, "audio": False},
            "embeddings": False,
            "pooling": None,
            "build_info": f"LlamaDesk {__version__}",
            "api_parameters": api_parameters(),
            "remote": {
                "url": front.conn.shown_root,  # never the URL's user:password
                "kind": traits.kind.value,
                "version": traits.version,
            },
        }

    # ---------------------------------------------------------------- slots

    def slots(self) -> list[dict[str, Any]]:
        model = self.served.get()
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
        self.served.get()
        return self.slot_actions.run(index, action, body)

    # ---------------------------------------------------------------- text and generation

    def tokenize(self, body: Any) -> dict[str, Any]:
        if (front := self.front) is not None:
            return dict(front.post("/tokenize", expect_object(body)))
        return self.text.tokenize(body)

    def detokenize(self, body: Any) -> dict[str, Any]:
        if (front := self.front) is not None:
            return dict(front.post("/detokenize", expect_object(body)))
        return self.text.detokenize(body)

    def apply_template(self, body: Any) -> dict[str, Any]:
        if (front := self.front) is not None:
            parse_chat(body)  # the same 400s as a local model's
            return dict(front.post("/apply-template", body))
        return self.text.apply_template(body)

    def forward_completion(self, body: Any, gone: Gone) -> Any:
        """A front's ``/v1/completions``: checked here as a local request is, then
        answered by the remote server (see :meth:`RemoteFront.completions`)."""
        front = self.front
        assert front is not None
        req = parse_completion(body)
        self.served.get()
        down = self.model_down()
        if down is not None:
            raise unavailable(down, "model_gone")
        self.admission.enter(gone)
        try:
            answer = front.completions(expect_object(body), req.stream)
        except BaseException:
            self.admission.leave()
            raise
        if not req.stream:
            self.admission.leave()
            return answer
        return _Released(answer, self.admission.leave)  # its place is held until it ends

    def embeddings(self, body: Any, gone: Gone) -> dict[str, Any]:
        return self.text.embeddings(body, gone, self.model_id)

    def generate(
        self, req: GenerationRequest, gone: Gone, client: str = "", endpoint: str = ""
    ) -> Iterator[Item]:
        """See :meth:`Generation.generate`."""
        down = self.model_down()
        if down is not None:  # at once, not after the remote engine's connection fails
            raise unavailable(down, "model_gone")
        return self.generation.generate(req, gone, client, endpoint)

    def close(self) -> None:
        self._unsubscribe()
        self.pool.close_all()
        with self._front_lock:
            fronts, self._old_fronts = self._old_fronts, []
            if self._front is not None:
                fronts.append(self._front)
            self._front = None
        for front in fronts:
            front.close()


class _Released:
    """A forwarded stream that calls ``release`` once, when it ends or is closed."""

    def __init__(self, events: Iterator[dict[str, Any]], release: Callable[[], None]) -> None:
        self._events = events
        self._release: Callable[[], None] | None = release

    def __iter__(self) -> _Released:
        return self

    def __next__(self) -> dict[str, Any]:
        try:
            return next(self._events)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        close = getattr(self._events, "close", None)
        if close is not None:
            close()
        release, self._release = self._release, None
        if release is not None:
            release()
