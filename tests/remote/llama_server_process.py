"""llama.cpp's own ``llama-server`` on 127.0.0.1 for the tests (built from the vendored
sources by benchmarks/bench_server.py into the benchmark cache): a test that needs it is
skipped, with the reason, where it has not been built."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx2
import pytest

CACHE = Path(os.environ.get("LLAMADESK_BENCH_CACHE", "~/.cache/llamadesk-bench")).expanduser()
BINARY = Path(
    os.environ.get("LLAMADESK_LLAMA_SERVER", CACHE / "llama-server-build" / "bin" / "llama-server")
)


def start_llama_server(model: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """llama-server on a free port of 127.0.0.1 with ``model``, once it is healthy."""
    if not BINARY.exists():
        pytest.skip(f"llama-server is not built ({BINARY}): benchmarks/bench_server.py builds it")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [str(BINARY), "-m", str(model), "--port", str(port), "-c", "4096"]
    argv += ["--parallel", "2", "-t", "1", "--no-webui", *extra]
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
