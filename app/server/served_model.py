"""The model a server serves: loading, loaded or failed, its name, and engine calls.

Its state follows the session's model events; request threads read it. Any model name a
client sends is accepted (llama-server does the same: one model is served), so the
README's ``model="local"`` and a client's default name both work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.engine import Engine
from app.errors import LlamaDeskError
from app.server.config import ServerConfig
from app.server.errors import ApiError, bad_request, server_error, unavailable
from app.session import LoadedModel, NoModelError, Session
from app.session import events as ev

CALL_TIMEOUT_S = 60.0


class ServedModel:
    def __init__(self, session: Session, config: ServerConfig) -> None:
        self.session = session
        self.config = config
        self.loaded: LoadedModel | None = None
        self.load_error: str | None = None
        self.event = threading.Event()
        # Attached to a window's session, which loads models itself: no model means
        # "load one in the window", not "loading".
        self.attached = False

    def attach(self, model: LoadedModel | None) -> None:
        """The model the session holds now (None: none)."""
        self.attached = True
        self.loaded = model
        if model is not None:
            self.load_error = None
            self.event.set()

    def on_session(self, event: ev.SessionEvent) -> None:
        if isinstance(event, ev.ModelLoaded | ev.Reconfigured):
            self.loaded = event.model
            self.load_error = None
            self.event.set()
        elif isinstance(event, ev.ModelLoadFailed):
            self.load_error = event.message
            self.event.set()
        elif isinstance(event, ev.ModelUnloaded):
            self.loaded = None

    def wait_loaded(self, timeout: float | None = None) -> LoadedModel:
        self.event.wait(timeout)
        if self.loaded is None:
            raise LlamaDeskError(self.load_error or "The model did not load in time.")
        return self.loaded

    @property
    def model_id(self) -> str:
        if self.config.model_alias:
            return self.config.model_alias
        return Path(self.loaded.path).stem if self.loaded is not None else ""

    def names(self, model: LoadedModel) -> tuple[str, ...]:
        """The names that mean this model in ``GET /v1/models/{name}``."""
        path = Path(model.path)
        return (self.model_id, path.name, path.stem, str(path))

    def get(self) -> LoadedModel:
        """The loaded model, or the 503/500 that says why there is none. The name a
        request gives is not checked: one model is served, whatever a client calls it."""
        model = self.loaded
        if model is not None:
            return model
        if self.load_error:
            raise server_error(f"The model could not be loaded: {self.load_error}")
        if self.attached:
            raise unavailable(
                "No model is loaded in LlamaDesk: load one in the window, then retry.",
                "no_model",
            )
        raise unavailable("The model is still loading; retry in a moment.", "loading")

    def lookup(self, name: str) -> LoadedModel:
        """``GET /v1/models/{name}``: the model if ``name`` is one of its names, else 404."""
        model = self.get()
        if name not in self.names(model):
            raise ApiError(
                404,
                f"There is no model {name!r} here; this server serves {self.model_id!r} "
                "(GET /v1/models), and generation requests accept any model name.",
                param="model",
                code="model_not_found",
            )
        return model

    def call(self, fn: Callable[[Engine], Any]) -> Any:
        """``fn(engine)`` on the session thread (short work only: it holds every decode)."""
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
