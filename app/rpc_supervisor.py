"""Run a model that uses remote (RPC) devices where llama.cpp's aborts cannot reach us.

llama.cpp's RPC client calls ``GGML_ABORT`` on any connection or protocol error (the
process dies, abort callback or not) and its sockets have no timeouts (a stopped or hung
worker blocks ``llama_decode`` for ever). So ``run --rpc`` does its work in a child
process - the same ``llamadesk run`` command line - and this parent watches it:

- the child sends a heartbeat byte for every session event it receives (load progress,
  prompt progress, each token) on a pipe; no beat for :data:`STALL_S` seconds means the
  worker hung or was stopped: the child is killed;
- a child killed by a signal (SIGABRT from ``GGML_ABORT``) means the worker went away.

Either way the parent prints one sentence on stderr and exits 1; what the child already
printed of the reply (it writes to the same stdout) stays. The child never opens the
database (``run`` has none), so nothing saved can be half-written.

``serve --rpc`` and the window do the same with a private ``llamadesk serve`` child
(:class:`PrivateServer`) reached as a remote engine (:mod:`app.remote`).

No llama.cpp here: this module only starts and watches a process.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.engine.rpc_heartbeat import DECODE_FD_ENV, END
from app.errors import LlamaDeskError
from app.remote.connection import RemoteConnection

log = logging.getLogger(__name__)

CHILD_ENV = "LLAMADESK_RPC_CHILD_FD"  # set in the child: the heartbeat pipe's fd
NO_BACKTRACE_ENV = "GGML_NO_BACKTRACE"  # ggml's abort: no gdb backtrace (as the load check)
STALL_S = 30.0  # no progress for this long: the worker is taken as gone (issue: < 60 s)


def in_child() -> bool:
    """In a watched child (``run --rpc``) or a private server (:class:`PrivateServer`):
    remote devices are used right here."""
    return CHILD_ENV in os.environ or PRIVATE_ENV in os.environ


def beat() -> None:
    """In the child: one heartbeat (a no-op elsewhere; a closed pipe is ignored)."""
    fd = os.environ.get(CHILD_ENV)
    if fd is None:
        return
    try:
        os.write(int(fd), b".")
    except (OSError, ValueError):
        pass


def self_command() -> list[str]:
    """This program's command line: the bundle's executable when frozen (PyInstaller),
    else this Python running the app package."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-m", "app"]


def supervise_if_remote(args: Any, rpc_servers: str) -> int | None:
    """``run --rpc`` and ``bench --rpc``: the command's exit code after running it again in a
    watched child; None where it runs here (no remote device, or this is the child)."""
    if not rpc_servers.strip() or in_child():
        return None
    return run_supervised(args._argv, rpc_servers)


def run_supervised(argv: Sequence[str], endpoints: str, stall_s: float = STALL_S) -> int:
    """Run ``llamadesk *argv`` in a child with a watchdog; its exit code, or 1 with a
    sentence when the remote workers went away or stopped answering."""
    read_fd, write_fd = os.pipe()
    env = dict(os.environ)
    env[CHILD_ENV] = str(write_fd)
    # llama.cpp's abort (a worker gone) would attach gdb and print a backtrace on the
    # stdout the child shares with us, into the reply or the --json object
    env[NO_BACKTRACE_ENV] = "1"
    try:
        child = subprocess.Popen([*self_command(), *argv], env=env, pass_fds=(write_fd,))
    finally:
        os.close(write_fd)
    last = time.monotonic()
    try:
        while True:
            ready, _, _ = select.select([read_fd], [], [], 0.5)
            if ready:
                if os.read(read_fd, 4096):
                    last = time.monotonic()
                    continue
                break  # the child closed the pipe: it is exiting
            if child.poll() is not None:
                break
            if time.monotonic() - last > stall_s:
                child.kill()
                child.wait()
                sys.stdout.flush()
                print(
                    f"\nllamadesk: the remote worker {endpoints} stopped answering: no progress "
                    f"for {stall_s:g} s (it was stopped, hung, or the network is down). The "
                    "model process was ended; what was printed of the reply is kept.",
                    file=sys.stderr,
                )
                return 1
        code = child.wait()
    except KeyboardInterrupt:
        child.send_signal(signal.SIGINT)
        child.wait()
        raise
    finally:
        os.close(read_fd)
    if code >= 0:
        return code
    name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
    print(
        f"\nllamadesk: the connection to the remote worker {endpoints} failed mid-run (llama.cpp "
        f"ended the model process with {name}: the worker went away or answered wrongly). "
        "What was printed of the reply is kept.",
        file=sys.stderr,
    )
    return 1


