"""What a GGUF file says about itself, read without loading the weights.

The model manager lists dozens of files and every load reads the header first, so this
parses the header with :mod:`app.engine.gguf_header` (about 10 ms for a 150,000-token
vocabulary, where ``gguf``'s ``GGUFReader`` takes over ten seconds). Every way a file can
be broken becomes a :class:`ModelLoadError` that names the file and the problem, including
the files llama.cpp would refuse to load (vocabulary only, unknown architecture, tensors
with impossible shapes or data outside the file): those are found here, before llama.cpp
is asked, and said in a sentence.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.engine.errors import ModelLoadError
from app.engine.gguf_header import (
    GGML_MAX_NAME,
    GGML_TYPE_SIZES,
    T_STRING,
    GGUFArray,
    GGUFHeader,
    GGUFHeaderError,
    printable_name,
    read_header,
)
from app.engine.header_checks import hparams_problem, vocabulary_problem

GGUF_MAGIC = b"GGUF"

# Architectures with an encoder (llama_model_has_encoder); decoding starts after llama_encode.
ENCODER_ARCHITECTURES = {"t5", "t5encoder"}

# The architectures the vendored llama.cpp knows: LLM_ARCH_NAMES in src/llama-arch.cpp of
# llama-cpp-python 0.3.36's vendor/llama.cpp (llama.cpp 0.5.0-dev, commit 0c1e570), without
# its "(unknown)". A file with another general.architecture fails with "unknown model
# architecture". Update this list with the bindings.
LLAMA_CPP_ARCHITECTURES = frozenset(
    """
    clip llama llama4 deci falcon grok gpt2 gptj gptneox mpt baichuan starcoder refact bert
    modern-bert nomic-bert nomic-bert-moe neo-bert jina-bert-v2 jina-bert-v3 eurobert bloom
    stablelm qwen qwen2 qwen2moe qwen2vl qwen3 qwen3moe qwen3next qwen3vl qwen3vlmoe qwen35
    qwen35moe qwen4exp phi2 phi3 phimoe plamo plamo2 plamo3 codeshell orion internlm2 minicpm
    minicpm3 gemma gemma2 gemma3 gemma3n gemma4 gemma4-assistant gemma-embedding starcoder2
    mamba mamba2 maple jamba falcon-h1 xverse command-r cohere2 cohere2moe dbrx olmo olmo2
    olmoe muse-glimmer openelm arctic deepseek deepseek2 deepseek2-ocr deepseek32 deepseek4
    chatglm glm4 glm4moe glm-dsa bitnet t5 t5encoder jais jais2 nemotron nemotron_h
    nemotron_h_moe exaone exaone4 exaone-moe rwkv6 rwkv6qwen2 rwkv7 arwkv7 granite granitemoe
    granitehybrid graniteswitch granite_swa chameleon wavtokenizer-dec plm bailingmoe
    bailingmoe2 bailingmoe3 dots1 dots3note arcee afmoe laguna ernie4_5 ernie4_5-moe
    hunyuan-moe hunyuan-dense hunyuan_vl hy_v3 hy_v4 smollm3 gpt-oss lfm2 lfm2moe dream
    smallthinker llada llada-moe seed_oss grovemoe apertus minimax-01 hrm_text minimax-m2
    minimax-m3 cogvlm rnd1 pangu-embedded mistral3 eagle3 dflash mistral4 paddleocr mimo2
    step35 spark2_5 llama-embed maincoder kimi-linear kimi-k3 glm5-next talkie mellum
    nanbeige qwen3tts pockettts
    """.split()
)

# general.file_type (llama_ftype in the vendored include/llama.h), named as users know them
# from file names (gguf's LlamaFileType names without MOSTLY_/ALL_).
FILE_TYPE_NAMES: dict[int, str] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
    39: "NVFP4",
    40: "Q1_0",
    41: "Q2_0",
}

_INT64_MAX = 2**63 - 1
_SIZE_MAX = 2**64 - 1


def _file_type_name(value: Any) -> str:
    if value is None or isinstance(value, GGUFArray):
        return "unknown"
    if isinstance(value, bool) or not isinstance(value, int):
        return f"type {value}"
    return FILE_TYPE_NAMES.get(value, "unknown" if value == 1024 else f"type {value}")


Raw = int | float | bool | tuple[int | float | bool, ...] | None

# ArchParams field -> key after "{arch}.".
_ARCH_KEYS = {
    "sliding_window": "attention.sliding_window",
    "sliding_window_pattern": "attention.sliding_window_pattern",
    "head_count": "attention.head_count",
    "head_count_kv": "attention.head_count_kv",
    "key_length": "attention.key_length",
    "value_length": "attention.value_length",
    "key_length_swa": "attention.key_length_swa",
    "value_length_swa": "attention.value_length_swa",
    "key_length_mla": "attention.key_length_mla",
    "value_length_mla": "attention.value_length_mla",
    "kv_lora_rank": "attention.kv_lora_rank",
    "shared_kv_layers": "attention.shared_kv_layers",
    "rope_dimension_count": "rope.dimension_count",
    "embedding_length": "embedding_length",
    "block_count": "block_count",
    "full_attention_interval": "full_attention_interval",
    "ssm_conv_kernel": "ssm.conv_kernel",
    "ssm_inner_size": "ssm.inner_size",
    "ssm_state_size": "ssm.state_size",
    "ssm_group_count": "ssm.group_count",
    "ssm_time_step_rank": "ssm.time_step_rank",
    "wkv_head_size": "wkv.head_size",
    "token_shift_count": "token_shift_count",
    "shortconv_l_cache": "shortconv.l_cache",
}


@dataclass(frozen=True)
class ArchParams:
    """The raw hyper-parameters a memory estimate needs, as the file has them: ``None``
    when the key is absent, a tuple for a per-layer array (hybrid models, e.g. a
    ``head_count_kv`` of 0 on recurrent layers). Names follow the keys after ``{arch}.``
    (``ssm_conv_kernel`` is ``{arch}.ssm.conv_kernel``, d_conv; ``ssm_inner_size`` d_inner;
    ``ssm_state_size`` d_state; ``ssm_group_count`` n_group; ``ssm_time_step_rank`` dt_rank;
    ``wkv_head_size`` RWKV's head size; ``shortconv_l_cache`` LFM2's conv cache)."""

    sliding_window: Raw = None
    sliding_window_pattern: Raw = None
    head_count: Raw = None
    head_count_kv: Raw = None
    key_length: Raw = None
    value_length: Raw = None
    key_length_swa: Raw = None
    value_length_swa: Raw = None
    key_length_mla: Raw = None
    value_length_mla: Raw = None
    kv_lora_rank: Raw = None
    shared_kv_layers: Raw = None
    rope_dimension_count: Raw = None
    embedding_length: Raw = None
    block_count: Raw = None
    full_attention_interval: Raw = None
    ssm_conv_kernel: Raw = None
    ssm_inner_size: Raw = None
    ssm_state_size: Raw = None
    ssm_group_count: Raw = None
    ssm_time_step_rank: Raw = None
    wkv_head_size: Raw = None
    token_shift_count: Raw = None
    shortconv_l_cache: Raw = None

    @classmethod
    def from_header(cls, header: GGUFHeader, arch: str) -> ArchParams:
        values: dict[str, Raw] = {}
        for name, suffix in _ARCH_KEYS.items():
            value = header.fields.get(f"{arch}.{suffix}")
            if isinstance(value, GGUFArray):
                values[name] = (
                    tuple(value.tolist()) if value.type != T_STRING and len(value) <= 4096 else None
                )
            elif isinstance(value, int | float):
                values[name] = value
        return cls(**values)

    @classmethod
    def from_dict(cls, data: Any) -> ArchParams:
        if isinstance(data, ArchParams):
            return data
        if not isinstance(data, dict):
            return cls()
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(
            **{
                k: tuple(v) if isinstance(v, list) else v
                for k, v in data.items()
                if k in names and (v is None or isinstance(v, int | float | list | tuple))
            }
        )


@dataclass(frozen=True)
class ModelInfo:
    """Metadata of one GGUF file; ``to_dict`` is what storage caches."""

    path: str
    size_bytes: int
    architecture: str
    name: str
    n_params: int
    file_type: str
    n_ctx_train: int
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_vocab: int
    tokenizer: str
    chat_template: str | None
    bos_token: str
    eos_token: str
    bos_token_id: int
    eos_token_id: int
    has_encoder: bool
    # Added after the fields above (so older cached dicts still load): the raw numbers of
    # the architecture that a memory estimate needs.
    arch_params: ArchParams = ArchParams()

    @property
    def n_embd_k_gqa(self) -> int:
        return self.head_dim_k * self.n_head_kv

    @property
    def n_embd_v_gqa(self) -> int:
        return self.head_dim_v * self.n_head_kv

    @property
    def display_name(self) -> str:
        return self.name or Path(self.path).stem

    @property
    def params_label(self) -> str:
        n = self.n_params
        for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
            if n >= scale:
                return f"{n / scale:.1f}{unit}"
        return str(n)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelInfo:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        if "arch_params" in values:
            values["arch_params"] = ArchParams.from_dict(values["arch_params"])
        return cls(**values)


def check_gguf_file(path: str | os.PathLike[str]) -> Path:
    """Cheap checks before anything parses the file; returns the resolved path."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelLoadError(
            f"The model file {p} does not exist. Check the path or add the file again."
        )
    if p.is_dir():
        raise ModelLoadError(f"{p} is a folder, not a model file. Choose a .gguf file inside it.")
    try:
        size = p.stat().st_size
        with p.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise ModelLoadError(f"The model file {p} cannot be read: {exc.strerror or exc}.") from exc
    if size == 0:
        raise ModelLoadError(
            f"The model file {p.name} is empty (0 bytes). Download or copy it again."
        )
    if magic != GGUF_MAGIC:
        raise ModelLoadError(
            f"{p.name} is not a GGUF model file (it does not start with 'GGUF'). "
            "LlamaDesk reads GGUF files only; convert the model with llama.cpp's tools."
        )
    return p


