"""The server's settings, checked before it binds."""

from __future__ import annotations

from dataclasses import dataclass

from app.errors import LlamaDeskError
from app.loopback import is_loopback_host

MIB = 1 << 20


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    parallel: int = 4  # requests generating at once (the engine's sequences)
    max_queue: int = 16  # requests waiting for a free sequence; beyond: 503
    max_body_bytes: int = 8 * MIB
    # Requests being answered at once (each holds a thread); beyond: 503. Idle and
    # half-sent connections do not count: they wait in the transport's selector.
    max_connections: int = 64
    # Connections not being answered (sending their request, or idle between requests):
    # beyond this the oldest of them is closed, so a flood of sockets cannot exhaust file
    # descriptors or shut out a client that has just connected.
    max_pending: int = 256
    max_resident: int = 0  # idle API conversations kept open (0: 2 x parallel)
    cors_origins: tuple[str, ...] = ()  # () = CORS off; ("*",) = any origin
    model_alias: str | None = None
    # A keep-alive connection that sends nothing for this long after a reply is closed;
    # also how long a send to a client that reads nothing may block.
    idle_timeout_s: float = 30.0
    # The whole request head (request line and headers) must arrive within this time of
    # the connection (or of its first byte after a keep-alive pause), however it trickles.
    head_timeout_s: float = 20.0
    # The whole body must arrive within body_timeout_s plus one second per
    # body_min_bytes_per_s bytes of its Content-Length (8 MiB: 30 s + 32 s).
    body_timeout_s: float = 30.0
    body_min_bytes_per_s: int = 256 * 1024
    turn_timeout_s: float = 3600.0

    @property
    def resident(self) -> int:
        return self.max_resident or 2 * self.parallel

    def body_timeout(self, length: int) -> float:
        """Seconds a body of ``length`` bytes may take to arrive, all of it."""
        return self.body_timeout_s + length / self.body_min_bytes_per_s

    def validate(self) -> None:
        if not 0 <= self.port <= 65535:
            raise LlamaDeskError(f"--port must be between 0 and 65535, not {self.port}.")
        if not 1 <= self.parallel <= 256:
            raise LlamaDeskError(f"--parallel must be between 1 and 256, not {self.parallel}.")
        if self.max_queue < 0:
            raise LlamaDeskError(f"The request queue cannot be negative ({self.max_queue}).")
        if self.max_resident < 0:
            raise LlamaDeskError(
                f"--resident must be 0 (twice --parallel) or more, not {self.max_resident}."
            )
        if self.max_connections < 1 or self.max_pending < 1:
            raise LlamaDeskError(
                "The connection bounds must be 1 or more "
                f"(max_connections={self.max_connections}, max_pending={self.max_pending})."
            )
        timeouts = (self.idle_timeout_s, self.head_timeout_s, self.body_timeout_s)
        if min(timeouts) <= 0 or self.body_min_bytes_per_s <= 0:
            raise LlamaDeskError("The connection timeouts and the body rate must be positive.")
        for origin in self.cors_origins:
            if origin not in ("*", "null") and "://" not in origin:
                raise LlamaDeskError(
                    f"--cors-origin takes an origin like http://localhost:3000, * or null, "
                    f"not {origin!r}."
                )
        if self.api_key is not None and not self.api_key.strip():
            raise LlamaDeskError("The API key is empty; give a key or leave --api-key out.")
        if not is_loopback_host(self.host) and not self.api_key:
            raise LlamaDeskError(
                f"Serving on {self.host} would let other devices use the model without a key: "
                "give --api-key KEY (or bind to 127.0.0.1)."
            )
