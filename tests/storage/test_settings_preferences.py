"""The Preferences' values in AppSettings: the new fields' checks on load, and the frozen
Preferences view (problems as sentences, apply in place, what changed)."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest

from app import paths
from app.storage.settings import (
    AppSettings,
    Preferences,
    SamplingDefaults,
    load_app_settings,
    save_app_settings,
)


def test_new_fields_round_trip_and_bad_values_fall_back(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = AppSettings(hub_endpoint="https://hf-mirror.com", font_size=14, send_with_enter=False)
    save_app_settings(s)
    assert load_app_settings() == s
    paths.settings_path().write_text(
        json.dumps({"hub_endpoint": "hf-mirror.com", "font_size": 3, "state_quota_bytes": -1}),
        "utf-8",
    )
    with caplog.at_level(logging.WARNING, logger="app.storage.settings"):
        loaded = load_app_settings()
    d = AppSettings()
    assert (loaded.hub_endpoint, loaded.font_size, loaded.state_quota_bytes) == (
        d.hub_endpoint,
        d.font_size,
        d.state_quota_bytes,
    )
    for name in ("hub_endpoint", "font_size", "state_quota_bytes"):
        assert name in caplog.text


def test_preferences_problems_are_sentences() -> None:
    good = Preferences.of(AppSettings())
    assert good.problems() == []
    bad = dataclasses.replace(
        good,
        theme="purple",  # type: ignore[arg-type]
        font_size=80,
        state_quota_bytes=-1,
        hub_endpoint="mirror",
        default_sampling=SamplingDefaults(temperature=9.0, stop=[""]),
    )
    problems = bad.problems()
    assert len(problems) == 6, problems
    assert all(p.endswith(".") and p[0].isupper() for p in problems)
    assert any("font size must be between 6 and 72" in p for p in problems)
    assert any("Temperature (temperature) must be between 0 and 5" in p for p in problems)
    assert any("Stop strings" in p for p in problems)


def test_apply_in_place_keeps_the_rest_and_copies_sampling() -> None:
    settings = AppSettings(window_geometry="g", last_model_path="/m.gguf")
    before = Preferences.of(settings)
    sampling = SamplingDefaults(top_k=7, stop=["x"])
    after = dataclasses.replace(before, font_size=12, default_sampling=sampling)
    assert after.changed(before) == {"font_size", "default_sampling"}
    after.apply_to(settings)
    assert settings.font_size == 12 and settings.default_sampling == sampling
    assert (settings.window_geometry, settings.last_model_path) == ("g", "/m.gguf")
    sampling.stop.append("y")  # the settings hold their own copy
    assert settings.default_sampling.stop == ["x"]
    assert Preferences.of(settings).changed(after) == {"default_sampling"}
