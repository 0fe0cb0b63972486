"""The hub's one background primitive: calls in order, on one named daemon thread."""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path

import pytest

from app.hub.background import HubWorker
from app.hub.download.hashing import HashPipe


def test_calls_run_in_order_on_one_named_daemon_thread() -> None:
    worker = HubWorker("llamadesk-test")
    seen: list[tuple[int, str, bool]] = []

    def call(i: int) -> int:
        time.sleep(0.01 * (3 - i))  # the first call is the slowest: order, not speed
        me = threading.current_thread()
        seen.append((i, me.name, me.daemon))
        return i * 10

    futures = [worker.submit(functools.partial(call, i)) for i in range(3)]
    assert [f.result(timeout=5) for f in futures] == [0, 10, 20]
    assert seen == [
        (0, "llamadesk-test", True),
        (1, "llamadesk-test", True),
        (2, "llamadesk-test", True),
    ]
    assert threading.current_thread().name != "llamadesk-test"
    worker.close(5)


def test_an_exception_reaches_the_future_and_the_thread_goes_on() -> None:
    worker = HubWorker("llamadesk-test")

    def fail() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        worker.submit(fail).result(timeout=5)
    assert worker.submit(lambda: "still here").result(timeout=5) == "still here"
    worker.close(5)


def test_close_runs_what_was_submitted_then_refuses_more() -> None:
    worker = HubWorker("llamadesk-test")
    gate = threading.Event()
    done: list[int] = []
    worker.submit(gate.wait)
    later = worker.submit(lambda: done.append(1))
    closer = threading.Thread(target=worker.close, args=(5,))
    closer.start()
    gate.set()
    closer.join(5)
    assert later.done() and done == [1]
    with pytest.raises(RuntimeError, match="closed"):
        worker.submit(lambda: None)


def test_a_hash_that_cannot_read_the_start_gives_no_digest_and_never_blocks(
    tmp_path: Path,
) -> None:
    worker = HubWorker("llamadesk-sha256")
    pipe = HashPipe(tmp_path / "missing.part", start=1000, worker=worker)  # nothing to read
    for _ in range(20):  # more than the queue holds (16): the writer must not block
        pipe.put(b"x" * (4 << 20))
    assert pipe.finish() is None  # the caller then hashes the file itself
    worker.close(5)
