"""Keep llama.cpp off CPU kernels that crash on this machine (today: AMX).

On some CPUs that report AMX int8 (seen on Sapphire Rapids class Xeons in VMs), llama.cpp
moves the weights of Q4_0/Q4_1/Q8_0/Q4_K/Q5_K/Q6_K/IQ4_XS matrices into its
"AMX" extra buffer type, and the first decode of a batch of more than one token then
dies with SIGSEGV in ``ggml_backend_amx_mul_mat`` (ggml-org/llama.cpp#20824, unfixed,
machine dependent). Whether a machine is affected is only known by trying, so the first
model load on a CPU with AMX decodes a tiny quantized model in a child process (a crash
there cannot reach the app) and keeps the verdict in the data folder, keyed by the CPU
model, its flags and the llama_cpp version, so later loads cost nothing.

When the AMX path crashes, each load keeps every tensor AMX would take out of the AMX
buffer with ``tensor_buft_overrides``: onto CPU_REPACK where that buffer supports the
tensor (Q4_0 and Q4_K linear weights on AVX2: the fastest kernels left), else onto a
plain CPU buffer. Which buffer type an override names is used as is (llama.cpp does not
check it), and a repack buffer asserts on a type it cannot repack, so the plan mirrors
ggml's own rules (``supports_op`` in ggml-cpu/amx/amx.cpp, the x86 branch of
``ggml_repack_get_optimal_repack_type`` in ggml-cpu/repack.cpp). If the buffer types
cannot be found, the load turns off the extra buffer types altogether
(``use_extra_bufts = False``, the same as llama-server's ``--no-repack``).

``LLAMADESK_AMX`` overrides the check: ``off`` avoids AMX without checking, ``on`` uses
it without checking, ``auto`` (the default) checks.
"""

from __future__ import annotations

import ctypes
import enum
import functools
import hashlib
import json
import logging
import multiprocessing
import os
import platform
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp

from app.engine.gguf_header import GGUFHeaderError, TensorInfo, read_header
from app.fsutil import atomic_write_bytes
from app.paths import data_dir

log = logging.getLogger(__name__)

AMX_ENV = "LLAMADESK_AMX"
AMX_WARNING = "llama.cpp's AMX kernels crash on this CPU; using the AVX-512 kernels instead"
VERDICT_FILE = "cpu_quirks.json"
PROBE_TIMEOUT_S = 180.0
PROBE_BATCH = 16
# Bump when the guard places weights differently: the load check's verdicts
# (app.engine.load_check) name it, so they are redone. 2: the tied output matrix.
GUARD_VERSION = 2

# ggml_type ids -> the row alignment AMX's supports_op asks of ne[0] (amx.cpp).
_AMX_ALIGNMENT = {
    2: 32,  # Q4_0
    3: 32,  # Q4_1
    8: 32,  # Q8_0
    12: 256,  # Q4_K
    13: 256,  # Q5_K
    14: 256,  # Q6_K
    23: 256,  # IQ4_XS
}
# AMX also takes F16 matrices (through its AVX-512 "tinygemm" path, not the AMX tiles);
# on the machine where the crash was found a batch decoded fine that way, so F16 models
# keep their memory-mapped weights.
_AMX_N_ALIGNMENT = 32  # the result's ne[0] (the weight's ne[1]) % (TILE_N * 2)
# Types CPU_REPACK repacks on x86 with AVX2 when ne[1] % 8 == 0 (repack.cpp); of the
# types AMX takes, only these.
_REPACK_X86_TYPES = frozenset({2, 12})  # Q4_0, Q4_K
# Weights whose only use is a plain matrix product (llama-arch.cpp maps them to
# GGML_OP_MUL_MAT): the only tensors a repack buffer may be given unchecked.
_LINEAR_WEIGHT = re.compile(
    r"(blk\.\d+\.)?(attn_(q|k|v|qkv|output)|ffn_(gate|up|down)|output)\.weight"
)
# Read with GET_ROWS only: AMX never takes them ...
_GET_ROWS_ONLY = re.compile(
    r"(.*\.)?(token_embd|per_layer_token_embd|pos_embd|token_types)\.weight"
)
# ... except the input embedding of a model without its own output matrix (tied
# embeddings: SmolLM2, Gemma 3, Qwen2.5 0.5B): llama.cpp then creates the output layer
# from token_embd.weight (TENSOR_DUPLICATED), and the logits' MUL_MAT reads it in AMX.
_TIED_OUTPUT = "token_embd.weight"
_OWN_OUTPUT = "output.weight"
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")


