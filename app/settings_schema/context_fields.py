"""The context fields (what building a llama.cpp context takes) and the settings panel's
groups of them."""

from __future__ import annotations

from typing import Any

from app.settings_schema.field_spec import Apply, CliOption, FieldSpec, Special
from app.settings_schema.llama_values import (
    ATTENTION,
    BATCH_MAX,
    CTX_MAX,
    FLASH_ATTN,
    FROM_MODEL,
    KV_TYPES,
    MAX_SEQUENCES,
    POOLING,
    ROPE_SCALING,
)
from app.settings_schema.machine_defaults import (
    clamp_threads,
    default_batch_threads,
    default_threads,
)


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
            maximum=CTX_MAX,
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
            maximum=BATCH_MAX,
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
            maximum=BATCH_MAX,
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
            raise_low=clamp_threads,  # a stored 0 is used as 1, and said so
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
            raise_low=clamp_threads,
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
            maximum=CTX_MAX,
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


CONTEXT_FIELDS: dict[str, FieldSpec] = {spec.name: spec for spec in _context_fields()}
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
