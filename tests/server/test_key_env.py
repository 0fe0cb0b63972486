"""``--api-key`` and ``--remote-api-key`` on a command line are visible to every user
(``ps``): their help says so and points to LLAMADESK_API_KEY / LLAMADESK_REMOTE_API_KEY,
which work - a real ``serve`` keyed by the environment only, reached by a real
``run --remote`` keyed by the environment only (issue 27 item 6)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest

from tests.support.serve_process import ServeProcess

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-from-the-environment-42"


def _help(*command: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "app", *command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(
    ("command", "flag", "variable"),
    [
        (("serve",), "--api-key", "LLAMADESK_API_KEY"),
        (("serve",), "--remote-api-key", "LLAMADESK_REMOTE_API_KEY"),
        (("run",), "--remote-api-key", "LLAMADESK_REMOTE_API_KEY"),
    ],
)
def test_the_help_says_a_key_flag_is_visible_in_ps(
    command: tuple[str, ...], flag: str, variable: str
) -> None:
    lines = _help(*command).splitlines()
    start = next(i for i, x in enumerate(lines) if x.strip().startswith(f"{flag} KEY"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip().startswith("-"))
    line = " ".join(" ".join(lines[start:end]).split())  # the flag's help, unwrapped
    assert "visible to every user of this computer (ps" in line
    assert f"set {variable} instead (read when {flag} is not given)" in line


def test_the_keys_work_from_the_environment(
    serve: Callable[..., ServeProcess],
    long_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLAMADESK_API_KEY", KEY)
    server = serve(str(long_model), "--parallel", "1", "--no-persist")
    monkeypatch.delenv("LLAMADESK_API_KEY")
    with open(f"/proc/{server.proc.pid}/cmdline", "rb") as cmdline:
        assert KEY.encode() not in cmdline.read()
    with httpx2.Client(base_url=server.url, timeout=60) as http:
        assert http.get("/v1/models").status_code == 401
        keyed = http.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        assert keyed.status_code == 200

    def run(env_key: str | None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LLAMADESK_HOME": str(tmp_path / "run-home")}
        env.pop("LLAMADESK_REMOTE_API_KEY", None)
        if env_key is not None:
            env["LLAMADESK_REMOTE_API_KEY"] = env_key
        return subprocess.run(
            [sys.executable, "-m", "app", "run", "--remote", server.url, "hello", "-n", "4"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
        )

    refused = run(None)
    assert refused.returncode != 0
    assert "refused the API key (HTTP 401)" in refused.stderr
    answered = run(KEY)
    assert answered.returncode == 0, answered.stderr
