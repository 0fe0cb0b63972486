"""The load check's child (:mod:`app.engine.load_check`): load the file as the app would
(its placement, memory-mapped or read, the CPU guard applied) and decode the app's shapes;
report with one result line on stdout, and a phase line before each phase (the parent reads
where a crash was)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from app.engine import load_check_runner

N_SEQ = 4  # sequences in the checked batch (one token each, a logits row each)
MAX_CHUNK = 512  # the prompt chunk: min(n_batch, 512) tokens
FAULT_ENV = "LLAMADESK_FAULT_EXTRA_BUFTS_CRASH"  # tests: "1" or "always" (load_check's text)
# The text the child tokenizes: letters, digits, spaces, a newline and non-ASCII, what any
# first prompt holds (some tokenizers only fail when they first run).
PROBE_TEXT = "Hello, world! 123\n  Grüße, 你好 🙂"
MARKER = "LLAMADESK-LOAD-CHECK "  # the child's one result line on stdout
PHASE = "LLAMADESK-LOAD-CHECK-PHASE "  # the child's phase lines: "load", "decode"
NO_EXTRA_BUFTS = "--no-extra-bufts"


def child_main(argv: Sequence[str] | None = None) -> int:
    """Load the file as the app would and decode the app's shapes; print one result line
    (and a phase line before each phase, which tells the parent where a crash was)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--serve"]:  # the warm helper (load_check_runner): fork per check
        return load_check_runner.serve(child_main)
    parser = argparse.ArgumentParser(prog="python -m app.engine.load_check")
    parser.add_argument("path")
    parser.add_argument("--n-gpu-layers", type=int, default=0)
    parser.add_argument(NO_EXTRA_BUFTS, action="store_true", dest="no_extra_bufts")
    parser.add_argument("--amx", choices=("on", "off", "auto"), default="auto")
    parser.add_argument("--placement", default="", help="the model's placement (JSON)")
    args = parser.parse_args(argv)
    from app.engine.cpu_quirks import AMX_ENV

    os.environ[AMX_ENV] = args.amx  # the parent's decision (see _amx_arg)
    # llama.cpp's warnings and errors go to stderr, where the parent reads the last ones
    # if this process dies.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    llama_logger = logging.getLogger("llama.cpp")
    llama_logger.addHandler(handler)
    llama_logger.setLevel(logging.WARNING)

    import ctypes

    import llama_cpp

    from app.engine import llama_log
    from app.engine.backend import ensure_backend
    from app.engine.cpu_quirks import apply_cpu_quirks

    ensure_backend()
    params = llama_cpp.llama_model_default_params()
    placed = None
    use_mmap, use_mlock = True, False
    if args.placement:
        # The app's placement (devices, split, RPC workers), resolved here as Model does.
        from app.engine.metadata import read_model_info
        from app.engine.offload import place
        from app.engine.settings import ModelSettings

        settings = ModelSettings.from_dict(json.loads(args.placement))
        # (The parent ran the header checks; this child tries what they cannot foresee.)
        placed = place(read_model_info(args.path, check_loadable=False), settings)
        placed.apply(params)
        use_mmap, use_mlock = settings.use_mmap, settings.use_mlock
    params.n_gpu_layers = args.n_gpu_layers  # the parent's plan
    # Memory-mapped as the app loads it (the app's load then finds the pages in memory),
    # or read and locked as the settings say.
    if use_mmap:
        params.load_mode = (
            llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK if use_mlock else llama_cpp.LLAMA_LOAD_MODE_MMAP
        )
    else:
        params.load_mode = (
            llama_cpp.LLAMA_LOAD_MODE_MLOCK if use_mlock else llama_cpp.LLAMA_LOAD_MODE_NONE
        )
    quirks = None
    if args.no_extra_bufts:
        params.use_extra_bufts = False
    else:
        quirks = apply_cpu_quirks(params, Path(args.path))  # what Model applies
    _phase_line("load")
    llama_log.clear()
    handle = llama_cpp.llama_model_load_from_file(os.fsencode(args.path), params)
    if not handle:
        _report({"ok": False, "said": " ".join(llama_log.recent_errors(2))})
        return 0
    vocab = llama_cpp.llama_model_get_vocab(handle)
    n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
    data = PROBE_TEXT.encode("utf-8")
    capacity = len(data) + 16
    tokens = (llama_cpp.llama_token * capacity)()
    n = llama_cpp.llama_tokenize(vocab, data, len(data), tokens, capacity, True, True)
    buf = ctypes.create_string_buffer(256)
    probe = [t for t in tokens[: max(n, 0)] if 0 <= t < n_vocab]
    for token in probe:
        llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
    decoded = _decode_shapes(handle, probe or [0], not args.no_extra_bufts)
    llama_cpp.llama_model_free(handle)
    del quirks, placed  # the override and device arrays live as long as the model
    _report({"ok": True, "n_vocab": n_vocab, "decoded": decoded})
    return 0


def _decode_shapes(model: object, tokens: list[int], extra_bufts: bool) -> str:
    """Decode the app's shapes with a small context; what was decoded (a word for the
    log), or why not. A decode llama.cpp refuses is not this check's business (the app
    says what llama.cpp says); only a crash is."""
    import llama_cpp

    if llama_cpp.llama_model_has_encoder(model):
        return "no: an encoder-decoder model (decoding needs its encoder's output)"
    n_train = int(llama_cpp.llama_model_n_ctx_train(model))
    chunk = MAX_CHUNK if n_train <= 0 else max(1, min(MAX_CHUNK, n_train - N_SEQ - 2))
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = chunk + N_SEQ + 2
    cparams.n_batch = cparams.n_ubatch = max(chunk, N_SEQ)
    cparams.n_seq_max = N_SEQ
    cparams.kv_unified = True  # sequence 0 holds the whole chunk
    cparams.n_threads = cparams.n_threads_batch = max(1, min(4, os.cpu_count() or 1))
    _phase_line("decode")
    fault = os.environ.get(FAULT_ENV, "").strip().lower()
    if fault == "always" or (fault == "1" and extra_bufts):
        signal.raise_signal(signal.SIGSEGV)  # stands in for the AMX kernel's crash (tests)
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    if not ctx:
        return "no: the context could not be created"
    batch = llama_cpp.llama_batch_init(max(chunk, N_SEQ), 0, N_SEQ)
    try:
        # (token, position, sequence, logits) rows of each decode: one token of each
        # sequence (a logits row each: the scheduler's batch), one token, then a prompt
        # chunk (logits for its last token), the slow one last (a timeout there is no
        # crash: see _run_child).
        shapes = [
            [(tokens[s % len(tokens)], 0, s, True) for s in range(N_SEQ)],
            [(tokens[0], 1, 0, True)],
            [(tokens[i % len(tokens)], 1 + i, 1, i == chunk - 1) for i in range(chunk)],
        ]
        for n, rows in enumerate(shapes):
            if n == len(shapes) - 1:
                _phase_line("decode-chunk")
            for i, (token, pos, seq, logits) in enumerate(rows):
                batch.token[i] = token
                batch.pos[i] = pos
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = seq
                batch.logits[i] = logits
            batch.n_tokens = len(rows)
            rc = int(llama_cpp.llama_decode(ctx, batch))
            if rc != 0:
                return f"no: llama_decode returned {rc}"
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)
    return f"yes: {chunk} tokens, {N_SEQ} sequences, 1 token"


def _phase_line(phase: str) -> None:
    sys.stdout.write(PHASE + phase + "\n")
    sys.stdout.flush()


def _report(result: dict[str, object]) -> None:
    sys.stdout.write(MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()