def read_model_info(path: str | os.PathLike[str], *, check_loadable: bool = True) -> ModelInfo:
    """Read a GGUF header. Raises :class:`ModelLoadError` for anything broken and, unless
    ``check_loadable`` is False, for a file llama.cpp would refuse to load (the error is
    a sentence saying what is wrong and what to do)."""
    return read_model_header(path, check_loadable=check_loadable)[0]


def read_model_header(
    path: str | os.PathLike[str], *, check_loadable: bool = True
) -> tuple[ModelInfo, GGUFHeader]:
    """:func:`read_model_info` and the parsed header it came from (whose
    :meth:`GGUFHeader.digest` identifies what a load reads)."""
    p = check_gguf_file(path)
    try:
        header = read_header(p)
    except GGUFHeaderError as exc:
        raise ModelLoadError(_header_failure(p, exc)) from exc
    except OSError as exc:
        raise ModelLoadError(f"The model file {p} cannot be read: {exc.strerror or exc}.") from exc
    try:
        info = _info_from_header(header, p)
        problem = load_problem(header, p, info) if check_loadable else None
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(
            f"{p.name} has metadata LlamaDesk cannot read ({_short(exc)})."
        ) from exc
    if problem is not None:
        raise ModelLoadError(problem)
    return info, header


def _header_failure(p: Path, exc: GGUFHeaderError) -> str:
    if exc.kind == "version":
        if exc.detail == "big-endian file":
            return (
                f"{p.name} is a big-endian GGUF file, which LlamaDesk cannot read. "
                "Download the model's usual (little-endian) file instead."
            )
        return (
            f"{p.name} is GGUF version {exc.version}, which LlamaDesk cannot read "
            "(the file is damaged, or newer than this version of LlamaDesk)."
        )
    if exc.kind == "malformed":
        return (
            f"{p.name} is damaged or truncated ({exc.detail}): its header cannot be read. "
            "Download or copy the file again."
        )
    return f"{p.name} is damaged or truncated: its header cannot be read. Download or copy the file again."


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]


