"""Settings: typed defaults, JSON, atomic writes, fallbacks with warnings."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app import paths
from app.storage.settings import (
    AppSettings,
    SamplingDefaults,
    load_app_settings,
    load_settings,
    save_app_settings,
    save_settings,
)


def test_defaults_when_missing(home: Path) -> None:
    s = load_app_settings()
    assert s == AppSettings()
    d = s.default_sampling
    # One default per field, from the schema (the engine's, llama.cpp's): 0.8 and 1.0.
    assert (d.temperature, d.top_k, d.top_p, d.min_p, d.repeat_penalty) == (
        0.8,
        40,
        0.95,
        0.05,
        1.0,
    )
    assert (d.frequency_penalty, d.presence_penalty, d.seed, d.max_tokens, d.stop) == (
        0.0,
        0.0,
        -1,
        1024,
        [],
    )
    assert (
        s.state_quota_bytes == 4 * 1024**3
        and s.context_full_policy == "shift"
        and s.theme == "system"
    )
    assert SamplingDefaults().to_dict()["max_tokens"] == 1024


def test_round_trip_is_atomic_json(home: Path) -> None:
    s = AppSettings(
        last_model_path="/m/ü.gguf",
        default_system_prompt="Be kind.\nAlways.",
        default_sampling=SamplingDefaults(temperature=1.3, stop=["</s>", "User:"], seed=42),
        context={"n_ctx": 8192, "type_k": "q8_0"},
        theme="dark",
        window_geometry="AdnQywADAAA=",
    )
    save_app_settings(s)
    assert load_app_settings() == s
    assert json.loads(paths.settings_path().read_text("utf-8"))["default_sampling"]["seed"] == 42
    # no temp file left (.owner-only marks a data folder already made private)
    assert [p.name for p in home.iterdir() if p.name != ".owner-only"] == ["settings.json"]


def test_unknown_and_invalid_values_fall_back(home: Path, caplog: pytest.LogCaptureFixture) -> None:
    paths.settings_path().write_text(
        json.dumps(
            {
                "theme": "purple",
                "font_size": "12",
                "state_quota_bytes": -5,
                "send_with_enter": 1,
                "last_model_path": None,
                "default_system_prompt": "kept",
                "context_full_policy": "stop",
                "context": {"n_ctx": 4096},
                "from_the_future": True,
                "default_sampling": {"temperature": 2, "top_p": 7.0, "stop": ["a", 3], "x": 1},
            }
        ),
        "utf-8",
    )
    with caplog.at_level(logging.WARNING, logger="app.storage.settings"):
        s = load_app_settings()
    d = AppSettings()
    assert (s.theme, s.font_size, s.state_quota_bytes, s.send_with_enter) == (
        d.theme,
        d.font_size,
        d.state_quota_bytes,
        d.send_with_enter,
    )
    assert (s.default_system_prompt, s.context_full_policy, s.context) == (
        "kept",
        "stop",
        {"n_ctx": 4096},
    )
    assert s.default_sampling.temperature == 2.0 and isinstance(
        s.default_sampling.temperature, float
    )
    # top_p 7 is a number out of range: clamped; a non-text stop string: reset.
    assert s.default_sampling.top_p == 1.0 and s.default_sampling.stop == []
    text = caplog.text
    for name in [
        "theme",
        "font_size",
        "state_quota_bytes",
        "send_with_enter",
        "from_the_future",
        "default_sampling.top_p",
        "default_sampling.stop",
        "default_sampling.x",
    ]:
        assert name in text


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b"\xff\xfe\x00garbage", b""])
def test_corrupt_file_gives_defaults_and_is_kept(home: Path, content: bytes) -> None:
    paths.settings_path().write_bytes(content)
    assert load_app_settings() == AppSettings()
    if content == b"[1, 2]":  # valid JSON of the wrong shape: defaults, file left alone
        return
    assert (home / "settings.json.bad").read_bytes() == content
    assert not paths.settings_path().exists()
    save_app_settings(AppSettings(theme="light"))
    assert load_app_settings().theme == "light"


@dataclass
class Inner:
    ratio: float = 0.5
    names: list[str] = field(default_factory=lambda: ["a"])


@dataclass
class Custom:
    count: int = 3
    label: str | None = None
    inner: Inner = field(default_factory=Inner)
    table: dict[str, int] = field(default_factory=dict)


def test_generic_loader_for_any_nested_dataclass(tmp_path: Path) -> None:
    path = tmp_path / "custom.json"
    save_settings(Custom(count=9, label="x", inner=Inner(0.25, ["b"]), table={"k": 1}), path)
    assert load_settings(Custom, path) == Custom(9, "x", Inner(0.25, ["b"]), {"k": 1})
    path.write_text('{"count": true, "label": 5, "inner": "nope", "table": {"k": "v"}}')
    assert load_settings(Custom, path) == Custom()
    assert load_settings(Custom, tmp_path / "missing.json") == Custom()
    with pytest.raises(TypeError):
        save_settings({"not": "a dataclass"}, path)
