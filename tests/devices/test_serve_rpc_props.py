"""``serve --rpc``'s /props describe the local model, as ``serve`` without ``--rpc`` does:
the private server child that holds it is no remote model (issue 27 review, item 14)."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from tests.devices.conftest import Worker
from tests.support.arch_models import write_arch_model
from tests.support.serve_process import ServeProcess


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_arch_model(tmp_path_factory.mktemp("serve-rpc-props") / "llama.gguf", "llama")


def test_serve_rpc_props_are_the_local_models(model: Path, tmp_path: Path, worker: Worker) -> None:
    args = [str(model), "--no-persist", "--gpu-layers", "2", "--parallel", "2"]
    cpu = ServeProcess([*args[:1], "--no-persist", "--parallel", "2"], tmp_path / "a")
    try:
        expected = httpx2.get(f"{cpu.url}/props", timeout=30).json()
    finally:
        cpu.stop()
    server = ServeProcess([*args, "--rpc", worker.endpoint], tmp_path / "b")
    try:
        props = httpx2.get(f"{server.url}/props", timeout=30).json()
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert "remote" not in props  # no private URL
    for key in ("chat_template_source", "chat_template", "model_path", "total_slots"):
        assert props[key] == expected[key], key
    assert props["model_path"] == str(model.absolute())
    assert props["chat_template_source"] in ("model", "builtin")