# --- A model on remote devices behind a private server (``serve --rpc``, the window) ------

PRIVATE_ENV = "LLAMADESK_RPC_PRIVATE"  # set in a private server child: its settings (JSON)
PRIVATE_KEY_ENV = "LLAMADESK_API_KEY"  # the child's API key (``serve``'s own default)
START_TIMEOUT_S = 600.0  # the child loads the model before it serves
# A reply whose stream sends nothing for this long: the worker hung or was stopped (the
# child is stuck in llama_decode for ever), so the parent gives the reply up and ends it.
PRIVATE_READ_TIMEOUT_S = 45.0
# A decode step open this long: the worker hangs (as for ``run --rpc``); the child is
# replaced before the parent's read (PRIVATE_READ_TIMEOUT_S) gives up.
HANG_S = STALL_S
GONE_WAIT_S = 1.0  # after a broken reply: how long the child may take to end (see _gone)
# A model process gone with its worker: the workers are probed this often, and once all
# answer a new process loads the model again on the same port (see _revive).
REVIVE_POLL_S = 1.0
REVIVE_PROBE_TIMEOUT_S = 2.0
# Restarts of the model process in a row (none lived STABLE_S): after these, no more (a
# model that dies at every load would restart for ever); each waits longer (back-off).
MAX_RESTARTS = 5
STABLE_S = 120.0
BACKOFF_MAX_S = 30.0
_SERVING = re.compile(r" at (http://127\.0\.0\.1:\d+)/v1\s*$")


def end_with_parent() -> None:
    """In a private server child: SIGTERM itself (``serve`` then stops) when the parent's
    end of standard input closes, i.e. the parent exited, whichever way."""

    def wait() -> None:
        sys.stdin.read()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait, daemon=True, name="rpc-private-parent").start()


def private_settings() -> tuple[dict[str, Any], dict[str, Any]] | None:
    """In a private server child: the context and model settings it was given."""
    text = os.environ.get(PRIVATE_ENV)
    if text is None:
        return None
    data = json.loads(text)
    return dict(data["context"]), dict(data["model"])


def _never_gone() -> str | None:
    return None


@dataclass(frozen=True)
class PrivateConnection(RemoteConnection):
    """The parent's connection to its private model process: the remote engine's sentences
    name the remote worker, not the child's loopback port (which means nothing to the
    user), and say so when the process is gone (read when the sentence is made)."""

    worker: str = ""
    gone: Callable[[], str | None] = field(default=_never_gone, compare=False)  # why, if so

    @property
    def label(self) -> str:
        where = f"the model process for the remote worker {self.worker}"
        why = self.gone()
        return f"{where} ({why})" if why else where
        return where


