"""``llamadesk devices``, ``rpc-worker``'s refusal of open networks and the device flags'
sentences, in any build (with or without GPU or RPC backends)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app import crash_supervisor
from app.cli import main
from tests.support.arch_models import write_arch_model


def test_devices_json_lists_the_cpu_with_its_memory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    cpu = next(d for d in data["devices"] if d["type"] == "cpu")
    assert cpu["name"] == "CPU" and 0 < cpu["free_bytes"] <= cpu["total_bytes"]
    assert "cpu" in data["backends"]
    missing = {b["backend"] for b in data["available_builds"]}
    assert not missing & set(data["backends"])
    cuda = next((b for b in data["available_builds"] if b["backend"] == "cuda"), None)
    if cuda is not None:  # the reinstall keeps the RPC backend and bypasses pip's cache
        assert "-DGGML_RPC=on -DGGML_CUDA=on" in cuda["install"]
        assert "--no-cache-dir" in cuda["install"]


def test_devices_text_names_the_backends(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPU ") and "This build's backends: " in out


def test_no_gpu_device_means_auto_offloads_nothing(tmp_path: Path) -> None:
    """Whatever llama_supports_gpu_offload() says (true with RPC alone), Auto plans by the
    registry's devices: without a GPU or remote one, every layer stays on the CPU."""
    from app.engine.devices import list_devices
    from app.engine.metadata import read_model_info
    from app.engine.offload import place
    from app.engine.settings import ModelSettings

    if any(d.kind.offloads for d in list_devices()):
        pytest.skip("this machine has a GPU or a remote device")
    info = read_model_info(write_arch_model(tmp_path / "m.gguf", "llama"))
    placement = place(info, ModelSettings())
    assert placement.plan.n_gpu_layers == 0
    assert placement.plan.describe() == "All 2 layers on the CPU"
    assert [d["name"] for d in placement.to_dicts()] == ["CPU"]


def test_rpc_worker_refuses_an_open_address(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rpc-worker", "--host", "0.0.0.0", "--port", "50052"]) == 2
    err = capsys.readouterr().err
    assert "Refusing to listen on 0.0.0.0" in err and "--trusted-network" in err
    assert "SSH" in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--gpu-layers", "lots"], "--gpu-layers/-ngl: GPU layers must be auto, all, none"),
        (["--tensor-split", "a,b"], "--tensor-split: The tensor split must be numbers"),
        (["--rpc", "[::1]:5"], "--rpc: '[::1]:5': llama.cpp splits an endpoint"),
        (["--devices", "NOPE0", "--gpu-layers", "1"], "There is no device 'NOPE0'"),
    ],
)
def test_bad_device_flags_are_sentences(
    flags: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # In this process, not a forked child: `run` forks before it loads (app.crash_supervisor)
    # and a child of pytest that finds an error after the fork returned into pytest, which
    # then ran the rest of the suite a second time (415 s) while this test waited for it.
    monkeypatch.setenv(crash_supervisor.DISABLE_ENV, "1")
    model = write_arch_model(tmp_path / "m.gguf", "llama")
    code = main(["run", str(model), "hi", "--raw", "-n", "1", *flags])
    assert code == 2
    assert message in capsys.readouterr().err
