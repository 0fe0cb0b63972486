"""One schema for every setting a user may change: context fields and sampling fields.

Each field is described once, by a frozen :class:`FieldSpec`: its label, help text, unit,
default, valid range (plus one special value such as ``-1 = random``), choices, whether a
change applies live or rebuilds the context, and its command-line flags. Everything else is
built from it:

- :mod:`app.engine.settings` declares ``ContextSettings`` and ``SamplingParams`` with
  :func:`spec_field` (default and spec attached as ``dataclasses.field`` metadata) and
  validates them with :meth:`FieldSpec.problem` (errors name their field);
- :mod:`app.storage.settings` migrates stored values with :meth:`FieldSpec.migrate`;
- the settings panel and the chat's sampling controls build their editors from the specs;
- ``llamadesk run`` / ``bench`` build their flags from :attr:`FieldSpec.cli`;
- the API server builds its request parameters from :func:`api_parameters`.

This module imports only the standard library: storage and the engine both use it, and
neither may import the other (nor Qt).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ADVANCED_CONTEXT_GROUPS",
    "ATTENTION",
    "BASIC_CONTEXT_FIELDS",
    "CONTEXT_FIELDS",
    "CONTEXT_GROUPS",
    "CONVERSATION_FIELDS",
    "FLASH_ATTN",
    "FROM_MODEL",
    "KV_TYPES",
    "MAX_SEQUENCES",
    "MISSING",
    "POOLING",
    "ROPE_SCALING",
    "SAMPLING_FIELDS",
    "SPEC_KEY",
    "Apply",
    "CliOption",
    "FieldSpec",
    "Special",
    "api_parameters",
    "default_batch_threads",
    "default_threads",
    "format_bytes",
    "spec_field",
    "specs_of",
]

# llama.cpp's LLAMA_MAX_SEQ: a larger n_seq_max makes context creation fail.
MAX_SEQUENCES = 256

# ggml type ids (ggml.h) of the KV cache types a user may pick, with bytes per element.
KV_TYPES: dict[str, tuple[int, float, int]] = {
    # name: (ggml_type, bytes per element, block size)
    "f32": (0, 4.0, 1),
    "f16": (1, 2.0, 1),
    "bf16": (30, 2.0, 1),
    "q8_0": (8, 34 / 32, 32),
    "q5_1": (7, 24 / 32, 32),
    "q5_0": (6, 22 / 32, 32),
    "q4_1": (3, 20 / 32, 32),
    "q4_0": (2, 18 / 32, 32),
    "iq4_nl": (20, 18 / 32, 32),
}

FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
ROPE_SCALING = {"model": -1, "none": 0, "linear": 1, "yarn": 2, "longrope": 3}
POOLING = {"model": -1, "none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
ATTENTION = {"model": -1, "causal": 0, "non-causal": 1}

FROM_MODEL = "From the model"
SPEC_KEY = "llamadesk.spec"  # the dataclasses.field metadata key holding a FieldSpec


class _Missing(enum.Enum):
    MISSING = "MISSING"


MISSING = _Missing.MISSING  # "no value": a stored value that must fall back to the default

Kind = Literal["int", "float", "bool", "choice", "text", "text_list"]


def default_threads() -> int:
    """Threads for generation: all cores but one, for the window to stay responsive.

    Generation is memory bound, so the last core adds little; llama.cpp's threads spin
    while they wait, and a window sharing every core with them stutters.
    """
    count = os.cpu_count() or 1
    return max(1, min(8, count - 1))


def default_batch_threads() -> int:
    """Threads for prompt processing (compute bound): every core."""
    return max(1, min(16, os.cpu_count() or 1))


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.50 KiB"``: binary units (KiB, MiB, GiB, TiB), as memory is counted.

    The one byte formatter of the app (the settings panel, the status bar, the model manager).
    """
    value = float(n)
    if abs(value) < 1024:
        return f"{int(value)} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.2f} {unit}" if abs(value) < 10 else f"{value:.1f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


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


