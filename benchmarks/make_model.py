"""A benchmark model of realistic shape: TinyLlama-1.1B's layout, random weights, Q4_0.

22 layers, 2048 wide, 32 heads, 4 KV heads, FFN 5632, vocabulary 32000 (the SPM-style
vocabulary of ``tests/support/gguf_models.py`` padded with filler pieces). The F16 tensors
are streamed to an intermediate GGUF, quantized with ``llama_model_quantize`` (Q4_0, the
output tensor Q6_K as llama.cpp does for this file type) and the intermediate is deleted.
The result is cached and reused:

    python benchmarks/make_model.py [--out PATH] [--force]   # prints the model's path

Speed does not depend on the values, but NaNs could stop a run, so weights are small
(std 0.02) and the output rows of control tokens are zero: their logit is exactly 0 while
the largest of 32000 random logits is always above it, so greedy decoding never ends a
generation early and every measurement produces the same number of tokens.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gguf
import llama_cpp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.gguf_models import add_llama_header, llama_tensor_shapes, vocabulary

CACHE_DIR = Path(os.environ.get("LLAMADESK_BENCH_CACHE", "~/.cache/llamadesk-bench")).expanduser()


@dataclass(frozen=True)
class BenchSpec:
    """TinyLlama-1.1B's shape."""

    n_embd: int = 2048
    n_head: int = 32
    n_head_kv: int = 4
    n_layer: int = 22
    n_ff: int = 5632
    n_vocab: int = 32000
    n_ctx_train: int = 2048
    weight_std: float = 0.02
    seed: int = 1234

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def file_name(self) -> str:
        # The shape is in the name: a changed spec never reuses a stale file.
        return (
            f"llama-{self.n_layer}l-{self.n_embd}w-{self.n_head}h-{self.n_head_kv}kv-"
            f"{self.n_ff}ff-{self.n_vocab}v-s{self.seed}-q4_0.gguf"
        )

    def n_params(self) -> int:
        return sum(int(np.prod(shape)) for _, shape in self.tensor_shapes())

    def tensor_shapes(self) -> Iterator[tuple[str, tuple[int, ...]]]:
        return llama_tensor_shapes(
            self.n_vocab, self.n_embd, self.n_head, self.n_head_kv, self.n_layer, self.n_ff
        )


def bench_vocabulary(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """The test vocabulary padded to ``n_vocab`` with unique filler pieces."""
    tokens, scores, types = vocabulary()
    seen = set(tokens)
    i = 0
    while len(tokens) < n_vocab:
        piece = f"▁w{i:05d}"
        i += 1
        if piece in seen:
            continue
        seen.add(piece)
        tokens.append(piece)
        scores.append(-100.0 + len(piece))
        types.append(int(gguf.TokenType.NORMAL))
    return tokens[:n_vocab], scores[:n_vocab], types[:n_vocab]


def _tensor(
    rng: np.random.Generator, name: str, shape: tuple[int, ...], spec: BenchSpec, silent: list[int]
) -> np.ndarray:
    if len(shape) == 1:  # norms: ones, kept F32 (llama.cpp never quantizes 1-D tensors)
        return np.ones(shape, np.float32)
    data = rng.standard_normal(shape, dtype=np.float32)
    data *= spec.weight_std
    if name == "output.weight":
        data[silent] = 0.0  # control tokens: logit exactly 0, never the greedy choice
    return data.astype(np.float16)


def write_f16(path: Path, spec: BenchSpec) -> None:
    """Stream the F16 model to ``path`` one tensor at a time (peak memory: one tensor)."""
    vocab = bench_vocabulary(spec.n_vocab)
    silent = [
        i
        for i, t in enumerate(vocab[2])
        if t in (int(gguf.TokenType.CONTROL), int(gguf.TokenType.UNKNOWN))
    ]
    writer = gguf.GGUFWriter(str(path), "llama")
    add_llama_header(
        writer,
        name="llamadesk-bench-1.1b",
        n_ctx_train=spec.n_ctx_train,
        n_embd=spec.n_embd,
        n_layer=spec.n_layer,
        n_ff=spec.n_ff,
        n_head=spec.n_head,
        n_head_kv=spec.n_head_kv,
        file_type=gguf.LlamaFileType.MOSTLY_F16,
        vocab=vocab,
    )
    shapes = list(spec.tensor_shapes())
    for name, shape in shapes:
        dtype = np.dtype(np.float32 if len(shape) == 1 else np.float16)
        writer.add_tensor_info(name, shape, dtype, int(np.prod(shape)) * dtype.itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(spec.seed)
    for name, shape in shapes:
        writer.write_tensor_data(_tensor(rng, name, shape, spec, silent))
    writer.close()


def quantize_q4_0(src: Path, dst: Path, nthread: int = 2) -> None:
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    params.nthread = nthread
    code = llama_cpp.llama_model_quantize(
        str(src).encode(), str(dst).encode(), ctypes.byref(params)
    )
    if code != 0:
        raise RuntimeError(f"llama_model_quantize failed with code {code}")


def ensure_model(
    out: Path | None = None, spec: BenchSpec = BenchSpec(), force: bool = False, nthread: int = 2
) -> Path:
    """The Q4_0 model's path, written first when it is not cached yet."""
    path = out if out is not None else CACHE_DIR / spec.file_name
    if path.exists() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    f16 = path.with_name(path.name + f".{os.getpid()}.f16.tmp")
    partial = path.with_name(path.name + f".{os.getpid()}.tmp")
    try:
        t0 = time.perf_counter()
        write_f16(f16, spec)
        t1 = time.perf_counter()
        quantize_q4_0(f16, partial, nthread)
        t2 = time.perf_counter()
        os.replace(partial, path)  # a killed run never leaves a half-written model behind
        print(
            f"wrote {path} ({spec.n_params() / 1e9:.2f}B parameters, "
            f"{path.stat().st_size / 2**20:.0f} MiB): F16 {t1 - t0:.0f} s, quantize {t2 - t1:.0f} s",
            file=sys.stderr,
        )
    finally:
        f16.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=None, help="default: the cache directory")
    parser.add_argument("--force", action="store_true", help="rewrite even when cached")
    parser.add_argument("--threads", type=int, default=2, help="quantization threads")
    args = parser.parse_args()
    print(ensure_model(args.out, force=args.force, nthread=args.threads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
