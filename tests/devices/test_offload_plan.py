"""The offload planner on plain numbers and on a real file's tensor sizes (the check against
llama.cpp's own allocation log needs an RPC device: tests/devices/test_rpc_run.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.gguf_header import read_header
from app.engine.offload_plan import (
    CPU,
    LayerSizes,
    PlanDevice,
    assign_layers,
    layer_sizes,
    plan,
)
from app.settings_schema.device_fields import parse_gpu_layers, parse_tensor_split
from tests.support.arch_models import write_arch_model

GiB = 1 << 30
MiB = 1 << 20


def test_assignment_follows_llama_cpp_last_layers_first() -> None:
    # 4 repeating layers + output; N = 2: layer 3 and the output go to the device.
    assert assign_layers(4, 2, ("RPC0",), (1.0,)) == (CPU, CPU, CPU, "RPC0", "RPC0")
    assert assign_layers(4, 0, ("RPC0",), (1.0,)) == (CPU,) * 5
    assert assign_layers(4, -1, ("RPC0",), (1.0,)) == ("RPC0",) * 5
    assert assign_layers(4, 99, ("RPC0",), (1.0,)) == ("RPC0",) * 5
    assert assign_layers(4, 4, (), ()) == (CPU,) * 5  # no device: all on the CPU


def test_assignment_splits_by_cumulative_proportions() -> None:
    # 5 offloaded layers over two devices 3:2 -> split point 0.6: positions 0,1,2 (0, 0.2,
    # 0.4) < 0.6 on A, 0.6 and 0.8 on B (upper_bound: equal goes to the next).
    assert assign_layers(4, -1, ("A", "B"), (3.0, 2.0)) == ("A", "A", "A", "B", "B")
    assert assign_layers(4, -1, ("A", "B"), (0.0, 1.0)) == ("B",) * 5


def _sizes(n: int = 28, layer: int = 100 * MiB, output: int = 200 * MiB) -> LayerSizes:
    return LayerSizes((layer,) * n, output, 150 * MiB)


def test_auto_fits_the_most_layers_with_a_gib_to_spare() -> None:
    # 2.5 GiB free -> 1.5 GiB budget: output (200 MiB) + k layers of 100 MiB + ctx share.
    devices = (PlanDevice("RPC0", "RPC0 (127.0.0.1:50052)", int(2.5 * GiB)),)
    p = plan(_sizes(), context_bytes=28 * 10 * MiB, devices=devices, gpu_layers=None)
    offloaded = p.layers_on("RPC0")
    assert p.assignment[-1] == "RPC0"
    assert 200 * MiB + offloaded * 110 * MiB <= 1.5 * GiB < 200 * MiB + (offloaded + 1) * 110 * MiB
    assert p.n_gpu_layers == offloaded + 1
    assert p.describe().startswith(
        f"{offloaded} of 28 layers on RPC0 (127.0.0.1:50052), {28 - offloaded} on the CPU."
    )
    assert "1.00 GiB free" in p.describe()
    assert dict(p.device_bytes)["RPC0"] <= 1.5 * GiB


def test_auto_puts_everything_on_a_large_device_and_nothing_on_a_full_one() -> None:
    big = plan(_sizes(), 0, (PlanDevice("CUDA0", "CUDA0", 40 * GiB),), None)
    assert big.n_gpu_layers == 29 and big.describe() == "28 of 28 layers on CUDA0"
    full = plan(_sizes(), 0, (PlanDevice("CUDA0", "CUDA0", GiB // 2),), None)
    assert full.n_gpu_layers == 0 and full.describe().startswith("All 28 layers on the CPU.")


def test_auto_over_two_devices_splits_by_what_each_can_hold() -> None:
    devices = (PlanDevice("RPC0", "RPC0", 3 * GiB), PlanDevice("RPC1", "RPC1", 2 * GiB))
    p = plan(_sizes(), 0, devices, None)
    used = dict(p.device_bytes)
    assert used["RPC0"] <= 2 * GiB and used["RPC1"] <= 1 * GiB
    assert p.layers_on("RPC0") > p.layers_on("RPC1") > 0
    assert p.splits == (2.0 * GiB, 1.0 * GiB)


def test_a_fixed_count_is_kept_whatever_fits() -> None:
    p = plan(_sizes(), 0, (PlanDevice("RPC0", "RPC0", GiB),), gpu_layers=10)
    assert p.n_gpu_layers == 10 and p.layers_on("RPC0") == 9 and not p.auto
    assert p.assignment[:19] == (CPU,) * 19


def test_layer_sizes_from_a_real_file(tmp_path: Path) -> None:
    path = write_arch_model(tmp_path / "m.gguf", "llama")
    header = read_header(path)
    sizes = layer_sizes(header, 2)
    total = sum(t.n_bytes or 0 for t in header.tensors)
    tied = "output.weight" not in {t.name for t in header.tensors}
    embd = next(t.n_bytes or 0 for t in header.tensors if t.name == "token_embd.weight")
    assert sum(sizes.layers) + sizes.output + sizes.input == total + (embd if tied else 0)
    assert sizes.layers[0] == sizes.layers[1] > 0


@pytest.mark.parametrize(
    ("text", "value"), [("auto", None), ("ALL", -1), ("none", 0), (" 12 ", 12)]
)
def test_gpu_layers_texts(text: str, value: int | None) -> None:
    assert parse_gpu_layers(text) == value


@pytest.mark.parametrize("text", ["-1", "lots", "1.5", "2000"])
def test_bad_gpu_layers_are_sentences(text: str) -> None:
    with pytest.raises(ValueError, match="auto, all, none or a number"):
        parse_gpu_layers(text)


def test_tensor_split_texts() -> None:
    assert parse_tensor_split("") == ()
    assert parse_tensor_split("3, 1") == (3.0, 1.0)
    for bad in ("a,b", "-1,2", "0,0", "nan"):
        with pytest.raises(ValueError, match="tensor split"):
            parse_tensor_split(bad)