class AmxMode(enum.Enum):
    AUTO = "auto"
    ON = "on"
    OFF = "off"


class Verdict(enum.Enum):
    WORKS = "works"  # a batch decoded with weights in the AMX buffer
    CRASHES = "crashes"  # the child died (signal, abort) or hung
    UNUSED = "unused"  # llama.cpp put nothing in the AMX buffer: nothing to guard


@dataclass(frozen=True)
class CpuIdentity:
    """What the verdict depends on."""

    model: str
    flags: tuple[str, ...]
    llama_cpp_version: str

    @property
    def has_amx_int8(self) -> bool:
        return "amx_int8" in self.flags

    @property
    def key(self) -> str:
        # The guard's version too: a probe that checks more (GUARD_VERSION 2: a tied
        # output matrix, every logits row) must not be answered by an older verdict.
        text = "\n".join(
            (self.model, " ".join(self.flags), self.llama_cpp_version, str(GUARD_VERSION))
        )
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def cpu_identity(cpuinfo: str | None = None, version: str | None = None) -> CpuIdentity:
    """This CPU's model name and flags (``/proc/cpuinfo`` text, read when not given)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    model: str | None = None
    flags: tuple[str, ...] = ()
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name == "model name" and model is None:
            model = value.strip()
        elif name in ("flags", "Features") and not flags:
            flags = tuple(sorted(set(value.split())))
    model = model or platform.processor() or platform.machine()
    return CpuIdentity(model, flags, version or llama_cpp.__version__)


def amx_mode(environ: dict[str, str] | None = None) -> AmxMode:
    raw = (os.environ if environ is None else environ).get(AMX_ENV, "auto").strip().lower()
    try:
        return AmxMode(raw or "auto")
    except ValueError:
        log.warning("%s=%r is not one of off, on, auto; checking the CPU (auto)", AMX_ENV, raw)
        return AmxMode.AUTO


# -- the verdict, cached ---------------------------------------------------------------------

_verdict_lock = threading.Lock()
_verdicts: dict[str, Verdict] = {}  # this process's answers (also those not written down)


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def amx_verdict(
    identity: CpuIdentity, probe: Callable[[], Verdict | None] | None = None
) -> Verdict:
    """Whether llama.cpp's AMX path survives on this CPU; probes once per CPU and version.

    ``probe`` returns None when it could not decide (a timeout): the answer is then
    CRASHES for this process and nothing is written, so the next start tries again."""
    with _verdict_lock:
        known = _verdicts.get(identity.key)
        if known is not None:
            return known
        path = data_dir() / VERDICT_FILE
        entry = _read_cache(path).get(identity.key)
        if isinstance(entry, dict):
            try:
                verdict = Verdict(entry.get("verdict"))
            except ValueError:
                pass
            else:
                _verdicts[identity.key] = verdict
                return verdict
        found = (probe or run_probe)()
        verdict = Verdict.CRASHES if found is None else found
        _verdicts[identity.key] = verdict
        if found is not None:
            cache = _read_cache(path)
            cache[identity.key] = {
                "verdict": verdict.value,
                "cpu": identity.model,
                "llama_cpp": identity.llama_cpp_version,
            }
            try:
                atomic_write_bytes(path, json.dumps(cache, indent=1, sort_keys=True).encode())
            except OSError as exc:  # a read-only data folder: check again next start
                log.warning("could not save the CPU check's verdict to %s: %s", path, exc)
        return verdict


def forget_verdicts() -> None:
    """Drop this process's remembered verdicts (tests; the file stays)."""
    with _verdict_lock:
        _verdicts.clear()


