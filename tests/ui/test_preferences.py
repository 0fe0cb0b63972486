"""Preferences: values round-trip through settings.json, bad input gets a sentence and
changes nothing, the token is stored but never shown, the endpoint reaches the Hub client."""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QLineEdit, QPlainTextEdit, QSpinBox
from pytestqt.qtbot import QtBot

from app import paths
from app.hub import config
from app.hub.client import HubClient
from app.hub.errors import HubError
from app.storage.settings import (
    AppSettings,
    Preferences,
    SamplingDefaults,
    load_settings,
    save_settings,
)
from app.ui.preferences import PreferencesChange, PreferencesDialog
from tests.hub.fake_hub import FakeHub
from tests.support.gguf_models import write_tiny_model

pytestmark = pytest.mark.qt_log_ignore(r"This plugin does not support propagateSizeHints")

TOKEN = "hf_SecretTokenValue0123456789"


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)


def _store() -> config.TokenStore:
    # Never the real keyring in tests: the private file under the test's LLAMADESK_HOME.
    return config.TokenStore(use_keyring=False)


def _dialog(qtbot: QtBot, settings: AppSettings, **kwargs: object) -> PreferencesDialog:
    dialog = PreferencesDialog(settings, token_store=_store(), **kwargs)  # type: ignore[arg-type]
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.token_state() is not None and not dialog.token_busy())
    return dialog


def _on_disk() -> dict[str, object]:
    data = json.loads(paths.settings_path().read_text("utf-8"))
    assert isinstance(data, dict)
    return data


def test_values_round_trip_through_the_file_and_announce_what_changed(qtbot: QtBot) -> None:
    settings = AppSettings(window_geometry="kept", context={"n_ctx": 1024})
    save_settings(settings)
    used: list[int] = []

    def usage() -> int:
        used.append(1)
        return 5 * 1024**2

    dialog = _dialog(qtbot, settings, state_usage=usage)
    qtbot.waitUntil(lambda: dialog.usage_label.text() == "5.00 MiB")
    assert used == [1]  # measured once, on the background thread
    changes: list[PreferencesChange] = []
    dialog.applied.connect(changes.append)

    dialog.theme_combo.setCurrentIndex(dialog.theme_combo.findData("dark"))
    dialog.font_spin.setValue(15)
    qtbot.mouseClick(dialog.ctrl_enter_sends, Qt.MouseButton.LeftButton)
    dialog.restore_check.setChecked(False)
    dialog.system_prompt.setPlainText("You are terse.")
    temperature = dialog.sampling["temperature"]
    max_tokens = dialog.sampling["max_tokens"]
    assert isinstance(max_tokens, QSpinBox)
    temperature.setValue(0.3)  # type: ignore[attr-defined]
    max_tokens.setValue(256)
    dialog.stop_edit.setPlainText("</s>\n\nUser:")
    dialog.quota_spin.setValue(1.5)
    dialog.endpoint_edit.setText(" https://mirror.example/ ")
    qtbot.mouseClick(dialog.ok_button, Qt.MouseButton.LeftButton)
    assert not dialog.isVisible()

    assert len(changes) == 1
    assert changes[0].changed == {
        "theme",
        "font_size",
        "send_with_enter",
        "restore_tabs",
        "default_system_prompt",
        "default_sampling",
        "state_quota_bytes",
        "hub_endpoint",
    }
    # The window's own object was updated in place, and the file says the same.
    loaded = load_settings(AppSettings)
    assert loaded == settings
    assert (loaded.theme, loaded.font_size, loaded.send_with_enter, loaded.restore_tabs) == (
        "dark",
        15,
        False,
        False,
    )
    assert loaded.default_system_prompt == "You are terse."
    assert loaded.default_sampling.temperature == 0.3
    assert loaded.default_sampling.max_tokens == 256
    assert loaded.default_sampling.stop == ["</s>", "User:"]
    assert loaded.state_quota_bytes == 3 * 1024**3 // 2
    assert loaded.hub_endpoint == "https://mirror.example"
    assert (loaded.window_geometry, loaded.context) == ("kept", {"n_ctx": 1024})

    # A new dialog shows what was saved; Cancel after edits changes nothing.
    again = _dialog(qtbot, loaded)
    assert again.preferences() == Preferences.of(loaded)
    again.font_spin.setValue(30)
    qtbot.mouseClick(again.cancel_button, Qt.MouseButton.LeftButton)
    assert load_settings(AppSettings).font_size == 15 and loaded.font_size == 15


