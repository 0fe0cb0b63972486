"""One llama.cpp sampler chain per sequence.

The chain has state (penalty history, the RNG, the grammar's parse state), so it belongs to
its sequence; after a restore it is rebuilt and fed the recent tokens again.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator

import llama_cpp
import numpy as np

from app.engine.errors import ContextError
from app.engine.settings import SamplingParams
from app.engine.tool_calls.grammar import CallGrammar


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


def _check_patterns(patterns: tuple[str, ...]) -> None:
    """Refuse trigger patterns llama.cpp's std::regex could throw on (it aborts the process
    through the C API): each must compile, and its text be one a regex reads the same in
    ECMAScript and Python (the tool grammars write them so; this is the guard)."""
    if not patterns:
        raise ContextError("A lazy grammar needs at least one trigger pattern.")
    for pattern in patterns:
        # (a NUL would cut the C string; named groups and lookbehinds are not ECMAScript)
        if "\0" in pattern or "(?P" in pattern or "(?<" in pattern:
            raise ContextError(f"The trigger pattern {pattern!r} cannot be used by llama.cpp.")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ContextError(f"The trigger pattern {pattern!r} is not valid: {exc}.") from None


def _init_grammar(
    vocab: llama_cpp.llama_vocab_p, grammar: str, lazy_patterns: tuple[str, ...] | None
) -> llama_cpp.llama_sampler_p:
    """llama.cpp's grammar sampler (lazy: started where a pattern matches). The grammar
    was read by :mod:`app.engine.grammar_bounds` already (``SamplingParams.validate``,
    :func:`~app.engine.tool_calls.grammar.call_grammar`)."""
    sampler: llama_cpp.llama_sampler_p  # the ctypes-wrapped calls below return Any
    with _stderr_captured() as said:
        if lazy_patterns is None:
            sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
        else:
            _check_patterns(lazy_patterns)
            words = (ctypes.c_char_p * len(lazy_patterns))(
                *(p.encode("utf-8") for p in lazy_patterns)
            )
            sampler = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
                vocab, grammar.encode("utf-8"), b"root", words, len(lazy_patterns), None, 0
            )
    if not sampler:
        raise ContextError(_grammar_error(said()))
    return sampler


class Sampler:
    def __init__(
        self,
        vocab: llama_cpp.llama_vocab_p,
        n_vocab: int,
        params: SamplingParams,
        n_ctx: int = 4096,
        tool_grammar: CallGrammar | None = None,
    ) -> None:
        # validate() also reads the grammar as llama.cpp will (app/engine/grammar_bounds.py):
        # a grammar that would overflow its parser's stack never reaches it.
        params.validate()
        if params.grammar and tool_grammar is not None:
            raise ContextError(
                "A grammar (or response format) and tool calls cannot both constrain a reply."
            )
        self.params = params
        chain_params = llama_cpp.llama_sampler_chain_default_params()
        chain_params.no_perf = True
        chain = llama_cpp.llama_sampler_chain_init(chain_params)
        self.handle = chain
        try:
            if params.grammar:
                llama_cpp.llama_sampler_chain_add(chain, _init_grammar(vocab, params.grammar, None))
            elif tool_grammar is not None:
                patterns = tool_grammar.trigger_patterns if tool_grammar.lazy else None
                llama_cpp.llama_sampler_chain_add(
                    chain, _init_grammar(vocab, tool_grammar.grammar, patterns)
                )
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
