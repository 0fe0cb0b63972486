"""Settings a user may change, as dataclasses, validated before llama.cpp sees them.

Several llama.cpp calls abort the process or return a NULL context on bad values, so every
field is checked here first and a wrong value becomes a :class:`ContextError` that names the
field, the value and the valid range.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from app.engine.errors import ContextError

if TYPE_CHECKING:
    from app.engine.memory_estimate import MemoryEstimate
    from app.engine.metadata import ModelInfo

_T = TypeVar("_T")

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


@dataclass
class ModelSettings:
    """How the weights are loaded (changing these reloads the model)."""

    n_gpu_layers: int = 0
    use_mmap: bool = True
    use_mlock: bool = False

    def validate(self) -> None:
        if not -1 <= self.n_gpu_layers <= 1024:
            raise ContextError(
                f"GPU layers must be between -1 (all) and 1024, not {self.n_gpu_layers}."
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSettings:
        return _from_dict(cls, data)


@dataclass
class ContextSettings:
    """Every field of ``llama_context_params`` a user may set, with the app's defaults.

    ``n_seq_max`` is the number of tabs whose caches stay resident at once; with
    ``kv_unified`` they share one pool of ``n_ctx`` cells (a split cache would give each a
    fixed n_ctx / n_seq_max share and forbid partial forks).
    """

    n_ctx: int = 4096
    n_batch: int = 512
    n_ubatch: int = 512
    n_seq_max: int = 4
    n_threads: int = field(default_factory=default_threads)
    n_threads_batch: int = field(default_factory=default_batch_threads)
    flash_attn: str = "auto"
    type_k: str = "f16"
    type_v: str = "f16"
    offload_kqv: bool = True
    op_offload: bool = True
    swa_full: bool = True
    kv_unified: bool = True
    rope_scaling_type: str = "model"
    rope_freq_base: float = 0.0  # 0 = from the model
    rope_freq_scale: float = 0.0  # 0 = from the model
    yarn_ext_factor: float = -1.0  # -1 = from the model
    yarn_attn_factor: float = -1.0  # -1 = from the model
    yarn_beta_fast: float = -1.0
    yarn_beta_slow: float = -1.0
    yarn_orig_ctx: int = 0
    embeddings: bool = False
    pooling_type: str = "model"
    attention_type: str = "model"
    no_perf: bool = True

    # Fields that change the layout of a sequence's saved state: a state file written under
    # other values is refused and the text re-processed instead.
    LAYOUT_FIELDS: ClassVar[tuple[str, ...]] = (
        "type_k",
        "type_v",
        "flash_attn",
        "rope_scaling_type",
        "rope_freq_base",
        "rope_freq_scale",
        "yarn_ext_factor",
        "yarn_attn_factor",
        "yarn_beta_fast",
        "yarn_beta_slow",
        "yarn_orig_ctx",
        "swa_full",
    )
    # Fields that apply without rebuilding the context.
    LIVE_FIELDS: ClassVar[tuple[str, ...]] = ("n_threads", "n_threads_batch")

    def validate(self, model: ModelInfo | None = None) -> None:
        """Raise :class:`ContextError` for any value llama.cpp would reject or die on."""
        _int_range("Context size (n_ctx)", self.n_ctx, 0, 1 << 24)
        if 0 < self.n_ctx < 64:
            raise ContextError(
                f"Context size (n_ctx) must be 0 (the model's) or at least 64, not {self.n_ctx}."
            )
        _int_range("Batch size (n_batch)", self.n_batch, 1, 1 << 20)
        _int_range("Micro-batch size (n_ubatch)", self.n_ubatch, 1, 1 << 20)
        if self.n_ubatch > self.n_batch:
            raise ContextError(
                f"Micro-batch size (n_ubatch = {self.n_ubatch}) cannot exceed the batch size "
                f"(n_batch = {self.n_batch})."
            )
        _int_range("Parallel sequences (n_seq_max)", self.n_seq_max, 1, MAX_SEQUENCES)
        if self.n_batch < self.n_seq_max:
            raise ContextError(
                f"The batch size (n_batch = {self.n_batch}) must be at least the number of parallel "
                f"sequences ({self.n_seq_max}): each generating tab adds a token to every batch."
            )
        _int_range("Threads (n_threads)", self.n_threads, 1, 512)
        _int_range("Batch threads (n_threads_batch)", self.n_threads_batch, 1, 512)
        _choice("Flash attention", self.flash_attn, FLASH_ATTN)
        _choice("K cache type", self.type_k, KV_TYPES)
        _choice("V cache type", self.type_v, KV_TYPES)
        _choice("RoPE scaling", self.rope_scaling_type, ROPE_SCALING)
        _choice("Pooling", self.pooling_type, POOLING)
        _choice("Attention type", self.attention_type, ATTENTION)
        for name in ("rope_freq_base", "rope_freq_scale"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1e9:
                raise ContextError(f"{name} must be 0 (from the model) or positive, not {value}.")
        if self.yarn_orig_ctx < 0:
            raise ContextError(f"yarn_orig_ctx must be 0 or positive, not {self.yarn_orig_ctx}.")
        if self.type_v in _QUANTIZED and self.flash_attn == "off":
            raise ContextError(
                f"A quantized V cache ({self.type_v}) needs flash attention: set flash attention "
                "to auto or on, or use an f16 V cache."
            )
        if not self.kv_unified and self.n_ctx and self.n_ctx // self.n_seq_max < 64:
            raise ContextError(
                f"A split cache gives each of the {self.n_seq_max} sequences only "
                f"{self.n_ctx // self.n_seq_max} tokens: raise n_ctx or use a unified cache."
            )
        if model is not None:
            head_dim_k, head_dim_v = model.head_dim_k, model.head_dim_v
            for label, kind, dim in (
                ("K", self.type_k, head_dim_k),
                ("V", self.type_v, head_dim_v),
            ):
                block = KV_TYPES[kind][2]
                if dim and dim % block:
                    raise ContextError(
                        f"The {label} cache type {kind} needs a head size divisible by {block}; "
                        f"this model's is {dim}. Use f16 for the {label} cache."
                    )
            if (
                model.n_ctx_train
                and self.effective_n_ctx(model) > 8 * model.n_ctx_train
                and (self.rope_scaling_type in ("model", "none"))
            ):
                raise ContextError(
                    f"Context size {self.n_ctx} is far beyond what the model was trained for "
                    f"({model.n_ctx_train}); choose at most {model.n_ctx_train} or enable RoPE scaling."
                )

    @property
    def rope_scaled(self) -> bool:
        return self.rope_scaling_type in (
            "linear",
            "yarn",
            "longrope",
        ) or self.rope_freq_scale not in (0.0, 1.0)

    def effective_n_ctx(self, model: ModelInfo | None) -> int:
        """The context size a context gets: this setting (0 = the model's), but never past
        what the model was trained for unless RoPE scaling is on - positions beyond it give
        garbage, not a longer memory."""
        train = model.n_ctx_train if model is not None else 0
        n_ctx = self.n_ctx or train or 4096
        if train > 0 and n_ctx > train and not self.rope_scaled:
            return train
        return n_ctx

    def kv_bytes_per_token(self, model: ModelInfo) -> float:
        """Bytes of K and V per cached token over the attention layers (recurrent layers
        hold a fixed state instead: :func:`app.engine.memory_estimate.estimate`)."""
        from app.engine.memory_estimate import kv_bytes_per_token

        k = KV_TYPES[self.type_k][1] if self.type_k in KV_TYPES else 2.0
        v = KV_TYPES[self.type_v][1] if self.type_v in KV_TYPES else 2.0
        return kv_bytes_per_token(model, k, v)

    def kv_bytes(self, model: ModelInfo) -> int:
        """Estimated KV cache size for this context, the figure the settings panel shows."""
        return int(self.kv_bytes_per_token(model) * self.effective_n_ctx(model))

    def memory_estimate(self, model: ModelInfo) -> MemoryEstimate:
        """The K/V cells, the recurrent states and the checkpoints these settings take."""
        from app.engine.memory_estimate import estimate

        forgets = not self.swa_full and bool(model.arch_params.sliding_window)
        return estimate(model, self.kv_bytes(model), self.n_seq_max, forgets)

    def layout_key(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.LAYOUT_FIELDS}

    def needs_rebuild(self, other: ContextSettings) -> bool:
        """Whether going from ``self`` to ``other`` needs a new context (not only threads)."""
        return any(
            getattr(self, f.name) != getattr(other, f.name)
            for f in fields(self)
            if f.name not in self.LIVE_FIELDS
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContextSettings:
        return _from_dict(cls, data)


_QUANTIZED = {name for name, (_, _, block) in KV_TYPES.items() if block > 1}


@dataclass
class SamplingParams:
    """Per-conversation sampling; temperature 0 means greedy."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int = -1
    max_tokens: int = 512
    stop: list[str] = field(default_factory=list)
    grammar: str | None = None

    def validate(self) -> None:
        if not 0.0 <= self.temperature <= 100.0:
            raise ContextError(f"Temperature must be between 0 and 100, not {self.temperature}.")
        if self.top_k < 0:
            raise ContextError(f"Top-k must be 0 (off) or positive, not {self.top_k}.")
        for name in ("top_p", "min_p"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ContextError(f"{name} must be between 0 and 1, not {value}.")
        if not 0.0 < self.repeat_penalty <= 10.0:
            raise ContextError(
                f"Repeat penalty must be above 0 and at most 10, not {self.repeat_penalty}."
            )
        if self.repeat_last_n < -1:
            raise ContextError(
                f"repeat_last_n must be -1 (whole context), 0 or positive, not {self.repeat_last_n}."
            )
        for name in ("frequency_penalty", "presence_penalty"):
            value = getattr(self, name)
            if not -2.0 <= value <= 2.0:
                raise ContextError(f"{name} must be between -2 and 2, not {value}.")
        if self.max_tokens < 1 and self.max_tokens != -1:
            raise ContextError(
                f"Max tokens must be -1 (no limit) or at least 1, not {self.max_tokens}."
            )
        if not -1 <= self.seed < 2**32:
            raise ContextError(
                f"Seed must be -1 (random) or between 0 and 4294967295, not {self.seed}."
            )
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ContextError("Stop strings must be non-empty text.")

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingParams:
        return _from_dict(cls, data)


def _int_range(label: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ContextError(f"{label} must be a whole number, not {value!r}.")
    if not low <= value <= high:
        raise ContextError(f"{label} must be between {low} and {high}, not {value}.")


def _choice(label: str, value: Any, options: dict[str, Any]) -> None:
    if value not in options:
        raise ContextError(f"{label} must be one of {', '.join(options)}, not {value!r}.")


def _from_dict(cls: type[_T], data: dict[str, Any]) -> _T:
    """Build ``cls`` from a dict, ignoring unknown keys (settings written by newer versions)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})
