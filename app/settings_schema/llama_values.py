"""llama.cpp's own numbers behind the schema's choices, and the limits it enforces.

The engine hands these values to llama.cpp's context parameters; the schema offers their
names as choices.
"""

from __future__ import annotations

# llama.cpp's LLAMA_MAX_SEQ: a larger n_seq_max makes context creation fail.
MAX_SEQUENCES = 256

# ggml type ids (ggml.h) of the KV cache types a user may pick, with bytes per element.
KV_TYPES: dict[str, tuple[int, float, int]] = {
    # name: (ggml_type, bytes per element, block size)
    "f32": (0, 4.0, 1),
    "f16": (1, 2.0, 1),
    "bf16": (30, 2.0, 1),
    "q8_0": (8, 34 / 32, 32),
    "q5_1": (7, 24 / 32, 32),
    "q5_0": (6, 22 / 32, 32),
    "q4_1": (3, 20 / 32, 32),
    "q4_0": (2, 18 / 32, 32),
    "iq4_nl": (20, 18 / 32, 32),
}

FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
ROPE_SCALING = {"model": -1, "none": 0, "linear": 1, "yarn": 2, "longrope": 3}
POOLING = {"model": -1, "none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
ATTENTION = {"model": -1, "causal": 0, "non-causal": 1}

FROM_MODEL = "From the model"

# The largest context and batch sizes a field accepts (far beyond any machine's memory,
# but below what makes llama.cpp's size arithmetic overflow).
CTX_MAX = 1 << 24
BATCH_MAX = 1 << 20
