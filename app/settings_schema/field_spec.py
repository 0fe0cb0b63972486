"""What a setting is: :class:`FieldSpec` and its parts, and the dataclass fields built from it.

A spec validates a value (:meth:`FieldSpec.problem`: a sentence naming the field),
migrates a stored one (:meth:`FieldSpec.migrate`), describes itself as an API parameter
and carries its command-line option; :func:`spec_field` attaches it to a dataclass field
and :func:`specs_of` reads it back.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from app.settings_schema.units import format_number as _num

SPEC_KEY = "llamadesk.spec"  # the dataclasses.field metadata key holding a FieldSpec


class _Missing(enum.Enum):
    MISSING = "MISSING"


MISSING = _Missing.MISSING  # "no value": a stored value that must fall back to the default

Kind = Literal["int", "float", "bool", "choice", "text", "text_list"]


class Apply(enum.Enum):
    """When a changed value takes effect."""

    LIVE = "live"  # at once, on the running context (threads)
    REBUILD = "rebuild"  # a new context (tabs are saved and restored)
    NEXT_REPLY = "next_reply"  # sampling: from the next reply on


@dataclass(frozen=True)
class Special:
    """A value outside the range with a meaning of its own (``0`` = from the model)."""

    value: int | float
    text: str


@dataclass(frozen=True)
class CliOption:
    """How a field appears on ``llamadesk run``/``bench``."""

    flags: tuple[str, ...]
    metavar: str | None = None
    # The command line's own default where it differs from the field's (``-n 128`` for a
    # quick run; ``None`` = leave the field's default alone, e.g. ``-t``).
    default: Any = MISSING
    note: str = ""  # appended to the help text


@dataclass(frozen=True)
class FieldSpec:
    """Everything about one setting; see the module docstring."""

    name: str
    label: str
    help: str
    kind: Kind
    default: Any = None
    default_factory: Callable[[], Any] | None = None
    minimum: float | None = None
    maximum: float | None = None
    special: Special | None = None
    choices: tuple[tuple[str, str], ...] = ()  # (value, text shown)
    unit: str = ""
    apply: Apply = Apply.REBUILD
    group: str = ""
    step: float = 1
    decimals: int = 0
    layout: bool = False  # changes a saved state's layout (state files are refused)
    chat: bool = False  # a per-chat sampling control
    cli: CliOption | None = None
    # Shown only under the settings panel's "Advanced" section: most people never need it,
    # and a short list of what matters (context size, threads) is easier to read.
    advanced: bool = False
    # One sentence per choice (value -> help), for the choice's tooltip in a combo box.
    choice_help: tuple[tuple[str, str], ...] = ()
    # How a stored number below the minimum is raised, with the sentence saying so (the
    # thread counts: :func:`app.settings_schema.machine_defaults.clamp_threads`); None:
    # the generic clamp of :meth:`migrate`.
    raise_low: Callable[[int], tuple[int, str | None]] | None = None

    # -- values --------------------------------------------------------------------------

    def default_value(self) -> Any:
        if self.default_factory is not None:
            return self.default_factory()
        if isinstance(self.default, list):
            return list(self.default)
        return self.default

    @property
    def json_name(self) -> str:
        return self.name

    @property
    def editor_minimum(self) -> float:
        """The lowest value an editor offers: the special value if there is one."""
        low = self.minimum if self.minimum is not None else -math.inf
        if self.special is not None:
            low = min(low, self.special.value)
        return low

    def in_gap(self, value: float) -> bool:
        """Between the special value and the range (``1..63`` for n_ctx)."""
        return (
            self.special is not None
            and self.minimum is not None
            and self.special.value < value < self.minimum
        )

    def range_text(self) -> str:
        """``"0 (from the model), or 64 to 16,777,216"``; ``""`` for non-numbers."""
        if self.kind not in ("int", "float") or self.minimum is None or self.maximum is None:
            return ""
        span = f"{_num(self.minimum)} to {_num(self.maximum)}"
        if self.special is not None and self.special.value != self.minimum:
            return f"{_num(self.special.value)} ({self.special.text.lower()}), or {span}"
        return span

    def choice_values(self) -> tuple[str, ...]:
        return tuple(value for value, _ in self.choices)

    def choice_text(self, value: str) -> str:
        """The text shown for ``value`` (the value itself if it is not a choice)."""
        return dict(self.choices).get(value, value)

    def help_for_choice(self, value: str) -> str:
        """One sentence about choice ``value`` (``""`` if the field has none for it)."""
        return dict(self.choice_help).get(value, "")

    # -- validation and migration -------------------------------------------------------

    def problem(self, value: Any) -> str | None:
        """A sentence naming this field if ``value`` is not valid for it, else ``None``."""
        who = f"{self.label} ({self.name})"
        if self.kind == "bool":
            return None if isinstance(value, bool) else f"{who} must be on or off, not {value!r}."
        if self.kind == "choice":
            if value in self.choice_values():
                return None
            return f"{who} must be one of {', '.join(self.choice_values())}, not {value!r}."
        if self.kind == "text":
            if value is None or isinstance(value, str):
                return None
            return f"{who} must be text, not {value!r}."
        if self.kind == "text_list":
            if isinstance(value, list) and all(isinstance(s, str) and s for s in value):
                return None
            return f"{who}: each entry must be non-empty text."
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{who} must be a number, not {value!r}."
        if self.kind == "int" and not isinstance(value, int):
            return f"{who} must be a whole number, not {value!r}."
        if self.special is not None and value == self.special.value:
            return None
        low = self.minimum if self.minimum is not None else -math.inf
        high = self.maximum if self.maximum is not None else math.inf
        if low <= value <= high and not math.isnan(value):
            return None
        if self.special is not None and self.special.value != self.minimum:
            return (
                f"{who} must be {_num(self.special.value)} ({self.special.text.lower()}) "
                f"or at least {_num(low)} and at most {_num(high)}, not {_num(value)}."
            )
        return f"{who} must be between {_num(low)} and {_num(high)}, not {_num(value)}."

    def migrate(self, value: Any) -> tuple[Any, str | None]:
        """A stored ``value`` made valid: ``(value, None)`` if it already is, else the
        clamped value (a number outside the range, as older versions allowed) or
        :data:`MISSING` (unusable: use the default), with a note saying what was done."""
        if self.kind == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if self.problem(value) is None:
            return value, None
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if self.raise_low is not None and isinstance(value, int) and not isinstance(value, bool):
            raised, sentence = self.raise_low(value)
            if sentence is not None and self.problem(raised) is None:
                return raised, sentence
        if (
            number
            and self.kind in ("int", "float")
            and not math.isnan(value)
            and (self.kind == "float" or isinstance(value, int))
            and not self.in_gap(value)
            and self.minimum is not None
            and self.maximum is not None
        ):
            clamped = min(max(value, self.minimum), self.maximum)
            return (
                clamped,
                f"{_num(value)} is outside {self.range_text()}; clamped to {_num(clamped)}",
            )
        return MISSING, f"unusable value {value!r:.100}; reset to the default"

    # -- the API server -------------------------------------------------------------------

    def api_parameter(self) -> dict[str, Any]:
        """A JSON-Schema-like description of this field as a request parameter."""
        types = {
            "int": "integer",
            "float": "number",
            "bool": "boolean",
            "choice": "string",
            "text": "string",
            "text_list": "array",
        }
        param: dict[str, Any] = {
            "name": self.json_name,
            "type": types[self.kind],
            "description": self.help,
            "default": self.default_value(),
        }
        if self.minimum is not None:
            param["minimum"] = self.minimum
        if self.maximum is not None:
            param["maximum"] = self.maximum
        if self.special is not None:
            param["special"] = {"value": self.special.value, "meaning": self.special.text}
        if self.choices:
            param["enum"] = list(self.choice_values())
        if self.kind == "text_list":
            param["items"] = {"type": "string", "minLength": 1}
        if self.kind == "text":
            param["nullable"] = True
        return param


def spec_field(spec: FieldSpec) -> Any:
    """A ``dataclasses.field`` with the spec's default and the spec as metadata."""
    metadata = {SPEC_KEY: spec}
    if spec.default_factory is not None:
        return dataclasses.field(default_factory=spec.default_factory, metadata=metadata)
    if isinstance(spec.default, list):
        items = list(spec.default)
        return dataclasses.field(default_factory=lambda: list(items), metadata=metadata)
    return dataclasses.field(default=spec.default, metadata=metadata)


def specs_of(cls: Any) -> Iterator[FieldSpec]:
    """The specs of a dataclass's fields declared with :func:`spec_field`, in order."""
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(SPEC_KEY)
        if isinstance(spec, FieldSpec):
            yield spec
