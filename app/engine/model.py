"""A loaded GGUF model: weights, vocabulary and tokenization.

Only this module and :mod:`app.engine.context` call llama.cpp's model functions; the
rest of the engine works with token ids and Python strings.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable
from pathlib import Path

import llama_cpp

from app.engine import llama_log, load_check, special_split
from app.engine.backend import ensure_backend
from app.engine.cpu_quirks import apply_cpu_quirks
from app.engine.errors import EngineError, ModelLoadError
from app.engine.metadata import ModelInfo, check_gguf_file, fingerprint, read_model_header
from app.engine.offload import place
from app.engine.settings import ModelSettings
from app.engine.tokenizer import VocabLease

log = logging.getLogger(__name__)

ProgressCallback = Callable[[float], bool]

# Vocabularies whose tokenize treats each fragment of the partition on its own.
_SPLIT_VOCABS = frozenset(
    (llama_cpp.LLAMA_VOCAB_TYPE_SPM, llama_cpp.LLAMA_VOCAB_TYPE_BPE, llama_cpp.LLAMA_VOCAB_TYPE_UGM)
)


class Model:
    """Owns a ``llama_model``; free it with :meth:`close` (contexts first)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        settings: ModelSettings | None = None,
        progress: ProgressCallback | None = None,
    ) -> None:
        ensure_backend()
        # Other threads tokenize with this vocabulary (app.engine.tokenizer); close waits.
        self.lease = VocabLease()
        settings = settings or ModelSettings()
        settings.validate()
        p = check_gguf_file(path)
        # Reading the header first turns truncated or malformed files into clear errors
        # before llama.cpp parses them (and gives the metadata the UI shows).
        self.info: ModelInfo
        self.info, header = read_model_header(p)
        if self.info.n_vocab == 0:
            raise ModelLoadError(
                f"{p.name} has no vocabulary (tokenizer.ggml.tokens is missing), so it cannot be used for chat."
            )
        if self.info.n_params == 0:
            raise ModelLoadError(
                f"{p.name} holds only a vocabulary, no weights (a vocab-only file). Choose the full model file."
            )
        # Where the layers go (devices probed, the plan made); it owns the arrays that
        # params point into, so it lives as long as the model.
        self.placement = place(self.info, settings)
        # llama.cpp aborts the process on some damage no header check foresees: the first
        # load of a header this app has not loaded before is tried in a child process.
        # The same check runs the decode shapes the app uses: a model that crashes llama.cpp
        # with its extra CPU buffer types is loaded without them (``load_notice`` says so).
        verdict = load_check.ensure_loadable(
            p,
            header,
            architecture=self.info.architecture,
            n_gpu_layers=self.placement.plan.n_gpu_layers,
            extra_bufts=settings.use_extra_bufts,
            placement=load_check.placement_of(settings),
        )
        # What the user is told about how this model was loaded ("": nothing to say).
        self.load_notice = verdict.notice
        extra_bufts = settings.use_extra_bufts and verdict.extra_bufts
        self.path = p
        self.settings = settings
        self._cancelled = False
        params = llama_cpp.llama_model_default_params()
        self.placement.apply(params)
        if settings.use_mmap:
            params.load_mode = (
                llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK
                if settings.use_mlock
                else llama_cpp.LLAMA_LOAD_MODE_MMAP
            )
        else:
            params.load_mode = (
                llama_cpp.LLAMA_LOAD_MODE_MLOCK
                if settings.use_mlock
                else llama_cpp.LLAMA_LOAD_MODE_NONE
            )

        def on_progress(fraction: float, _data: ctypes.c_void_p) -> bool:
            if progress is None:
                return True
            try:
                keep_going = bool(progress(float(fraction)))
            except Exception:  # an exception must not cross into C
                log.exception("model load progress callback failed")
                keep_going = True
            if not keep_going:
                self._cancelled = True
            return keep_going

        # Kept for the model's life: llama.cpp reads the override array it points at.
        self._cpu_quirks = apply_cpu_quirks(params, p) if extra_bufts else None
        if not extra_bufts:
            params.use_extra_bufts = False

        # Keep the ctypes callback referenced for the whole load: if it were collected,
        # llama.cpp would call freed memory.
        self._progress_cb = llama_cpp.llama_progress_callback(on_progress)
        params.progress_callback = self._progress_cb
        llama_log.clear()
        handle = llama_cpp.llama_model_load_from_file(str(p).encode("utf-8"), params)
        while not handle and not self._cancelled:
            # A device could not allocate its layers: the planner's next smaller plan.
            fewer = self.placement.fewer(" ".join(llama_log.recent_errors(3)))
            if fewer is None:
                break
            log.warning("%s", fewer.plan.reason)
            self.placement = fewer
            fewer.apply(params)
            llama_log.clear()
            handle = llama_cpp.llama_model_load_from_file(str(p).encode("utf-8"), params)
        if not handle:
            if self._cancelled:
                raise ModelLoadError(f"Loading {p.name} was cancelled.")
            raise ModelLoadError(_load_failure_message(p, self.info))
        self.handle = handle
        self.vocab = llama_cpp.llama_model_get_vocab(handle)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))
        self.add_eos = bool(llama_cpp.llama_vocab_get_add_eos(self.vocab))
        self.bos = int(llama_cpp.llama_vocab_bos(self.vocab))
        self.eos = int(llama_cpp.llama_vocab_eos(self.vocab))
        self.has_encoder = bool(llama_cpp.llama_model_has_encoder(handle))
        self.has_decoder = bool(llama_cpp.llama_model_has_decoder(handle))
        self.size_bytes = int(llama_cpp.llama_model_size(handle))
        self.n_ctx_train = int(llama_cpp.llama_model_n_ctx_train(handle))
        self._pieces: dict[int, bytes] = {}
        self._special_pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._fingerprint: str | None = None
        self._vocab_type = int(llama_cpp.llama_vocab_type(self.vocab))
        self._special: special_split.SpecialTokens | None = None

    # -- identity -------------------------------------------------------------------------

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.path)
        return self._fingerprint

    # -- tokens ---------------------------------------------------------------------------

    def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        data = text.encode("utf-8", errors="replace")  # a lone surrogate must not raise
        if len(data) >= special_split.LONG_TEXT and self._vocab_type in _SPLIT_VOCABS:
            # llama.cpp's special-token search is quadratic in the tokens it finds.
            fragments = special_split.partition(data, self._special_tokens(), parse_special)
            if fragments is not None and len(fragments) > 1:
                return self._tokenize_fragments(fragments, add_special)
        return self._tokenize_bytes(data, add_special, parse_special)

    def _tokenize_fragments(
        self, fragments: list[special_split.Fragment], add_special: bool
    ) -> list[int]:
        """What llama.cpp's tokenize does after its partition (SPM, BPE and UGM alike):
        BOS, each plain fragment on its own, the special tokens as they are, EOS."""
        out: list[int] = []
        if add_special and self.add_bos:
            out.append(self.bos)
        for fragment in fragments:
            if isinstance(fragment, int):
                out.append(fragment)
            else:
                # parse_special off: the fragment holds no special token that takes part
                out.extend(self._tokenize_bytes(fragment, False, False))
        if add_special and self.add_eos:
            out.append(self.eos)
        return out

    def _special_tokens(self) -> special_split.SpecialTokens:
        if self._special is None:
            vocab, get_attr, get_text = (
                self.vocab,
                llama_cpp.llama_vocab_get_attr,
                llama_cpp.llama_vocab_get_text,
            )
            attrs = [int(get_attr(vocab, i)) for i in range(self.n_vocab)]
            self._special = special_split.SpecialTokens.of(
                [
                    special_split.SpecialToken(i, get_text(vocab, i) or b"", attr)
                    for i, attr in enumerate(attrs)
                    if attr & special_split.SPECIAL_ATTRS
                ]
            )
        return self._special

    def _tokenize_bytes(self, data: bytes, add_special: bool, parse_special: bool) -> list[int]:
        capacity = len(data) + 8
        while True:
            buf = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(
                self.vocab, data, len(data), buf, capacity, add_special, parse_special
            )
            if n >= 0:
                return list(buf[:n])
            if n == -(2**31):  # INT32_MIN: the result would overflow int32
                raise ModelLoadError("The text is too long to tokenize.")
            capacity = -n

    def piece(self, token: int, special: bool = False) -> bytes:
        """The bytes a token stands for (may be part of a UTF-8 character)."""
        cache = self._special_pieces if special else self._pieces
        cached = cache.get(token)
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, 64, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, -n, 0, special)
        data = buf.raw[:n]
        cache[token] = data
        return data

    def detokenize(self, tokens: list[int], special: bool = False) -> str:
        # llama.cpp aborts the process on a token id outside the vocabulary: check first.
        bad = next((t for t in tokens if not self.valid_token(t)), None)
        if bad is not None:
            raise EngineError(
                f"Token id {bad} is not in this model's vocabulary (0..{self.n_vocab - 1})."
            )
        return b"".join(self.piece(t, special) for t in tokens).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        cached = self._eog.get(token)
        if cached is None:
            cached = self._eog[token] = bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))
        return cached

    def valid_token(self, token: int) -> bool:
        return isinstance(token, int) and 0 <= token < self.n_vocab

    def close(self) -> None:
        handle = getattr(self, "handle", None)
        if handle:
            self.lease.retire()
            llama_cpp.llama_model_free(handle)
            self.handle = None

    def __del__(self) -> None:  # a forgotten close must not leak gigabytes
        try:
            self.close()
        except Exception:
            pass


def _load_failure_message(path: Path, info: ModelInfo) -> str:
    return load_check.refusal_message(path, info.architecture, " ".join(llama_log.recent_errors(2)))
