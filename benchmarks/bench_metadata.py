"""Reading a model's metadata: ``read_model_info`` vs llama.cpp's vocab-only load vs gguf.

On tiny models with real-size vocabularies (``tests/support/big_vocab.py``: Qwen2's
151,936 tokens and 151,387 merges, Llama 3's 128,256 tokens and 280,147 merges; written to
a temporary folder on each run) and on the demo model, in one process:

* ``read_model_info`` (the header reader of ``app/engine/gguf_header.py``): median of
  ``--repeat`` runs - target: under 50 ms for the 150k vocabulary;
* llama.cpp's own vocab-only load (``llama_model_load_from_file`` with ``vocab_only``,
  which parses the header and builds the tokenizer): median of ``--llama-repeat`` runs;
* the former reader on ``gguf``'s ``GGUFReader``: ``--gguf-repeat`` runs (10+ s each for
  the big vocabularies; 0 skips it).

Ratios are the other time / ``read_model_info``'s, within this run. The results are
checked against each other (vocabulary size, BOS/EOS texts). Prints ONE JSON object:

    python benchmarks/bench_metadata.py [--repeat 9] [--llama-repeat 3] [--gguf-repeat 1]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine.backend import ensure_backend
from app.engine.metadata import ModelInfo, read_model_info
from tests.support.big_vocab import bpe_vocab, write_big_vocab_model
from tests.support.gguf_reference import reference_model_info

TARGET_MS = 50.0
DEMO = Path(__file__).resolve().parents[1] / "resources" / "models" / "llamadesk-demo.gguf"


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median seconds of ``repeat`` calls, and the last result."""
    times = []
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def llama_vocab_only(path: Path) -> dict[str, Any]:
    """Load the vocabulary with llama.cpp; what it says about it."""
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise RuntimeError(f"llama.cpp could not load the vocabulary of {path}")
    try:
        vocab = llama_cpp.llama_model_get_vocab(model)
        bos, eos = llama_cpp.llama_vocab_bos(vocab), llama_cpp.llama_vocab_eos(vocab)
        text = llama_cpp.llama_vocab_get_text
        return {
            "n_vocab": int(llama_cpp.llama_vocab_n_tokens(vocab)),
            "bos_token": ctypes.string_at(text(vocab, bos)).decode(),
            "eos_token": ctypes.string_at(text(vocab, eos)).decode(),
        }
    finally:
        llama_cpp.llama_model_free(model)


def same(info: ModelInfo, llama: dict[str, Any]) -> bool:
    return (info.n_vocab, info.bos_token, info.eos_token) == (
        llama["n_vocab"],
        llama["bos_token"],
        llama["eos_token"],
    )


def measure(name: str, path: Path, args: argparse.Namespace) -> dict[str, Any]:
    read_model_info(path)  # warm the page cache and the imports
    ours, info = timed(lambda: read_model_info(path), args.repeat)
    llama, llama_info = timed(lambda: llama_vocab_only(path), args.llama_repeat)
    row: dict[str, Any] = {
        "model": name,
        "n_vocab": info.n_vocab,
        "header_bytes": _header_size(path),
        "read_model_info_ms": round(ours * 1e3, 2),
        "llama_vocab_only_ms": round(llama * 1e3, 1),
        "llama_vocab_only_over_ours": round(llama / ours, 1),
        "agrees_with_llama": same(info, llama_info),
        "under_target": ours * 1e3 < TARGET_MS,
    }
    if args.gguf_repeat > 0:
        old, old_info = timed(lambda: reference_model_info(path), args.gguf_repeat)
        row["gguf_reader_ms"] = round(old * 1e3, 1)
        row["gguf_reader_over_ours"] = round(old / ours, 1)
        row["agrees_with_gguf_reader"] = old_info.to_dict() == {
            **info.to_dict(),
            "arch_params": old_info.to_dict()["arch_params"],
        }
    return row


def _header_size(path: Path) -> int:
    from app.engine.gguf_header import read_header

    return read_header(path).data_offset


def run(args: argparse.Namespace) -> dict[str, Any]:
    ensure_backend()
    rows = []
    with tempfile.TemporaryDirectory(prefix="llamadesk-bench-meta-") as tmp:
        for kind in ("qwen2", "llama3"):
            t0 = time.perf_counter()
            vocab = bpe_vocab(kind)
            t_vocab = time.perf_counter() - t0
            t0 = time.perf_counter()
            path = write_big_vocab_model(Path(tmp) / f"tiny-{kind}.gguf", kind)
            t_write = time.perf_counter() - t0
            row = measure(f"tiny-{kind}-vocab", path, args)
            row["n_merges"] = len(vocab.merges)
            row["vocab_generate_s"] = round(t_vocab, 2)
            row["file_write_s"] = round(t_write, 2)
            rows.append(row)
        rows.append(measure("llamadesk-demo", DEMO, args))
    return {
        "benchmark": "metadata",
        "target_ms": TARGET_MS,
        "repeat": args.repeat,
        "llama_repeat": args.llama_repeat,
        "gguf_repeat": args.gguf_repeat,
        "results": rows,
        "ok": all(r["under_target"] and r["agrees_with_llama"] for r in rows),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=9, help="runs of read_model_info")
    parser.add_argument("--llama-repeat", type=int, default=3, help="runs of llama.cpp's load")
    parser.add_argument("--gguf-repeat", type=int, default=1, help="runs of GGUFReader; 0 skips")
    args = parser.parse_args()
    if args.repeat < 1 or args.llama_repeat < 1 or args.gguf_repeat < 0:
        parser.error("--repeat and --llama-repeat must be at least 1, --gguf-repeat at least 0")
    report = run(args)
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
