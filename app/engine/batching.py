"""One batched decode for every generating tab, or the tabs decoded in turn: chosen once
per context by measuring (issue 20, item 2).

llama.cpp's server puts every slot's token into one batch, and so does the scheduler by
default: on most machines a batch of two costs little more than one token. Not on all:
with one CPU thread a batch of 2 sequences cost about 3x one sequence per step on the
Gemma 3 file of issue 20 (4 sequences 4.7x), so two tabs in one decode gave less in total
than one tab alone. :func:`measure` decodes a few steps of both kinds into sequences 0
and 1 of the fresh context (its cache is cleared afterwards) and picks the one that gives
more tokens per second; :class:`BatchingChoice` says which and why, and the session
reports it with the loaded model. Decoding in turn changes a batch's composition, so
greedy output may differ in the last bits from the batched one (DESIGN.md section 7).
"""

from __future__ import annotations

import enum
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # the session imports BatchingChoice without loading llama.cpp
    from app.engine.context import Context
    from app.engine.model import Model

log = logging.getLogger(__name__)

_REPEATS: Final = 3  # rounds of each kind; the fastest of each counts (noise only adds time)
# Turns must win clearly: a batch keeps prompt chunks and tabs in step, so a tie stays batched.
_TURNS_MARGIN: Final = 1.15


class BatchMode(enum.Enum):
    BATCHED = "batched"  # one llama_decode per step, one token of every generating tab
    TURNS = "turns"  # one generating tab's token per step, the tabs in rotation


@dataclass(frozen=True)
class BatchingChoice:
    """How generating tabs share a step, and the measurement behind it."""

    mode: BatchMode
    reason: str
    batch_of_two_ms: float = 0.0  # one decode of two sequences' tokens (fastest of a few)
    one_by_one_ms: float = 0.0  # two decodes of one token each
    n_threads: int = 0
    pinned: bool = False  # set by the caller (tests, a setting), not measured

    def to_dict(self) -> dict[str, object]:
        return {
            "mode": self.mode.value,
            "reason": self.reason,
            "batch_of_two_ms": round(self.batch_of_two_ms, 3),
            "one_by_one_ms": round(self.one_by_one_ms, 3),
            "n_threads": self.n_threads,
            "pinned": self.pinned,
        }


def pinned(mode: BatchMode) -> BatchingChoice:
    return BatchingChoice(mode, f"Pinned to {mode.value} decoding.", pinned=True)


def choose(batch_of_two_ms: float, one_by_one_ms: float, n_threads: int) -> BatchingChoice:
    """The choice for these measured costs: in turn only where two single-token decodes are
    clearly (``_TURNS_MARGIN``) cheaper than one decode of both tokens."""
    two, one_by_one = batch_of_two_ms, one_by_one_ms
    figures = (
        f"a batch of 2 tokens took {two:.1f} ms, 2 single decodes {one_by_one:.1f} ms "
        f"({n_threads} thread{'s' if n_threads != 1 else ''})"
    )
    if one_by_one * _TURNS_MARGIN < two:
        return BatchingChoice(
            BatchMode.TURNS,
            f"Tabs generate in turn: {figures}, so one batch would be slower in total.",
            two,
            one_by_one,
            n_threads,
        )
    return BatchingChoice(
        BatchMode.BATCHED,
        f"Generating tabs share one batch: {figures}.",
        two,
        one_by_one,
        n_threads,
    )


def measure(ctx: Context, model: Model) -> BatchingChoice:
    """Time a batch of two tokens against two single-token decodes on a fresh context.

    The kinds alternate within each round, so a busy spell of the machine slows both; a
    verdict for turns (against the default) must hold over as many rounds again."""
    settings = ctx.settings
    threads = settings.n_threads
    if settings.n_seq_max < 2 or settings.embeddings or model.has_encoder:
        return BatchingChoice(
            BatchMode.BATCHED, "One sequence decodes at a time here.", n_threads=threads
        )
    token = model.bos if model.valid_token(model.bos) else 0
    batch = ctx.batch
    batch_ms: list[float] = []
    single_ms: list[float] = []

    def run(spans: list[tuple[int, int]]) -> float:  # (seq, pos) per decode of one token
        started = time.perf_counter()
        batch.clear()
        for seq, pos in spans:
            batch.add_span([token], pos, seq, True)
        if not ctx.decode().ok:
            raise RuntimeError("decode failed")
        return (time.perf_counter() - started) * 1000.0

    def rounds(first: int, count: int) -> None:
        for step in range(first, first + count):
            pos = 1 + 2 * step
            batch_ms.append(run([(0, pos), (1, pos)]))
            single_ms.append(run([(0, pos + 1)]) + run([(1, pos + 1)]))

    try:
        ctx.use_prompt_threads(False)  # generated tokens: the threads the scheduler gives them
        run([(0, 0), (1, 0)])  # warm-up, and the first cells
        rounds(0, _REPEATS)
        if choose(min(batch_ms), min(single_ms), threads).mode is BatchMode.TURNS:
            rounds(_REPEATS, _REPEATS)
    except RuntimeError:
        return BatchingChoice(
            BatchMode.BATCHED,
            "The decode measurement failed; tabs share one batch.",
            n_threads=threads,
        )
    finally:
        batch.clear()
        ctx.clear()
    choice = choose(min(batch_ms), min(single_ms), threads)
    log.info("%s", choice.reason)
    return choice
