"""An OpenAI- and llama-server-compatible HTTP server: another client of the session
(engine calls through ``Session.call``, token prompts through ``Session.submit_tokens``).

- :mod:`app.server.config` - :class:`ServerConfig` (host, key, bounds), checked before binding
- :mod:`app.server.params` - request bodies -> typed requests (sampling from the schema)
- :mod:`app.server.pool` - which conversation serves a request (warm caches)
- :mod:`app.server.store` - API conversations in the app's database
- :mod:`app.server.service` - the endpoints, transport-free
- :mod:`app.server.openai_format` - response objects and stream chunks
- :mod:`app.server.origin` - which web pages may send requests (checked first)
- :mod:`app.server.transport` - connections: deadlines, the caps, JSON wire errors
- :mod:`app.server.http` - requests and replies (the standard library's parser)
- :mod:`app.server.runner` - :class:`ServerRunner`: all of it for ``llamadesk serve``
"""

from app.server.config import ServerConfig
from app.server.errors import ApiError
from app.server.runner import ServerRunner

__all__ = ["ApiError", "ServerConfig", "ServerRunner"]
