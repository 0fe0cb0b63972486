"""The UI's background jobs (app/ui/background.py): Qt's thread pool, one thread by
default, the same thread for every job."""

from __future__ import annotations

import asyncio
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


def test_run_hands_the_result_or_the_error_to_the_gui_thread(qtbot: Any) -> None:
    jobs = BackgroundJobs("test-run")
    got: list[tuple[object, int]] = []
    jobs.run(lambda: threading.get_ident(), lambda r: got.append((r, threading.get_ident())))

    def fail() -> int:
        raise ValueError("no such file")

    jobs.run(fail, lambda r: got.append((r, threading.get_ident())))
    qtbot.waitUntil(lambda: len(got) == 2, timeout=5000)
    (worker, where), (error, where_too) = got
    assert worker != threading.get_ident()  # ran off the GUI thread...
    assert where == where_too == threading.get_ident()  # ...answered on it
    assert isinstance(error, ValueError) and str(error) == "no such file"


def test_call_awaits_a_job_from_a_coroutine(qtbot: Any) -> None:
    jobs = BackgroundJobs("test-call")

    async def main() -> tuple[str, str]:
        name = await jobs.call(lambda: threading.current_thread().name)
        try:
            await jobs.call(lambda: 1 // 0)
        except ZeroDivisionError as exc:
            return name, type(exc).__name__
        return name, "no error"

    assert asyncio.run(main()) == ("test-call", "ZeroDivisionError")


def test_mcp_work_runs_on_pool_threads_only(qtbot: Any) -> None:
    """The MCP loop and its blocking calls are jobs of the runtime's pool ("mcp"): no
    thread of another name (asyncio.to_thread's executor, a private loop thread)."""

    from app.ui.mcp_runtime import McpRuntime

    runtime = McpRuntime()
    before = set(threading.enumerate())

    async def where() -> tuple[str, str]:
        blocking = await runtime.blocking(lambda: threading.current_thread().name)
        return threading.current_thread().name, blocking

    got: list[object] = []
    runtime.submit(where(), got.append)
    qtbot.waitUntil(lambda: bool(got), timeout=5000)
    assert got == [("mcp", "mcp")]
    started = {t.name for t in set(threading.enumerate()) - before}
    assert started <= {"mcp"}, started
    runtime.stop()
    assert runtime.loop().is_running()  # a stopped runtime starts again on use
    runtime.stop()
