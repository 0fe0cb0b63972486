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

from app.remote.connection import INSECURE_FLAG, RemoteConnection, RemoteConnectionError
from app.remote.engine import RemoteEngine
from app.remote.faults import FaultKind, RemoteError, RemoteFault
from app.remote.loader import RemoteLoader
from app.remote.probe import ServerKind, ServerTraits

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
