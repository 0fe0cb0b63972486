"""``llamadesk run --mcp FILE --allow ...`` in a subprocess (no terminal): a tiny model
forced to call (``--tool-choice``) a tool of a stdio MCP server this test writes; an
allowed call runs and its result goes back to the model, one not in ``--allow`` is
refused with a sentence and runs nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.mcp.loop_guard import DEFAULT_MAX_ROUNDS
from app.mcp_run_cli import DEFAULT_MAX_ROUNDS as CLI_MAX_ROUNDS
from tests.support.gguf_models import TinySpec, write_tiny_model

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parents[2]
QWEN25 = ROOT / "tests/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"

# Parameters a random-weight model can only complete under the grammar (enums).
SERVER = '''
import sys
from pathlib import Path
from typing import Literal

from mcp.server.mcpserver import MCPServer

server = MCPServer("run-test")
FOLDER = Path(sys.argv[1])


@server.tool()
def greet(who: Literal["world", "tab"]) -> str:
    """Greet someone."""
    return f"hello {who}"


@server.tool()
def write_note(name: Literal["a", "b"]) -> str:
    """Write a note file."""
    (FOLDER / f"{name}.txt").write_text("note", encoding="utf-8")
    return "written"


server.run("stdio")
'''


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(
        tmp_path_factory.mktemp("run-mcp") / "qwen25.gguf",
        TinySpec(chat_template=QWEN25.read_text(), n_ctx_train=8192),
    )


def _config(tmp_path: Path) -> Path:
    script = tmp_path / "server.py"
    script.write_text(SERVER, encoding="utf-8")
    path = tmp_path / "mcp.json"
    servers = {"notes": {"command": sys.executable, "args": [str(script), str(tmp_path)]}}
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def _run(model: Path, tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLAMADESK_HOME": str(tmp_path / "home")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "run",
            str(model),
            "say hello",
            "--mcp",
            str(_config(tmp_path)),
            "--temp",
            "0",
            "-n",
            "200",
            "-c",
            "4096",
            "--max-rounds",
            "1",
            "--json",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=200,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_an_allowed_call_runs_and_its_result_goes_back(model: Path, tmp_path: Path) -> None:
    done = _run(model, tmp_path, "--allow", "greet", "--tool-choice", "greet")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    [[call]] = out["rounds"][:1]
    assert (call["name"], call["server"], call["outcome"]) == ("greet", "notes", "ok")
    assert call["result"] in ("hello world", "hello tab")
    assert "finish_reason" in out  # the model answered after the result


def test_a_call_not_allowed_is_refused_without_a_terminal(model: Path, tmp_path: Path) -> None:
    done = _run(model, tmp_path, "--allow", "greet", "--tool-choice", "write_note")
    assert done.returncode == 0, done.stderr
    [[call]] = json.loads(done.stdout)["rounds"][:1]
    assert (call["name"], call["outcome"]) == ("write_note", "denied")
    assert "not in --allow: refused." in done.stderr
    assert not list(tmp_path.glob("*.txt"))  # nothing ran


def test_the_cli_says_the_guards_default() -> None:
    assert CLI_MAX_ROUNDS == DEFAULT_MAX_ROUNDS


def test_tool_flags_without_mcp_are_a_sentence(model: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLAMADESK_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "app", "run", str(model), "hi", "--allow", "greet", "-n", "2"],
        capture_output=True,
        text=True,
        timeout=200,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert "--allow needs --mcp FILE" in done.stderr and "Traceback" not in done.stderr