# -- the child process that tries AMX ----------------------------------------------------------

_PROBE_WORKS, _PROBE_UNUSED, _PROBE_FAILED = 0, 3, 4


def run_probe(timeout_s: float = PROBE_TIMEOUT_S) -> Verdict | None:
    """Decode a batch with a tiny Q4_0 model in a fresh process; None if it timed out."""
    with tempfile.TemporaryDirectory(prefix="llamadesk-amx-") as folder:
        child = multiprocessing.get_context("spawn").Process(
            target=_probe_child, args=(folder,), name="llamadesk-amx-check", daemon=True
        )
        child.start()
        child.join(timeout_s)
        if child.is_alive():
            child.kill()
            child.join()
            log.warning("the AMX check did not finish in %.0f s; avoiding AMX for now", timeout_s)
            return None
        code = child.exitcode
    if code == _PROBE_WORKS:
        return Verdict.WORKS
    if code == _PROBE_UNUSED:
        return Verdict.UNUSED
    log.info("the AMX check's child ended with exit code %s", code)
    return Verdict.CRASHES


def _probe_child(folder: str) -> None:  # runs in the child process
    seen: list[bool] = []

    def on_log(_level: int, text: bytes, _data: ctypes.c_void_p) -> None:
        if b"amx repack tensor" in text:
            seen.append(True)

    callback = llama_cpp.llama_log_callback(on_log)
    llama_cpp.llama_log_set(callback, ctypes.c_void_p())
    llama_cpp.llama_backend_init()
    f32 = Path(folder) / "probe-f32.gguf"
    q4 = Path(folder) / "probe-q4_0.gguf"
    # Tied, with a logits row for every token: the output matrix then multiplies many rows
    # in AMX, as in the scheduler's batches (issue 27: untied, or one logits row, passed
    # on a CPU where that crashed).
    write_probe_model(f32, tied=True)
    if not quantize_q4_0(f32, q4):
        os._exit(_PROBE_FAILED)
    model = llama_cpp.llama_model_load_from_file(
        str(q4).encode(), llama_cpp.llama_model_default_params()
    )
    if not model:
        os._exit(_PROBE_FAILED)
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = 64
    cparams.n_batch = cparams.n_ubatch = PROBE_BATCH
    cparams.n_threads = cparams.n_threads_batch = 2
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    if not ctx:
        os._exit(_PROBE_FAILED)
    batch = llama_cpp.llama_batch_init(PROBE_BATCH, 0, 1)
    for i in range(PROBE_BATCH):
        batch.token[i] = 3 + i
        batch.pos[i] = i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = True
    batch.n_tokens = PROBE_BATCH
    rc = llama_cpp.llama_decode(ctx, batch)  # where the broken AMX path dies
    if rc != 0:
        os._exit(_PROBE_FAILED)
    # os._exit: freeing llama.cpp objects is not what is being tested, and a clean exit
    # must not depend on it.
    os._exit(_PROBE_WORKS if seen else _PROBE_UNUSED)


def quantize_q4_0(source: Path, target: Path) -> bool:
    """llama.cpp's own quantizer (Q4_0, with its usual Q6_K output matrix)."""
    qparams = llama_cpp.llama_model_quantize_default_params()
    qparams.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    qparams.nthread = 1
    rc: int = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), qparams)
    return rc == 0