def _num(value: float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 100_000 else str(value)
    return f"{value:g}"


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


# -- the context fields ------------------------------------------------------------------


def _choices(options: dict[str, Any], labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((key, labels.get(key, key)) for key in options)


def _kv_label(name: str) -> str:
    size = KV_TYPES[name][1]
    notes = {
        "f16": "exact, the default",
        "f32": "exact, twice the memory",
        "bf16": "exact range, less precision",
        "q8_0": "about half of f16, nearly lossless",
        "q4_0": "about a quarter of f16, lower quality",
    }
    note = notes.get(name, "smaller, lower quality")
    return f"{name} — {size:.2f} bytes per value ({note})"


_KV_CHOICES = tuple((name, _kv_label(name)) for name in KV_TYPES)
_FROM_MODEL_0 = Special(0, FROM_MODEL)
_FROM_MODEL_NEG = Special(-1, FROM_MODEL)
_CTX_MAX = 1 << 24
_BATCH_MAX = 1 << 20


def _context_fields() -> tuple[FieldSpec, ...]:
    # The basic fields' groups order CONTEXT_GROUPS; the panel shows the basic fields in one
    # section and the advanced ones by group (BT: the advanced halves of batching and threads).
    C, B, T, BT, A, R, X = (
        "Context",
        "Batching",
        "Threads",
        "Batches & threads",
        "Attention & cache",
        "RoPE / YaRN",
        "Embeddings & diagnostics",
    )
    return (
        FieldSpec(
            "n_ctx",
            "Context size",
            "How many tokens (pieces of words) the model keeps in memory, for all resident "
            "tabs together. 0 uses the length the model was trained for.",
            "int",
            default=4096,
            minimum=64,
            maximum=_CTX_MAX,
            special=_FROM_MODEL_0,
            unit="tokens",
            group=C,
            step=1024,
            cli=CliOption(("-c", "--ctx-size"), "N"),
        ),
        FieldSpec(
            "n_seq_max",
            "Resident tabs",
            "How many tabs keep their conversation cached at once; other tabs are saved and "
            "re-read when you switch to them.",
            "int",
            default=4,
            minimum=1,
            maximum=MAX_SEQUENCES,
            unit="tabs",
            group=C,
        ),
        FieldSpec(
            "kv_unified",
            "Unified cache",
            "Resident tabs share one pool of context instead of each getting a fixed "
            "slice (context size ÷ resident tabs). Recommended.",
            "bool",
            default=True,
            group=A,
            advanced=True,
        ),
        FieldSpec(
            "n_batch",
            "Batch size",
            "Most tokens handed to the model in one step while reading a prompt. Larger reads "
            "long prompts faster and uses more memory.",
            "int",
            default=512,
            minimum=1,
            maximum=_BATCH_MAX,
            unit="tokens",
            group=B,
            step=128,
            cli=CliOption(("-b", "--batch-size"), "N"),
        ),
        FieldSpec(
            "n_ubatch",
            "Micro-batch size",
            "How many of those tokens are computed together; at most the batch size.",
            "int",
            default=512,
            minimum=1,
            maximum=_BATCH_MAX,
            unit="tokens",
            group=BT,
            step=128,
            advanced=True,
        ),
        FieldSpec(
            "n_threads",
            "Generation threads",
            "CPU threads used while writing a reply. More than your physical cores usually "
            "makes it slower.",
            "int",
            default_factory=default_threads,
            minimum=1,
            maximum=512,
            unit="threads",
            apply=Apply.LIVE,
            group=T,
            cli=CliOption(
                ("-t", "--threads"),
                "N",
                default=None,
                note="Sets the prompt threads too. Default: all cores but one, at most 8.",
            ),
        ),
        FieldSpec(
            "n_threads_batch",
            "Prompt threads",
            "CPU threads used while reading a prompt.",
            "int",
            default_factory=default_batch_threads,
            minimum=1,
            maximum=512,
            unit="threads",
            apply=Apply.LIVE,
            group=BT,
            advanced=True,
        ),
        FieldSpec(
            "flash_attn",
            "Flash attention",
            "A faster, leaner way to compute attention. Auto uses it where the hardware "
            "supports it; a quantized V cache needs it.",
            "choice",
            default="auto",
            choices=_choices(FLASH_ATTN, {"auto": "Auto", "on": "On", "off": "Off"}),
            group=A,
            layout=True,
            advanced=True,
        ),
        FieldSpec(
            "type_k",
            "K cache type",
            "Number format of the cached keys: smaller formats hold more context in the same "
            "memory at some cost in quality.",
            "choice",
            default="f16",
            choices=_KV_CHOICES,
            group=A,
            layout=True,
            advanced=True,
        ),
        FieldSpec(
            "type_v",
            "V cache type",
            "Number format of the cached values; anything but f16/bf16/f32 needs flash attention.",
            "choice",
            default="f16",
            choices=_KV_CHOICES,
            group=A,
            layout=True,
            advanced=True,
        ),
        FieldSpec(
            "offload_kqv",
            "Cache on the GPU",
            "Keep the cache and compute attention on the GPU for layers that run there.",
            "bool",
            default=True,
            group=A,
            advanced=True,
        ),
        FieldSpec(
            "op_offload",
            "Offload host operations",
            "Let the GPU also work on weights kept in system memory (faster prompt reading "
            "with a GPU).",
            "bool",
            default=True,
            group=A,
            advanced=True,
        ),
        FieldSpec(
            "swa_full",
            "Full sliding-window cache",
            "For models with sliding-window attention (Gemma, gpt-oss): keep every position, "
            "so an edit far back is cut from the cache. Off saves memory; edits then restore "
            "a checkpoint or re-read the conversation.",
            "bool",
            default=True,
            group=A,
            layout=True,
            advanced=True,
        ),
        FieldSpec(
            "rope_scaling_type",
            "RoPE scaling",
            "How positions are stretched to use more context than the model was trained "
            "on. Leave it to the model unless you extend the context.",
            "choice",
            default="model",
            choices=_choices(
                ROPE_SCALING,
                {
                    "model": FROM_MODEL,
                    "none": "None",
                    "linear": "Linear",
                    "yarn": "YaRN",
                    "longrope": "LongRoPE",
                },
            ),
            group=R,
            layout=True,
            advanced=True,
        ),
        FieldSpec(
            "rope_freq_base",
            "RoPE base frequency",
            "Base frequency of the position encoding. 0 uses the model's value.",
            "float",
            default=0.0,
            minimum=0.0,
            maximum=1e9,
            special=_FROM_MODEL_0,
            group=R,
            step=1000.0,
            decimals=2,
            layout=True,
            advanced=True,
        ),
        FieldSpec(
            "rope_freq_scale",
            "RoPE frequency scale",
            "Position scale factor for linear scaling (0.5 doubles the usable context). "
            "0 uses the model's value.",
            "float",
            default=0.0,
            minimum=0.0,
            maximum=1e9,
            special=_FROM_MODEL_0,
            group=R,
            step=0.05,
            decimals=6,
            layout=True,
            advanced=True,
        ),
        FieldSpec(
            "yarn_ext_factor",
            "YaRN extrapolation mix",
            "How much of YaRN's extrapolation is mixed in. -1 uses the model's value.",
            "float",
            default=-1.0,
            minimum=-1.0,
            maximum=100.0,
            special=_FROM_MODEL_NEG,
            group=R,
            step=0.1,
            decimals=4,
            layout=True,
            advanced=True,
        ),
        FieldSpec(
            "yarn_attn_factor",
            "YaRN attention factor",
            "Scales attention strength under YaRN. -1 uses the model's value.",
            "float",
            default=-1.0,
            minimum=-1.0,
            maximum=100.0,
            special=_FROM_MODEL_NEG,
            group=R,
            step=0.1,
            decimals=4,
            layout=True,
            advanced=True,
        ),
        FieldSpec(
            "yarn_beta_fast",
            "YaRN beta fast",
            "YaRN's low correction dimension. -1 uses the model's value.",
            "float",
            default=-1.0,
            minimum=-1.0,
            maximum=1000.0,
            special=_FROM_MODEL_NEG,
            group=R,
            step=1.0,
            decimals=4,
            layout=True,
            advanced=True,
        ),
        FieldSpec(
            "yarn_beta_slow",
            "YaRN beta slow",
            "YaRN's high correction dimension. -1 uses the model's value.",
            "float",
            default=-1.0,
            minimum=-1.0,
            maximum=1000.0,
            special=_FROM_MODEL_NEG,
            group=R,
            step=1.0,
            decimals=4,
            layout=True,
            advanced=True,
        ),
        FieldSpec(
            "yarn_orig_ctx",
            "YaRN original context",
            "The context length the model was trained with, as YaRN should assume it. "
            "0 uses the model's value.",
            "int",
            default=0,
            minimum=0,
            maximum=_CTX_MAX,
            special=_FROM_MODEL_0,
            unit="tokens",
            group=R,
            step=1024,
            layout=True,
            advanced=True,
        ),
        FieldSpec(
            "embeddings",
            "Embeddings output",
            "Produce embedding vectors instead of text. Leave off for chatting.",
            "bool",
            default=False,
            group=X,
            advanced=True,
        ),
        FieldSpec(
            "pooling_type",
            "Pooling",
            "How token embeddings are combined into one vector (embeddings output only).",
            "choice",
            default="model",
            choices=_choices(
                POOLING,
                {
                    "model": FROM_MODEL,
                    "none": "None",
                    "mean": "Mean",
                    "cls": "First (CLS) token",
                    "last": "Last token",
                    "rank": "Rank (rerankers)",
                },
            ),
            group=X,
            advanced=True,
        ),
        FieldSpec(
            "attention_type",
            "Attention type",
            "Causal for chat models, non-causal for embedding models.",
            "choice",
            default="model",
            choices=_choices(
                ATTENTION,
                {
                    "model": FROM_MODEL,
                    "causal": "Causal (chat models)",
                    "non-causal": "Non-causal (embedding models)",
                },
            ),
            group=X,
            advanced=True,
        ),
        FieldSpec(
            "no_perf",
            "Skip performance counters",
            "Do not collect llama.cpp's internal timing statistics (a little less overhead).",
            "bool",
            default=True,
            group=X,
            advanced=True,
        ),
    )


def _sampling_fields() -> tuple[FieldSpec, ...]:
    n = Apply.NEXT_REPLY
    return (
        FieldSpec(
            "temperature",
            "Temperature",
            "Randomness: 0 always picks the likeliest token (greedy), higher is more varied.",
            "float",
            default=0.8,
            minimum=0.0,
            maximum=5.0,
            apply=n,
            step=0.05,
            decimals=2,
            chat=True,
            cli=CliOption(("--temp",), "T"),
        ),
        FieldSpec(
            "top_k",
            "Top-k",
            "Sample only among the k likeliest tokens (0: no limit).",
            "int",
            default=40,
            minimum=0,
            maximum=100_000,
            unit="tokens",
            apply=n,
            chat=True,
            cli=CliOption(("--top-k",), "K"),
        ),
        FieldSpec(
            "top_p",
            "Top-p",
            "Sample among the likeliest tokens whose probabilities add up to p (1: off).",
            "float",
            default=0.95,
            minimum=0.0,
            maximum=1.0,
            apply=n,
            step=0.01,
            decimals=2,
            chat=True,
            cli=CliOption(("--top-p",), "P"),
        ),
        FieldSpec(
            "min_p",
            "Min-p",
            "Drop tokens less likely than this fraction of the likeliest one (0: off).",
            "float",
            default=0.05,
            minimum=0.0,
            maximum=1.0,
            apply=n,
            step=0.01,
            decimals=2,
            chat=True,
            cli=CliOption(("--min-p",), "P"),
        ),
        FieldSpec(
            "repeat_penalty",
            "Repeat penalty",
            "Above 1 discourages repeating recent tokens (1: off).",
            "float",
            default=1.0,
            minimum=0.01,
            maximum=5.0,
            apply=n,
            step=0.05,
            decimals=2,
            chat=True,
            cli=CliOption(("--repeat-penalty",), "R"),
        ),
        FieldSpec(
            "repeat_last_n",
            "Repeat window",
            "How many recent tokens the repeat, frequency and presence penalties look at.",
            "int",
            default=64,
            minimum=0,
            maximum=_CTX_MAX,
            special=Special(-1, "Whole context"),
            unit="tokens",
            apply=n,
            cli=CliOption(("--repeat-last-n",), "N"),
        ),
        FieldSpec(
            "frequency_penalty",
            "Frequency penalty",
            "Discourages tokens in proportion to how often they appeared (0: off).",
            "float",
            default=0.0,
            minimum=-2.0,
            maximum=2.0,
            apply=n,
            step=0.05,
            decimals=2,
            chat=True,
            cli=CliOption(("--frequency-penalty",), "F"),
        ),
        FieldSpec(
            "presence_penalty",
            "Presence penalty",
            "Discourages tokens that appeared at all (0: off).",
            "float",
            default=0.0,
            minimum=-2.0,
            maximum=2.0,
            apply=n,
            step=0.05,
            decimals=2,
            chat=True,
            cli=CliOption(("--presence-penalty",), "P"),
        ),
        FieldSpec(
            "seed",
            "Seed",
            "The same seed and settings give the same reply; -1 picks a new one each time.",
            "int",
            default=-1,
            minimum=0,
            maximum=2**31 - 1,
            special=Special(-1, "Random"),
            apply=n,
            chat=True,
            cli=CliOption(("--seed",), "S"),
        ),
        FieldSpec(
            "max_tokens",
            "Max tokens",
            "The longest reply, in tokens.",
            "int",
            default=1024,
            minimum=1,
            maximum=1_000_000,
            special=Special(-1, "No limit"),
            unit="tokens",
            apply=n,
            step=16,
            chat=True,
            cli=CliOption(("-n", "--n-predict"), "N", default=128),
        ),
        FieldSpec(
            "stop",
            "Stop strings",
            "The reply ends where one of these appears (not included).",
            "text_list",
            default=[],
            apply=n,
            cli=CliOption(("--stop",), "TEXT", note="Repeatable."),
        ),
        FieldSpec(
            "grammar",
            "Grammar",
            "A GBNF grammar the reply must follow (none: free text).",
            "text",
            default=None,
            apply=n,
        ),
    )


CONTEXT_FIELDS: dict[str, FieldSpec] = {spec.name: spec for spec in _context_fields()}
SAMPLING_FIELDS: dict[str, FieldSpec] = {spec.name: spec for spec in _sampling_fields()}
# The settings panel's groups, in order: (title, field names).
CONTEXT_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (group, tuple(s.name for s in CONTEXT_FIELDS.values() if s.group == group))
    for group in dict.fromkeys(s.group for s in CONTEXT_FIELDS.values())
)
# The panel's "Basic" section (in schema order) and its "Advanced" section's groups.
BASIC_CONTEXT_FIELDS: tuple[str, ...] = tuple(
    s.name for s in CONTEXT_FIELDS.values() if not s.advanced
)
ADVANCED_CONTEXT_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (group, advanced)
    for group, names in CONTEXT_GROUPS
    if (advanced := tuple(n for n in names if CONTEXT_FIELDS[n].advanced))
)


