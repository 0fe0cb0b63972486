"""SettingsPanel: fields round-trip, inline validation, the KV estimate, Apply, presets,
basic and advanced sections, the context the model really runs at (from a real load),
"Stop all and apply", feedback after Apply, and a 640 px wide dialog."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSpinBox,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QInputDialog,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QWidget,
)
from pytestqt.qtbot import QtBot

from app.engine.metadata import ModelInfo, read_model_info
from app.engine.settings import ContextSettings, SamplingParams
from app.session import LoadedModel, Session
from app.session import events as ev
from app.settings_schema import BASIC_CONTEXT_FIELDS, CONTEXT_FIELDS
from app.ui.settings_panel import FROM_MODEL, SettingsPanel, format_bytes
from tests.support.gguf_models import TinySpec, write_tiny_model

# The offscreen platform warns when a shown top-level window gets size hints.
pytestmark = pytest.mark.qt_log_ignore(r"This plugin does not support propagateSizeHints")


def model_info(head_dim: int = 128, n_layer: int = 32, n_head_kv: int = 8) -> ModelInfo:
    """A made-up 8B-like model (no file needed for the panel)."""
    return ModelInfo(
        path="/models/test-8b.gguf",
        size_bytes=4_920_000_000,
        architecture="llama",
        name="Test 8B",
        n_params=8_030_000_000,
        file_type="Q4_K_M",
        n_ctx_train=8192,
        n_layer=n_layer,
        n_embd=4096,
        n_head=32,
        n_head_kv=n_head_kv,
        head_dim_k=head_dim,
        head_dim_v=head_dim,
        n_vocab=128256,
        tokenizer="gpt2",
        chat_template="{{ messages }}",
        bos_token="<s>",
        eos_token="</s>",
        bos_token_id=1,
        eos_token_id=2,
        has_encoder=False,
    )


@pytest.fixture(autouse=True)
def advanced_closed() -> Iterator[None]:
    """Each test starts with the "Advanced" section closed (the panel remembers it)."""
    SettingsPanel.advanced_open = False
    yield
    SettingsPanel.advanced_open = False


def make_panel(
    qtbot: QtBot, settings: ContextSettings | None = None, **kwargs: Any
) -> SettingsPanel:
    panel = SettingsPanel(settings or ContextSettings(n_threads=4, n_threads_batch=4), **kwargs)
    qtbot.addWidget(panel)
    return panel


# -- layout checks (also used by the model manager's tests) ------------------------------

_CONTROLS = (QLabel, QAbstractButton, QAbstractSpinBox, QComboBox, QProgressBar, QAbstractItemView)


def controls(container: QWidget, skip: tuple[QWidget, ...] = ()) -> list[QWidget]:
    """The visible controls inside ``container`` (not the parts of a control, such as a spin
    box's line edit or a table's header, and nothing inside ``skip``)."""
    found: list[QWidget] = []
    for widget in container.findChildren(QWidget):
        if not isinstance(widget, _CONTROLS) or not widget.isVisibleTo(container):
            continue
        parent = widget.parentWidget()
        inside = False
        while parent is not None and parent is not container:
            if isinstance(parent, _CONTROLS) or parent in skip:
                inside = True
                break
            parent = parent.parentWidget()
        if not inside and widget not in skip:
            found.append(widget)
    return found


def assert_laid_out(container: QWidget, skip: tuple[QWidget, ...] = ()) -> int:
    """No two controls overlap, each lies inside ``container``'s width, and no label's text
    is cut (a wrapped label is tall enough for its lines; ``Ignored`` ones may elide).
    Returns how many controls were checked."""
    from PySide6.QtCore import QRect
    from PySide6.QtWidgets import QSizePolicy

    items = controls(container, skip)
    rects: list[tuple[QWidget, QRect]] = []
    for widget in items:
        rect = QRect(widget.mapTo(container, widget.rect().topLeft()), widget.size())
        assert rect.left() >= 0 and rect.right() < container.width(), (
            f"{widget.objectName() or type(widget).__name__} sticks out: {rect} in "
            f"{container.width()} px"
        )
        if isinstance(widget, QLabel) and widget.text():
            policy = widget.sizePolicy().horizontalPolicy()
            if widget.wordWrap():
                need = widget.heightForWidth(widget.width())
                assert need <= widget.height() + 1, (widget.text()[:60], need, widget.height())
            elif policy is not QSizePolicy.Policy.Ignored:
                need = widget.minimumSizeHint().width()
                assert need <= widget.width(), (widget.text()[:60], need, widget.width())
        rects.append((widget, rect))
    for i, (a, ra) in enumerate(rects):
        for b, rb in rects[i + 1 :]:
            assert not ra.intersects(rb), (
                f"{a.objectName() or type(a).__name__} {ra} overlaps "
                f"{b.objectName() or type(b).__name__} {rb}"
            )
    return len(rects)


def field(panel: SettingsPanel, name: str) -> QWidget:
    widget = panel.findChild(QWidget, f"field_{name}")
    assert widget is not None, name
    return widget


def spin(panel: SettingsPanel, name: str) -> QSpinBox:
    widget = field(panel, name)
    assert isinstance(widget, QSpinBox)
    return widget


def combo(panel: SettingsPanel, name: str) -> QComboBox:
    widget = field(panel, name)
    assert isinstance(widget, QComboBox)
    return widget


def choose(panel: SettingsPanel, name: str, value: str) -> None:
    box = combo(panel, name)
    index = box.findData(value)
    assert index >= 0, (name, value)
    box.setCurrentIndex(index)


def apply_button(panel: SettingsPanel) -> QPushButton:
    button = panel.findChild(QPushButton, "applyButton")
    assert button is not None
    return button


def label_text(panel: SettingsPanel, name: str) -> str:
    label = panel.findChild(QLabel, name)
    assert label is not None
    return label.text() if label.isVisibleTo(panel) else ""


NON_DEFAULT = ContextSettings(
    n_ctx=8192,
    n_batch=1024,
    n_ubatch=256,
    n_seq_max=6,
    n_threads=3,
    n_threads_batch=5,
    flash_attn="on",
    type_k="q8_0",
    type_v="q4_0",
    offload_kqv=False,
    op_offload=False,
    swa_full=False,
    kv_unified=False,
    rope_scaling_type="yarn",
    rope_freq_base=500000.0,
    rope_freq_scale=0.25,
    yarn_ext_factor=1.0,
    yarn_attn_factor=0.5,
    yarn_beta_fast=32.0,
    yarn_beta_slow=1.0,
    yarn_orig_ctx=4096,
    embeddings=True,
    pooling_type="mean",
    attention_type="non-causal",
    no_perf=False,
)


def test_every_field_has_an_editor_explanation_and_mark(qtbot: QtBot) -> None:
    panel = make_panel(qtbot)
    for f in dataclasses.fields(ContextSettings):
        field(panel, f.name)
        help_label = panel.findChild(QLabel, f"help_{f.name}")
        assert help_label is not None and len(help_label.text()) > 20, f.name
        mark = panel.findChild(QLabel, f"mark_{f.name}")
        assert mark is not None
        live = f.name in ("n_threads", "n_threads_batch")
        assert ("live" in mark.text()) is live, f.name
        assert ("Rebuilds" in mark.text()) is not live, f.name
    # Ranges match ContextSettings.validate; "model" shows as "From the model".
    assert (spin(panel, "n_seq_max").minimum(), spin(panel, "n_seq_max").maximum()) == (1, 256)
    assert spin(panel, "n_ctx").maximum() == 1 << 24
    assert spin(panel, "n_batch").minimum() == 1
    assert spin(panel, "n_threads").maximum() == 512
    rope = combo(panel, "rope_scaling_type")
    assert rope.itemText(rope.findData("model")) == FROM_MODEL
    assert {combo(panel, "type_k").itemData(i) for i in range(combo(panel, "type_k").count())} >= {
        "f16",
        "q8_0",
        "q4_0",
    }


def test_fields_round_trip_settings(qtbot: QtBot) -> None:
    panel = make_panel(qtbot, NON_DEFAULT, model_info=model_info())
    assert panel.current_settings() == NON_DEFAULT
    panel.set_settings(ContextSettings(n_threads=2, n_threads_batch=2))
    assert panel.current_settings() == ContextSettings(n_threads=2, n_threads_batch=2)
    panel.set_settings(NON_DEFAULT)
    assert panel.current_settings() == NON_DEFAULT
    assert apply_button(panel).text() == "Apply"
    assert not apply_button(panel).isEnabled()  # nothing changed


def test_micro_batch_larger_than_batch_disables_apply(qtbot: QtBot) -> None:
    panel = make_panel(qtbot)
    spin(panel, "n_ubatch").setValue(1024)
    assert not apply_button(panel).isEnabled()
    assert "cannot exceed the batch size" in label_text(panel, "problemLabel")
    with qtbot.assertNotEmitted(panel.applyRequested):
        qtbot.mouseClick(apply_button(panel), Qt.MouseButton.LeftButton)
    spin(panel, "n_batch").setValue(2048)
    assert label_text(panel, "problemLabel") == ""
    assert apply_button(panel).isEnabled()
    with qtbot.waitSignal(panel.applyRequested, timeout=1000) as blocker:
        qtbot.mouseClick(apply_button(panel), Qt.MouseButton.LeftButton)
    (applied,) = blocker.args
    assert isinstance(applied, ContextSettings)
    assert (applied.n_batch, applied.n_ubatch) == (2048, 1024)
    applied.validate()


def test_quantized_v_cache_needs_flash_attention(qtbot: QtBot) -> None:
    panel = make_panel(qtbot, model_info=model_info())
    choose(panel, "type_v", "q8_0")
    assert apply_button(panel).isEnabled()  # flash attention "auto" is fine
    choose(panel, "flash_attn", "off")
    assert not apply_button(panel).isEnabled()
    assert "needs flash attention" in label_text(panel, "problemLabel")
    choose(panel, "type_v", "f16")
    assert apply_button(panel).isEnabled()
    assert label_text(panel, "problemLabel") == ""


def test_model_dependent_checks_use_the_model(qtbot: QtBot, tmp_path: Path) -> None:
    # A real tiny GGUF has head size 16: a q8_0 cache (blocks of 32) is refused for it.
    tiny = read_model_info(write_tiny_model(tmp_path / "tiny.gguf", TinySpec()))
    panel = make_panel(qtbot, model_info=tiny)
    choose(panel, "type_k", "q8_0")
    assert "divisible by 32" in label_text(panel, "problemLabel")
    assert not apply_button(panel).isEnabled()
    panel.set_model_info(model_info(head_dim=128))
    assert apply_button(panel).isEnabled()


def test_estimate_follows_n_ctx_and_cache_type(qtbot: QtBot) -> None:
    info = model_info()
    panel = make_panel(qtbot, ContextSettings(n_ctx=4096, n_threads=2, n_threads_batch=2))
    assert "needs a loaded model" in label_text(panel, "estimateLabel")
    panel.set_model_info(info)
    # 32 layers x 2 x 8 heads x 128 x 2 bytes = 128 KiB per token; 4096 tokens = 512 MiB.
    text = label_text(panel, "estimateLabel")
    assert "512.0 MiB" in text and "128.0 KiB per token" in text
    spin(panel, "n_ctx").setValue(8192)
    assert "1.00 GiB" in label_text(panel, "estimateLabel")
    choose(panel, "type_k", "q8_0")
    expected = ContextSettings(n_ctx=8192, type_k="q8_0").kv_bytes(info)
    assert format_bytes(expected) in label_text(panel, "estimateLabel")
    assert expected < 1 << 30
    # A split cache shows each tab's share.
    unified = field(panel, "kv_unified")
    assert isinstance(unified, QCheckBox)
    unified.setChecked(False)
    assert "each of the 4 resident tabs gets 2,048 tokens" in label_text(panel, "estimateLabel")
    # n_ctx 0 uses the model's training context.
    spin(panel, "n_ctx").setValue(0)
    assert "8,192" in label_text(panel, "estimateLabel")
    panel.set_model_info(None)
    assert "needs a loaded model" in label_text(panel, "estimateLabel")


def test_apply_label_says_live_or_rebuild(qtbot: QtBot) -> None:
    base = ContextSettings(n_threads=4, n_threads_batch=4)
    panel = make_panel(qtbot, base)
    spin(panel, "n_threads").setValue(2)
    assert apply_button(panel).text() == "Apply (threads only, live)"
    with qtbot.waitSignal(panel.applyRequested, timeout=1000) as blocker:
        apply_button(panel).click()
    assert blocker.args[0] == dataclasses.replace(base, n_threads=2)
    assert not base.needs_rebuild(blocker.args[0])
    spin(panel, "n_ctx").setValue(8192)
    assert apply_button(panel).text() == "Apply and rebuild context"
    spin(panel, "n_ctx").setValue(4096)
    assert apply_button(panel).text() == "Apply (threads only, live)"
    # The main window applied the threads: new baseline, nothing left to apply.
    panel.set_settings(dataclasses.replace(base, n_threads=2))
    assert apply_button(panel).text() == "Apply"
    assert not apply_button(panel).isEnabled()


def test_applying_state_and_errors(qtbot: QtBot) -> None:
    panel = make_panel(qtbot)
    panel.show()
    spin(panel, "n_ctx").setValue(8192)
    panel.set_applying(True, "Saving 3 tabs… rebuilding context… restoring")
    assert not apply_button(panel).isEnabled()
    assert not spin(panel, "n_ctx").isEnabled()
    bar = panel.findChild(QProgressBar, "busyBar")
    assert bar is not None and bar.isVisible()
    assert "rebuilding context" in label_text(panel, "busyLabel")
    panel.show_error("The context could not be created: not enough memory.")
    assert "not enough memory" in label_text(panel, "errorLabel")
    assert spin(panel, "n_ctx").isEnabled() and apply_button(panel).isEnabled()
    assert not bar.isVisible()
    spin(panel, "n_ctx").setValue(16384)  # editing clears the old error
    assert label_text(panel, "errorLabel") == ""


def test_reset_to_defaults(qtbot: QtBot) -> None:
    panel = make_panel(qtbot, NON_DEFAULT, model_info=model_info())
    reset = panel.findChild(QPushButton, "resetButton")
    assert reset is not None
    reset.click()
    defaults = ContextSettings()
    assert panel.current_settings() == defaults
    assert apply_button(panel).text() == "Apply and rebuild context"


def test_presets_emit_signals_and_load_values(qtbot: QtBot) -> None:
    long_ctx = dataclasses.replace(ContextSettings(n_threads=4, n_threads_batch=4), n_ctx=16384)
    panel = make_panel(qtbot, model_info=model_info(), presets={"Long context": long_ctx.to_dict()})
    presets = panel.findChild(QComboBox, "presetCombo")
    assert presets is not None and presets.findData("Long context") > 0

    # Choosing a preset fills the fields (not applied until Apply).
    presets.setCurrentIndex(presets.findData("Long context"))
    presets.activated.emit(presets.currentIndex())
    assert panel.current_settings().n_ctx == 16384
    assert apply_button(panel).text() == "Apply and rebuild context"

    delete = panel.findChild(QPushButton, "deletePresetButton")
    assert delete is not None and delete.isEnabled()
    with qtbot.waitSignal(panel.presetDeleteRequested, timeout=1000) as deleted:
        delete.click()
    assert deleted.args == ["Long context"]

    save = panel.findChild(QPushButton, "savePresetButton")
    assert save is not None and save.isEnabled()
    save.click()
    dialog = panel.findChild(QInputDialog, "presetNameDialog")
    assert dialog is not None and dialog.isVisible()
    dialog.setTextValue("  Fast  ")
    with qtbot.waitSignal(panel.presetSaveRequested, timeout=1000) as saved:
        dialog.accept()
    name, values = saved.args
    assert name == "Fast"
    assert ContextSettings.from_dict(values) == panel.current_settings()

    panel.set_presets({"Fast": values, "Long context": long_ctx.to_dict()})
    assert presets.count() == 3

    # Invalid values cannot be saved as a preset.
    spin(panel, "n_ubatch").setValue(4096)
    assert not save.isEnabled()


def test_presets_need_a_model(qtbot: QtBot) -> None:
    panel = make_panel(qtbot)
    save = panel.findChild(QPushButton, "savePresetButton")
    assert save is not None and not save.isEnabled()


def test_unusable_values_are_never_emitted(qtbot: QtBot) -> None:
    # A settings object from elsewhere with an unknown cache type stays visible and invalid.
    bad = dataclasses.replace(ContextSettings(n_threads=4, n_threads_batch=4), type_k="q3_weird")
    panel = make_panel(qtbot, bad)
    assert panel.current_settings().type_k == "q3_weird"
    spin(panel, "n_ctx").setValue(8192)
    assert "K cache type" in label_text(panel, "problemLabel")
    assert not apply_button(panel).isEnabled()
    # n_ctx between 1 and 63 is refused.
    choose(panel, "type_k", "f16")
    spin(panel, "n_ctx").setValue(32)
    assert not apply_button(panel).isEnabled()
    assert "at least 64" in label_text(panel, "problemLabel")


def test_other_editor_kinds(qtbot: QtBot) -> None:
    panel = make_panel(qtbot)
    assert isinstance(field(panel, "rope_freq_scale"), QDoubleSpinBox)
    assert isinstance(field(panel, "embeddings"), QCheckBox)
    assert spin(panel, "yarn_orig_ctx").specialValueText().endswith(FROM_MODEL)


def test_panel_fits_the_screen_and_scrolls(qtbot: QtBot) -> None:
    from PySide6.QtWidgets import QScrollArea

    owner = QWidget()
    qtbot.addWidget(owner)
    owner.resize(900, 700)
    panel = SettingsPanel(ContextSettings(n_threads=4, n_threads_batch=4), parent=owner)
    panel.show()
    qtbot.waitExposed(panel)
    screen = panel.screen()
    assert screen is not None
    area = screen.availableGeometry()
    assert panel.height() <= int(area.height() * 0.9)
    assert area.contains(panel.frameGeometry())
    scroll = panel.findChild(QScrollArea)
    assert scroll is not None and scroll.widget() is panel._fields_widget
    assert panel.isSizeGripEnabled()  # resizable
    # the basic fields fit; with the advanced ones open, they scroll instead of stretching
    # the dialog
    assert panel._fields_widget.sizeHint().height() <= scroll.viewport().height()
    panel.findChild(QWidget, "advancedToggle").click()  # type: ignore[union-attr]
    qtbot.waitUntil(lambda: panel.is_advanced_open())
    assert panel.height() <= int(area.height() * 0.9)
    assert panel._fields_widget.sizeHint().height() > scroll.viewport().height()
    panel.close()


def test_wheel_edits_only_a_focused_field(qtbot: QtBot) -> None:
    from PySide6.QtCore import QPoint, QPointF
    from PySide6.QtGui import QWheelEvent
    from PySide6.QtWidgets import QApplication

    panel = SettingsPanel(ContextSettings(n_threads=4, n_threads_batch=4))
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitExposed(panel)
    editor = spin(panel, "n_batch")
    before = editor.value()

    def wheel_down() -> bool:
        centre = QPointF(editor.rect().center())
        event = QWheelEvent(
            centre,
            QPointF(editor.mapToGlobal(QPoint(0, 0))) + centre,
            QPoint(0, 0),
            QPoint(0, -120),
            Qt.MouseButton.NoButton,
            Qt.KeyboardModifier.NoModifier,
            Qt.ScrollPhase.NoScrollPhase,
            False,
        )
        QApplication.sendEvent(editor, event)
        return event.isAccepted()

    assert editor.focusPolicy() == Qt.FocusPolicy.StrongFocus
    assert not editor.hasFocus()
    # not focused: the value stays and the event is left unaccepted, which is what lets Qt
    # hand a real wheel event on to the scroll area (synthetic events do not propagate)
    assert not wheel_down()
    assert editor.value() == before
    editor.setFocus()
    qtbot.waitUntil(editor.hasFocus)
    assert wheel_down()
    assert editor.value() != before  # focused: the wheel edits it
    for kind in (QSpinBox, QDoubleSpinBox, QComboBox):
        assert all(
            w.focusPolicy() == Qt.FocusPolicy.StrongFocus for w in panel.findChildren(kind)
        ), kind


def test_panel_colours_follow_the_theme(qtbot: QtBot) -> None:
    from app.ui import theme

    panel = make_panel(qtbot)
    mark = panel.findChild(QLabel, "mark_n_ctx")
    assert mark is not None and theme.LIGHT_COLORS.warn in mark.styleSheet()
    try:
        theme.apply_theme("dark")
        qtbot.waitUntil(lambda: theme.DARK_COLORS.warn in mark.styleSheet())
    finally:
        theme.apply_theme("system")
    qtbot.waitUntil(lambda: theme.LIGHT_COLORS.warn in mark.styleSheet())


def test_estimate_counts_recurrent_state_and_attention_layers_only(
    qtbot: QtBot, tmp_path: Path
) -> None:
    from app.engine.memory_estimate import recurrent_state_bytes
    from tests.support.arch_models import write_arch_model

    hybrid = read_model_info(write_arch_model(tmp_path / "granite.gguf", "granitehybrid"))
    panel = make_panel(qtbot, ContextSettings(n_ctx=4096, n_seq_max=4), model_info=hybrid)
    text = label_text(panel, "estimateLabel")
    # One attention layer of two: 2 KV heads x (16 + 16) x 2 bytes per token, not twice that.
    assert "(128 bytes per token)" in text
    per_tab = recurrent_state_bytes(hybrid)
    assert per_tab > 0 and "Recurrent state" in text and format_bytes(4 * per_tab) in text
    assert "Checkpoints" in text
    mamba = read_model_info(write_arch_model(tmp_path / "mamba2.gguf", "mamba2"))
    panel.set_model_info(mamba)
    text = label_text(panel, "estimateLabel")
    assert "no per-token cache" in text and "Recurrent state" in text


# -- a real model: what the context really got -------------------------------------------

# As the demo model: trained for 512 tokens. Asking for 4,096 gives 512 (the panel showed
# 4,096 while the model ran at 512; issue 14 item 17).
ASKED = ContextSettings(
    n_ctx=4096, n_batch=128, n_ubatch=128, n_seq_max=2, n_threads=1, n_threads_batch=1
)
ENDLESS = 'root ::= ("hello" | " world" | " tab" | " llama") root'


@pytest.fixture(scope="module")
def short_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("short")
    return write_tiny_model(folder / "short.gguf", TinySpec(n_ctx_train=512, name="Short Tiny"))


class SessionEvents:
    """A real session's session-wide events, collected from its thread."""

    def __init__(self, session: Session) -> None:
        self._cond = threading.Condition()
        self.events: list[object] = []
        session.subscribe_session(self._on_event)

    def _on_event(self, event: object) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def wait_for(self, kind: type, after: int = 0, timeout: float = 30.0) -> Any:
        """The first event of ``kind`` among those after the ``after``-th."""

        def found() -> list[object]:
            return [e for e in self.events[after:] if isinstance(e, kind)]

        with self._cond:
            assert self._cond.wait_for(lambda: bool(found()), timeout), kind.__name__
            return found()[0]