def test_ok_without_edits_changes_no_value_the_editors_round(qtbot: QtBot) -> None:
    settings = AppSettings(
        state_quota_bytes=1_000_000_000,  # 0.93 GiB in the editor
        default_sampling=SamplingDefaults(temperature=0.333, top_p=0.125),
    )
    before = Preferences.of(settings)
    dialog = _dialog(qtbot, settings)
    changes: list[PreferencesChange] = []
    dialog.applied.connect(changes.append)
    qtbot.mouseClick(dialog.ok_button, Qt.MouseButton.LeftButton)
    assert changes and changes[0].changed == frozenset()
    assert Preferences.of(settings) == before
    assert dialog.status.text() == "Saved (nothing had changed)."


@pytest.mark.parametrize(
    ("edit", "sentence"),
    [
        (lambda d: d.font_spin.setValue(3), "font size must be between 6 and 72"),
        (lambda d: d.endpoint_edit.setText("ftp://mirror"), "must be a web address"),
        (lambda d: d.endpoint_edit.setText("https://a b"), "must not contain spaces"),
        (lambda d: d.sampling["max_tokens"].setValue(0), "Max tokens (max_tokens) must be -1"),
    ],
)
def test_invalid_input_is_refused_with_a_sentence(
    qtbot: QtBot, edit: object, sentence: str
) -> None:
    settings = AppSettings()
    save_settings(settings)
    before = paths.settings_path().read_bytes()
    dialog = _dialog(qtbot, settings)
    changes: list[PreferencesChange] = []
    dialog.applied.connect(changes.append)
    dialog.system_prompt.setPlainText("an edit that must not be saved either")
    edit(dialog)  # type: ignore[operator]
    qtbot.mouseClick(dialog.ok_button, Qt.MouseButton.LeftButton)
    assert dialog.isVisible(), "the dialog stays open with what was typed"
    assert sentence in dialog.status.text()
    assert dialog.system_prompt.toPlainText() == "an edit that must not be saved either"
    assert paths.settings_path().read_bytes() == before
    assert settings == AppSettings() and not changes


def test_a_failed_save_says_so_and_changes_nothing(qtbot: QtBot, tmp_path: Path) -> None:
    settings = AppSettings()
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")

    def save(s: AppSettings) -> None:
        save_settings(s, blocker / "settings.json")  # a file where a folder should be

    dialog = _dialog(qtbot, settings, save=save)
    dialog.font_spin.setValue(20)
    qtbot.mouseClick(dialog.apply_button, Qt.MouseButton.LeftButton)
    assert "Could not save the settings" in dialog.status.text()
    assert settings.font_size == 0  # not half-applied


def _texts(dialog: PreferencesDialog) -> str:
    parts = [w.text() for w in dialog.findChildren(QLabel)]
    parts += [w.text() for w in dialog.findChildren(QLineEdit)]
    parts += [w.toPlainText() for w in dialog.findChildren(QPlainTextEdit)]
    parts += [w.toolTip() for w in dialog.findChildren(QLabel)]
    return "\n".join(parts)


