"""Tokenizing long texts full of special tokens: LlamaDesk's ``Model.tokenize`` (special
tokens found in Python, :mod:`app.engine.special_split`) against llama.cpp's own
``llama_tokenize`` on the same text, which is quadratic in the special tokens it finds.

Texts of ``--sizes`` characters, of plain words and of ``<|im_start|>x`` repeated, on a
realistic 151,936-token vocabulary (the qwen2 one of ``tests/support/big_vocab.py``) and
the tests' small SentencePiece one. Both sides must give the same tokens (checked). Prints
ONE JSON object: seconds per case and the ratio llama.cpp / LlamaDesk.

    python benchmarks/bench_tokenize.py [--sizes 20000,40000,80000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.engine.model import Model
from tests.support.big_vocab import write_big_vocab_model
from tests.support.gguf_models import TinySpec, write_tiny_model

TEXTS = {"words": "hello world ", "specials": "<|im_start|>x"}


def _timed(fn: object, *args: object) -> tuple[float, list[int]]:
    start = time.perf_counter()
    out = fn(*args)  # type: ignore[operator]
    return time.perf_counter() - start, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20000,40000,80000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        models = {
            "qwen2-152k": write_big_vocab_model(Path(tmp) / "q.gguf", "qwen2", n_embd=8),
            "spm-small": write_tiny_model(Path(tmp) / "s.gguf", TinySpec(n_layer=1)),
        }
        for vocab, path in models.items():
            model = Model(path)
            try:
                for kind, unit in TEXTS.items():
                    for size in sizes:
                        text = unit * (size // len(unit))
                        app_s, app_tokens = _timed(model.tokenize, text, True, True)
                        bare_s, bare_tokens = _timed(
                            model._tokenize_bytes, text.encode(), True, True
                        )
                        results.append(
                            {
                                "vocab": vocab,
                                "text": kind,
                                "chars": len(text),
                                "tokens": len(app_tokens),
                                "same_tokens": app_tokens == bare_tokens,
                                "llamadesk_s": round(app_s, 4),
                                "llama_cpp_s": round(bare_s, 4),
                                "ratio_llama_cpp_over_llamadesk": round(bare_s / app_s, 2),
                            }
                        )
            finally:
                model.close()
    print(json.dumps({"cases": results, "loadavg": os.getloadavg()[0]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
