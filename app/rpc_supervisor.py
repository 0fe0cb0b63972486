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
from typing import Any

from app.errors import LlamaDeskError

log = logging.getLogger(__name__)

CHILD_ENV = "LLAMADESK_RPC_CHILD_FD"  # set in the child: the heartbeat pipe's fd
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


class PrivateServer:
    """A ``llamadesk serve`` child on 127.0.0.1 (any free port, a random API key, no
    database: the parent's session stays the only writer) that holds a model using remote
    devices. llama.cpp's aborts end the child, not the parent, which reaches the model as a
    remote engine (:meth:`loader`) and tells the user in a sentence when the child is gone."""

    def __init__(
        self,
        model_path: str,
        context: dict[str, Any],
        model: dict[str, Any],
        parallel: int,
        on_gone: Callable[[str], None] | None = None,
    ) -> None:
        """``on_gone``: told the sentence when the child ends by itself (default: stderr)."""
        self._closing = False
        self._on_gone = on_gone or (lambda text: print(f"llamadesk: {text}", file=sys.stderr))
        self.endpoints = str(model.get("rpc_servers", ""))
        self.key = secrets.token_urlsafe(24)
        env = dict(os.environ)
        env[PRIVATE_ENV] = json.dumps({"context": context, "model": model})
        env[PRIVATE_KEY_ENV] = self.key
        env.pop(CHILD_ENV, None)
        argv = ["serve", model_path, "--host", "127.0.0.1", "--port", "0", "--no-persist"]
        argv += ["--parallel", str(max(1, parallel)), "--resident", "1"]
        self.child = subprocess.Popen(
            [*self_command(), *argv],
            env=env,
            stdin=subprocess.PIPE,  # never written: its end-of-file says the parent is gone
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._errors: list[str] = []
        self._url: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        threading.Thread(target=self._read_stdout, daemon=True, name="rpc-private-out").start()
        threading.Thread(target=self._read_stderr, daemon=True, name="rpc-private-err").start()
        self.url = self._wait_url()
        threading.Thread(target=self._watch, daemon=True, name="rpc-private-watch").start()

    def _watch(self) -> None:
        self.child.wait()
        if not self._closing:
            self._on_gone(self.gone_sentence())

    def _read_stdout(self) -> None:
        assert self.child.stdout is not None
        for line in self.child.stdout:
            match = _SERVING.search(line)
            if match:
                self._url.put(match.group(1))
        self._url.put(None)

    def _read_stderr(self) -> None:
        assert self.child.stderr is not None
        for line in self.child.stderr:
            if line.startswith("llamadesk:"):
                self._errors.append(line.removeprefix("llamadesk:").strip())
            log.debug("model process: %s", line.rstrip())

    def _wait_url(self) -> str:
        try:
            url = self._url.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            url = None
        if url is None:
            self.close()
            reason = self._errors[-1] if self._errors else "it printed no reason"
            raise LlamaDeskError(
                f"The model could not be loaded on the remote devices {self.endpoints}: {reason}"
            )
        return url

    def alive(self) -> bool:
        return self.child.poll() is None

    def gone_sentence(self) -> str:
        code = self.child.poll()
        how = "" if code is None else f" (it ended with {_exit_name(code)})"
        return (
            f"The model process using the remote worker {self.endpoints} is gone{how}: the "
            "worker went away, stopped or answered wrongly. Load the model again when the "
            "worker is back."
        )

    def loader(self) -> Any:
        """A :class:`~app.remote.RemoteLoader` for the child (its model: the child's first)."""
        from app.remote import RemoteLoader
        from app.remote.connection import RemoteConnection

        conn = RemoteConnection(self.url, self.key, read_timeout_s=PRIVATE_READ_TIMEOUT_S)
        return RemoteLoader(conn)

    def close(self) -> None:
        self._closing = True
        if self.child.poll() is None:
            self.child.terminate()
            try:
                self.child.wait(15)
            except subprocess.TimeoutExpired:
                # A child stuck in llama_decode on a stopped worker ignores SIGTERM's handler.
                self.child.kill()
                self.child.wait()


def _exit_name(code: int) -> str:
    if code >= 0:
        return f"exit code {code}"
    known = -code in signal.Signals._value2member_map_
    return signal.Signals(-code).name if known else f"signal {-code}"
