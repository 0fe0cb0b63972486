"""Remote engines: the session's conversations answered by an OpenAI-compatible server.

Qt-free and llama.cpp-free. :class:`RemoteLoader` (an
:class:`~app.session.engine_port.EngineLoader`) probes the server
(:mod:`app.remote.probe`) and gives a :class:`RemoteEngine`
(:mod:`app.remote.engine`), which streams each turn on a worker thread
(:mod:`app.remote.turn`) with the request of :mod:`app.remote.wire`; what can fail on the
wire is said in :mod:`app.remote.faults`, and where the engine may connect in
:mod:`app.remote.connection`. On llama-server a turn takes the token route
(:mod:`app.remote.completion`) and a conversation's slot is kept in a file there
(:mod:`app.remote.slots`). The window's saved connections and the ``remote://`` addresses
of their models are in :mod:`app.remote.saved`; its loader, which sends each address to
its connection and every file to the local engine, in :mod:`app.remote.router`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.remote.connection import INSECURE_FLAG, RemoteConnection, RemoteConnectionError
    from app.remote.engine import RemoteEngine
    from app.remote.faults import FaultKind, RemoteError, RemoteFault
    from app.remote.loader import RemoteLoader
    from app.remote.probe import ServerKind, ServerTraits

# Each name is imported when first asked for: a process that only needs
# app.remote.connection (the local ``run`` through app.rpc_supervisor) does not pay for
# the HTTP client, the engine and the tool-call machinery it would otherwise import.
_WHERE = {
    "INSECURE_FLAG": "connection",
    "RemoteConnection": "connection",
    "RemoteConnectionError": "connection",
    "RemoteEngine": "engine",
    "FaultKind": "faults",
    "RemoteError": "faults",
    "RemoteFault": "faults",
    "RemoteLoader": "loader",
    "ServerKind": "probe",
    "ServerTraits": "probe",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'app.remote' has no attribute {name!r}")
    return getattr(importlib.import_module(f"app.remote.{module}"), name)


__all__ = [
    "INSECURE_FLAG",
    "FaultKind",
    "RemoteConnection",
    "RemoteConnectionError",
    "RemoteEngine",
    "RemoteError",
    "RemoteFault",
    "RemoteLoader",
    "ServerKind",
    "ServerTraits",
]
