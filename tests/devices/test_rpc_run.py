"""Models split between the CPU and a real RPC device on loopback (``llamadesk rpc-worker``):
the same greedy tokens as the CPU alone, the plan checked against llama.cpp's allocation
log, and a worker killed or stopped mid-reply leaving a sentence and exit code 1."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.devices.conftest import ROOT, Worker, cli_env
from tests.support.arch_models import write_arch_model

FAMILIES = ("llama", "qwen3", "gemma3", "lfm2", "mamba2")
PROMPT = "hello there, how are you"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("device-models")
    return {a: write_arch_model(folder / f"{a}.gguf", a) for a in FAMILIES}


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(),
        cwd=ROOT,
    )


def _run_json(model: Path, *extra: str) -> dict[str, Any]:
    done = _cli("run", str(model), PROMPT, "--raw", "--json", "-n", "24", "--temp", "0", *extra)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_devices_lists_the_cpu_and_the_remote_device(worker: Worker) -> None:
    done = _cli("devices", "--rpc", worker.endpoint, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    kinds = {d["type"]: d for d in data["devices"]}
    assert "cpu" in kinds and "rpc" in data["backends"]
    remote = kinds["remote"]
    assert remote["endpoint"] == worker.endpoint and remote["name"].startswith("RPC")
    assert 0 < remote["free_bytes"] <= remote["total_bytes"]


def test_devices_says_a_dead_endpoint_in_a_sentence(need_rpc: None) -> None:
    from tests.devices.conftest import free_port

    done = _cli("devices", "--rpc", f"127.0.0.1:{free_port()}")
    assert done.returncode == 2
    assert re.search(r"Nothing listens on 127\.0\.0\.1:\d+", done.stderr), done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("arch", FAMILIES)
def test_split_over_cpu_and_rpc_gives_the_cpu_only_tokens(
    arch: str, models: dict[str, Path], worker: Worker
) -> None:
    cpu = _run_json(models[arch], "--gpu-layers", "none")
    split = _run_json(models[arch], "--rpc", worker.endpoint, "--gpu-layers", "2")
    assert split["results"][0]["tokens"] == cpu["results"][0]["tokens"]
    assert len(cpu["results"][0]["tokens"]) == 24
    by_name = {d["name"]: d for d in split["devices"]}
    remote = next(d for d in split["devices"] if d["type"] == "remote")
    assert remote["endpoint"] == worker.endpoint
    assert remote["layers"] == [1] and remote["output_layer"]
    assert by_name["CPU"]["layers"] == [0]
    assert split["plan"] == f"1 of 2 layers on {remote['name']} ({worker.endpoint}), 1 on the CPU"
    assert [d["name"] for d in cpu["devices"]] == ["CPU"]


def test_all_layers_on_the_rpc_device(models: dict[str, Path], worker: Worker) -> None:
    cpu = _run_json(models["llama"], "--gpu-layers", "none")
    remote = _run_json(models["llama"], "--rpc", worker.endpoint)  # auto: it all fits
    assert remote["results"][0]["tokens"] == cpu["results"][0]["tokens"]
    device = next(d for d in remote["devices"] if d["type"] == "remote")
    assert device["layers"] == [0, 1] and device["output_layer"]


_ALLOC = """
import json, logging, sys
lines = []
class Keep(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())
logging.getLogger("llama.cpp").addHandler(Keep())
logging.getLogger("llama.cpp").setLevel(logging.DEBUG)
from app.engine.model import Model
from app.engine.settings import ModelSettings
m = Model(sys.argv[1], ModelSettings(rpc_servers=sys.argv[2], gpu_layers=sys.argv[3],
          tensor_split=sys.argv[4]))