@pytest.fixture
def loaded(short_model: Path) -> Iterator[tuple[Session, SessionEvents, LoadedModel]]:
    session = Session()  # no storage: only the engine and its thread
    events = SessionEvents(session)
    session.load_model(str(short_model), ASKED, fallback=False)
    model = events.wait_for(ev.ModelLoaded).model
    yield session, events, model
    session.shutdown()
    assert session.join(10.0)


def test_context_field_says_what_the_model_really_runs_at(
    qtbot: QtBot, loaded: tuple[Session, SessionEvents, LoadedModel]
) -> None:
    _, _, model = loaded
    assert (model.settings.n_ctx, model.n_ctx, model.info.n_ctx_train) == (4096, 512, 512)
    panel = make_panel(qtbot, model.settings, loaded=model)
    assert spin(panel, "n_ctx").value() == 4096  # what was asked for, as stored
    running = label_text(panel, "runningLabel")
    assert "runs at <b>512 tokens</b>, not the 4,096 asked for" in running
    assert "training limit is 512" in running
    # the estimate counts what the context holds, not what was asked for
    assert "for 512 tokens" in label_text(panel, "estimateLabel")
    # editing the field previews what applying would give
    spin(panel, "n_ctx").setValue(8192)
    assert "Applying 8,192 would give 512 tokens" in label_text(panel, "runningLabel")
    spin(panel, "n_ctx").setValue(256)
    assert "Applying gives 256 tokens" in label_text(panel, "runningLabel")
    # another model loaded: no stale figures
    panel.set_model_info(model_info())
    assert "runs at" not in label_text(panel, "runningLabel")
    panel.set_loaded_model(None)
    assert label_text(panel, "runningLabel") == ""


