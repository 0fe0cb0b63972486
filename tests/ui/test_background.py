"""The UI's background jobs (app/ui/background.py): Qt's thread pool, one thread by
default, the same thread for every job."""

from __future__ import annotations

import functools
import threading
from typing import Any

from app.ui.background import BackgroundJobs


def test_jobs_run_in_order_on_one_thread_that_stays(qtbot: Any) -> None:
    jobs = BackgroundJobs("test-jobs")
    seen: list[tuple[int, int, str]] = []

    def job(n: int) -> None:
        thread = threading.current_thread()
        seen.append((n, threading.get_ident(), thread.name))

    for n in range(3):
        jobs.submit(functools.partial(job, n))
    assert jobs.wait_idle(5)
    jobs.submit(lambda: job(3))  # after an idle wait: still the same thread
    assert jobs.wait_idle(5)
    assert [n for n, _, _ in seen] == [0, 1, 2, 3]
    assert len({ident for _, ident, _ in seen}) == 1
    assert threading.get_ident() not in {ident for _, ident, _ in seen}
    assert {name for _, _, name in seen} == {"test-jobs"}


def test_a_failing_job_does_not_stop_the_next(qtbot: Any, caplog: Any) -> None:
    jobs = BackgroundJobs("test-failing")
    done = threading.Event()

    def fail() -> None:
        raise ValueError("a bug")

    jobs.submit(fail)
    jobs.submit(done.set)
    assert jobs.wait_idle(5) and done.is_set()
    assert "background job of test-failing failed" in caplog.text


def test_wait_idle_says_when_a_job_is_still_running(qtbot: Any) -> None:
    jobs = BackgroundJobs("test-waiting", threads=2)
    release = threading.Event()

    def blocked() -> None:
        release.wait(5)

    jobs.submit(blocked)
    other = threading.Event()
    jobs.submit(other.set)  # the second thread runs it meanwhile
    assert other.wait(5)
    assert not jobs.wait_idle(0.05)
    release.set()
    assert jobs.wait_idle(5)
