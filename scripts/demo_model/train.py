#!/usr/bin/env python
"""Train LlamaDesk's bundled demo model and write it as a llama-architecture GGUF.

Everything is made here, nothing is downloaded: a synthetic chat corpus from templates
(corpus.py), a byte-level BPE tokenizer compatible with llama.cpp's "qwen2" pre-tokenizer
(tok.py), a tiny llama in PyTorch (model.py) and the GGUF export (export.py).  Besides the
GGUF, small reference files are written next to it:

* ``<stem>.reference.npz``  -- PyTorch logits for a few held-out token sequences,
* ``<stem>.eval.json``      -- the fixed evaluation set (50 questions, 20 recall dialogues),
* ``<stem>.tokenizer.json`` -- the trained tokenizer (for the tokenization equality check).

Usage::

    python scripts/demo_model/train.py --seed 0 --out resources/models/llamadesk-demo.gguf
    python scripts/demo_model/train.py --check --out resources/models/llamadesk-demo.gguf

Training needs ``torch`` (``pip install torch==2.13.0``); the checks need only llama-cpp-python.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import corpus  # noqa: E402
import tok  # noqa: E402

N_CONVERSATIONS = 80_000
N_COPY_CONVERSATIONS = 40_000
N_MICRO_CONVERSATIONS = 40_000
VOCAB_SIZE = 3072


def sidecar(out: Path, suffix: str) -> Path:
    return out.with_name(out.name.removesuffix(".gguf") + suffix)


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


@dataclass
class Example:
    ids: list[int]
    # weight[i] > 0: predict ids[i] from ids[:i] (assistant content + <|im_end|>); the hard
    # parts of a reply weigh more (LossWeights), everything else 1
    weight: list[float]


@dataclass(frozen=True)
class LossWeights:
    """Loss weight of the tokens that carry the slow-to-learn skills: copied strings (names,
    repeated lists) and computed arithmetic results; the rest of a reply is easy (templates)."""

    copy: float = 1.0
    result: float = 1.0


def _token_weights(
    tk: object, content: str, copies: tuple[str, ...], weights: LossWeights
) -> tuple[list[int], list[float]]:
    """Token ids of an assistant reply and each token's loss weight."""
    enc = tk.encode(content, add_special_tokens=False)  # type: ignore[attr-defined]
    spans = []
    for c in copies:
        start = content.find(c)
        while c and start >= 0:
            spans.append((start, start + len(c), weights.copy))
            start = content.find(c, start + 1)
    result = corpus.arith_result_span(content)
    if result is not None:
        spans.append((*result, weights.result))
    out = []
    for a, b in enc.offsets:
        out.append(max((w for s, e, w in spans if a < e and b > s), default=1.0))
    return list(enc.ids), out


def encode_conversation(
    tk: object,
    conv: corpus.Conversation,
    ids_of: dict[str, int],
    weights: LossWeights = LossWeights(),
) -> Example:
    ids: list[int] = []
    weight: list[float] = []
    nl = tok.encode(tk, "\n")  # type: ignore[arg-type]
    for m in conv.messages:
        head = [ids_of[corpus.IM_START], *tok.encode(tk, m["role"] + "\n")]  # type: ignore[arg-type]
        ids += head
        weight += [0.0] * len(head)
        if m["role"] == "assistant":
            body, body_w = _token_weights(tk, m["content"], conv.copies, weights)
            ids += [*body, ids_of[corpus.IM_END]]
            weight += [*body_w, 1.0]
        else:
            body = tok.encode(tk, m["content"])  # type: ignore[arg-type]
            ids += [*body, ids_of[corpus.IM_END]]
            weight += [0.0] * (len(body) + 1)
        ids += nl
        weight += [0.0] * len(nl)
    return Example(ids, weight)