def test_stop_all_apply_then_feedback_from_a_real_reconfigure(
    qtbot: QtBot, loaded: tuple[Session, SessionEvents, LoadedModel]
) -> None:
    session, events, model = loaded
    panel = make_panel(qtbot, model.settings, loaded=model)
    panel.show()
    note = panel.findChild(QLabel, "generatingNote")
    assert note is not None and not note.isVisible()

    # A reply is being written (a real one, that cannot end by itself).
    session.submit_text(1, "hello", SamplingParams(max_tokens=100_000, grammar=ENDLESS))
    panel.set_generating(True)
    assert note.isVisible() and "rebuild the context stop them" in note.text()
    spin(panel, "n_threads").setValue(2)  # threads change live: nothing is stopped
    assert apply_button(panel).text() == "Apply (threads only, live)"
    spin(panel, "n_ctx").setValue(256)
    assert apply_button(panel).text() == "Stop all and apply"
    assert "stops them" in apply_button(panel).toolTip()
    assert "stops them first" in note.text()
    with qtbot.waitSignal(panel.applyRequested, timeout=1000) as blocker:
        apply_button(panel).click()
    (wanted,) = blocker.args
    panel.set_applying(True, "Stopping the replies and rebuilding the context…")
    assert not note.isVisible() and not apply_button(panel).isEnabled()

    # Applied without stopping first, the engine refuses: the real sentence is shown and
    # the dialog keeps the values entered.
    seen = len(events.events)
    session.reconfigure(wanted)
    failed = events.wait_for(ev.ReconfigureFailed, seen)
    panel.show_failed(failed.message)
    error = label_text(panel, "errorLabel")
    assert error.startswith("Not applied: Stop generation") and "still here" in error
    assert panel.isVisible() and panel.current_settings() == wanted
    assert apply_button(panel).isEnabled()  # try again

    # Stopped, then applied: the dialog says what the model now runs with.
    session.stop(None)
    panel.set_generating(False)
    assert apply_button(panel).text() == "Apply and rebuild context" and not note.isVisible()
    applied: LoadedModel | None = None
    for _attempt in range(50):  # the stop lands within a step; the refusal until then is real
        seen = len(events.events)
        session.reconfigure(wanted)
        outcome = events.wait_for(ev.Reconfigured | ev.ReconfigureFailed, seen)  # type: ignore[arg-type]
        if isinstance(outcome, ev.Reconfigured):
            applied = outcome.model
            break
        qtbot.wait(20)
    assert applied is not None and applied.n_ctx == 256
    panel.show_applied(applied)
    done = label_text(panel, "appliedLabel")
    assert done.startswith("Applied: the model now runs with a 256-token context")
    assert "2 generation threads" in done and "Every open tab was kept" in done
    assert label_text(panel, "errorLabel") == ""
    assert panel.current_settings() == applied.settings
    assert apply_button(panel).text() == "Apply" and not apply_button(panel).isEnabled()
    assert "runs at 256 tokens" in label_text(panel, "runningLabel")
    spin(panel, "n_ctx").setValue(512)  # a new edit: the old feedback goes
    assert label_text(panel, "appliedLabel") == ""


