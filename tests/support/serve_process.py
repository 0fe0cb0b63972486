"""``llamadesk serve`` in a subprocess on a free port (the server's and the remote
engine's tests start it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class ServeProcess:
    """``llamadesk serve`` in a subprocess on a free port."""

    def __init__(self, args: list[str], home: Path) -> None:
        env = dict(os.environ, LLAMADESK_HOME=str(home), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--port", "0", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "/v1" not in line:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"serve did not start: {line!r} {err}")
        self.url = line.strip().rsplit(" at ", 1)[1].removesuffix("/v1")

    @property
    def server_pid(self) -> int:
        """The process that serves (its memory, its threads): on Linux ``serve`` works in a
        forked child of the one started, which watches it (app.crash_supervisor)."""
        pid = self.proc.pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return pid
        return int(children[0]) if len(children) == 1 else pid

    def stop(self, timeout: float = 30.0) -> tuple[int, str]:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, err