def write_probe_model(
    path: Path, n_layer: int = 2, n_embd: int = 256, n_ff: int = 512, *, tied: bool = False
) -> Path:
    """A llama with random weights, big enough that AMX takes its matrices (rows of 256
    values, 32-row multiples) and small enough to write and quantize in a blink.
    ``tied``: no ``output.weight`` (the embedding computes the logits, as in SmolLM2)."""
    import gguf
    import numpy as np

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    while len(tokens) % 32:  # output.weight too goes to AMX
        tokens.append(f"▁w{len(tokens)}")
        types.append(gguf.TokenType.NORMAL)
    n_head = 4
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("llamadesk-amx-probe")
    writer.add_context_length(128)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types([int(t) for t in types])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    rng = np.random.default_rng(0)

    def add(name: str, *shape: int) -> None:
        if len(shape) == 1:
            writer.add_tensor(name, np.ones(shape, np.float32))
        else:
            data = rng.standard_normal(shape) / np.sqrt(shape[-1])
            writer.add_tensor(name, data.astype(np.float32))

    add("token_embd.weight", len(tokens), n_embd)
    for i in range(n_layer):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", n_embd)
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            add(p + part + ".weight", n_embd, n_embd)
        add(p + "ffn_norm.weight", n_embd)
        add(p + "ffn_gate.weight", n_ff, n_embd)
        add(p + "ffn_up.weight", n_ff, n_embd)
        add(p + "ffn_down.weight", n_embd, n_ff)
    add("output_norm.weight", n_embd)
    if not tied:
        add("output.weight", len(tokens), n_embd)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# -- where each tensor goes instead ---------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Tensor names AMX would take, split by where they go instead."""

    repack: tuple[str, ...]
    plain: tuple[str, ...]


def amx_would_take(tensor: TensorInfo, *, tied_output: bool = False) -> bool:
    """ggml's AMX supports_op for the MUL_MAT llama.cpp tries a weight with.

    ``tied_output``: the model has no ``output.weight``, so its input embedding is also
    the output matrix and reaches a MUL_MAT."""
    align = _AMX_ALIGNMENT.get(tensor.ggml_type)
    if align is None or len(tensor.dims) < 2:
        return False
    if _GET_ROWS_ONLY.fullmatch(tensor.name) and not (tied_output and tensor.name == _TIED_OUTPUT):
        return False
    return tensor.dims[0] % align == 0 and tensor.dims[1] % _AMX_N_ALIGNMENT == 0


def plan_placement(tensors: Iterable[TensorInfo], repack_available: bool) -> Placement:
    repack: list[str] = []
    plain: list[str] = []
    tensors = tuple(tensors)
    tied = not any(t.name == _OWN_OUTPUT for t in tensors)
    for t in tensors:
        if not amx_would_take(t, tied_output=tied):
            continue
        fits_repack = (
            repack_available
            and t.ggml_type in _REPACK_X86_TYPES
            and t.dims[1] % 8 == 0
            and len(t.dims) == 2
            and _LINEAR_WEIGHT.fullmatch(t.name) is not None
        )
        (repack if fits_repack else plain).append(t.name)
    return Placement(tuple(repack), tuple(plain))


def name_patterns(names: Sequence[str]) -> list[str]:
    """Anchored regexes matching exactly ``names``, one per per-layer tensor kind.

    llama.cpp compiles every pattern once per tensor it loads, so one regex per name
    would cost quadratic time on a model with hundreds of tensors."""
    layers: dict[str, list[str]] = {}
    patterns: list[str] = []
    for name in names:
        m = _BLOCK.fullmatch(name)
        if m:
            layers.setdefault(m.group(2), []).append(m.group(1))
        else:
            patterns.append(f"^{re.escape(name)}$")
    for rest, ids in layers.items():
        patterns.append(rf"^blk\.({'|'.join(ids)})\.{re.escape(rest)}$")
    return patterns


# -- ggml's buffer types, through its registry -----------------------------------------------