class PrivateServer:
    """A ``llamadesk serve`` child on 127.0.0.1 (any free port, a random API key, no
    database: the parent's session stays the only writer) that holds a model using remote
    devices. llama.cpp's aborts end the child, not the parent, which reaches the model as a
    remote engine (:meth:`loader`) and tells the user in a sentence when the child is gone.

    A watchdog reads the child's decode heartbeat (:mod:`app.engine.rpc_heartbeat`): a
    decode step open for ``hang_s`` seconds means the worker was stopped or hangs, and the
    child would stay stuck in ``llama_decode`` for ever (every later request waiting for
    its read timeout). The child is then killed and a new one started on the same port
    with the same key, so the parent's remote engine reaches it unchanged: the next request
    is answered (the worker is back) or refused at once (the new child could not load)."""

    def __init__(
        self,
        model_path: str,
        context: dict[str, Any],
        model: dict[str, Any],
        parallel: int,
        on_gone: Callable[[str], None] | None = None,
        hang_s: float = HANG_S,
    ) -> None:
        """``on_gone``: told the sentence when the child ends by itself or is replaced
        (default: stderr)."""
        self._closing = False
        self._on_gone = on_gone or (lambda text: print(f"llamadesk: {text}", file=sys.stderr))
        self.endpoints = str(model.get("rpc_servers", ""))
        self.key = secrets.token_urlsafe(24)
        self.hang_s = hang_s
        self.restarts = 0
        self._hung_at: float | None = None  # when a hung child was killed, until replaced
        self._reviving = False  # a new child loads after the workers answered again
        self._given_up: str | None = None  # why the model is not loaded again (down())
        self._in_a_row = 0  # restarts since a model process last lived STABLE_S
        self._started_at = time.monotonic()
        self._env = dict(os.environ)
        self._env[PRIVATE_ENV] = json.dumps({"context": context, "model": model})
        self._env[PRIVATE_KEY_ENV] = self.key
        self._env.pop(CHILD_ENV, None)
        self._env[NO_BACKTRACE_ENV] = "1"  # no gdb attached to a child that llama.cpp aborts
        self._argv = ["serve", model_path, "--host", "127.0.0.1", "--no-persist"]
        self._argv += ["--parallel", str(max(1, parallel)), "--resident", "1"]
        self._errors: list[str] = []
        self.child, url = self._start(0)
        if url is None:
            self.close()
            raise LlamaDeskError(self._load_failed())
        self.url = url
        self.port = int(url.rpartition(":")[2])

    def _start(self, port: int) -> tuple[subprocess.Popen[str], str | None]:
        """A new child on ``port`` (0: any free one), its watchers, and its URL (None when
        it did not come up)."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # a slow parent must never stall a decode step
        env = dict(self._env)
        env[DECODE_FD_ENV] = str(write_fd)
        try:
            child = subprocess.Popen(
                [*self_command(), *self._argv, "--port", str(port)],
                env=env,
                stdin=subprocess.PIPE,  # never written: its end-of-file says the parent is gone
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                pass_fds=(write_fd,),
            )
        finally:
            os.close(write_fd)
        urls: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        threading.Thread(
            target=self._read_stdout, args=(child, urls), daemon=True, name="rpc-private-out"
        ).start()
        threading.Thread(
            target=self._read_stderr, args=(child,), daemon=True, name="rpc-private-err"
        ).start()
        try:
            url = urls.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            url = None
        if url is None:
            os.close(read_fd)
            try:
                child.wait(10)  # its last words reach _errors before they are read
            except subprocess.TimeoutExpired:
                pass
            return child, None
        self._started_at = time.monotonic()
        threading.Thread(
            target=self._watch, args=(child, read_fd), daemon=True, name="rpc-private-watch"
        ).start()
        return child, url

    def _watch(self, child: subprocess.Popen[str], read_fd: int) -> None:
        """Until ``child`` ends: end it when a decode step stays open ``hang_s`` seconds;
        then say why it ended, and replace it where it hung."""
        open_since: float | None = None
        hung = False
        try:
            while child.poll() is None:
                ready, _, _ = select.select([read_fd], [], [], 0.5)
                if ready:
                    marks = os.read(read_fd, 4096)
                    if not marks:
                        break  # the child closed the pipe: it is exiting
                    if marks.endswith(END):
                        open_since = None
                    elif open_since is None or END in marks:
                        open_since = time.monotonic()
                if open_since is not None and time.monotonic() - open_since > self.hang_s:
                    hung = True
                    self._hung_at = time.monotonic()
                    log.warning("model process %d: a decode step hangs, killing it", child.pid)
                    child.kill()
                    break
            child.wait()
        finally:
            os.close(read_fd)
        if self._closing:
            return
        try:
            if not hung and self._workers_answer():
                # The worker is still there: the process died of something else (a crash
                # of its own), which a new one would repeat - not loaded again.
                self._give_up(
                    f"its model process ended ({_exit_name(child.poll() or 0)}) while the "
                    f"remote worker {self.endpoints} still answered, so it is not loaded "
                    "again; restart `llamadesk serve`."
                )
                return
            if not self._may_restart():
                return
            if not hung:
                self._on_gone(self.gone_sentence())
                self._revive(child)
                return
            self._replace(child)
        except Exception as exc:  # the watcher must not die silently: down() says it
            log.exception("the model process could not be started again")
            self._give_up(f"a new model process could not be started ({exc}).")

    def _workers_answer(self) -> bool:
        """Whether every remote worker answers a probe now (just after a model process
        ended: if so, the worker did not go away)."""
        from app.engine.rpc_probe import RpcProbeError, parse_endpoints, probe

        try:
            for endpoint in parse_endpoints(self.endpoints):
                probe(endpoint, timeout_s=REVIVE_PROBE_TIMEOUT_S)
        except RpcProbeError:
            return False
        return True

    def _may_restart(self) -> bool:
        """Count one more restart in a row; False (given up) past :data:`MAX_RESTARTS`.
        Waits the back-off first (1, 2, 4 … s, at most :data:`BACKOFF_MAX_S`)."""
        if time.monotonic() - self._started_at > STABLE_S:
            self._in_a_row = 0  # the last one lived a while: a new series
        self._in_a_row += 1
        if self._in_a_row > MAX_RESTARTS:
            self._give_up(
                f"its model process ended {MAX_RESTARTS + 1} times in a row, so it is not "
                "loaded again; restart `llamadesk serve`."
            )
            return False
        deadline = time.monotonic() + min(BACKOFF_MAX_S, 2.0 ** (self._in_a_row - 1) - 1)
        while not self._closing and time.monotonic() < deadline:
            time.sleep(0.1)
        return not self._closing

    def _give_up(self, why: str) -> None:
        self._given_up = f"The model is gone: {why}"
        self._on_gone(self._given_up)

    def _replace(self, old: subprocess.Popen[str]) -> None:
        if self._closing or old is not self.child:
            return
        self.restarts += 1
        self._errors.clear()
        # No lock held while it starts (a load takes a while): close() ends the old child
        # meanwhile, and the new one here.
        child, url = self._start(self.port)
        self.child = child
        self._hung_at = None
        if self._closing:
            self._end(child)
            return
        if url is None:
            self._end(child)
            self._on_gone(
                f"The remote worker {self.endpoints} stopped answering mid-reply (no decode "
                f"step ended for {self.hang_s:g} s), so its model process was ended; a new "
                f"one could not start: {self._reason()} The model is loaded again when the "
                "worker answers."
            )
            self._revive(child)
            return
        self._on_gone(
            f"The remote worker {self.endpoints} stopped answering mid-reply (no decode step "
            f"ended for {self.hang_s:g} s), so its model process was ended and started again: "
            "the next message is answered when the worker answers."
        )

    def _revive(self, old: subprocess.Popen[str]) -> None:
        """On the watcher thread of ``old`` (ended): probe the workers every
        :data:`REVIVE_POLL_S` (the probe leaves a busy worker alive) and, once every one
        answers, start a new model process on the same port with the same key, so the
        parent's remote engine reaches it unchanged; until then :meth:`down` says why
        there is no model. Ends when closing or when another thread replaced ``old``."""
        from app.engine.rpc_probe import RpcProbeError, parse_endpoints, probe

        endpoints = parse_endpoints(self.endpoints)
        while not self._closing and old is self.child:
            try:
                for endpoint in endpoints:
                    probe(endpoint, timeout_s=REVIVE_PROBE_TIMEOUT_S)
            except RpcProbeError:
                time.sleep(REVIVE_POLL_S)
                continue
            self.restarts += 1
            self._errors.clear()
            self._reviving = True
            try:
                child, url = self._start(self.port)
            finally:
                self._reviving = False
            if self._closing:
                self._end(child)
                return
            self.child = child
            if url is not None:
                self._on_gone(
                    f"The remote worker {self.endpoints} answers again: the model was loaded again."
                )
                return
            self._end(child)  # the worker went again while loading: wait for it again
            old = child
            if not self._may_restart():
                return

    def down(self) -> str | None:
        """Why the model cannot answer now (its process ended with the worker, or is being
        started again), or None: ``/health`` says it with a 503, and a request gets it."""
        if self._closing:
            return None
        if self._given_up is not None:
            return self._given_up
        where = f"the remote worker {self.endpoints}"
        if self._hung_at is not None or self._reviving:
            return (
                f"The model is being loaded again: {where} stopped answering or went away, "
                "and its model process is starting again."
            )
        code = self.child.poll()
        if code is None:
            return None
        return (
            f"The model is gone: {where} went away or stopped answering, and its model "
            f"process ended ({_exit_name(code)}); it is loaded again when the worker answers."
        )

    def _read_stdout(
        self, child: subprocess.Popen[str], urls: queue.SimpleQueue[str | None]
    ) -> None:
        assert child.stdout is not None
        for line in child.stdout:
            match = _SERVING.search(line)
            if match:
                urls.put(match.group(1))
        urls.put(None)

    def _read_stderr(self, child: subprocess.Popen[str]) -> None:
        assert child.stderr is not None
        for line in child.stderr:
            if line.startswith("llamadesk:"):
                self._errors.append(line.removeprefix("llamadesk:").strip())
            log.debug("model process: %s", line.rstrip())

    def _reason(self) -> str:
        return self._errors[-1] if self._errors else "it printed no reason."

    def _load_failed(self) -> str:
        return f"The model could not be loaded on the remote devices {self.endpoints}: {self._reason()}"

    def alive(self) -> bool:
        return self.child.poll() is None

    def gone_sentence(self) -> str:
        code = self.child.poll()
        how = "" if code is None else f" (it ended with {_exit_name(code)})"
        return (
            f"The model process using the remote worker {self.endpoints} is gone{how}: the "
            "worker went away, stopped or answered wrongly. The model is loaded again when "
            "the worker answers."
        )

    def connection(self) -> PrivateConnection:
        return PrivateConnection(
            self.url,
            self.key,
            read_timeout_s=PRIVATE_READ_TIMEOUT_S,
            worker=self.endpoints,
            gone=self._gone,
        )

    def _gone(self) -> str | None:
        """Why the child the last reply went to is gone (ended, or hung and being
        replaced), or None. Read only for a failure's sentence: a child that llama.cpp
        aborts closes its sockets a moment before it can be waited for, so a short wait
        tells a dying child from a live one."""
        if self._hung_at is not None:
            return "gone: the worker stopped answering; a new model process is starting"
        try:
            self.child.wait(GONE_WAIT_S)
        except subprocess.TimeoutExpired:
            return None
        return "gone: the worker went away or stopped answering"

    def loader(self) -> Any:
        """A :class:`~app.remote.RemoteLoader` for the child (its model: the child's first)."""
        from app.remote import RemoteLoader

        return RemoteLoader(self.connection(), name=f"remote worker {self.endpoints}")

    def close(self) -> None:
        self._closing = True
        self._end(self.child)

    @staticmethod
    def _end(child: subprocess.Popen[str]) -> None:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                # A child stuck in llama_decode on a stopped worker ignores SIGTERM's handler.
                child.kill()
                child.wait()


def _exit_name(code: int) -> str:
    if code >= 0:
        return f"exit code {code}"
    known = -code in signal.Signals._value2member_map_
    return signal.Signals(-code).name if known else f"signal {-code}"
