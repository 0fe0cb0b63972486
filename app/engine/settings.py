"""Settings a user may change, as dataclasses, validated before llama.cpp sees them.

Each field is declared from :mod:`app.settings_schema` (its default, range, label and help
live there, once). Several llama.cpp calls abort the process or return a NULL context on
bad values, so every field is checked here first: a wrong value becomes a
:class:`SettingsError` (a :class:`ContextError`) whose ``field`` names the field and whose
message gives the value and the valid range.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from app.engine.errors import ContextError
from app.engine.grammar_bounds import GrammarBoundsError, GrammarSyntaxError, check_grammar
from app.settings_schema import (
    ATTENTION,
    CONTEXT_FIELDS,
    DEVICE_FIELDS,
    FLASH_ATTN,
    KV_TYPES,
    MAX_SEQUENCES,
    MODEL_FIELDS,
    POOLING,
    ROPE_SCALING,
    SAMPLING_FIELDS,
    Apply,
    FieldSpec,
    default_batch_threads,
    default_threads,
    spec_field,
    specs_of,
)

if TYPE_CHECKING:
    from app.engine.memory_estimate import MemoryEstimate
    from app.engine.metadata import ModelInfo

__all__ = [
    "ATTENTION",
    "FLASH_ATTN",
    "KV_TYPES",
    "MAX_SEQUENCES",
    "POOLING",
    "ROPE_SCALING",
    "ContextSettings",
    "ModelSettings",
    "SamplingParams",
    "SettingsError",
    "default_batch_threads",
    "default_threads",
    "validate_fields",
]

_T = TypeVar("_T")


class SettingsError(ContextError):
    """A setting that is not valid: ``field`` names it, ``fields`` every field involved
    (``n_ubatch`` and ``n_batch`` when one exceeds the other), for an editor to highlight."""

    def __init__(self, field: str, message: str, fields: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.field = field
        self.fields = fields or (field,)


def validate_fields(obj: Any) -> None:
    """Check every schema field of the dataclass ``obj`` on its own (type and range)."""
    for spec in specs_of(type(obj)):
        message = spec.problem(getattr(obj, spec.name))
        if message is not None:
            raise SettingsError(spec.name, message)


def _c(name: str) -> Any:
    return spec_field(CONTEXT_FIELDS[name])


def _s(name: str) -> Any:
    return spec_field(SAMPLING_FIELDS[name])


@dataclass
class ModelSettings:
    """How the weights are loaded and where their layers go (changing these reloads the
    model); the device fields are :data:`app.settings_schema.DEVICE_FIELDS`."""

    gpu_layers: str = spec_field(DEVICE_FIELDS["gpu_layers"])
    split_mode: str = spec_field(DEVICE_FIELDS["split_mode"])
    main_device: int = spec_field(DEVICE_FIELDS["main_device"])
    tensor_split: str = spec_field(DEVICE_FIELDS["tensor_split"])
    devices: str = spec_field(DEVICE_FIELDS["devices"])
    rpc_servers: str = spec_field(DEVICE_FIELDS["rpc_servers"])
    use_mmap: bool = True
    use_mlock: bool = False
    # False: no extra CPU buffer types (AMX, CPU_REPACK), as llama-server's --no-repack:
    # the window's "Load with safe settings" after a crash (issue 27).
    use_extra_bufts: bool = True
    # A bundled template's name or a Jinja file ("": automatic); applies without a reload
    # (Engine.set_chat_template).
    chat_template: str = spec_field(MODEL_FIELDS["chat_template"])

    def validate(self) -> None:
        from app.settings_schema.device_fields import parse_gpu_layers, parse_tensor_split

        validate_fields(self)
        from app.engine.chat_template import user_template_problem
        from app.engine.rpc_probe import RpcProbeError, parse_endpoints

        problem = user_template_problem(self.chat_template or "")
        if problem is not None:
            raise SettingsError("chat_template", problem)
        for name, parse in (("gpu_layers", parse_gpu_layers), ("tensor_split", parse_tensor_split)):
            try:
                parse(getattr(self, name))
            except ValueError as exc:
                raise SettingsError(name, str(exc)) from None
        try:
            parse_endpoints(self.rpc_servers)
        except RpcProbeError as exc:
            raise SettingsError("rpc_servers", str(exc)) from None

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

    n_ctx: int = _c("n_ctx")
    n_batch: int = _c("n_batch")
    n_ubatch: int = _c("n_ubatch")
    n_seq_max: int = _c("n_seq_max")
    n_threads: int = _c("n_threads")
    n_threads_batch: int = _c("n_threads_batch")
    flash_attn: str = _c("flash_attn")
    type_k: str = _c("type_k")
    type_v: str = _c("type_v")
    offload_kqv: bool = _c("offload_kqv")
    op_offload: bool = _c("op_offload")
    swa_full: bool = _c("swa_full")
    kv_unified: bool = _c("kv_unified")
    rope_scaling_type: str = _c("rope_scaling_type")
    rope_freq_base: float = _c("rope_freq_base")  # 0 = from the model
    rope_freq_scale: float = _c("rope_freq_scale")  # 0 = from the model
    yarn_ext_factor: float = _c("yarn_ext_factor")  # -1 = from the model
    yarn_attn_factor: float = _c("yarn_attn_factor")  # -1 = from the model
    yarn_beta_fast: float = _c("yarn_beta_fast")
    yarn_beta_slow: float = _c("yarn_beta_slow")
    yarn_orig_ctx: int = _c("yarn_orig_ctx")
    embeddings: bool = _c("embeddings")
    pooling_type: str = _c("pooling_type")
    attention_type: str = _c("attention_type")
    no_perf: bool = _c("no_perf")

    # Fields that change the layout of a sequence's saved state: a state file written under
    # other values is refused and the text re-processed instead.
    LAYOUT_FIELDS: ClassVar[tuple[str, ...]] = tuple(
        s.name for s in CONTEXT_FIELDS.values() if s.layout
    )
    # Fields that apply without rebuilding the context.
    LIVE_FIELDS: ClassVar[tuple[str, ...]] = tuple(
        s.name for s in CONTEXT_FIELDS.values() if s.apply is Apply.LIVE
    )

    @staticmethod
    def spec(name: str) -> FieldSpec:
        return CONTEXT_FIELDS[name]

    def validate(self, model: ModelInfo | None = None) -> None:
        """Raise :class:`SettingsError` for any value llama.cpp would reject or die on."""
        validate_fields(self)
        if self.n_ubatch > self.n_batch:
            raise SettingsError(
                "n_ubatch",
                f"Micro-batch size (n_ubatch = {self.n_ubatch}) cannot exceed the batch size "
                f"(n_batch = {self.n_batch}).",
                ("n_ubatch", "n_batch"),
            )
        if self.n_batch < self.n_seq_max:
            raise SettingsError(
                "n_batch",
                f"The batch size (n_batch = {self.n_batch}) must be at least the number of parallel "
                f"sequences ({self.n_seq_max}): each generating tab adds a token to every batch.",
                ("n_batch", "n_seq_max"),
            )
        if self.type_v in _QUANTIZED and self.flash_attn == "off":
            raise SettingsError(
                "type_v",
                f"A quantized V cache ({self.type_v}) needs flash attention: set flash attention "
                "to auto or on, or use an f16 V cache.",
                ("type_v", "flash_attn"),
            )
        if not self.kv_unified and self.n_ctx and self.n_ctx // self.n_seq_max < 64:
            raise SettingsError(
                "kv_unified",
                f"A split cache gives each of the {self.n_seq_max} sequences only "
                f"{self.n_ctx // self.n_seq_max} tokens: raise n_ctx or use a unified cache.",
                ("kv_unified", "n_ctx", "n_seq_max"),
            )
        if self.embeddings and self.n_ubatch % self.n_seq_max:
            # llama.cpp aborts the process (GGML_ASSERT in the pooling's mul_mat) when it
            # splits a micro-batch of embeddings over sequences that do not divide it.
            raise SettingsError(
                "n_ubatch",
                f"With embeddings on, the micro-batch size (n_ubatch = {self.n_ubatch}) must be "
                f"a multiple of the parallel sequences (n_seq_max = {self.n_seq_max}).",
                ("n_ubatch", "n_seq_max"),
            )
        if model is not None:
            head_dim_k, head_dim_v = model.head_dim_k, model.head_dim_v
            for name, label, kind, dim in (
                ("type_k", "K", self.type_k, head_dim_k),
                ("type_v", "V", self.type_v, head_dim_v),
            ):
                block = KV_TYPES[kind][2]
                if dim and dim % block:
                    raise SettingsError(
                        name,
                        f"The {label} cache type {kind} needs a head size divisible by {block}; "
                        f"this model's is {dim}. Use f16 for the {label} cache.",
                    )
            if (
                model.n_ctx_train
                and self.effective_n_ctx(model) > 8 * model.n_ctx_train
                and (self.rope_scaling_type in ("model", "none"))
            ):
                raise SettingsError(
                    "n_ctx",
                    f"Context size {self.n_ctx} is far beyond what the model was trained for "
                    f"({model.n_ctx_train}); choose at most {model.n_ctx_train} or enable RoPE scaling.",
                    ("n_ctx", "rope_scaling_type"),
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

    def thread_warnings(self, cores: int | None = None) -> list[str]:
        """Sentences to show before these thread counts are used: a count that
        oversubscribes the machine (:func:`app.engine.threads.thread_warnings`)."""
        from app.engine.threads import thread_warnings

        return thread_warnings(self.n_threads, self.n_threads_batch, cores)

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

    temperature: float = _s("temperature")
    top_k: int = _s("top_k")
    top_p: float = _s("top_p")
    min_p: float = _s("min_p")
    repeat_penalty: float = _s("repeat_penalty")
    repeat_last_n: int = _s("repeat_last_n")
    frequency_penalty: float = _s("frequency_penalty")
    presence_penalty: float = _s("presence_penalty")
    seed: int = _s("seed")
    max_tokens: int = _s("max_tokens")
    stop: list[str] = _s("stop")  # noqa: RUF009 (a dataclasses.field with a factory)
    grammar: str | None = _s("grammar")
    # Speculative decoding (app.engine.speculative): "off" or "ngram".
    speculative: str = _s("speculative")
    draft_max: int = _s("draft_max")

    @staticmethod
    def spec(name: str) -> FieldSpec:
        return SAMPLING_FIELDS[name]

    def validate(self) -> None:
        """Raise :class:`SettingsError` (naming the field) for a value out of range, or a
        grammar llama.cpp could not parse or would crash on (every grammar reaches
        llama.cpp through a :class:`~app.engine.sampling.Sampler`, which validates)."""
        validate_fields(self)
        if self.grammar:
            try:
                check_grammar(self.grammar)
            except (GrammarBoundsError, GrammarSyntaxError) as exc:
                raise SettingsError("grammar", str(exc)) from None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingParams:
        return _from_dict(cls, data)


def _from_dict(cls: type[_T], data: dict[str, Any]) -> _T:
    """Build ``cls`` from a dict, ignoring unknown keys (settings written by newer versions)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})