def test_applied_text_says_when_the_model_got_less_than_asked(
    loaded: tuple[Session, SessionEvents, LoadedModel],
) -> None:
    from app.ui.settings_panel import applied_text

    _, _, model = loaded
    text = applied_text(model)
    assert text.startswith("Applied: the model now runs with a 512-token context")
    assert "not the 4,096 asked for" in text and "shared by 2 resident tabs" in text
    split = dataclasses.replace(
        model, settings=dataclasses.replace(model.settings, kv_unified=False), n_ctx_seq=256
    )
    assert "256 for each of 2 resident tabs" in applied_text(split)


# -- basic and advanced ------------------------------------------------------------------


def test_basic_fields_first_and_the_rest_under_advanced(qtbot: QtBot) -> None:
    from PySide6.QtWidgets import QToolButton

    panel = make_panel(qtbot, model_info=model_info())
    panel.show()
    basic = panel.findChild(QWidget, "basicSection")
    advanced = panel.findChild(QWidget, "advancedSection")
    toggle = panel.findChild(QToolButton, "advancedToggle")
    assert basic is not None and advanced is not None and toggle is not None
    for name, spec in CONTEXT_FIELDS.items():
        section = advanced if spec.advanced else basic
        assert section.isAncestorOf(field(panel, name)), name
    assert [n for n in CONTEXT_FIELDS if basic.isAncestorOf(field(panel, n))] == list(
        BASIC_CONTEXT_FIELDS
    )
    assert not advanced.isVisible() and not panel.is_advanced_open()
    assert field(panel, "n_ctx").isVisible() and not field(panel, "type_k").isVisible()
    # changed values hidden in the closed section are counted on its button
    choose(panel, "type_k", "q8_0")
    choose(panel, "flash_attn", "on")
    assert toggle.text() == "Advanced settings (2 changed)"
    toggle.click()
    assert advanced.isVisible() and field(panel, "type_k").isVisible()
    # the next panel opens the way this one was left (in-process)
    again = make_panel(qtbot)
    again.show()
    assert again.is_advanced_open()
    toggle.click()
    assert not make_panel(qtbot).is_advanced_open()


