"""App-wide preferences: typed defaults in dataclasses, stored as JSON, written atomically.

:func:`load_settings` never fails on bad data: unknown keys are ignored, a value of the
wrong type (or one a field's ``metadata["check"]`` rejects) falls back to that field's
default, and a corrupt file falls back to all defaults and is kept as ``<name>.bad``;
each case is logged as a warning.

Sampling and context fields are described by :mod:`app.settings_schema`, the same schema
the engine validates with. A stored value the schema no longer accepts is migrated with a
warning: a number outside the range (older versions allowed temperatures up to 100 in the
engine, seeds up to 2^32) is clamped into it, anything else unusable is reset to the
default. :func:`migrate_sampling` does the same for a conversation's sampling dict and
:func:`migrate_context` for the stored context settings.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from app import paths
from app.fsutil import atomic_write_bytes
from app.settings_schema import (
    CONTEXT_FIELDS,
    MISSING,
    SAMPLING_FIELDS,
    SPEC_KEY,
    FieldSpec,
    format_bytes,
    spec_field,
)
from app.storage.errors import StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")


def _check(predicate: Callable[[Any], bool]) -> dict[str, Any]:
    return {"check": predicate}


def _sampling(name: str) -> Any:
    return spec_field(SAMPLING_FIELDS[name])


@dataclass
class SamplingDefaults:
    """Default sampling for new conversations: the engine's SamplingParams fields a chat
    edits, with the schema's defaults and ranges."""

    temperature: float = _sampling("temperature")
    top_k: int = _sampling("top_k")
    top_p: float = _sampling("top_p")
    min_p: float = _sampling("min_p")
    repeat_penalty: float = _sampling("repeat_penalty")
    frequency_penalty: float = _sampling("frequency_penalty")
    presence_penalty: float = _sampling("presence_penalty")
    seed: int = _sampling("seed")  # -1: a random seed for every generation
    max_tokens: int = _sampling("max_tokens")
    stop: list[str] = _sampling("stop")  # noqa: RUF009 (a dataclasses.field with a factory)
    speculative: str = _sampling("speculative")  # off | ngram (app.engine.speculative)
    draft_max: int = _sampling("draft_max")

    def to_dict(self) -> dict[str, Any]:
        """The dict stored as a conversation's ``sampling``."""
        return dataclasses.asdict(self)


def _migrate_values(
    specs: dict[str, FieldSpec], data: dict[str, Any], where: str
) -> tuple[dict[str, Any], bool]:
    """``data`` with every schema field made valid (clamped, or dropped so that the default
    applies), each change logged; other keys are kept as they are."""
    out: dict[str, Any] = {}
    changed = False
    for key, value in data.items():
        spec = specs.get(key)
        if spec is None:
            out[key] = value
            continue
        new, note = spec.migrate(value)
        if note is not None:
            log.warning("Setting %s%s: %s", f"{where}." if where else "", key, note)
        if new is MISSING:
            changed = True
            continue
        changed = changed or note is not None
        out[key] = new
    return out, changed


def migrate_sampling(data: Any, where: str = "sampling") -> tuple[dict[str, Any], bool]:
    """A conversation's stored sampling dict, valid for the schema: ``(dict, changed)``.

    Keys the schema does not know (a tab's context-full policy, reasoning choices) are
    kept."""
    if not isinstance(data, dict):
        if data is not None:
            log.warning("Setting %s: expected an object, got %.100r; using defaults", where, data)
        return {}, data is not None
    return _migrate_values(SAMPLING_FIELDS, data, where)


def migrate_context(data: Any, where: str = "context") -> dict[str, Any]:
    """Stored context settings (``AppSettings.context``, a preset), valid for the schema."""
    if not isinstance(data, dict):
        return {}
    return _migrate_values(CONTEXT_FIELDS, data, where)[0]


Theme = Literal["system", "light", "dark"]
THEMES: tuple[Theme, ...] = ("system", "light", "dark")

# The chat's font size in points; 0 follows the system. The one range, for the stored
# value's check, the Preferences dialog's editor and its sentence.
FONT_SIZE_SYSTEM = 0
FONT_SIZE_MIN = 6
FONT_SIZE_MAX = 72
# The state-cache quota's upper bound: a typo (a TB) must not look like "keep everything".
STATE_QUOTA_MAX = 1024**4


def font_size_problem(value: int) -> str | None:
    if value == FONT_SIZE_SYSTEM or FONT_SIZE_MIN <= value <= FONT_SIZE_MAX:
        return None
    return (
        f"The chat font size must be between {FONT_SIZE_MIN} and {FONT_SIZE_MAX} points "
        f"(or {FONT_SIZE_SYSTEM} for the system's size), not {value}."
    )


