"""How a session gets a :class:`~app.remote.engine.RemoteEngine`: an
:class:`~app.session.engine_port.EngineLoader` for one server.

``path`` in :meth:`RemoteLoader.load` is the model's name on the server ("": the
connection's model, else the server's first). Loading probes the server
(:func:`~app.remote.probe.probe`); what the server does not give is the load's warning, one
sentence each (no context meter, no cached-token figures, no prompt progress).
"""

from __future__ import annotations

import ssl

import httpx2

from app.engine import ContextSettings, ModelSettings
from app.remote.connection import RemoteConnection
from app.remote.engine import RemoteEngine
from app.remote.probe import ServerTraits, probe
from app.session.engine_port import Loaded, Progress


def new_client(conn: RemoteConnection, keep_alive: int, tls: ssl.SSLContext) -> httpx2.Client:
    """A client for ``conn``; a conversation's has one connection, kept alive between its
    turns (so its socket is the one its next turn uses: see :class:`~app.remote.turn.Line`).
    ``tls`` is made once per engine: building the system trust store takes half a second,
    which every conversation's open would otherwise wait for on the session thread."""
    return httpx2.Client(
        headers=conn.headers(),
        verify=tls,
        timeout=httpx2.Timeout(conn.read_timeout_s, connect=conn.connect_timeout_s),
        limits=httpx2.Limits(max_connections=keep_alive, max_keepalive_connections=keep_alive),
        follow_redirects=False,
    )


class RemoteLoader:
    """See the module docstring. ``engine`` is the last engine it loaded (a client such as
    the command line reads what the server reported from it after a turn)."""

    def __init__(
        self, conn: RemoteConnection, *, name: str | None = None, address: str | None = None
    ) -> None:
        """``name``: the machine as the window calls it ("gpu-box"; default: the URL's
        host and port); ``address``: what the loaded model's path is (the window's
        ``remote://`` address; default: the model's name on the server)."""
        self.conn = conn
        self.name = name
        self.address = address
        self.engine: RemoteEngine | None = None

    def check(self, path: str) -> None:
        self.conn.validate()

    def load(
        self,
        path: str,
        settings: ContextSettings,
        progress: Progress,
        fallback: bool,
        *,
        model_settings: ModelSettings | None = None,  # the server renders with its own template
    ) -> Loaded:
        conn = self.conn
        if path:
            conn = RemoteConnection(
                conn.base_url,
                conn.api_key,
                path,
                conn.allow_insecure,
                conn.connect_timeout_s,
                conn.read_timeout_s,
                conn.max_retry_after_s,
            )
        conn.validate()
        tls = httpx2.create_ssl_context()
        with new_client(conn, 1, tls) as client:
            traits = probe(client, conn)
        progress(1.0)
        engine = RemoteEngine(
            conn, traits, lambda: new_client(conn, 1, tls), name=self.name, address=self.address
        )
        self.engine = engine
        notes = traits.unavailable()
        return Loaded(engine, " ".join(notes) if notes else None)


def probe_connection(conn: RemoteConnection) -> ServerTraits:
    """What the server at ``conn`` is (Preferences ▸ Engines' Test): raises
    :class:`~app.remote.faults.RemoteError` with a sentence when it cannot be used, and
    :class:`~app.remote.connection.RemoteConnectionError` for an unusable URL."""
    conn.validate()
    with new_client(conn, 1, httpx2.create_ssl_context()) as client:
        return probe(client, conn)
