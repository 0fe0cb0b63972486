"""One settings schema: each field's range is enforced alike in the engine, storage, the
settings panel, the chat's sampling controls and the command line."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QDoubleSpinBox, QSpinBox
from pytestqt.qtbot import QtBot

from app import engine_cli, paths
from app.cli import build_parser
from app.engine.settings import ContextSettings, SamplingParams, SettingsError, validate_fields
from app.settings_schema import (
    CONTEXT_FIELDS,
    MISSING,
    SAMPLING_FIELDS,
    FieldSpec,
    api_parameters,
    format_bytes,
)
from app.storage.settings import (
    AppSettings,
    SamplingDefaults,
    from_dict,
    load_app_settings,
    migrate_context,
    migrate_sampling,
)
from app.ui.composer import CHAT_FIELDS, ConversationSettings
from app.ui.settings_fields import THREAD_FIELDS
from app.ui.settings_panel import SettingsPanel

NUMERIC = [
    s for s in (*CONTEXT_FIELDS.values(), *SAMPLING_FIELDS.values()) if s.kind in ("int", "float")
]


def bad_values(spec: FieldSpec) -> list[tuple[str, float]]:
    """Values the schema refuses: below, above and (where there is one) in the gap."""
    assert spec.minimum is not None and spec.maximum is not None, spec.name
    step = 1 if spec.kind == "int" else 0.5
    low = spec.editor_minimum - step
    cases = [("below", low), ("above", spec.maximum + step)]
    if spec.special is not None and spec.in_gap(spec.special.value + 1):
        cases.append(("gap", spec.special.value + 1))
    if spec.kind == "float":
        cases = [(kind, float(value)) for kind, value in cases]
    else:
        cases = [(kind, int(value)) for kind, value in cases]
    return cases


CASES = [(spec, kind, value) for spec in NUMERIC for kind, value in bad_values(spec)]


def engine_object(spec: FieldSpec, value: Any) -> ContextSettings | SamplingParams:
    if spec.name in CONTEXT_FIELDS:
        return ContextSettings(**{spec.name: value})
    return SamplingParams(**{spec.name: value})


def cli_args(spec: FieldSpec, value: Any) -> argparse.Namespace:
    assert spec.cli is not None
    args, _ = build_parser().parse_known_args(
        ["run", "model.gguf", "hi", spec.cli.flags[-1], str(value)]
    )
    return args


@pytest.mark.parametrize(
    ("spec", "kind", "value"), CASES, ids=[f"{s.name}-{k}" for s, k, _ in CASES]
)
def test_a_range_is_enforced_alike_everywhere(
    qtbot: QtBot, spec: FieldSpec, kind: str, value: float
) -> None:
    # The engine refuses it, naming the field.
    with pytest.raises(SettingsError) as refused:
        engine_object(spec, value).validate()
    assert refused.value.field == spec.name
    assert f"({spec.name})" in str(refused.value)
    assert spec.problem(value) == str(refused.value)

    # Storage migrates it to a value the engine accepts: clamped, or reset to the default.
    migrate = migrate_context if spec.name in CONTEXT_FIELDS else migrate_sampling
    migrated = migrate({spec.name: value})
    stored = migrated if isinstance(migrated, dict) else migrated[0]
    fixed, _ = spec.migrate(value)
    if kind == "gap":
        assert fixed is MISSING and spec.name not in stored
    else:
        expected = spec.minimum if kind == "below" else spec.maximum
        assert stored[spec.name] == expected
    with_value = engine_object(spec, stored.get(spec.name, spec.default_value()))
    assert spec.problem(getattr(with_value, spec.name)) is None
    if spec.name in {f.name for f in dataclasses.fields(SamplingDefaults)}:
        loaded = from_dict(SamplingDefaults, {spec.name: value})
        assert getattr(loaded, spec.name) == stored.get(spec.name, spec.default_value())

    # The editors (the settings panel, the chat's sampling controls) offer exactly the range.
    editors: list[QSpinBox | QDoubleSpinBox] = []
    if spec.name in CONTEXT_FIELDS:
        panel = SettingsPanel(ContextSettings(n_threads=2, n_threads_batch=2))
        qtbot.addWidget(panel)
        editor = panel.findChild(QSpinBox, f"field_{spec.name}") or panel.findChild(
            QDoubleSpinBox, f"field_{spec.name}"
        )
        assert editor is not None
        editors.append(editor)
        if kind == "gap":  # an editor can show it (n_ctx 32); the panel refuses and flags it
            assert isinstance(editor, QSpinBox)
            editor.setValue(int(value))
            assert panel._flagged == {spec.name}
            assert not panel._apply_button.isEnabled()
    elif spec.chat:
        chat = ConversationSettings()
        qtbot.addWidget(chat)
        editors.append(chat.spins[spec.name])
    # (a thread count's editor takes a typed 0 and says it is used as 1: THREAD_FIELDS)
    low = 0 if spec.name in THREAD_FIELDS else spec.editor_minimum
    for editor in editors:
        assert (editor.minimum(), editor.maximum()) == (low, spec.maximum)

    # The command line refuses it before loading anything, naming the flag (a thread
    # count under 1 is used as 1, in one sentence: clamp_threads).
    if spec.cli is not None:
        args = cli_args(spec, value)
        build = (
            engine_cli.context_settings
            if spec.name in CONTEXT_FIELDS
            else lambda a, _n: engine_cli.sampling_params(a)
        )
        if spec.name in THREAD_FIELDS and kind == "below":  # used as 1, said on stderr
            assert getattr(build(args, 1), spec.name) == 1
            return
        with pytest.raises(SettingsError) as cli_refused:
            build(args, 1)
        assert cli_refused.value.field == spec.name
        assert str(cli_refused.value).startswith(f"{'/'.join(spec.cli.flags)}: ")


@pytest.mark.parametrize("spec", NUMERIC, ids=[s.name for s in NUMERIC])
def test_defaults_and_bounds_are_accepted_everywhere(spec: FieldSpec) -> None:
    assert spec.minimum is not None and spec.maximum is not None
    good = [spec.default_value(), spec.minimum, spec.maximum]
    if spec.special is not None:
        good.append(spec.special.value)
    for value in good:
        value = int(value) if spec.kind == "int" else float(value)
        validate_fields(engine_object(spec, value))  # each field on its own
        assert spec.migrate(value) == (value, None)
    defaults = ContextSettings() if spec.name in CONTEXT_FIELDS else SamplingParams()
    assert getattr(defaults, spec.name) == spec.default_value() or spec.default_factory


def test_an_error_highlights_its_fields_in_the_panel(qtbot: QtBot) -> None:
    panel = SettingsPanel(ContextSettings(n_threads=2, n_threads_batch=2))
    qtbot.addWidget(panel)
    error_style = panel._problem_label.styleSheet()  # "color: <the theme's error colour>;"
    panel._editors["n_ubatch"].setValue(1024)  # type: ignore[attr-defined]
    assert panel._flagged == {"n_ubatch", "n_batch"}
    assert panel._labels["n_ubatch"].styleSheet() == error_style
    assert panel._labels["n_ctx"].styleSheet() == ""
    panel._editors["n_ubatch"].setValue(256)  # type: ignore[attr-defined]
    assert panel._flagged == set()
    # An error from applying (the engine's, reported by the window) highlights its field too.
    panel.show_error(SettingsError("type_k", "The K cache type q8_0 needs ...", ("type_k",)))
    assert panel._flagged == {"type_k"}
    assert panel._labels["type_k"].styleSheet() == error_style


def test_a_settings_file_written_by_the_previous_version_loads(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = {  # what the app wrote before the schema (its defaults then: 0.7, 1.1, 1024)
        "context": {"n_ctx": 8192, "n_threads": 3, "type_k": "q8_0", "flash_attn": "on"},
        "context_full_policy": "shift",
        "default_sampling": {
            "frequency_penalty": 0.0,
            "max_tokens": 1024,
            "min_p": 0.05,
            "presence_penalty": 0.0,
            "repeat_penalty": 1.1,
            "seed": -1,
            "stop": [],
            "temperature": 0.7,
            "top_k": 40,
            "top_p": 0.95,
        },
        "default_system_prompt": "",
        "font_size": 0,
        "last_model_path": None,
        "restore_tabs": True,
        "send_with_enter": True,
        "state_quota_bytes": 4294967296,
        "theme": "system",
        "window_geometry": "",
        "window_state": "",
    }
    paths.settings_path().parent.mkdir(parents=True, exist_ok=True)
    paths.settings_path().write_text(json.dumps(old), "utf-8")
    with caplog.at_level(logging.WARNING, logger="app.storage.settings"):
        s = load_app_settings()
    assert caplog.text == ""
    assert s.default_sampling == SamplingDefaults(temperature=0.7, repeat_penalty=1.1)
    assert s.context == old["context"]
    ContextSettings.from_dict(s.context).validate()


def test_values_the_old_ranges_allowed_migrate_with_a_log_line(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The engine allowed temperatures to 100, seeds below 2^32 and repeat penalties to 10;
    # the panel let yarn factors be anything the engine did not check.
    paths.settings_path().parent.mkdir(parents=True, exist_ok=True)
    paths.settings_path().write_text(
        json.dumps(
            {
                "default_sampling": {
                    "temperature": 50,
                    "seed": 4_000_000_000,
                    "repeat_penalty": 8.0,
                    "max_tokens": 0,
                },
                "context": {"n_ctx": 10, "n_batch": 1 << 22, "yarn_ext_factor": -3.0, "x": 1},
            }
        ),
        "utf-8",
    )
    with caplog.at_level(logging.WARNING, logger="app.storage.settings"):
        s = load_app_settings()
    d = s.default_sampling
    assert (d.temperature, d.seed, d.repeat_penalty) == (5.0, 2**31 - 1, 5.0)
    assert d.max_tokens == SAMPLING_FIELDS["max_tokens"].default  # 0: reset, not clamped
    assert s.context == {"n_batch": 1 << 20, "yarn_ext_factor": -1.0, "x": 1}
    for name in (
        "default_sampling.temperature",
        "default_sampling.seed",
        "default_sampling.repeat_penalty",
        "default_sampling.max_tokens",
        "context.n_ctx",
        "context.n_batch",
        "context.yarn_ext_factor",
    ):
        assert name in caplog.text
    assert "clamped to 5" in caplog.text and "reset to the default" in caplog.text
    SamplingParams.from_dict(dataclasses.asdict(d)).validate()
    assert s == AppSettings(default_sampling=d, context=s.context)


def test_a_conversation_stored_under_old_ranges_is_fixed_on_open(
    qtbot: QtBot, caplog: pytest.LogCaptureFixture
) -> None:
    chat = ConversationSettings()
    qtbot.addWidget(chat)
    stored = {"temperature": 9.0, "seed": 3_000_000_000, "stop": ["x", ""], "thinking": False}
    with caplog.at_level(logging.WARNING, logger="app.storage.settings"):
        with qtbot.waitSignal(chat.changed, timeout=2000):  # so that the tab stores the fix
            chat.set_values("be brief", stored)
    _, sampling = chat.values()
    assert (sampling["temperature"], sampling["seed"]) == (5.0, 2**31 - 1)
    assert "stop" not in sampling and sampling["thinking"] is False  # other keys kept
    assert "sampling.temperature" in caplog.text and "sampling.stop" in caplog.text
    SamplingParams.from_dict(sampling).validate()


def test_chat_controls_come_from_the_schema(qtbot: QtBot) -> None:
    chat = ConversationSettings()
    qtbot.addWidget(chat)
    assert list(chat.spins) == [s.name for s in CHAT_FIELDS]
    for spec in CHAT_FIELDS:
        assert spec.help in chat.spins[spec.name].toolTip()
    seed = chat.spins["seed"]
    assert seed.minimum() == -1 and seed.specialValueText() == "Random"
    # Stepping down from 1 skips the invalid 0 and lands on -1, "No limit".
    tokens = chat.spins["max_tokens"]
    tokens.setSingleStep(1)
    tokens.setValue(1)
    tokens.stepBy(-1)
    assert tokens.value() == -1 and tokens.text() == "No limit"
    tokens.stepBy(1)
    assert tokens.value() == 1


def test_api_parameters_list_the_sampling_fields() -> None:
    params = {p["name"]: p for p in api_parameters()}
    assert list(params) == list(SAMPLING_FIELDS)
    assert params["temperature"] == {
        "name": "temperature",
        "type": "number",
        "description": SAMPLING_FIELDS["temperature"].help,
        "default": 0.8,
        "minimum": 0.0,
        "maximum": 5.0,
    }
    assert params["seed"]["special"] == {"value": -1, "meaning": "Random"}
    assert params["stop"]["type"] == "array" and params["grammar"]["nullable"] is True
    json.dumps(params)


def test_one_byte_format() -> None:
    from app.ui import settings_panel

    assert settings_panel.format_bytes is format_bytes
    assert format_bytes(512) == "512 bytes"
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(3 * 1024**3) == "3.00 GiB"
    assert format_bytes(40 * 1024**4) == "40.0 TiB"


def test_basic_and_advanced_are_marked_once_in_the_schema() -> None:
    from app.settings_schema import ADVANCED_CONTEXT_GROUPS, BASIC_CONTEXT_FIELDS

    # the few fields most people change: how much the model remembers, and how fast
    assert BASIC_CONTEXT_FIELDS == ("n_ctx", "n_seq_max", "n_batch", "n_threads")
    advanced = [name for _, names in ADVANCED_CONTEXT_GROUPS for name in names]
    # every context field in exactly one place, each advanced group non-empty
    assert sorted([*BASIC_CONTEXT_FIELDS, *advanced]) == sorted(CONTEXT_FIELDS)
    assert len(advanced) == len(set(advanced))
    assert all(names for _, names in ADVANCED_CONTEXT_GROUPS)
    assert all(CONTEXT_FIELDS[n].advanced for n in advanced)
    assert not any(s.advanced for s in SAMPLING_FIELDS.values())


def test_when_full_is_a_conversation_field_with_the_session_policies() -> None:
    from app.session import ContextFullPolicy
    from app.session.types import POLICY_KEY, policy_of
    from app.settings_schema import CONVERSATION_FIELDS

    spec = CONVERSATION_FIELDS[POLICY_KEY]  # stored under the key the session reads
    assert spec.kind == "choice" and spec.label == "When the context is full"
    assert spec.choice_values() == tuple(p.value for p in ContextFullPolicy)
    assert ContextFullPolicy.parse(spec.default_value()) is ContextFullPolicy.SHIFT
    for value in spec.choice_values():
        assert policy_of({POLICY_KEY: value}) is ContextFullPolicy(value)
        assert len(spec.help_for_choice(value)) > 40, value
    assert spec.choice_text("stop") == "Stop the reply"
    assert spec.problem("stop") is None
    problem = spec.problem("drop")
    assert problem is not None and problem.startswith(
        "When the context is full (context_full_policy)"
    )
    assert spec.migrate("drop")[0] is MISSING  # an unusable stored value: the default
    # not a sampling parameter: the engine's and the API's lists do not include it
    assert POLICY_KEY not in SAMPLING_FIELDS and POLICY_KEY not in CONTEXT_FIELDS


def test_choice_editor_explains_each_choice_and_reports_only_user_choices(qtbot: QtBot) -> None:
    from PySide6.QtCore import Qt

    from app.session.types import POLICY_KEY
    from app.settings_schema import CONVERSATION_FIELDS
    from app.ui.field_editors import SpecComboBox, make_editor, read_editor, write_editor

    spec = CONVERSATION_FIELDS[POLICY_KEY]
    combo = make_editor(spec)
    assert isinstance(combo, SpecComboBox)
    qtbot.addWidget(combo)
    assert [combo.itemData(i) for i in range(combo.count())] == ["shift", "stop"]
    assert [combo.itemText(i) for i in range(combo.count())] == [
        "Drop the oldest messages",
        "Stop the reply",
    ]
    for i in range(combo.count()):
        tip = combo.itemData(i, Qt.ItemDataRole.ToolTipRole)
        assert tip == spec.help_for_choice(combo.itemData(i))
    assert combo.value() == "shift" and "Drop the oldest messages:" in combo.toolTip()

    # showing a stored value is not an edit
    with qtbot.assertNotEmitted(combo.chosen):
        assert combo.set_value("stop")
    assert combo.value() == "stop" and read_editor(combo) == "stop"
    assert "Stop the reply:" in combo.toolTip() and spec.help in combo.toolTip()
    assert not combo.set_value("drop") and combo.value() == "stop"  # unknown: nothing changes

    # the user picking an item (keyboard on the closed box) reports its value
    combo.show()
    combo.setFocus()
    with qtbot.waitSignal(combo.chosen, timeout=1000) as picked:
        qtbot.keyClick(combo, Qt.Key.Key_Up)
    assert picked.args == ["shift"] and combo.value() == "shift"

    # the settings panel's way in keeps an unknown value visible rather than dropping it
    assert write_editor(spec, combo, "drop")
    assert read_editor(combo) == "drop" and "not a valid choice" in combo.currentText()


def test_the_schema_package_imports_only_the_standard_library() -> None:
    """Storage and the engine both import the schema, and neither may import the other:
    its rooms import the standard library, each other and the app's shared vocabulary
    below both (``app.context_policy``, itself of the standard library only), nothing
    else (inside functions too). tests/test_layers.py covers app's top-level modules, not
    this package."""
    import ast
    import sys

    app = Path(__file__).resolve().parents[2] / "app"
    shared = {"app.context_policy"}
    files = sorted((app / "settings_schema").glob("*.py"))
    assert len(files) > 1
    files += [app / f"{name.split('.')[1]}.py" for name in sorted(shared)]
    wrong = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                top = name.split(".")[0]
                ours = (
                    name == "app.settings_schema"
                    or name.startswith("app.settings_schema.")
                    or name in shared
                )
                if not ours and top not in sys.stdlib_module_names and top != "__future__":
                    wrong.append(f"{path.name} imports {name}")
    assert not wrong, wrong