def _conversation_fields() -> tuple[FieldSpec, ...]:
    return (
        FieldSpec(
            # The key the conversation's settings store it under (app.session.types
            # POLICY_KEY); the values are app.session.types.ContextFullPolicy's.
            "context_full_policy",
            "When the context is full",
            "What happens when this conversation fills the model's context. Applies to "
            "this conversation only.",
            "choice",
            default="shift",
            choices=(
                ("shift", "Drop the oldest messages"),
                ("stop", "Stop the reply"),
            ),
            choice_help=(
                (
                    "shift",
                    "The oldest messages (never the system prompt) are dropped from what "
                    "the model sees and the reply goes on; they stay in the chat.",
                ),
                (
                    "stop",
                    "The reply ends where the context is full; nothing is dropped. Start a "
                    "new chat or raise the context size to go on.",
                ),
            ),
            apply=Apply.LIVE,
        ),
    )


# Settings of one conversation kept with its sampling values (not engine parameters:
# ``SamplingParams`` ignores them).
CONVERSATION_FIELDS: dict[str, FieldSpec] = {s.name: s for s in _conversation_fields()}


def api_parameters() -> list[dict[str, Any]]:
    """The sampling fields as request parameters (JSON name, type, range, default,
    description), for the API server to accept and validate."""
    return [spec.api_parameter() for spec in SAMPLING_FIELDS.values()]