print(json.dumps({"plan": m.placement.plan.to_dict(), "log": lines}))
m.close()
"""


@pytest.mark.parametrize(
    ("gpu_layers", "split"), [("1", ""), ("2", ""), ("all", "1,1"), ("all", "1,2"), ("auto", "")]
)
def test_the_plan_is_what_llama_cpp_allocates(
    gpu_layers: str,
    split: str,
    models: dict[str, Path],
    worker: Worker,
    make_worker: Callable[[], Worker],
) -> None:
    endpoints = worker.endpoint
    if split:
        endpoints += "," + make_worker().endpoint
    done = subprocess.run(
        [sys.executable, "-c", _ALLOC, str(models["qwen3"]), endpoints, gpu_layers, split],
        capture_output=True,
        text=True,
        timeout=240,
        env=cli_env(),
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    logged = {
        int(m.group(1)): m.group(2)
        for line in data["log"]
        if (m := re.search(r"layer\s+(\d+) assigned to device (\S+),", line))
    }
    plan = data["plan"]
    planned = [*plan["layers"], plan["output_layer"]]
    assert logged == dict(enumerate(planned))
    if split == "1,1":  # 3 layers over two devices at 1:1: positions 0, 1/3 | 2/3
        assert planned[0] == planned[1] != planned[2] != "CPU"
    if split == "1,2":  # split point 1/3: position 0 | 1/3, 2/3
        assert planned[0] != planned[1] == planned[2] != "CPU"


def _start_long_run(model: Path, endpoint: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "app", "run", str(model), PROMPT, "--raw", "-n", "4000"),
            *("-c", "4096", "--temp", "0", "--rpc", endpoint, "--gpu-layers", "all"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
        cwd=ROOT,
    )


def _wait_for_text(run: subprocess.Popen[str]) -> str:
    assert run.stdout is not None
    deadline = time.monotonic() + 120
    seen = ""
    while len(seen) < 20:
        seen += run.stdout.read(1)
        assert time.monotonic() < deadline, "no reply text"
        assert run.poll() is None or seen, "the run ended before replying"
    return seen


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_a_worker_gone_mid_reply_ends_the_run_with_a_sentence(
    how: str, models: dict[str, Path], make_worker: Callable[[], Worker]
) -> None:
    w = make_worker()
    run = _start_long_run(models["llama"], w.endpoint)
    try:
        first = _wait_for_text(run)
        w.process.send_signal(signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        t0 = time.monotonic()
        out, err = run.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode in (1, 2), err
    assert elapsed < 60
    assert "Traceback" not in err
    assert w.endpoint in err
    if how == "kill":
        assert "failed mid-run" in err and "What was printed of the reply is kept" in err
    else:
        assert "stopped answering" in err
    assert len(first + out) >= 20  # the partial reply stayed on stdout


def test_inspect_fit_says_the_plan(models: dict[str, Path], worker: Worker) -> None:
    done = _cli("inspect", str(models["llama"]), "--fit", "--rpc", worker.endpoint, "--json")
    assert done.returncode == 0, done.stderr
    fit = json.loads(done.stdout)["fit"]
    assert fit["auto"] and fit["n_gpu_layers"] == 3  # a loopback worker has room for it all
    remote = next(d for d in fit["devices"] if d["type"] == "remote")
    assert remote["layers"] == [0, 1] and remote["endpoint"] == worker.endpoint
    assert fit["plan"] == f"2 of 2 layers on {remote['name']} ({worker.endpoint})"


def _connected_to(port: int) -> bool:
    """An established TCP connection to ``port`` on this machine (llama.cpp's RPC client
    keeps one open while it loads and decodes)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01":  # 01: ESTABLISHED
                return True
    return False


def test_a_worker_killed_mid_run_leaves_json_output_clean(
    models: dict[str, Path], make_worker: Callable[[], Worker]
) -> None:
    # llama.cpp aborts the model process when its worker goes; without GGML_NO_BACKTRACE
    # ggml attaches gdb and its backtrace lands on stdout, in the middle of --json.
    w = make_worker()
    port = int(w.endpoint.rsplit(":", 1)[1])
    run = subprocess.Popen(
        [
            *(sys.executable, "-m", "app", "run", str(models["llama"]), PROMPT, "--raw"),
            *("--json", "-n", "4000", "-c", "4096", "--temp", "0"),
            *("--rpc", w.endpoint, "--gpu-layers", "all"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120
        held_since: float | None = None
        while held_since is None or time.monotonic() - held_since < 2.0:
            assert run.poll() is None, run.communicate()[1]
            assert time.monotonic() < deadline, "the run never kept a connection to the worker"
            if _connected_to(port):
                held_since = held_since or time.monotonic()
            else:
                held_since = None
            time.sleep(0.1)
        w.process.kill()
        out, err = run.communicate(timeout=90)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, err
    assert "failed mid-run" in err, err
    assert "Traceback" not in err
    # nothing but JSON on stdout: here, no object at all (the run failed), and no backtrace
    if out.strip():
        json.loads(out)
    assert "#0" not in out + err and "gdb" not in (out + err).lower()
