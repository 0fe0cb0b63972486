"""Where the Hub is (argument, HF_ENDPOINT, the Preferences' setting, the default) and the
token store (saved here vs HF_TOKEN)."""

from __future__ import annotations

import stat

import pytest

from app import paths
from app.hub import config
from app.hub.config import EndpointSource, resolve_endpoint
from app.storage.settings import AppSettings, load_settings, save_settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)


def test_endpoint_order_argument_environment_setting_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert resolve_endpoint() == (config.DEFAULT_ENDPOINT, EndpointSource.DEFAULT)
    save_settings(AppSettings(hub_endpoint="https://mirror.example"))
    assert resolve_endpoint() == ("https://mirror.example", EndpointSource.SETTING)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:8080/ ")
    assert resolve_endpoint() == ("http://127.0.0.1:8080", EndpointSource.ENVIRONMENT)
    assert resolve_endpoint("https://cli.example/") == (
        "https://cli.example",
        EndpointSource.EXPLICIT,
    )
    monkeypatch.setenv("HF_ENDPOINT", "  ")  # set but empty: not an address
    assert config.endpoint() == "https://mirror.example"


def test_an_invalid_stored_endpoint_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    paths.settings_path().parent.mkdir(parents=True, exist_ok=True)
    paths.settings_path().write_text('{"hub_endpoint": "ftp://nope"}', "utf-8")
    assert resolve_endpoint() == (config.DEFAULT_ENDPOINT, EndpointSource.DEFAULT)
    # The app's load says so (the Hub's read on a download thread stays quiet).
    assert load_settings(AppSettings).hub_endpoint == ""
    assert "hub_endpoint" in caplog.text
    paths.settings_path().write_text("{damaged", "utf-8")
    assert config.endpoint() == config.DEFAULT_ENDPOINT
    assert paths.settings_path().exists(), "left for the app to report and set aside"


def test_saved_token_is_private_and_told_apart_from_hf_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = config.TokenStore(use_keyring=False)
    monkeypatch.setenv("HF_TOKEN", "hf_from_env")
    assert store.get() == "hf_from_env" and not store.has_saved()
    store.set("  hf_saved  ")
    token_file = paths.data_dir() / "hub-token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert store.saved() == "hf_saved" and store.get() == "hf_saved" and store.has_saved()
    store.clear()
    assert not token_file.exists() and store.get() == "hf_from_env"
    store.set("")  # an empty token is a removal
    assert not store.has_saved()
