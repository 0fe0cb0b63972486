"""At most N tool rounds per turn, and the same call repeated stops the turn."""

from __future__ import annotations

from app.mcp.loop_guard import LoopGuard, PlannedCall


def test_the_same_call_repeated_stops() -> None:
    guard = LoopGuard()
    assert guard.check([PlannedCall("search", {"q": "x", "n": 1})]) is None
    assert guard.check([PlannedCall("search", {"q": "y"})]) is None
    stop = guard.check([PlannedCall("search", {"n": 1, "q": "x"})])  # same arguments, other order
    assert stop == (
        "Stopped: the tool 'search' was called again with the same arguments. Use the result you already have."
    )
    assert guard.rounds == 2


def test_at_most_n_rounds_per_turn() -> None:
    guard = LoopGuard(max_rounds=3)
    for n in range(3):
        assert guard.check([PlannedCall("step", {"n": n})]) is None
    stop = guard.check([PlannedCall("step", {"n": 99})])
    assert stop is not None and stop.startswith(
        "Stopped: the model used tools 3 times in this turn"
    )
    assert LoopGuard(max_rounds=3).check([PlannedCall("step", {"n": 99})]) is None, (
        "a new turn starts afresh"
    )
