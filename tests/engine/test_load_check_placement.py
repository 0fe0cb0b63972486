"""The load check's verdict holds for one placement of the model (devices, split,
tensor split, RPC workers, mmap/mlock, GPU layers): another placement is checked again,
in a child that places the model as the app does (issue 27 review, item 13)."""

from __future__ import annotations

from pathlib import Path

from app.engine import ModelSettings, load_check
from app.engine.metadata import read_model_header
from tests.support.gguf_models import TinySpec, write_tiny_model


def test_another_placement_is_checked_again(tmp_path: Path) -> None:
    model = write_tiny_model(tmp_path / "model.gguf", TinySpec(seed=13))
    _, header = read_model_header(model)
    load_check.forget()
    mapped = load_check.placement_of(ModelSettings())
    read_in = load_check.placement_of(ModelSettings(use_mmap=False))
    assert load_check.check(model, header, placement=mapped).source == "child"
    assert load_check.check(model, header, placement=read_in).source == "child"
    assert load_check.check(model, header, placement=mapped).source == "memory"
    assert load_check.check(model, header, placement=read_in).source == "memory"
    more_layers = load_check.check(model, header, placement=mapped, n_gpu_layers=99)
    assert more_layers.source == "child"
    assert len(list(load_check.cache_dir().glob("*.json"))) == 3


def test_the_child_places_the_model_as_the_app_does(tmp_path: Path) -> None:
    """A placement on a device this computer lacks: the child resolves the devices as
    Model does and cannot (no verdict on the file, nothing kept), where a child that
    ignored the placement would have passed the CPU load."""
    model = write_tiny_model(tmp_path / "model.gguf", TinySpec(seed=14))
    _, header = read_model_header(model)
    load_check.forget()
    missing = load_check.placement_of(ModelSettings(devices="NoSuchDevice0", gpu_layers="all"))
    verdict = load_check.check(model, header, placement=missing)
    assert verdict.ok and verdict.source == "unchecked"
    assert list(load_check.cache_dir().glob("*.json")) == []
