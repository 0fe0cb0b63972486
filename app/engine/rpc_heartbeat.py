"""The decode heartbeat of a private model process (:class:`app.rpc_supervisor.PrivateServer`).

llama.cpp's RPC client has no timeouts: on a stopped or hung worker ``llama_decode`` never
returns. The supervising parent cannot see that from the HTTP side (the child's server
thread still answers ``/health``), so the child says on a pipe when each decode step begins
(``[``) and ends (``]``, after ``llama_synchronize``: llama.cpp's decode may return before
the devices finish, and the wait then happens when the logits are read); a step open for too long means the worker hangs. Outside such a
child (the variable unset) both calls are a no-op.
"""

from __future__ import annotations

import os

DECODE_FD_ENV = "LLAMADESK_RPC_DECODE_FD"  # set in a private model process: the pipe's fd
BEGIN, END = b"[", b"]"


def _fd() -> int | None:
    text = os.environ.get(DECODE_FD_ENV)
    try:
        return int(text) if text else None
    except ValueError:
        return None


_FD = _fd()  # read once: decode steps are many, the environment does not change
WATCHED = _FD is not None  # this is a watched model process


def _write(mark: bytes) -> None:
    if _FD is None:
        return
    try:
        os.write(_FD, mark)
    except OSError:  # the parent is gone or slow (the pipe is non-blocking): no beat
        pass


def decode_begins() -> None:
    _write(BEGIN)


def decode_ends() -> None:
    _write(END)