def _info_from_header(header: GGUFHeader, p: Path) -> ModelInfo:
    fields = header.fields

    def scalar(key: str, default: Any = None) -> Any:
        value = fields.get(key)
        if value is None:
            return default
        if isinstance(value, GGUFArray):  # per-layer arrays (e.g. head counts): take the max
            if value.type == T_STRING or not len(value):
                return default
            return value.numpy().max().item()
        return value

    arch = scalar("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelLoadError(
            f"{p.name} does not say which model architecture it is (general.architecture is missing)."
        )

    n_embd = int(scalar(f"{arch}.embedding_length", 0) or 0)
    n_head = int(scalar(f"{arch}.attention.head_count", 0) or 0)
    n_head_kv = int(scalar(f"{arch}.attention.head_count_kv", n_head) or n_head)
    default_head = n_embd // n_head if n_head else 0
    head_k = int(scalar(f"{arch}.attention.key_length", default_head) or default_head)
    head_v = int(scalar(f"{arch}.attention.value_length", default_head) or default_head)

    tokens = fields.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, GGUFArray) or tokens.type != T_STRING:
        tokens = None
    n_vocab = len(tokens) if tokens is not None else 0
    bos_id = int(scalar("tokenizer.ggml.bos_token_id", -1))
    eos_id = int(scalar("tokenizer.ggml.eos_token_id", -1))

    def token_text(token_id: int) -> str:
        if tokens is None or not 0 <= token_id < n_vocab:
            return ""
        return tokens.raw(token_id).decode("utf-8", errors="replace")

    template = scalar("tokenizer.chat_template")
    has_encoder = arch in ENCODER_ARCHITECTURES or any(
        t.name.startswith("enc.") for t in header.tensors
    )
    return ModelInfo(
        path=str(p.resolve()),
        size_bytes=header.file_size,
        architecture=arch,
        name=str(scalar("general.name", "") or ""),
        n_params=sum(t.n_elements for t in header.tensors),
        file_type=_file_type_name(fields.get("general.file_type")),
        n_ctx_train=int(scalar(f"{arch}.context_length", 0) or 0),
        n_layer=int(scalar(f"{arch}.block_count", 0) or 0),
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=head_k,
        head_dim_v=head_v,
        n_vocab=n_vocab,
        tokenizer=str(scalar("tokenizer.ggml.model", "") or ""),
        chat_template=template if isinstance(template, str) and template.strip() else None,
        bos_token=token_text(bos_id),
        eos_token=token_text(eos_id),
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        has_encoder=has_encoder,
        arch_params=ArchParams.from_header(header, arch),
    )