def quota_problem(value: int) -> str | None:
    if 0 <= value <= STATE_QUOTA_MAX:
        return None
    return (
        f"The state-cache quota must be between 0 and {format_bytes(STATE_QUOTA_MAX)}, "
        f"not {value:,} bytes."
    )


def endpoint_problem(value: str) -> str | None:
    """A sentence if ``value`` is not a usable Hub address ("" means the default)."""
    text = value.strip()
    if not text:
        return None
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return (
            f"The Hub address {text!r} must be a web address starting with http:// or "
            "https://, e.g. https://hf-mirror.com; leave it empty for huggingface.co."
        )
    if any(c.isspace() for c in text) or parts.query or parts.fragment:
        return f"The Hub address {text!r} must not contain spaces, a query (?) or a #."
    return None


def _ok(problem: Callable[[Any], str | None]) -> dict[str, Any]:
    return _check(lambda v: problem(v) is None)


@dataclass
class AppSettings:
    """Everything app-wide the user can set (model folders live in the database)."""

    last_model_path: str | None = None
    default_system_prompt: str = ""
    default_sampling: SamplingDefaults = field(default_factory=SamplingDefaults)
    state_quota_bytes: int = field(default=4 * 1024**3, metadata=_ok(quota_problem))
    context_full_policy: Literal["shift", "stop"] = "shift"
    # engine ContextSettings fields (the engine checks the combination, the schema each one)
    context: dict[str, Any] = field(default_factory=dict, metadata={"migrate": migrate_context})
    theme: Theme = "system"
    window_geometry: str = ""  # base64 of QWidget.saveGeometry()
    window_state: str = ""  # base64 of QMainWindow.saveState()
    font_size: int = field(default=FONT_SIZE_SYSTEM, metadata=_ok(font_size_problem))
    send_with_enter: bool = True  # False: Ctrl+Enter sends and Enter is a new line
    restore_tabs: bool = True
    # The Hugging Face Hub's address (a mirror); "" is HF_ENDPOINT, else huggingface.co.
    # HF_ENDPOINT, when set, wins (app.hub.config.endpoint): the environment is explicit.
    hub_endpoint: str = field(default="", metadata=_ok(endpoint_problem))
    # Preferences ▸ Engines' remote connections (read through app.remote.saved; no keys)
    remote_connections: list[dict[str, Any]] = field(default_factory=list)
    # Each model file's ModelSettings.chat_template ("" or absent: automatic), by path.
    model_chat_templates: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Preferences:
    """What the Preferences dialog edits: a frozen copy of those :class:`AppSettings`
    fields (the rest of AppSettings is the window's own: geometry, context, last model)."""

    theme: Theme
    font_size: int
    send_with_enter: bool
    restore_tabs: bool
    default_system_prompt: str
    default_sampling: SamplingDefaults
    state_quota_bytes: int
    hub_endpoint: str

    @classmethod
    def of(cls, settings: AppSettings) -> Preferences:
        return cls(
            theme=settings.theme,
            font_size=settings.font_size,
            send_with_enter=settings.send_with_enter,
            restore_tabs=settings.restore_tabs,
            default_system_prompt=settings.default_system_prompt,
            default_sampling=copy.deepcopy(settings.default_sampling),
            state_quota_bytes=settings.state_quota_bytes,
            hub_endpoint=settings.hub_endpoint,
        )

    def problems(self) -> list[str]:
        """One sentence per invalid value (empty: valid), checked as loading checks them."""
        out: list[str] = []
        if self.theme not in THEMES:
            out.append(f"The theme must be one of {', '.join(THEMES)}, not {self.theme!r}.")
        for problem in (
            font_size_problem(self.font_size),
            quota_problem(self.state_quota_bytes),
            endpoint_problem(self.hub_endpoint),
        ):
            if problem is not None:
                out.append(problem)
        for name, value in self.default_sampling.to_dict().items():
            sentence = SAMPLING_FIELDS[name].problem(value)
            if sentence is not None:
                out.append(sentence)
        return out

    def changed(self, other: Preferences) -> frozenset[str]:
        """The names of the fields whose values differ from ``other``'s."""
        return frozenset(
            f.name
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        )

    def apply_to(self, settings: AppSettings) -> None:
        """Write these values into ``settings`` (in place: the window's one copy)."""
        settings.theme = self.theme
        settings.font_size = self.font_size
        settings.send_with_enter = self.send_with_enter
        settings.restore_tabs = self.restore_tabs
        settings.default_system_prompt = self.default_system_prompt
        settings.default_sampling = copy.deepcopy(self.default_sampling)
        settings.state_quota_bytes = self.state_quota_bytes
        settings.hub_endpoint = self.hub_endpoint


