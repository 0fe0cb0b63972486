"""The stop on tool loops: at most N tool rounds in one turn, and no call repeated with
the same arguments (the loop users of other apps report: the model calls the same tool
again and again). A stop is a sentence the model is given instead of another round."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["DEFAULT_MAX_ROUNDS", "LoopGuard", "PlannedCall"]

DEFAULT_MAX_ROUNDS: Final = 8


@dataclass(frozen=True, slots=True)
class PlannedCall:
    tool: str
    arguments: Mapping[str, Any]

    @property
    def key(self) -> str:
        return (
            self.tool + "\0" + json.dumps(dict(self.arguments), sort_keys=True, ensure_ascii=False)
        )


@dataclass(slots=True)
class LoopGuard:
    """One per turn: :meth:`check` each round's calls before running them."""

    max_rounds: int = DEFAULT_MAX_ROUNDS
    rounds: int = 0
    _seen: set[str] = field(default_factory=set)

    def check(self, calls: Sequence[PlannedCall]) -> str | None:
        """None: run the round (it is counted); else why the turn stops here."""
        if self.rounds >= self.max_rounds:
            return (
                f"Stopped: the model used tools {self.rounds} times in this turn, the most allowed. "
                "Answer with what you have."
            )
        for call in calls:
            if call.key in self._seen:
                return (
                    f"Stopped: the tool '{call.tool}' was called again with the same arguments. "
                    "Use the result you already have."
                )
        self._seen.update(call.key for call in calls)
        self.rounds += 1
        return None