def load_problem(header: GGUFHeader, p: Path, info: ModelInfo) -> str | None:
    """Why llama.cpp would refuse to load the file, as a sentence; None if it would not.

    The checks of the vendored llama.cpp, in its order: gguf.cpp's tensor infos (name,
    dimensions, type, data offsets one after the other at ``general.alignment``), the
    loader's "data is not within the file bounds", the architecture, then the weights.
    """
    name = p.name
    alignment = header.alignment
    seen: set[str] = set()
    expected = 0
    zero: str | None = None
    for t in header.tensors:
        shape = "x".join(str(d) for d in t.dims) or "scalar"
        if len(t.name.encode("utf-8")) >= GGML_MAX_NAME:
            return (
                f"{name} has a tensor name longer than llama.cpp allows ({GGML_MAX_NAME - 1} "
                "bytes). Convert the model again with a current llama.cpp."
            )
        if t.name in seen:
            return f"{name} is damaged: the tensor '{printable_name(t.name)}' appears twice. Download or convert it again."
        seen.add(t.name)
        n = 1
        for d in t.dims:
            if d < 0:
                return (
                    f"{name} is damaged: the tensor '{printable_name(t.name)}' has a negative dimension "
                    f"({shape}). Download or convert it again."
                )
            n *= d
        if n > _INT64_MAX:
            return (
                f"{name} is damaged: the tensor '{printable_name(t.name)}' has a huge dimension ({shape}) whose "
                "size overflows. Download or convert it again."
            )
        size = GGML_TYPE_SIZES.get(t.ggml_type)
        if size is None:
            return (
                f"{name} stores the tensor '{printable_name(t.name)}' in a type (ggml type {t.ggml_type}) this "
                "version of llama.cpp does not know. Update LlamaDesk or choose another "
                "quantization of the model."
            )
        block, type_size = size
        row = t.dims[0] if t.dims else 1
        if row % block:
            return (
                f"{name} is damaged: the tensor '{printable_name(t.name)}' has rows of {row} values, not a "
                f"multiple of its type's block of {block}. Download or convert it again."
            )
        n_bytes = n // block * type_size
        if n_bytes > _SIZE_MAX - alignment:
            return (
                f"{name} is damaged: the tensor '{printable_name(t.name)}' has a huge dimension ({shape}) whose "
                "size overflows. Download or convert it again."
            )
        if zero is None and 0 in t.dims:
            zero = (
                f"{name} is damaged: the tensor '{printable_name(t.name)}' has a zero dimension ({shape}), so it "
                "holds no weights. Download or convert the model again."
            )
        if t.offset % alignment:
            return (
                f"{name} is damaged: the data of the tensor '{printable_name(t.name)}' starts at offset "
                f"{t.offset:,}, which is not a multiple of the file's alignment ({alignment}). "
                "Download or convert it again."
            )
        if t.offset != expected:
            if header.data_offset + t.offset + n_bytes > header.file_size:
                return (
                    f"{name} is damaged: the data of the tensor '{printable_name(t.name)}' would lie past the "
                    f"end of the file (at offset {t.offset:,} of the data, {n_bytes:,} bytes; "
                    f"the file has {header.file_size:,}). Download or convert it again."
                )
            return (
                f"{name} is damaged: the data of the tensor '{printable_name(t.name)}' is not where llama.cpp "
                f"expects it (offset {t.offset:,} instead of {expected:,}). Download or convert "
                "it again."
            )
        expected += n_bytes + (-n_bytes % alignment)
    # llama.cpp's loader: a tensor's data must lie inside the file.
    last_end = max(
        (header.data_offset + t.offset + (t.n_bytes or 0) for t in header.tensors), default=0
    )
    if last_end > header.file_size:
        return (
            f"{name} is truncated: its tensors need {last_end:,} bytes but the file has "
            f"{header.file_size:,}. Download or copy it again."
        )
    arch = info.architecture
    if arch not in LLAMA_CPP_ARCHITECTURES:
        return (
            f"{name} uses the model architecture '{arch}', which this version of llama.cpp "
            "does not support. Update LlamaDesk or choose another model."
        )
    if arch == "clip":
        return (
            f"{name} is a vision projector (a CLIP/mmproj file), not a language model: load "
            "the model it belongs to instead."
        )
    split_count = header.fields.get("split.count")
    if not header.tensors and not (isinstance(split_count, int) and split_count > 1):
        return (
            f"{name} holds only a vocabulary (no weights): it is a tokenizer file, not a "
            "model; download the full model."
        )
    tokens = header.fields.get("tokenizer.ggml.tokens")
    mistyped = isinstance(tokens, GGUFArray) and tokens.type != T_STRING  # said below
    if info.n_vocab == 0 and not mistyped:
        return (
            f"{name} has no vocabulary (tokenizer.ggml.tokens is missing), so it cannot be "
            "used for chat."
        )
    # llama.cpp's order: hyper-parameters, then the vocabulary (both may abort the process).
    return hparams_problem(header, name, arch) or vocabulary_problem(header, name) or zero


def fingerprint(path: str | os.PathLike[str]) -> str:
    """Identify a model file's exact weights cheaply.

    The size plus a hash of the first 8 MiB (the header and the first tensors), 32 samples
    spread over the rest and the last MiB. Two models of the same shape with other weights
    differ here; hashing a 40 GB file whole would take minutes.
    """
    p = Path(path)
    size = p.stat().st_size
    h = hashlib.blake2b(digest_size=16)
    h.update(size.to_bytes(8, "little"))
    head = 8 << 20
    with p.open("rb") as fh:
        if size <= head + (1 << 20) + 32 * 65536:
            h.update(fh.read())
        else:
            h.update(fh.read(head))
            step = (size - head) // 33
            for i in range(1, 33):
                fh.seek(head + i * step)
                h.update(fh.read(65536))
            fh.seek(size - (1 << 20))
            h.update(fh.read())
    return h.hexdigest()
