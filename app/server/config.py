"""The server's settings, checked before it binds."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from app.errors import LlamaDeskError

MIB = 1 << 20


def is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    parallel: int = 4  # requests generating at once (the engine's sequences)
    max_queue: int = 16  # requests waiting for a free sequence; beyond: 503
    max_body_bytes: int = 8 * MIB
    max_connections: int = 64  # open connections (each holds a thread); beyond: 503
    max_resident: int = 0  # idle API conversations kept open (0: 2 x parallel)
    cors_origins: tuple[str, ...] = ()  # () = CORS off; ("*",) = any origin
    model_alias: str | None = None
    idle_timeout_s: float = 30.0  # a connection that sends nothing for this long is closed
    turn_timeout_s: float = 3600.0

    @property
    def resident(self) -> int:
        return self.max_resident or 2 * self.parallel

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
        if self.api_key is not None and not self.api_key.strip():
            raise LlamaDeskError("The API key is empty; give a key or leave --api-key out.")
        if not is_loopback(self.host) and not self.api_key:
            raise LlamaDeskError(
                f"Serving on {self.host} would let other devices use the model without a key: "
                "give --api-key KEY (or bind to 127.0.0.1)."
            )
