"""The peer of ``llamadesk run --resume-session``: a bare program on llama.cpp's C API.

It loads the model, makes a context, restores a sequence with llama.cpp's own
``llama_state_seq_load_file``, decodes a short prompt after it and generates N greedy
tokens: the least any program can do to continue a saved chat. ``save`` makes the state
file it restores (the same text as LlamaDesk's state file, so both restore as many tokens).

    python benchmarks/bare_resume.py save MODEL STATE TEXT_FILE [--ctx N] [--threads N]
    python benchmarks/bare_resume.py load MODEL STATE PROMPT [--ctx N] [--threads N] [-n N]
    python benchmarks/bare_resume.py count MODEL - TEXT_FILE   # prints its token count
"""

from __future__ import annotations

import argparse
import ctypes
import sys

import llama_cpp


def _context(model_path: str, n_ctx: int, threads: int) -> tuple[object, object, object]:
    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    model = llama_cpp.llama_model_load_from_file(model_path.encode(), mparams)
    if not model:
        raise SystemExit(f"cannot load {model_path}")
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = n_ctx
    cparams.n_batch = min(2048, n_ctx)
    cparams.n_ubatch = 512
    cparams.n_seq_max = 1
    cparams.n_threads = cparams.n_threads_batch = threads
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    if not ctx:
        raise SystemExit("cannot create the context")
    return model, ctx, llama_cpp.llama_model_get_vocab(model)


def _tokenize(vocab: object, text: str, add_special: bool) -> list[int]:
    data = text.encode()
    buf = (llama_cpp.llama_token * (len(data) + 8))()
    n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, len(buf), add_special, True)
    return list(buf[:n])


def _decode(ctx: object, tokens: list[int], pos0: int, n_batch: int) -> None:
    for start in range(0, len(tokens), n_batch):
        chunk = tokens[start : start + n_batch]
        batch = llama_cpp.llama_batch_init(len(chunk), 0, 1)
        for i, tok in enumerate(chunk):
            batch.token[i] = tok
            batch.pos[i] = pos0 + start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = start + i == len(tokens) - 1
        batch.n_tokens = len(chunk)
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise SystemExit("decode failed")
        llama_cpp.llama_batch_free(batch)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("save", "load", "count"))
    p.add_argument("model")
    p.add_argument("state")
    p.add_argument("text", help="save: a file with the chat's text; load: the new prompt")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("-n", type=int, default=8)
    args = p.parse_args()
    if args.mode == "count":
        llama_cpp.llama_backend_init()
        mparams = llama_cpp.llama_model_default_params()
        mparams.vocab_only = True
        vmodel = llama_cpp.llama_model_load_from_file(args.model.encode(), mparams)
        with open(args.text, encoding="utf-8") as f:
            print(len(_tokenize(llama_cpp.llama_model_get_vocab(vmodel), f.read(), True)))
        return 0
    model, ctx, vocab = _context(args.model, args.ctx, args.threads)
    if args.mode == "save":
        with open(args.text, encoding="utf-8") as f:
            tokens = _tokenize(vocab, f.read(), True)
        _decode(ctx, tokens, 0, 2048)
        arr = (llama_cpp.llama_token * len(tokens))(*tokens)
        llama_cpp.llama_state_seq_save_file(ctx, args.state.encode(), 0, arr, len(tokens))
        print(len(tokens))
        return 0
    cap = args.ctx
    arr = (llama_cpp.llama_token * cap)()
    n_out = ctypes.c_size_t(0)
    if not llama_cpp.llama_state_seq_load_file(
        ctx, args.state.encode(), 0, arr, cap, ctypes.byref(n_out)
    ):
        raise SystemExit("cannot load the state file")
    n_past = n_out.value
    prompt = _tokenize(vocab, args.text, False)
    _decode(ctx, prompt, n_past, 2048)
    n_past += len(prompt)
    sampler = llama_cpp.llama_sampler_init_greedy()
    pieces = []
    buf = ctypes.create_string_buffer(256)
    for i in range(args.n):
        tok = llama_cpp.llama_sampler_sample(sampler, ctx, -1)
        n = llama_cpp.llama_token_to_piece(vocab, tok, buf, len(buf), 0, True)
        pieces.append(buf.raw[: max(0, n)])
        if i + 1 < args.n:  # the last token needs no decode (nothing is sampled after it)
            _decode(ctx, [tok], n_past, 1)
            n_past += 1
    sys.stdout.write(b"".join(pieces).decode("utf-8", "replace") + "\n")
    llama_cpp.llama_sampler_free(sampler)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