@dataclass(frozen=True)
class CpuBufferTypes:
    """Pointers to the CPU device's buffer types (0 where absent)."""

    amx: int
    repack: int
    plain: int  # a host buffer that is not ggml_backend_cpu_buffer_type() (see below)
    avx2: bool


@functools.cache
def cpu_buffer_types() -> CpuBufferTypes:
    """The AMX and CPU_REPACK extra buffer types and a plain CPU buffer type.

    An override naming ggml_backend_cpu_buffer_type() itself makes llama.cpp choose among
    the extra types again (AMX first), so "plain" is the buffer type of mapped host memory
    ("CPU_Mapped"): the same CPU buffer functions under another pointer."""
    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    names = sorted(os.listdir(lib_dir)) if lib_dir.is_dir() else []

    def load(stem: str) -> ctypes.CDLL | None:
        for n in names:
            if n.startswith(stem + ".") and (
                n.endswith(".so") or ".so." in n or n.endswith((".dylib", ".dll"))
            ):
                return ctypes.CDLL(str(lib_dir / n))
        return None

    base, ggml = load("libggml-base") or load("ggml-base"), load("libggml") or load("ggml")
    if base is None or ggml is None:
        return CpuBufferTypes(0, 0, 0, False)
    vp = ctypes.c_void_p
    ggml.ggml_backend_dev_by_type.restype = vp
    ggml.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
    base.ggml_backend_dev_backend_reg.restype = vp
    base.ggml_backend_dev_backend_reg.argtypes = [vp]
    base.ggml_backend_reg_get_proc_address.restype = vp
    base.ggml_backend_reg_get_proc_address.argtypes = [vp, ctypes.c_char_p]
    base.ggml_backend_buft_name.restype = ctypes.c_char_p
    base.ggml_backend_buft_name.argtypes = [vp]
    base.ggml_backend_cpu_buffer_from_ptr.restype = vp
    base.ggml_backend_cpu_buffer_from_ptr.argtypes = [vp, ctypes.c_size_t]
    base.ggml_backend_buffer_get_type.restype = vp
    base.ggml_backend_buffer_get_type.argtypes = [vp]
    base.ggml_backend_buffer_free.argtypes = [vp]
    cpu = ggml.ggml_backend_dev_by_type(0)  # GGML_BACKEND_DEVICE_TYPE_CPU
    if not cpu:
        return CpuBufferTypes(0, 0, 0, False)
    reg = base.ggml_backend_dev_backend_reg(cpu)
    extra: dict[str, int] = {}
    fn = base.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
    if fn:
        get_extra = ctypes.CFUNCTYPE(ctypes.POINTER(vp), vp)(fn)
        arr = get_extra(cpu)
        i = 0
        while arr and arr[i]:
            extra[(base.ggml_backend_buft_name(arr[i]) or b"").decode()] = int(arr[i])
            i += 1
    avx2 = False
    fn = base.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_get_features")

    class Feature(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_char_p)]

    if fn:
        features = ctypes.CFUNCTYPE(ctypes.POINTER(Feature), vp)(fn)(reg)
        i = 0
        while features[i].name:
            avx2 = avx2 or features[i].name == b"AVX2"
            i += 1
    # A zero-sized wrapper around static memory: only its type is wanted.
    anchor = (ctypes.c_char * 128)()
    aligned = (ctypes.addressof(anchor) + 63) // 64 * 64
    buf = base.ggml_backend_cpu_buffer_from_ptr(aligned, 0)
    plain = int(base.ggml_backend_buffer_get_type(buf) or 0) if buf else 0
    if buf:
        base.ggml_backend_buffer_free(buf)
    return CpuBufferTypes(extra.get("AMX", 0), extra.get("CPU_REPACK", 0), plain, avx2)


# -- the load hook --------------------------------------------------------------------------


class _Override(ctypes.Structure):
    # struct llama_model_tensor_buft_override (llama.h); the binding types the field void*.
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


