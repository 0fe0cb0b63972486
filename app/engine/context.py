"""A ``llama_context`` with every call that can kill the process guarded.

llama.cpp aborts the whole process on a sequence id out of range (split cache), on a NULL
context, on a collected ctypes callback... The wrappers here check ids and handles first
and turn failures into exceptions with sentences.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
from dataclasses import dataclass

import llama_cpp
import numpy as np

from app.engine import llama_log, rpc_heartbeat
from app.engine.cache import CacheTraits
from app.engine.errors import ContextError, EngineError, StateError
from app.engine.model import Model
from app.engine.settings import (
    ATTENTION,
    FLASH_ATTN,
    KV_TYPES,
    POOLING,
    ROPE_SCALING,
    ContextSettings,
)
from app.engine.threads import decode_threads

log = logging.getLogger(__name__)


# Tests only: every decode dies of SIGSEGV, as llama.cpp's crashing kernels do (issue 27).
FAULT_DECODE_ENV = "LLAMADESK_FAULT_DECODE_CRASH"
_FAULT_DECODE = os.environ.get(FAULT_DECODE_ENV) == "1"


@dataclass
class DecodeResult:
    """What ``llama_decode`` returned, in words."""

    code: int

    @property
    def ok(self) -> bool:
        return self.code == 0

    @property
    def no_slot(self) -> bool:
        return self.code == 1

    @property
    def aborted(self) -> bool:
        return self.code == 2


class Batch:
    """A reusable ``llama_batch`` of up to ``capacity`` tokens, one sequence per token."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.handle = llama_cpp.llama_batch_init(capacity, 0, 1)
        self.n = 0
        self._token = np.ctypeslib.as_array(self.handle.token, shape=(capacity,))
        self._pos = np.ctypeslib.as_array(self.handle.pos, shape=(capacity,))
        self._n_seq = np.ctypeslib.as_array(self.handle.n_seq_id, shape=(capacity,))
        self._logits = np.ctypeslib.as_array(self.handle.logits, shape=(capacity,))
        self._seq_ptrs = [self.handle.seq_id[i] for i in range(capacity)]
        self._n_seq[:] = 1

    def clear(self) -> None:
        self.n = 0

    def add_span(
        self, tokens: list[int], start_pos: int, seq_id: int, want_last_logits: bool
    ) -> int:
        """Append tokens at consecutive positions; returns the batch index of the last one."""
        count = len(tokens)
        begin, end = self.n, self.n + count
        if end > self.capacity:
            raise EngineError("Internal error: batch overflow.")
        self._token[begin:end] = tokens
        self._pos[begin:end] = np.arange(start_pos, start_pos + count, dtype=np.int32)
        self._logits[begin:end] = 0
        if want_last_logits:
            self._logits[end - 1] = 1
        ptrs = self._seq_ptrs
        for i in range(begin, end):
            ptrs[i][0] = seq_id
        self.n = end
        return end - 1

    def add_rows(self, tokens: list[int], start_pos: int, seq_id: int) -> int:
        """Append tokens with a logits row for each (a guess to verify); returns the batch
        index of the first."""
        last = self.add_span(tokens, start_pos, seq_id, True)
        self._logits[last - len(tokens) + 1 : last + 1] = 1
        return last - len(tokens) + 1

    def mark_all_outputs(self) -> None:
        """Request output for every token (encoders and pooled embeddings need them all)."""
        self._logits[: self.n] = 1

    @property
    def free(self) -> int:
        return self.capacity - self.n

    def close(self) -> None:
        if self.handle is not None:
            self.handle.n_tokens = self.capacity
            llama_cpp.llama_batch_free(self.handle)
            self.handle = None


