"""``serve --rpc``'s private model process is started again only when its remote worker
went away, and a new one that cannot start is said in ``down()`` instead of a watcher that
died (issue 27 review, item 7). A real worker, a real child, real signals."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from tests.devices.conftest import Worker, private_server, start_worker, wait_until


def test_a_crash_while_the_worker_answers_is_not_restarted(
    private_model: Path, make_worker: Callable[[], Worker]
) -> None:
    worker = make_worker()
    told: list[str] = []
    private = private_server(private_model, worker, told)
    try:
        os.kill(private.child.pid, signal.SIGSEGV)  # a crash of its own, the worker is fine
        assert wait_until(lambda: private.down() is not None and bool(told), 30), private.down()
        said = private.down() or ""
        assert "ended (SIGSEGV)" in said and "still answered" in said, said
        assert "not loaded again" in said and said.endswith("."), said
        time.sleep(3)  # nothing is started again meanwhile
        assert private.restarts == 0 and private.child.poll() is not None
        assert private.down() == said and told == [said]
    finally:
        private.close()


def test_a_new_model_process_that_cannot_start_is_said(
    private_model: Path, make_worker: Callable[[], Worker]
) -> None:
    worker = make_worker()
    told: list[str] = []
    private = private_server(private_model, worker, told)
    again: Worker | None = None
    try:
        # Popen refuses this environment (ValueError) when the next child is started.
        private._env["LLAMADESK_TEST_BROKEN"] = "a\x00b"
        worker.stop()  # the worker goes away, and its model process with it
        private.child.kill()
        assert wait_until(lambda: "is gone" in (private.down() or ""), 30), private.down()
        port = int(worker.endpoint.rsplit(":", 1)[1])
        again = start_worker(port=port)  # it answers again: the start fails
        assert wait_until(lambda: "could not be started" in (private.down() or ""), 60), (
            private.down()
        )
        said = private.down() or ""
        assert said.startswith("The model is gone: a new model process could not be started")
        assert told[-1] == said
    finally:
        private.close()
        if again is not None:
            again.stop()
