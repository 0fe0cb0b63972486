"""``--remote-model`` names a model by its file name as well as by the server's full id:
llama-server lists its model by the path it was started with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.remote import RemoteConnection, RemoteError
from app.remote.loader import probe_connection
from app.remote.probe import _named_model
from tests.remote.conftest import ROOT
from tests.remote.llama_server_process import start_llama_server


def test_the_file_name_picks_the_one_id_it_ends() -> None:
    conn = RemoteConnection("http://127.0.0.1:1")
    names = ("/srv/models/qwen.gguf", "/srv/models/tiny.gguf", r"C:\models\gemma.gguf")
    assert _named_model(conn, "tiny.gguf", names) == "/srv/models/tiny.gguf"
    assert _named_model(conn, "tiny", names) == "/srv/models/tiny.gguf"
    assert _named_model(conn, "gemma.gguf", names) == r"C:\models\gemma.gguf"
    with pytest.raises(RemoteError, match=r"has no model 'mistral\.gguf'; it has: /srv/models"):
        _named_model(conn, "mistral.gguf", names)
    twice = ("/a/tiny.gguf", "/b/tiny.gguf")
    with pytest.raises(RemoteError, match=r"2 models named 'tiny\.gguf': give the full id"):
        _named_model(conn, "tiny.gguf", twice)


def test_llama_server_model_by_file_name(tiny_model: Path) -> None:
    proc, url = start_llama_server(tiny_model)
    try:
        for name in (str(tiny_model), tiny_model.name, tiny_model.stem):
            traits = probe_connection(RemoteConnection(url, model=name))
            assert traits.model == str(tiny_model)  # the wire names the server's own id
        with pytest.raises(RemoteError, match=r"has no model 'other\.gguf'"):
            probe_connection(RemoteConnection(url, model="other.gguf"))
        # the command line: a turn on the model named by its file name
        done = subprocess.run(
            [
                *(sys.executable, "-m", "app", "run", "--remote", url),
                *("--remote-model", tiny_model.name, "hi", "-n", "4", "--json"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr
    finally:
        proc.terminate()
        proc.wait(30)