class Context:
    """Owns a ``llama_context`` for one :class:`Model`."""

    def __init__(self, model: Model, settings: ContextSettings) -> None:
        settings.validate(model.info)
        self.model = model
        self.settings = settings
        self.abort_requested = False
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = settings.effective_n_ctx(model.info)
        if settings.n_ctx and params.n_ctx < settings.n_ctx:
            log.info(
                "context size %d clamped to the model's training context %d",
                settings.n_ctx,
                params.n_ctx,
            )
        params.n_batch = settings.n_batch
        params.n_ubatch = settings.n_ubatch
        params.n_seq_max = settings.n_seq_max
        params.n_threads = settings.n_threads
        params.n_threads_batch = settings.n_threads_batch
        self._live_threads = (settings.n_threads, settings.n_threads_batch)
        params.flash_attn_type = FLASH_ATTN[settings.flash_attn]
        params.type_k = KV_TYPES[settings.type_k][0]
        params.type_v = KV_TYPES[settings.type_v][0]
        params.offload_kqv = settings.offload_kqv
        params.op_offload = settings.op_offload
        params.swa_full = settings.swa_full
        params.kv_unified = settings.kv_unified
        params.rope_scaling_type = ROPE_SCALING[settings.rope_scaling_type]
        params.rope_freq_base = settings.rope_freq_base
        params.rope_freq_scale = settings.rope_freq_scale
        params.yarn_ext_factor = settings.yarn_ext_factor
        params.yarn_attn_factor = settings.yarn_attn_factor
        params.yarn_beta_fast = settings.yarn_beta_fast
        params.yarn_beta_slow = settings.yarn_beta_slow
        params.yarn_orig_ctx = settings.yarn_orig_ctx
        params.embeddings = settings.embeddings
        params.pooling_type = POOLING[settings.pooling_type]
        params.attention_type = ATTENTION[settings.attention_type]
        params.no_perf = settings.no_perf

        # Read by llama.cpp dozens of times per micro-batch: keep it to an attribute read.
        def on_abort(_data: ctypes.c_void_p) -> bool:
            return self.abort_requested

        self._abort_cb = llama_cpp.ggml_abort_callback(on_abort)
        self._no_abort_cb = llama_cpp.ggml_abort_callback()  # NULL: no check
        self._abort_enabled = True
        params.abort_callback = self._abort_cb
        llama_log.clear()
        handle = llama_cpp.llama_init_from_model(model.handle, params)
        if not handle:
            said = " ".join(llama_log.recent_errors(2))
            hint = ""
            if "alloc" in said.lower() or "memory" in said.lower():
                hint = " There is not enough memory: lower the context size or the number of parallel sequences."
            raise ContextError(
                f"llama.cpp could not create a context with these settings{': ' + said if said else '.'}{hint}"
            )
        self.handle = handle
        self.memory = llama_cpp.llama_get_memory(handle)
        self.n_ctx = int(llama_cpp.llama_n_ctx(handle))
        self.n_ctx_seq = int(llama_cpp.llama_n_ctx_seq(handle))
        self.n_batch = int(llama_cpp.llama_n_batch(handle))
        self.n_seq_max = int(llama_cpp.llama_n_seq_max(handle))
        self.can_shift = (
            bool(llama_cpp.llama_memory_can_shift(self.memory)) if self.memory else False
        )
        self.traits = CacheTraits.of(
            recurrent=bool(llama_cpp.llama_model_is_recurrent(model.handle)),
            hybrid=bool(llama_cpp.llama_model_is_hybrid(model.handle)),
            n_swa=int(llama_cpp.llama_model_n_swa(model.handle)),
            swa_full=settings.swa_full,
            can_shift=self.can_shift,
        )
        # Non-causal attention (embedding models) and encoders must see a whole batch in one
        # micro-batch: llama.cpp asserts n_ubatch >= n_tokens there.
        self.single_ubatch = (
            settings.embeddings or settings.attention_type == "non-causal" or model.has_encoder
        )
        n_ubatch = int(llama_cpp.llama_n_ubatch(handle))
        self.batch = Batch(min(self.n_batch, n_ubatch) if self.single_ubatch else self.n_batch)

    # -- guards ---------------------------------------------------------------------------

    def _check_seq(self, seq_id: int) -> None:
        if not 0 <= seq_id < self.n_seq_max:
            raise EngineError(
                f"Internal error: sequence id {seq_id} is outside 0..{self.n_seq_max - 1}."
            )

    # -- memory (KV cache) operations, ids checked ------------------------------------------

    def seq_rm(self, seq_id: int, p0: int, p1: int = -1) -> bool:
        self._check_seq(seq_id)
        return bool(llama_cpp.llama_memory_seq_rm(self.memory, seq_id, p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        self._check_seq(src)
        self._check_seq(dst)
        if src == dst:
            return
        if not self.settings.kv_unified and (p0 >= 0 or p1 >= 0):
            raise EngineError(
                "A split KV cache cannot copy part of a sequence; use a unified cache."
            )
        llama_cpp.llama_memory_seq_cp(self.memory, src, dst, p0, p1)

    def seq_keep(self, seq_id: int) -> None:
        self._check_seq(seq_id)
        llama_cpp.llama_memory_seq_keep(self.memory, seq_id)

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        self._check_seq(seq_id)
        if not self.can_shift:
            raise EngineError("This model's cache cannot shift positions.")
        llama_cpp.llama_memory_seq_add(self.memory, seq_id, p0, p1, delta)

    def seq_div(self, seq_id: int, p0: int, p1: int, d: int) -> None:
        self._check_seq(seq_id)
        if d <= 1:
            raise EngineError(f"Internal error: position divisor must be above 1, not {d}.")
        if not self.can_shift:
            raise EngineError("This model's cache cannot shift positions.")
        llama_cpp.llama_memory_seq_div(self.memory, seq_id, p0, p1, d)

    def seq_pos_min(self, seq_id: int) -> int:
        self._check_seq(seq_id)
        return int(llama_cpp.llama_memory_seq_pos_min(self.memory, seq_id))

    def seq_pos_max(self, seq_id: int) -> int:
        self._check_seq(seq_id)
        return int(llama_cpp.llama_memory_seq_pos_max(self.memory, seq_id))

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self.memory, True)

    # -- compute --------------------------------------------------------------------------

    def set_abort_check(self, enabled: bool) -> None:
        """Check the stop flag inside ``llama_decode`` only when it can take long.

        The callback is Python: llama.cpp calls it after every graph node, and each call
        needs the GIL. Generation-only steps are short (a stop waits for the next step);
        batches with prompt chunks keep it, so a stop lands within a micro-batch.
        """
        if enabled == self._abort_enabled:
            return
        llama_cpp.llama_set_abort_callback(
            self.handle, self._abort_cb if enabled else self._no_abort_cb, ctypes.c_void_p(0)
        )
        self._abort_enabled = enabled

    def decode(self) -> DecodeResult:
        batch = self.batch
        if batch.n == 0:
            return DecodeResult(0)
        if _FAULT_DECODE:  # tests: a crash in llama_decode (app.crash_supervisor's sentence)
            signal.raise_signal(signal.SIGSEGV)
        batch.handle.n_tokens = batch.n
        if not rpc_heartbeat.WATCHED:
            return DecodeResult(int(llama_cpp.llama_decode(self.handle, batch.handle)))
        # A watched model process on remote workers (issue 22): the wait for the workers'
        # results (where a stopped worker hangs) falls inside the step the parent watches.
        rpc_heartbeat.decode_begins()
        try:
            code = int(llama_cpp.llama_decode(self.handle, batch.handle))
            llama_cpp.llama_synchronize(self.handle)
        finally:
            rpc_heartbeat.decode_ends()
        return DecodeResult(code)

    def encode(self) -> int:
        if not self.model.has_encoder:
            raise EngineError("This model has no encoder.")
        batch = self.batch
        batch.handle.n_tokens = batch.n
        return int(llama_cpp.llama_encode(self.handle, batch.handle))

    def logits(self, batch_index: int) -> np.ndarray:
        ptr = llama_cpp.llama_get_logits_ith(self.handle, batch_index)
        if not ptr:
            raise EngineError(f"Internal error: no logits for batch index {batch_index}.")
        return np.ctypeslib.as_array(ptr, shape=(self.model.n_vocab,)).copy()

    def embeddings_seq(self, seq_id: int, n_embd: int) -> np.ndarray:
        self._check_seq(seq_id)
        ptr = llama_cpp.llama_get_embeddings_seq(self.handle, seq_id)
        if not ptr:
            raise EngineError("This context produced no pooled embeddings (is pooling enabled?).")
        return np.ctypeslib.as_array(ptr, shape=(n_embd,)).copy()

    def set_threads(self, n_threads: int, n_threads_batch: int) -> None:
        llama_cpp.llama_set_n_threads(self.handle, n_threads, n_threads_batch)
        self._live_threads = (n_threads, n_threads_batch)
        self.settings.n_threads = n_threads
        self.settings.n_threads_batch = n_threads_batch

    def use_prompt_threads(self, prompt: bool) -> None:
        """The next decodes' threads: with ``prompt`` False (generated tokens only) the
        generation threads even for several tabs' tokens (:func:`threads.decode_threads`)."""
        live = decode_threads(self.settings.n_threads, self.settings.n_threads_batch, prompt)
        if live != self._live_threads:
            llama_cpp.llama_set_n_threads(self.handle, *live)
            self._live_threads = live

    # -- state ------------------------------------------------------------------------------

    def state_get(self, seq_id: int) -> bytes:
        self._check_seq(seq_id)
        size = int(llama_cpp.llama_state_seq_get_size(self.handle, seq_id))
        buf = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_seq_get_data(self.handle, buf, size, seq_id))
        if written == 0 and size:
            raise StateError("llama.cpp could not copy the sequence state.")
        return bytes(memoryview(buf)[:written])

    def state_set(self, seq_id: int, blob: bytes) -> bool:
        self._check_seq(seq_id)
        # llama.cpp only reads the blob: it gets a pointer into the bytes object (alive for
        # the call) rather than a copy of a cache that is tens of MB on a resumed chat
        buf = ctypes.cast(ctypes.c_char_p(blob), ctypes.POINTER(ctypes.c_uint8))
        return int(llama_cpp.llama_state_seq_set_data(self.handle, buf, len(blob), seq_id)) > 0

    def partial_state_get(self, seq_id: int) -> bytes:
        """The part of the sequence's state that cannot be cut back (recurrent or
        sliding-window layers), for a checkpoint."""
        self._check_seq(seq_id)
        flags = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        size = int(llama_cpp.llama_state_seq_get_size_ext(self.handle, seq_id, flags))
        buf = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_seq_get_data_ext(self.handle, buf, size, seq_id, flags))
        if written == 0 and size:
            raise StateError("llama.cpp could not copy the sequence's checkpoint state.")
        return bytes(memoryview(buf)[:written])

    def partial_state_set(self, seq_id: int, blob: bytes) -> bool:
        """Put a checkpoint's part back; the attention part is left as it is."""
        self._check_seq(seq_id)
        flags = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        buf = (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)
        return (
            int(llama_cpp.llama_state_seq_set_data_ext(self.handle, buf, len(blob), seq_id, flags))
            > 0
        )

    def full_state_get(self) -> bytes:
        size = int(llama_cpp.llama_state_get_size(self.handle))
        buf = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_get_data(self.handle, buf, size))
        return bytes(memoryview(buf)[:written])

    def full_state_set(self, blob: bytes) -> bool:
        buf = (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)
        return int(llama_cpp.llama_state_set_data(self.handle, buf, len(blob))) > 0

    def close(self) -> None:
        if getattr(self, "batch", None) is not None:
            self.batch.close()
        handle = getattr(self, "handle", None)
        if handle:
            llama_cpp.llama_free(handle)
            self.handle = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
