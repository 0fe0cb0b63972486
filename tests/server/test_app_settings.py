"""The in-app server's settings file (``server.json``): round trip, damage, bad values."""

from __future__ import annotations

import json
from pathlib import Path

from app.server import app_settings
from app.server.app_settings import ServerAppSettings, generate_key


def test_round_trip_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "server.json"
    assert app_settings.load(path) == (ServerAppSettings(), None)
    assert not ServerAppSettings().allow_other_devices
    assert not ServerAppSettings().start_with_app  # the app never serves by itself
    key = generate_key()
    wanted = ServerAppSettings(port=1234, allow_other_devices=True, api_key=key)
    app_settings.save(wanted, path)
    assert app_settings.load(path) == (wanted, None)
    assert path.stat().st_mode & 0o077 == 0  # it holds the key: the owner's only
    assert wanted.host == "0.0.0.0" and ServerAppSettings().host == "127.0.0.1"
    assert generate_key() != key


def test_damaged_or_wrong_values_fall_back_to_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "server.json"
    path.write_text("{broken")
    settings, warning = app_settings.load(path)
    assert settings == ServerAppSettings()
    assert warning is not None and "damaged" in warning and str(path) in warning
    assert path.read_text() == "{broken"  # kept until the user changes a setting
    path.write_text(json.dumps([1, 2]))
    assert app_settings.load(path)[0] == ServerAppSettings()
    path.write_text(
        json.dumps(
            {
                "port": 99999,
                "allow_other_devices": "yes",
                "api_key": 5,
                "start_with_app": 1,
                "extra": True,
            }
        )
    )
    assert app_settings.load(path) == (ServerAppSettings(), None)
    path.write_text(json.dumps({"port": True}))
    assert app_settings.load(path)[0].port == app_settings.DEFAULT_PORT


def test_problems_are_sentences() -> None:
    assert ServerAppSettings().problem() is None
    need_key = ServerAppSettings(allow_other_devices=True).problem()
    assert need_key is not None and "Generate key" in need_key
    assert ServerAppSettings(allow_other_devices=True, api_key="k").problem() is None
    spaced = ServerAppSettings(api_key="a key").problem()
    assert spaced is not None and "spaces" in spaced
    port = ServerAppSettings(port=70000).problem()
    assert port is not None and "65535" in port
