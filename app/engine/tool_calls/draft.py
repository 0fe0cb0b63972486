"""A tool call as far as it has been read: what the region reader and the argument readers
both write into (a module of its own so that neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Draft"]


@dataclass(slots=True)
class Draft:
    """A call as far as it has been read."""

    name: str | None = None
    call_id: str | None = None
    started: bool = False  # name (and the model's id) known: the call can be announced
    args: str = ""  # the arguments JSON text that can no longer change
    arguments: dict[str, Any] | None = None  # set once the call is complete
    done: bool = False
