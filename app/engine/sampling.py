"""One llama.cpp sampler chain per sequence.

The chain has state (penalty history, the RNG, the grammar's parse state), so it belongs to
its sequence; after a restore it is rebuilt and fed the recent tokens again.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile
from collections.abc import Callable, Iterator

import llama_cpp
import numpy as np

from app.engine.errors import ContextError
from app.engine.settings import SamplingParams


@contextlib.contextmanager
def _stderr_captured() -> Iterator[Callable[[], str]]:
    """What C code writes to file descriptor 2 meanwhile (llama.cpp's grammar parser
    fprintf's its error followed by the whole grammar there, bypassing the log callback)."""
    text: list[str] = []
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable stderr: nothing to keep clean
        yield lambda: ""
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield lambda: "".join(text)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text.append(sink.read().decode("utf-8", errors="replace"))


def _grammar_error(said: str) -> str:
    """A sentence from the parser's first line ("parse: error parsing grammar: expecting ::=
    at ...")."""
    first = said.strip().splitlines()[0] if said.strip() else ""
    reason = first.split("error parsing grammar:", 1)[-1].strip() if first else ""
    if len(reason) > 120:
        reason = reason[:117] + "..."
    detail = f": {reason}" if reason else ""
    return f"The grammar is not valid GBNF{detail} (llama.cpp could not parse it)."


class Sampler:
    def __init__(
        self,
        vocab: llama_cpp.llama_vocab_p,
        n_vocab: int,
        params: SamplingParams,
        n_ctx: int = 4096,
    ) -> None:
        # validate() also reads the grammar as llama.cpp will (app/engine/grammar_bounds.py):
        # a grammar that would overflow its parser's stack never reaches it.
        params.validate()
        self.params = params
        chain_params = llama_cpp.llama_sampler_chain_default_params()
        chain_params.no_perf = True
        chain = llama_cpp.llama_sampler_chain_init(chain_params)
        self.handle = chain
        try:
            if params.grammar:
                with _stderr_captured() as said:
                    grammar = llama_cpp.llama_sampler_init_grammar(
                        vocab, params.grammar.encode("utf-8"), b"root"
                    )
                if not grammar:
                    raise ContextError(_grammar_error(said()))
                llama_cpp.llama_sampler_chain_add(chain, grammar)
            if (
                params.repeat_penalty != 1.0
                or params.frequency_penalty != 0.0
                or params.presence_penalty != 0.0
            ):
                llama_cpp.llama_sampler_chain_add(
                    chain,
                    llama_cpp.llama_sampler_init_penalties(
                        n_vocab,
                        # -1 means the whole context; llama.cpp reads negatives as "off".
                        n_ctx if params.repeat_last_n < 0 else params.repeat_last_n,
                        params.repeat_penalty,
                        params.frequency_penalty,
                        params.presence_penalty,
                    ),
                )
            if params.greedy:
                llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
            else:
                if params.top_k > 0:
                    llama_cpp.llama_sampler_chain_add(
                        chain, llama_cpp.llama_sampler_init_top_k(params.top_k)
                    )
                if params.top_p < 1.0:
                    llama_cpp.llama_sampler_chain_add(
                        chain, llama_cpp.llama_sampler_init_top_p(params.top_p, 1)
                    )
                if params.min_p > 0.0:
                    llama_cpp.llama_sampler_chain_add(
                        chain, llama_cpp.llama_sampler_init_min_p(params.min_p, 1)
                    )
                llama_cpp.llama_sampler_chain_add(
                    chain, llama_cpp.llama_sampler_init_temp(params.temperature)
                )
                seed = llama_cpp.LLAMA_DEFAULT_SEED if params.seed < 0 else params.seed
                llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(seed))
        except BaseException:
            self.close()
            raise

    def sample(self, ctx: llama_cpp.llama_context_p, batch_index: int) -> int:
        """Sample from the logits of ``batch_index`` and accept the token into the chain."""
        return int(llama_cpp.llama_sampler_sample(self.handle, ctx, batch_index))

    def sample_logits(self, logits: np.ndarray) -> int:
        """Sample from saved logits (a checkpoint's), as ``llama_sampler_sample`` does from
        the context's: apply the chain to every candidate, then accept the choice."""
        n = len(logits)
        data = np.zeros(n, dtype=[("id", np.int32), ("logit", np.float32), ("p", np.float32)])
        data["id"] = np.arange(n, dtype=np.int32)
        data["logit"] = logits
        cur = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(llama_cpp.llama_token_data_p),
            size=n,
            selected=-1,
            sorted=False,
        )
        llama_cpp.llama_sampler_apply(self.handle, ctypes.byref(cur))
        if not 0 <= cur.selected < cur.size:
            raise ContextError("The sampler chose no token (internal error).")
        token = int(cur.data[cur.selected].id)
        llama_cpp.llama_sampler_accept(self.handle, token)
        return token

    def accept(self, token: int) -> None:
        llama_cpp.llama_sampler_accept(self.handle, token)

    def close(self) -> None:
        if self.handle:
            llama_cpp.llama_sampler_free(self.handle)
            self.handle = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
