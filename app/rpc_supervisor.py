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

No llama.cpp here: this module only starts and watches a process.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

CHILD_ENV = "LLAMADESK_RPC_CHILD_FD"  # set in the child: the heartbeat pipe's fd
STALL_S = 30.0  # no progress for this long: the worker is taken as gone (issue: < 60 s)


def in_child() -> bool:
    return CHILD_ENV in os.environ


def beat() -> None:
    """In the child: one heartbeat (a no-op elsewhere; a closed pipe is ignored)."""
    fd = os.environ.get(CHILD_ENV)
    if fd is None:
        return
    try:
        os.write(int(fd), b".")
    except (OSError, ValueError):
        pass


def run_supervised(argv: Sequence[str], endpoints: str, stall_s: float = STALL_S) -> int:
    """Run ``llamadesk *argv`` in a child with a watchdog; its exit code, or 1 with a
    sentence when the remote workers went away or stopped answering."""
    read_fd, write_fd = os.pipe()
    env = dict(os.environ)
    env[CHILD_ENV] = str(write_fd)
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "app", *argv], env=env, pass_fds=(write_fd,)
        )
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