@dataclass(frozen=True)
class BuftOverrides:
    """The override array handed to llama.cpp; keep it as long as the model lives."""

    array: Any
    patterns: tuple[bytes, ...]
    placement: Placement


def build_overrides(placement: Placement, bufts: CpuBufferTypes) -> BuftOverrides:
    entries = [(p, bufts.repack) for p in name_patterns(placement.repack)]
    entries += [(p, bufts.plain) for p in name_patterns(placement.plain)]
    array = (_Override * (len(entries) + 1))()  # zeroed: the last one ends the list
    patterns = tuple(p.encode() for p, _ in entries)
    for slot, (pattern, (_, buft)) in zip(array, zip(patterns, entries, strict=True), strict=False):
        slot.pattern = pattern
        slot.buft = buft
    return BuftOverrides(array, patterns, placement)


def amx_guard_active(identity: CpuIdentity | None = None) -> bool:
    """Whether loads on this machine keep weights out of AMX (the mode, then the check)."""
    identity = identity or cpu_identity()
    # The AMX buffer type exists only where ggml was built with AMX and the OS allowed its
    # tiles; the flags (absent outside Linux) only rule a CPU out.
    if (identity.flags and not identity.has_amx_int8) or not cpu_buffer_types().amx:
        return False
    mode = amx_mode()
    if mode is not AmxMode.AUTO:
        return mode is AmxMode.OFF
    return amx_verdict(identity) is Verdict.CRASHES


def llama_server_flags() -> list[str]:
    """Flags that keep llama.cpp's own llama-server off AMX where the guard is active.

    Its ``-ot`` can name only the devices' default buffer types (and "CPU" makes it choose
    among the extra types again, AMX first), so the one way is ``--no-repack``: no extra
    buffer types at all. That is not quite what the app runs (it keeps CPU_REPACK for Q4_0
    and Q4_K matrices); a peer built without AMX (-mno-amx-int8) would match exactly."""
    return ["--no-repack"] if amx_guard_active() else []


def apply_cpu_quirks(params: Any, model_path: Path) -> BuftOverrides | None:
    """Adjust ``llama_model_params`` for this CPU before loading ``model_path``.

    Returns what must stay referenced for the model's life (or None)."""
    if not amx_guard_active():
        return None
    bufts = cpu_buffer_types()
    tensors: tuple[TensorInfo, ...] | None = None
    if bufts.plain and not getattr(params, "tensor_buft_overrides", None):
        try:
            tensors = read_header(model_path).tensors
        except (OSError, GGUFHeaderError):
            pass
    if tensors is not None:
        placement = plan_placement(tensors, bufts.repack != 0 and bufts.avx2)
        if not placement.repack and not placement.plain:
            return None  # nothing of this model would go to AMX
        overrides = build_overrides(placement, bufts)
        if len(overrides.patterns) < int(llama_cpp.llama_max_tensor_buft_overrides()):
            log.warning("%s (%s=on to use them anyway)", AMX_WARNING, AMX_ENV)
            params.tensor_buft_overrides = ctypes.addressof(overrides.array)
            return overrides
    # No plan (the buffer types were not found, or the caller has its own overrides):
    # without any extra buffer type nothing can reach AMX.
    log.warning("%s (without weight repacking)", AMX_WARNING)
    params.use_extra_bufts = False
    return None


def _main(argv: Sequence[str]) -> int:
    """``python -m app.engine.cpu_quirks``: print this machine's verdict."""
    identity = cpu_identity()
    print(f"CPU: {identity.model}; AMX int8: {identity.has_amx_int8}")
    print(f"{AMX_ENV}: {amx_mode().value}; AMX buffer: {bool(cpu_buffer_types().amx)}")
    if identity.has_amx_int8:
        print(f"verdict: {amx_verdict(identity).value}")
    print(f"guard active: {amx_guard_active(identity)}")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(_main(sys.argv[1:]))