def test_a_problem_in_an_advanced_field_opens_the_section(qtbot: QtBot) -> None:
    panel = make_panel(qtbot, model_info=model_info())
    panel.show()
    assert not panel.is_advanced_open()
    choose(panel, "type_v", "q8_0")
    choose(panel, "flash_attn", "off")  # a quantized V cache needs flash attention
    assert "needs flash attention" in label_text(panel, "problemLabel")
    assert panel.is_advanced_open() and field(panel, "type_v").isVisible()


# -- narrow windows ----------------------------------------------------------------------


def test_the_dialog_works_640_px_wide(qtbot: QtBot) -> None:
    from PySide6.QtWidgets import QScrollArea

    panel = make_panel(
        qtbot, ContextSettings(n_threads=4, n_threads_batch=4), model_info=model_info()
    )
    panel.set_generating(True)
    panel.show()
    qtbot.waitExposed(panel)
    assert panel.minimumSizeHint().width() <= 640
    panel.resize(640, 720)
    spin(panel, "n_ctx").setValue(16384)  # the running preview and the estimate's notes
    panel.findChild(QWidget, "advancedToggle").click()  # type: ignore[union-attr]
    panel.show_error("The context could not be created: not enough memory for 16,384 tokens.")
    qtbot.waitUntil(lambda: panel.width() == 640)
    qtbot.wait(50)  # the layout settles (word-wrapped labels take their height)
    scroll = panel.findChild(QScrollArea)
    assert scroll is not None
    fields = panel._fields_widget
    assert fields.width() <= scroll.viewport().width()  # no sideways scrolling
    assert assert_laid_out(fields) > 3 * len(CONTEXT_FIELDS)  # label, editor, mark, help...
    assert assert_laid_out(panel, skip=(scroll,)) >= 8  # the rest of the dialog
    for name in ("errorLabel", "generatingNote", "estimateLabel", "runningLabel"):
        assert label_text(panel, name), name
    assert apply_button(panel).text() == "Stop all and apply"


def test_the_layout_check_catches_overlaps_and_cut_text(qtbot: QtBot) -> None:
    owner = QWidget()
    qtbot.addWidget(owner)
    owner.resize(300, 100)
    first, second = QLabel("first", owner), QLabel("second", owner)
    first.setGeometry(0, 0, 100, 30)
    second.setGeometry(50, 10, 100, 30)
    owner.show()
    with pytest.raises(AssertionError, match="overlaps"):
        assert_laid_out(owner)
    second.move(150, 0)
    assert assert_laid_out(owner) == 2
    first.setText("a label far too long for the hundred pixels it was given")
    with pytest.raises(AssertionError, match="far too long"):
        assert_laid_out(owner)
    first.setText("first")
    second.move(250, 0)  # half outside
    with pytest.raises(AssertionError, match="sticks out"):
        assert_laid_out(owner)
