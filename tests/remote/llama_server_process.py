"""llama.cpp's own ``llama-server`` on 127.0.0.1 for the tests (built from the vendored
sources by ``python -m tests.support.peers``, which the README's test command runs first):
a test that needs it fails, saying how to build it, where it has not been built - CI must
run these, not skip them."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import httpx2
import pytest

from app.engine.cpu_quirks import llama_server_flags
from tests.support.peers import LLAMA_SERVER as BINARY


def start_llama_server(model: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """llama-server on a free port of 127.0.0.1 with ``model``, once it is healthy."""
    if not BINARY.exists():
        pytest.fail(
            f"llama-server is not built ({BINARY}): python -m tests.support.peers builds it"
        )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [str(BINARY), "-m", str(model), "--port", str(port), "-c", "4096"]
    argv += ["--parallel", "2", "-t", "1", "--no-webui", *extra]
    # The app's CPU quirks (--no-repack where llama.cpp's AMX kernels crash): the peer
    # runs on the same CPU, with the same kernels.
    argv += llama_server_flags()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"llama-server exited with {proc.returncode}"
        try:
            if httpx2.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx2.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("llama-server did not become healthy in 60 s")