def _matches(value: Any, annotation: Any) -> bool:
    """Is the JSON ``value`` acceptable for a field annotated ``annotation``?"""
    if annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in args)
    if origin is Literal:
        return any(value == arg and type(value) is type(arg) for arg in args)
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if origin is list:
        return isinstance(value, list) and (
            not args or all(_matches(item, args[0]) for item in value)
        )
    if origin is dict:
        return isinstance(value, dict) and (
            not args or all(_matches(k, args[0]) and _matches(v, args[1]) for k, v in value.items())
        )
    if annotation is dict:
        return isinstance(value, dict)
    if annotation is list:
        return isinstance(value, list)
    return False


def _default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise TypeError(f"settings field {f.name!r} needs a default")


def from_dict(cls: type[T], data: Any, *, where: str = "") -> T:
    """Build ``cls`` (a dataclass, possibly nested) from JSON data, field by field, with
    the fallbacks described in the module docstring."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    if not isinstance(data, dict):
        if data is not None:
            log.warning("Settings%s: expected an object, got %r; using defaults", where, data)
        data = {}
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    names = set()
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        names.add(f.name)
        label = f"{where}.{f.name}" if where else f.name
        annotation = hints[f.name]
        if f.name not in data:
            continue  # default
        raw = data[f.name]
        if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
            values[f.name] = from_dict(annotation, raw, where=label)
            continue
        if isinstance(raw, int) and not isinstance(raw, bool) and annotation is float:
            raw = float(raw)
        spec = f.metadata.get(SPEC_KEY)
        if isinstance(spec, FieldSpec):
            value, note = spec.migrate(raw)
            if note is not None:
                log.warning("Setting %s: %s", label, note)
            if value is not MISSING:
                values[f.name] = value
            continue
        if not _matches(raw, annotation):
            log.warning("Setting %s: invalid value %.100r; using the default", label, raw)
            continue
        migrate = f.metadata.get("migrate")
        if migrate is not None:
            raw = migrate(raw, label)
        check = f.metadata.get("check")
        if check is not None:
            try:
                ok = bool(check(raw))
            except Exception:
                ok = False
            if not ok:
                log.warning("Setting %s: out-of-range value %.100r; using the default", label, raw)
                continue
        values[f.name] = raw
    for key in data:
        if key not in names:
            log.warning("Setting %s%s is unknown; ignored", f"{where}." if where else "", key)
    return cls(**values)


def load_settings(cls: type[T], path: Path | None = None) -> T:
    """Read settings of type ``cls`` from ``path`` (default ``paths.settings_path()``).
    A missing file gives the defaults; a corrupt one is renamed to ``<name>.bad``."""
    settings_file = Path(path) if path is not None else paths.settings_path()
    try:
        text = settings_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return cls()
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("Could not read the settings file %s (%s); using defaults", settings_file, exc)
        if isinstance(exc, UnicodeDecodeError):
            _keep_bad(settings_file)
        return cls()
    try:
        data = json.loads(text)
    except ValueError as exc:
        log.warning(
            "The settings file %s is not valid JSON (%s); using defaults", settings_file, exc
        )
        _keep_bad(settings_file)
        return cls()
    return from_dict(cls, data)


def _keep_bad(settings_file: Path) -> None:
    bad = settings_file.with_name(settings_file.name + ".bad")
    try:
        os.replace(settings_file, bad)
        log.warning("Kept the unreadable settings file as %s", bad)
    except OSError as exc:
        log.warning("Could not rename the unreadable settings file %s: %s", settings_file, exc)


def save_settings(obj: Any, path: Path | None = None) -> None:
    """Write a settings dataclass as JSON atomically (default ``paths.settings_path()``)."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"{obj!r} is not a dataclass instance")
    settings_file = Path(path) if path is not None else paths.settings_path()
    text = json.dumps(dataclasses.asdict(obj), ensure_ascii=False, indent=2, sort_keys=True)
    try:
        atomic_write_bytes(settings_file, (text + "\n").encode("utf-8"))
    except OSError as exc:
        raise StorageError(
            f"Could not save the settings to {settings_file} ({exc.strerror or exc}); "
            "check that the folder is writable and the disk is not full."
        ) from exc


def load_app_settings() -> AppSettings:
    """:func:`load_settings` for :class:`AppSettings` at the default path."""
    return load_settings(AppSettings)


def save_app_settings(settings: AppSettings) -> None:
    save_settings(settings, None)