def pack(
    examples: list[Example], seq_len: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Greedy packing into rows. Returns ids, target weights, doc ids (-1 = pad), positions."""
    rows: list[list[Example]] = []
    cur: list[Example] = []
    used = 0
    for ex in examples:
        n = len(ex.ids)
        if n > seq_len:
            continue
        if used + n > seq_len:
            rows.append(cur)
            cur, used = [], 0
        cur.append(ex)
        used += n
    if cur:
        rows.append(cur)
    r = len(rows)
    ids = np.zeros((r, seq_len), dtype=np.int64)
    tgt = np.zeros((r, seq_len), dtype=np.float32)
    doc = np.full((r, seq_len), -1, dtype=np.int64)
    pos = np.zeros((r, seq_len), dtype=np.int64)
    for i, row in enumerate(rows):
        o = 0
        for j, ex in enumerate(row):
            n = len(ex.ids)
            ids[i, o : o + n] = ex.ids
            tgt[i, o : o + n] = ex.weight
            doc[i, o : o + n] = j
            pos[i, o : o + n] = np.arange(n)
            o += n
    return ids, tgt, doc, pos


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


def train(args: argparse.Namespace) -> None:
    import torch
    import torch.nn.functional as F
    from model import Config, TinyLlama

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    out = Path(args.out)
    t0 = time.time()

    # the tokenizer is trained on the corpus with generated names; the corpus is then drawn
    # again (same seed) with names glued from the tokenizer's own pieces (corpus.name_pieces)
    tk = tok.train_tokenizer(
        (c.text() for c in corpus.build_corpus(args.seed, N_CONVERSATIONS, pieces=())),
        VOCAB_SIZE,
    )
    pieces = corpus.name_pieces(tk.get_vocab())
    ids_of = tok.special_ids(tk)
    loss_weights = LossWeights(copy=args.copy_weight, result=args.result_weight)
    if args.checkpoint:  # so that checkpoints can be evaluated while training runs
        tk.save(str(Path(args.checkpoint.format(step="")).with_suffix(".tokenizer.json")))

    def packed(convs: list[corpus.Conversation]) -> tuple[np.ndarray, ...]:
        examples = [encode_conversation(tk, c, ids_of, loss_weights) for c in convs]
        for ex, conv in zip(examples[:1000], convs[:1000], strict=True):
            assert ex.ids == tok.encode(tk, conv.text()), (
                "segment-wise encoding differs from whole-text encoding"
            )
        return pack(examples, args.seq_len)

    convs = corpus.build_corpus(args.seed, N_CONVERSATIONS, pieces=pieces)
    ids_np, tgt_np, doc_np, pos_np = packed(convs)
    copy_np = packed(corpus.build_copy_corpus(args.seed, N_COPY_CONVERSATIONS, pieces=pieces))
    micro_np = packed(corpus.build_micro_corpus(args.seed, N_MICRO_CONVERSATIONS, pieces=pieces))
    n_rows = len(ids_np)
    n_tok = int((doc_np >= 0).sum())
    print(
        f"corpus: {len(convs)} conversations, {n_tok} tokens "
        f"({int((tgt_np > 0).sum())} trained) in {n_rows} rows of {args.seq_len}; "
        f"{time.time() - t0:.1f}s",
        flush=True,
    )

    cfg = Config(
        vocab_size=tk.get_vocab_size(),
        d_model=args.d_model,
        n_layer=args.n_layer,
        n_head=args.n_head,
        n_kv_head=args.n_kv_head,
        d_ff=args.d_ff,
    )
    model = TinyLlama(cfg)
    print(f"model: {cfg} params={model.n_params():,}", flush=True)
    if args.from_checkpoint:  # export (and check) saved weights instead of training
        saved = torch.load(args.from_checkpoint)
        assert saved["cfg"] == cfg.to_dict(), "checkpoint was made with other settings"
        model.load_state_dict(saved["model"])
        print(f"loaded {args.from_checkpoint} (step {saved['step']}); not training", flush=True)
        args.steps = 0

    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "tok_embd" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2 or "tok_embd" in n]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.98),
        eps=1e-8,
    )
    main_data = tuple(torch.from_numpy(a) for a in (ids_np, tgt_np, doc_np, pos_np))
    copy_data = tuple(torch.from_numpy(a) for a in copy_np)
    micro_data = tuple(torch.from_numpy(a) for a in micro_np)
    micro_order: list[int] = []
    order: list[int] = []
    copy_order: list[int] = []
    warmup = max(1, int(args.steps * 0.04))
    causal = torch.ones(args.seq_len, args.seq_len, dtype=torch.bool).tril()
    model.train()
    t_train = time.time()
    ema = None
    for step in range(args.steps):
        lr = args.lr * (
            (step + 1) / warmup
            if step < warmup
            else 0.5
            * (1 + math.cos(math.pi * (step - warmup) / max(1, args.steps - warmup)))
            * 0.95
            + 0.05
        )
        for g in opt.param_groups:
            g["lr"] = lr
        # copy curriculum: the first --copy-steps steps draw only short copy dialogues (names,
        # lists), so that the copying circuit forms before the full mixture; afterwards
        # --copy-rows of every batch still come from them, so that it is not forgotten
        n_copy = args.batch if step < args.copy_steps else args.copy_rows
        if step < args.micro_steps:  # before that, tiny copy dialogues only (see corpus.py)
            parts = ((micro_data, micro_order, args.batch),)
        else:
            parts = ((copy_data, copy_order, n_copy), (main_data, order, args.batch - n_copy))
        rows_of: list[tuple[torch.Tensor, ...]] = []
        for data, queue, n in parts:
            if n == 0:
                continue
            if len(queue) < n:
                epoch = list(range(len(data[0])))
                rng.shuffle(epoch)
                queue += epoch
            rows_of.append(tuple(a[queue[:n]] for a in data))
            del queue[:n]
        ids, w_t, doc, pos = (torch.cat(cols) for cols in zip(*rows_of, strict=True))
        mask = (doc[:, :, None] == doc[:, None, :]) & causal & (doc[:, :, None] >= 0)
        mask |= torch.eye(args.seq_len, dtype=torch.bool)  # padding rows attend to themselves
        # bf16 matmuls (weights and optimizer stay f32): ~1.3x more steps in the same time on
        # CPUs with AVX512-BF16; the exported weights and the reference logits are f32
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            hidden = model.hidden(ids, pos, mask[:, None])
            # predict token i+1 from position i where token i+1 is a trained (assistant) token
            w = w_t[:, 1:]
            sel = w > 0
            logits = model.output(hidden[:, :-1][sel])
        ce = F.cross_entropy(logits.float(), ids[:, 1:][sel], reduction="none")
        loss = (ce * w[sel]).sum() / w[sel].sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % args.log_every == 0 or step == args.steps - 1:
            el = time.time() - t_train
            print(
                f"step {step:5d}/{args.steps} loss {ema:.4f} lr {lr:.2e} "
                f"{el:6.0f}s ({el / (step + 1):.2f}s/step)",
                flush=True,
            )
        if args.checkpoint and ((step + 1) % args.checkpoint_every == 0 or step == args.steps - 1):
            torch.save(
                {"cfg": cfg.to_dict(), "step": step + 1, "model": model.state_dict()},
                args.checkpoint.format(step=step + 1),
            )
    print(f"training: {time.time() - t_train:.0f}s", flush=True)
    model.eval()

    # ---- export ----------------------------------------------------------------------------
    weights = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}
    from export import write_gguf

    desc = (
        "Tiny demo chat model trained by scripts/demo_model/train.py "
        f"(seed {args.seed}) on a synthetic corpus: LlamaDesk help, two-digit arithmetic, "
        "name recall, list repetition."
    )
    write_gguf(out, cfg.to_dict(), weights, tk, description=desc)
    tk.save(str(sidecar(out, ".tokenizer.json")))
    evalset = corpus.build_eval(args.seed)
    sidecar(out, ".eval.json").write_text(json.dumps(evalset, indent=1, ensure_ascii=False) + "\n")

    # reference logits: last positions of a few held-out sequences (not training text)
    seqs = reference_sequences(tk, evalset)
    with torch.no_grad():
        ref = [model(torch.tensor([s]))[0, -4:].numpy() for s in seqs]
    lens = np.array([len(s) for s in seqs], dtype=np.int64)
    flat = np.concatenate([np.array(s, dtype=np.int32) for s in seqs])
    np.savez_compressed(
        sidecar(out, ".reference.npz"), tokens=flat, lengths=lens, logits=np.stack(ref), last_n=4
    )
    print(
        f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB) in {time.time() - t0:.0f}s total",
        flush=True,
    )


def reference_sequences(tk: object, evalset: dict[str, object]) -> list[list[int]]:
    qs = evalset["questions"]  # type: ignore[index]
    rec = evalset["recall"]  # type: ignore[index]
    q = [x["question"] for x in qs]  # type: ignore[union-attr]
    msgs1 = [{"role": "user", "content": q[0]}]
    msgs2 = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": rec[0]["turn1"]},  # type: ignore[index]
        {"role": "assistant", "content": corpus.NAME_REPLY.format(N=rec[0]["name"])},  # type: ignore[index]
        {"role": "user", "content": q[30]},
        {"role": "assistant", "content": qs[30]["expected"]},  # type: ignore[index]
        {"role": "user", "content": rec[0]["turn3"]},  # type: ignore[index]
    ]
    msgs3 = []
    for i in range(8):
        msgs3 += [
            {"role": "user", "content": q[i * 5]},
            {"role": "assistant", "content": qs[i * 5]["expected"]},  # type: ignore[index]
        ]
    msgs3.append({"role": "user", "content": q[41]})
    texts = [
        corpus.render(msgs1, add_generation_prompt=True),
        corpus.render(msgs2, add_generation_prompt=True),
        corpus.render(msgs3, add_generation_prompt=True)[:1500],
        "Unrelated text: The quick brown fox jumps over 13 lazy dogs; Zoë said 'naïve'?",
    ]
    return [tok.encode(tk, t)[:400] for t in texts]  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Train the LlamaDesk demo model (tiny llama, synthetic corpus) and export GGUF.",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (corpus, init, order)")
    p.add_argument("--out", default="resources/models/llamadesk-demo.gguf", help="output GGUF path")
    p.add_argument("--check", action="store_true", help="only run the llama.cpp checks on --out")
    p.add_argument("--no-check", action="store_true", help="skip the checks after training")
    p.add_argument("--steps", type=int, default=5400, help="optimizer steps")
    p.add_argument("--batch", type=int, default=8, help="packed rows per step")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per packed row")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=8)
    p.add_argument("--n-kv-head", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=768)
    p.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="bf16 autocast for the training matmuls (default on; 1.33x faster on this CPU "
        "with AVX512-BF16, maybe no faster without; the weights differ, so the checks decide)",
    )
    p.add_argument("--threads", type=int, default=2, help="torch / llama.cpp threads")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument(
        "--micro-steps", type=int, default=300, help="first steps: tiny copy dialogues only"
    )
    p.add_argument(
        "--copy-steps",
        type=int,
        default=900,
        help="first steps (counting --micro-steps) with copy dialogues only",
    )
    p.add_argument(
        "--copy-rows", type=int, default=2, help="rows of every later batch from copy dialogues"
    )
    p.add_argument(
        "--copy-weight", type=float, default=2.0, help="loss weight of copied name/list tokens"
    )
    p.add_argument(
        "--result-weight", type=float, default=3.0, help="loss weight of arithmetic results"
    )
    p.add_argument(
        "--checkpoint", default="", help="also save the weights here ({step}: keep every save)"
    )
    p.add_argument("--checkpoint-every", type=int, default=500, help="steps between saves")
    p.add_argument("--from-checkpoint", default="", help="export saved weights, do not train")
    args = p.parse_args(argv)
    if not 0 <= args.copy_rows <= args.batch:
        p.error(f"--copy-rows must be between 0 and --batch ({args.batch})")
    if args.copy_weight <= 0 or args.result_weight <= 0:
        p.error("--copy-weight and --result-weight must be positive")
    if min(args.steps, args.micro_steps, args.copy_steps, args.checkpoint_every - 1) < 0:
        p.error("step counts must not be negative (and --checkpoint-every at least 1)")
    try:
        args.checkpoint.format(step=0)
    except (KeyError, IndexError, ValueError):
        p.error("--checkpoint may contain {step} and no other {...} field")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    if not args.check:
        train(args)
        if args.no_check:
            return 0
    import checks

    return checks.run_all(Path(args.out), seed=args.seed, threads=args.threads)


if __name__ == "__main__":
    sys.exit(main())