def test_the_token_is_stored_never_shown_and_removed(
    qtbot: QtBot, caplog: pytest.LogCaptureFixture
) -> None:
    settings = AppSettings()
    dialog = _dialog(qtbot, settings)
    assert dialog.token_label.text() == "No token is saved."
    assert dialog.remove_token_button.isHidden()
    assert dialog.token_edit.echoMode() == QLineEdit.EchoMode.Password
    caplog.set_level(logging.DEBUG)

    qtbot.keyClicks(dialog.token_edit, TOKEN)
    qtbot.mouseClick(dialog.apply_button, Qt.MouseButton.LeftButton)
    assert dialog.token_edit.text() == ""  # out of the field at once
    qtbot.waitUntil(lambda: not dialog.token_busy())
    state = dialog.token_state()
    assert state is not None and state.saved and state.error is None
    assert dialog.token_label.text().startswith("A token is saved (in ")
    assert not dialog.remove_token_button.isHidden()
    token_file = paths.data_dir() / "hub-token"
    assert token_file.read_text() == TOKEN
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert _store().get() == TOKEN
    # Not in the dialog, not in settings.json, not in the log.
    assert TOKEN not in _texts(dialog)
    assert TOKEN not in paths.settings_path().read_text("utf-8")
    assert TOKEN not in caplog.text

    # A new dialog says a token is saved, without showing it.
    again = _dialog(qtbot, settings)
    assert again.token_label.text().startswith("A token is saved")
    assert again.token_edit.text() == "" and TOKEN not in _texts(again)
    # Remove takes effect at OK, not before.
    qtbot.mouseClick(again.remove_token_button, Qt.MouseButton.LeftButton)
    assert _store().has_saved()
    qtbot.mouseClick(again.ok_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not again.isVisible(), timeout=5000)
    assert not _store().has_saved() and not token_file.exists()


def test_hf_token_from_the_environment_is_named(
    qtbot: QtBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    dialog = _dialog(qtbot, AppSettings())
    assert dialog.token_label.text() == "No token is saved. HF_TOKEN from the environment is used."
    assert TOKEN not in _texts(dialog)


@pytest.fixture
def private_hub(tmp_path: Path) -> Iterator[FakeHub]:
    server = FakeHub(token=TOKEN).start()
    server.add_repo("acme/Private-GGUF", private=True)
    server.add_file("acme/Private-GGUF", "p-Q8_0.gguf", write_tiny_model(tmp_path / "p.gguf"))
    yield server
    server.stop()


def test_the_endpoint_and_token_set_here_are_what_the_hub_client_uses(
    qtbot: QtBot, private_hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = AppSettings()
    dialog = _dialog(qtbot, settings)
    assert "HF_ENDPOINT, when set, wins" in dialog.endpoint_note.text()
    dialog.endpoint_edit.setText(private_hub.url + "/")
    qtbot.keyClicks(dialog.token_edit, TOKEN)
    qtbot.mouseClick(dialog.ok_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=5000)

    assert config.resolve_endpoint() == (private_hub.url, config.EndpointSource.SETTING)
    details = HubClient(token=_store().get()).details("acme/Private-GGUF")
    assert [e.name for e in details.entries] == ["p-Q8_0.gguf"]
    assert private_hub.requests, "the request went to the endpoint set in Preferences"
    sent = [
        {k.lower(): v for k, v in r.headers.items()}.get("authorization")
        for r in private_hub.requests
        if r.path.startswith("/api/models/")
    ]
    assert sent and all(value == f"Bearer {TOKEN}" for value in sent), sent
    with pytest.raises(HubError):  # without the token the private repository is hidden
        HubClient(token=None).details("acme/Private-GGUF")

    # HF_ENDPOINT, when set, wins, and the dialog says so.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert config.resolve_endpoint() == ("http://127.0.0.1:9", config.EndpointSource.ENVIRONMENT)
    again = _dialog(qtbot, settings)
    assert "HF_ENDPOINT is set to http://127.0.0.1:9" in again.endpoint_note.text()
    assert again.endpoint_edit.text() == private_hub.url
    assert os.environ["HF_ENDPOINT"] == "http://127.0.0.1:9"
