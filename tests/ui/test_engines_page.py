"""Preferences ▸ Engines: add a connection, test it against real servers (``llamadesk
serve``, the stub servers of tests/remote), its key kept out of every file, plain http://
to another computer asked once, remove; bad input gets a sentence and changes nothing."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox
from pytestqt.qtbot import QtBot

from app import paths
from app.remote.saved import ApiKeys, load_connections
from app.storage.settings import AppSettings, load_settings, save_settings
from app.ui.engines_page import EnginesPage
from app.ui.preferences import PreferencesDialog
from tests.remote.stub_server import StubServer
from tests.support.gguf_models import TinySpec, write_tiny_model
from tests.support.serve_process import ServeProcess

pytestmark = pytest.mark.qt_log_ignore(r"This plugin does not support propagateSizeHints")

KEY = "sk-EnginesPageSecret0123456789"


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    model = write_tiny_model(
        tmp_path_factory.mktemp("models") / "tiny.gguf", TinySpec(n_ctx_train=2048)
    )
    proc = ServeProcess(
        [str(model), "--ctx-size", "2048", "--threads", "1"], tmp_path_factory.mktemp("home")
    )
    yield proc
    proc.stop()


@pytest.fixture
def stub() -> Iterator[StubServer]:
    server = StubServer("openai", api_key=KEY)
    yield server
    server.close()


@pytest.fixture
def page(qtbot: QtBot, home: Path) -> Iterator[tuple[EnginesPage, AppSettings, ApiKeys]]:
    settings = AppSettings()
    keys = ApiKeys(use_keyring=False)
    widget = EnginesPage(settings, save_settings, keys)
    qtbot.addWidget(widget)
    yield widget, settings, keys
    widget.shutdown()


def add(page: EnginesPage, name: str, url: str, key: str = "") -> None:
    page.name_edit.setText(name)
    page.url_edit.setText(url)
    page.key_edit.setText(key)
    page.add_button.click()


def saved_json() -> dict[str, object]:
    data: dict[str, object] = json.loads(paths.settings_path().read_text(encoding="utf-8"))
    return data


def test_a_llamadesk_server_is_added_tested_and_saved(
    qtbot: QtBot, page: tuple[EnginesPage, AppSettings, ApiKeys], serve: ServeProcess
) -> None:
    widget, settings, _ = page
    gui = threading.get_ident()
    probed_on: list[int] = []
    import app.ui.engines_page as module
    from app.remote.loader import probe_connection as real

    def watched(conn):  # type: ignore[no-untyped-def]
        probed_on.append(threading.get_ident())
        return real(conn)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "probe_connection", watched)
        add(widget, "serve-box", serve.url)
        qtbot.waitUntil(lambda: not widget.testing(), timeout=15000)
    assert probed_on and gui not in probed_on  # the probe ran off the GUI thread
    assert "serve-box answers: LlamaDesk" in widget.status.text()
    assert "tiny" in widget.status.text() and "context 2,048" in widget.status.text()
    (conn,) = load_connections(load_settings(AppSettings).remote_connections)
    assert (conn.name, conn.url, conn.kind, conn.n_ctx) == (
        "serve-box",
        serve.url,
        "LlamaDesk",
        2048,
    )
    assert conn.models and not conn.has_key
    assert widget.list.count() == 1 and "LlamaDesk, 1 model" in widget.list.item(0).text()
    assert settings.remote_connections == saved_json()["remote_connections"]


def test_the_key_goes_to_the_key_store_never_to_a_file(
    qtbot: QtBot, page: tuple[EnginesPage, AppSettings, ApiKeys], stub: StubServer
) -> None:
    widget, _, keys = page
    add(widget, "stub", stub.url, KEY)
    qtbot.waitUntil(lambda: not widget.testing(), timeout=15000)
    assert "stub answers: OpenAI-compatible" in widget.status.text()
    # what a plain server does not give is said
    assert "does not report prompt progress" in widget.status.text()
    assert widget.key_edit.text() == ""  # not left on screen
    assert KEY not in paths.settings_path().read_text(encoding="utf-8")
    (conn,) = widget.connections()
    assert conn.has_key and keys.get(conn.id) == KEY
    assert any(r.headers.get("Authorization") == f"Bearer {KEY}" for r in stub.requests)
    # no keyring here: the owner-only keys file, as for MCP secrets and the Hub token
    assert keys.persistent and "remote-keys.json" in keys.where()
    assert keys.path.stat().st_mode & 0o777 == 0o600 and KEY in keys.path.read_text()
    assert "remote-keys.json" in widget.key_edit.toolTip()


def test_a_wrong_key_is_said_and_the_connection_kept(
    qtbot: QtBot, page: tuple[EnginesPage, AppSettings, ApiKeys], stub: StubServer
) -> None:
    widget, _, _ = page
    add(widget, "stub", stub.url, "sk-wrong")
    qtbot.waitUntil(lambda: not widget.testing(), timeout=15000)
    assert "stub did not answer" in widget.status.text()
    assert "API key" in widget.status.text()
    (conn,) = widget.connections()
    assert conn.kind == ""  # not tested successfully: no models listed
    assert "not tested" in widget.list.item(0).text()


def test_a_server_that_is_down_gets_a_sentence(
    qtbot: QtBot, page: tuple[EnginesPage, AppSettings, ApiKeys]
) -> None:
    widget, _, _ = page
    server = StubServer("openai")
    url = server.url
    server.close()  # nothing listens there now
    add(widget, "gone", url)
    qtbot.waitUntil(lambda: not widget.testing(), timeout=20000)
    assert widget.status.text().startswith("gone did not answer:")
    assert widget.test_button.isEnabled()


@pytest.mark.parametrize(
    ("name", "url", "said"),
    [
        ("", "http://127.0.0.1:8080", "Give the connection a name"),
        ("box", "ftp://example.org", "is not a server address"),
        ("box", "http://127.0.0.1:port", "port"),
    ],
)
def test_bad_input_gets_a_sentence_and_adds_nothing(
    page: tuple[EnginesPage, AppSettings, ApiKeys], name: str, url: str, said: str
) -> None:
    widget, settings, _ = page
    add(widget, name, url)
    assert said in widget.status.text()
    assert widget.connections() == () and settings.remote_connections == []
    assert not paths.settings_path().exists()


def test_a_second_connection_of_the_same_name_is_refused(
    page: tuple[EnginesPage, AppSettings, ApiKeys], stub: StubServer, qtbot: QtBot
) -> None:
    widget, _, _ = page
    add(widget, "box", stub.url, KEY)
    qtbot.waitUntil(lambda: not widget.testing(), timeout=15000)
    add(widget, "Box", stub.url)
    assert "named 'Box' already" in widget.status.text()
    assert len(widget.connections()) == 1


def test_plain_http_to_another_computer_is_confirmed_once(
    qtbot: QtBot, page: tuple[EnginesPage, AppSettings, ApiKeys]
) -> None:
    widget, _, _ = page
    add(widget, "far", "http://gpu-box.invalid:8080", "sk-x")
    box = widget.confirmation()
    assert box is not None and "unencrypted" in box.text() and "API key" in box.text()
    box.button(QMessageBox.StandardButton.Cancel).click()
    qtbot.waitUntil(lambda: widget.confirmation() is None)
    assert widget.connections() == () and "was not added" in widget.status.text()

    add(widget, "far", "http://gpu-box.invalid:8080")
    box = widget.confirmation()
    assert box is not None
    box.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: not widget.testing() and widget.confirmation() is None, timeout=20000)
    (conn,) = widget.connections()
    assert conn.allow_insecure and not conn.needs_confirmation
    assert "far did not answer" in widget.status.text()  # no such host: a sentence
    widget.test_selected()  # testing again asks nothing
    assert widget.confirmation() is None
    qtbot.waitUntil(lambda: not widget.testing(), timeout=20000)
    assert load_connections(load_settings(AppSettings).remote_connections)[0].allow_insecure


def test_remove_forgets_the_connection_and_its_key(
    qtbot: QtBot, page: tuple[EnginesPage, AppSettings, ApiKeys], stub: StubServer
) -> None:
    widget, _, keys = page
    add(widget, "stub", stub.url, KEY)
    qtbot.waitUntil(lambda: not widget.testing(), timeout=15000)
    (conn,) = widget.connections()
    widget.select(conn.id)
    widget.remove_button.click()
    assert widget.connections() == () and widget.list.count() == 0
    widget.shutdown()  # the key is forgotten on the background job
    assert keys.get(conn.id) is None
    assert load_settings(AppSettings).remote_connections == []
    assert "was removed" in widget.status.text()


def test_the_preferences_dialog_has_the_engines_section(qtbot: QtBot, home: Path) -> None:
    dialog = PreferencesDialog(AppSettings(), save=save_settings)
    qtbot.addWidget(dialog)
    names = [dialog.tabs.tabText(i) for i in range(dialog.tabs.count())]
    assert "Engines" in names
    assert dialog.tabs.widget(names.index("Engines")) is dialog.engines_page
    dialog.engines_page.shutdown()
