"""Minimal llama.cpp runner on llama-cpp-python's low-level API (no torch), for the checks."""

from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp as lc
import numpy as np

_LOG_CB = None


def quiet() -> None:
    """Silence llama.cpp's log output."""
    global _LOG_CB

    @lc.llama_log_callback
    def _cb(level: int, text: bytes, data: ctypes.c_void_p) -> None:
        return None

    _LOG_CB = _cb
    lc.llama_log_set(_LOG_CB, ctypes.c_void_p(0))


class Runner:
    """One model, one context, one sequence (seq_id 0)."""

    def __init__(
        self, path: Path | str, n_ctx: int = 512, n_threads: int = 2, f32_kv: bool = True
    ) -> None:
        lc.llama_backend_init()
        mparams = lc.llama_model_default_params()
        self.model = lc.llama_model_load_from_file(str(path).encode(), mparams)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        self.vocab = lc.llama_model_get_vocab(self.model)
        self.n_vocab = lc.llama_vocab_n_tokens(self.vocab)
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_ctx
        cparams.n_ubatch = n_ctx
        cparams.n_seq_max = 1
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        if f32_kv:
            cparams.type_k = 0  # GGML_TYPE_F32
            cparams.type_v = 0
            cparams.flash_attn_type = 0  # disabled: exact f32 attention
        self.ctx = lc.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context")
        self.n_past = 0

    def close(self) -> None:
        if self.ctx:
            lc.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            lc.llama_model_free(self.model)
            self.model = None

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- vocab -----------------------------------------------------------------------------
    def tokenize(self, text: str, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self.vocab, data, len(data), buf, cap, False, parse_special)
        if n < 0:
            raise RuntimeError("tokenize buffer too small")
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = lc.llama_token_to_piece(self.vocab, token, buf, 64, 0, True)
        return buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        return bool(lc.llama_vocab_is_eog(self.vocab, token))

    # -- decoding --------------------------------------------------------------------------
    def reset(self) -> None:
        lc.llama_memory_clear(lc.llama_get_memory(self.ctx), True)
        self.n_past = 0

    def eval(self, tokens: list[int], all_logits: bool = False) -> np.ndarray:
        """Append tokens to sequence 0; return logits (n, V) for all or (1, V) for the last."""
        n = len(tokens)
        batch = lc.llama_batch_init(n, 0, 1)
        try:
            for i, t in enumerate(tokens):
                batch.token[i] = t
                batch.pos[i] = self.n_past + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1 if (all_logits or i == n - 1) else 0
            batch.n_tokens = n
            rc = lc.llama_decode(self.ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode failed: {rc}")
        finally:
            lc.llama_batch_free(batch)
        self.n_past += n
        rows = range(n) if all_logits else [n - 1]
        out = np.empty((len(rows), self.n_vocab), dtype=np.float32)
        for j, i in enumerate(rows):
            ptr = lc.llama_get_logits_ith(self.ctx, i)
            out[j] = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))
        return out

    def generate(self, prompt_tokens: list[int], max_tokens: int = 80) -> str:
        """Greedy continuation of the current sequence; returns the text up to an EOG token."""
        logits = self.eval(prompt_tokens)[-1]
        out = b""
        for _ in range(max_tokens):
            tok = int(np.argmax(logits))
            if self.is_eog(tok):
                self.eval([tok])  # keep the end-of-turn token in the cache, like a chat does
                break
            out += self.piece(tok)
            logits = self.eval([tok])[-1]
        return out.decode("utf-8", errors="replace")

    # -- state -----------------------------------------------------------------------------
    def save_state(self, path: Path) -> None:
        size = lc.llama_state_seq_get_size(self.ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        n = lc.llama_state_seq_get_data(self.ctx, buf, size, 0)
        path.write_bytes(int(self.n_past).to_bytes(8, "little") + bytes(buf[:n]))

    def load_state(self, path: Path) -> None:
        raw = path.read_bytes()
        self.reset()
        data = raw[8:]
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        n = lc.llama_state_seq_set_data(self.ctx, buf, len(data), 0)
        if n == 0:
            raise RuntimeError("llama_state_seq_set_data failed")
        self.n_past = int.from_bytes(raw[:8], "little")
