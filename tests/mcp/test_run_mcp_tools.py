"""``llamadesk run --mcp`` with tools as real servers write them (issue 27, items 6-7), in
a subprocess on the tiny model (calls forced by ``--tool-choice``, so its random weights
write valid calls): a pydantic model parameter (``$defs``) is called and its arguments are
in ``--json``; a tool whose schema cannot be a grammar is left out with a warning naming
it; ``--allow`` is per server; a huge result reaches the model cut, with a note; a call
cut off by ``-n`` is an error; and ``--remote`` sends the tools to the remote server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]
import pytest

from app.mcp.client import DEFAULT_MAX_RESULT_CHARS
from app.mcp.stdio_transport import MAX_MESSAGE_BYTES
from app.mcp_run_cli import DEFAULT_MAX_RESULT_CHARS as CLI_MAX_RESULT_CHARS
from app.server import ServerConfig, ServerRunner
from tests.server.conftest import start_server
from tests.support.gguf_models import TinySpec, write_tiny_model

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]
QWEN25 = ROOT / "tests/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"

# ``server.py NAME SIZE``: "one" has plan (a pydantic model parameter), bad (a pattern no
# grammar can hold), big (a result of SIZE characters) and echo; "two" has echo only.
SERVER = '''
import enum
import sys
from typing import Annotated, Literal

import pydantic
from mcp.server.mcpserver import MCPServer

NAME, SIZE = sys.argv[1], int(sys.argv[2])
server = MCPServer(NAME)


class Unit(enum.Enum):
    CELSIUS = "c"
    FAHRENHEIT = "f"


class Place(pydantic.BaseModel):
    city: Literal["Paris", "Rome"]


class Trip(pydantic.BaseModel):
    place: Place
    unit: Unit


@server.tool()
def echo(word: Literal["hi", "yo"]) -> str:
    """Say the word back."""
    return f"{NAME} says {word}"


if NAME == "one":

    @server.tool()
    def plan(trip: Trip) -> str:
        """Plan a trip."""
        return f"planned {trip.place.city} in {trip.unit.value}"

    @server.tool()
    def bad(code: Annotated[str, pydantic.Field(pattern="^a{5000}$")]) -> str:
        """A schema no grammar can hold."""
        return code

    @server.tool()
    def big() -> str:
        """A huge result."""
        return "x" * SIZE


server.run("stdio")
'''
TRIP_SCHEMA = {
    "type": "object",
    "properties": {
        "trip": {
            "type": "object",
            "properties": {
                "place": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}},
                "unit": {"enum": ["c", "f"]},
            },
            "required": ["place", "unit"],
        }
    },
    "required": ["trip"],
}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(
        tmp_path_factory.mktemp("run-mcp-tools") / "qwen25.gguf",
        TinySpec(chat_template=QWEN25.read_text(), n_ctx_train=8192),
    )


def _config(tmp_path: Path, size: int = 10, servers: tuple[str, ...] = ("one", "two")) -> Path:
    script = tmp_path / "server.py"
    script.write_text(SERVER, encoding="utf-8")
    path = tmp_path / "mcp.json"
    entries = {
        name: {"command": sys.executable, "args": [str(script), name, str(size)]}
        for name in servers
    }
    path.write_text(json.dumps({"mcpServers": entries}), encoding="utf-8")
    return path


def _run(
    target: list[str], config: Path, tmp_path: Path, *flags: str
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLAMADESK_HOME": str(tmp_path / "home")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "run",
            *target,
            "plan a trip",
            "--mcp",
            str(config),
            "--temp",
            "0",
            "--max-rounds",
            "1",
            "--json",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=250,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def _local(
    model: Path, config: Path, tmp_path: Path, *flags: str
) -> subprocess.CompletedProcess[str]:
    return _run([str(model)], config, tmp_path, "-c", "4096", *flags)


def test_the_cli_says_the_clients_result_bound() -> None:
    assert CLI_MAX_RESULT_CHARS == DEFAULT_MAX_RESULT_CHARS


def test_a_pydantic_tool_is_called_and_a_bad_schema_is_left_out(
    model: Path, tmp_path: Path
) -> None:
    done = _local(
        model,
        _config(tmp_path),
        tmp_path,
        "--tool-choice",
        "plan",
        "--allow",
        "one.plan",
        "-n",
        "200",
    )
    assert done.returncode == 0, done.stderr
    [[call]] = json.loads(done.stdout)["rounds"]
    assert (call["name"], call["server"], call["outcome"]) == ("plan", "one", "ok")
    jsonschema.validate(call["arguments"], TRIP_SCHEMA)  # the call's arguments, in --json
    city, unit = call["arguments"]["trip"]["place"]["city"], call["arguments"]["trip"]["unit"]
    assert call["result"] == f"planned {city} in {unit}"
    [warning] = [line for line in done.stderr.splitlines() if "left out" in line]
    assert warning.startswith("[tools] The tool 'bad' is left out: ") and "{'" not in warning


def test_a_bare_allow_two_servers_share_is_refused(model: Path, tmp_path: Path) -> None:
    done = _local(model, _config(tmp_path), tmp_path, "--allow", "echo", "-n", "50")
    assert done.returncode == 2
    assert (
        "--allow echo: the servers 'one' and 'two' each have a tool 'echo'; name the one to "
        "allow as SERVER.TOOL (e.g. one.echo)." in done.stderr
    ), done.stderr


def test_allowing_one_servers_tool_does_not_allow_the_others(model: Path, tmp_path: Path) -> None:
    done = _local(
        model,
        _config(tmp_path),
        tmp_path,
        "--allow",
        "two.echo",
        "--tool-choice",
        "one__echo",
        "-n",
        "200",
    )
    assert done.returncode == 0, done.stderr
    [[call]] = json.loads(done.stdout)["rounds"]
    assert (call["name"], call["server"], call["outcome"]) == ("one__echo", "one", "denied")
    assert "'echo' on 'one' is not in --allow: refused." in done.stderr


def test_a_call_cut_off_by_the_token_limit_is_an_error(model: Path, tmp_path: Path) -> None:
    done = _local(model, _config(tmp_path), tmp_path, "--tool-choice", "plan", "-n", "4")
    assert done.returncode == 1, done.stderr
    out = json.loads(done.stdout)
    assert out["finish_reason"] == "length" and out["rounds"] == []
    assert "while writing a tool call, so the call was not made; raise -n." in out["error"]
    assert out["error"] in done.stderr


@pytest.mark.parametrize("megabytes", [1, 10, 50])
def test_a_huge_result_reaches_the_model_cut_with_a_note(
    model: Path, tmp_path: Path, megabytes: int
) -> None:
    """1 MB: read whole, then cut for the model. 10 and 50 MB: more than one message may
    hold (MAX_MESSAGE_BYTES); the reader keeps the start only, and the call ends at once
    (it used to take the run past its 30 s timeout and near 1 GB)."""
    size = megabytes * 1_000_000
    started = time.monotonic()
    done = _local(
        model,
        _config(tmp_path, size, ("one",)),
        tmp_path,
        "--tool-choice",
        "big",
        "--allow",
        "big",
        "--max-tool-result",
        "2000",
        "-n",
        "200",
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    [[call]] = out["rounds"]
    result = call["result"]
    if size < MAX_MESSAGE_BYTES:
        assert call["outcome"] == "ok", done.stderr
        assert result == "x" * 2000 + (
            f"\n[The tool's result was cut here: 2,000 of its {size:,} characters are shown.]"
        )
    else:
        assert call["outcome"] == "tool_error", done.stderr
        head = result.split("\n")
        assert head[0].startswith(f"[The tool's result was {2 * size + 140:,} bytes"[:30])
        assert head[0].endswith(
            f"more than the {MAX_MESSAGE_BYTES:,} this app reads of one message; only its "
            "start is shown.]"
        )
        assert set(head[1]) == {"x"} and result.endswith("characters are shown.]")
    assert "finish_reason" in out  # the model answered after the result
    assert took < 200  # (the measured figures: benchmarks/bench_tool_results.py)


@pytest.fixture
def remote(model: Path, tmp_path: Path) -> Iterator[ServerRunner]:
    runner = start_server(model, tmp_path / "server-home", ServerConfig(port=0, parallel=1))
    yield runner
    runner.close()


def test_a_remote_run_sends_the_tools(tmp_path: Path, remote: ServerRunner) -> None:
    done = _run(
        ["--remote", remote.url],
        _config(tmp_path, servers=("one",)),
        tmp_path,
        "--tool-choice",
        "required",
        "--allow",
        "one.echo",
        "-n",
        "200",
    )
    assert done.returncode == 0, done.stderr
    [[call]] = json.loads(done.stdout)["rounds"]
    # The remote server forced a call: it had the tools (the pydantic one among them; bad
    # is left out here too, or the server would refuse the whole request).
    assert call["name"] in ("echo", "plan", "big") and call["outcome"] in ("ok", "denied")
    assert "[tools] The tool 'bad' is left out" in done.stderr


def test_a_server_that_never_answers_does_not_hold_the_run(model: Path, tmp_path: Path) -> None:
    """An HTTP server that takes the connection and never answers, listed after a stdio
    one: the run goes on with the stdio server's tools after the start timeout (it hung)."""
    config = _config(tmp_path, servers=("one",))
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(16)
        entries = json.loads(config.read_text(encoding="utf-8"))
        entries["mcpServers"]["mute"] = {"url": f"http://127.0.0.1:{mute.getsockname()[1]}/mcp"}
        config.write_text(json.dumps(entries), encoding="utf-8")
        done = _local(
            model, config, tmp_path, "--tool-choice", "echo", "--allow", "one.echo", "-n", "200"
        )
    assert done.returncode == 0, done.stderr
    [[call]] = json.loads(done.stdout)["rounds"]
    assert (call["name"], call["outcome"]) == ("echo", "ok")
    assert "[tools] The MCP server 'mute' did not answer within 20 s." in done.stderr


def test_allow_names_resolve_per_server(capsys: pytest.CaptureFixture[str]) -> None:
    from app.errors import LlamaDeskError
    from app.mcp_run_cli import allowed_tools

    tools = [("one", "echo"), ("two", "echo"), ("one", "plan"), ("fs", "read.file")]
    assert allowed_tools("plan, two.echo,fs.read.file", tools) == {
        ("one", "plan"),
        ("two", "echo"),
        ("fs", "read.file"),
    }
    assert allowed_tools("nope", tools) == frozenset()
    assert "[tools] --allow nope: no connected server has that tool." in capsys.readouterr().err
    with pytest.raises(LlamaDeskError, match="the servers 'one' and 'two' each have a tool 'echo'"):
        allowed_tools("echo", tools)
