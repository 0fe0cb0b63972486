"""Write the demo model as a llama-architecture GGUF (f32 weights) with its BPE vocab."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from corpus import BOS, CHAT_TEMPLATE, IM_END, IM_START
from tok import GGUF_PRE, merges_list, vocab_list
from tokenizers import Tokenizer

# torch parameter name (per block) -> GGUF tensor name
_BLOCK_NAMES = {
    "attn_norm.weight": "attn_norm.weight",
    "wq.weight": "attn_q.weight",
    "wk.weight": "attn_k.weight",
    "wv.weight": "attn_v.weight",
    "wo.weight": "attn_output.weight",
    "ffn_norm.weight": "ffn_norm.weight",
    "w_gate.weight": "ffn_gate.weight",
    "w_up.weight": "ffn_up.weight",
    "w_down.weight": "ffn_down.weight",
}


def gguf_tensor_name(torch_name: str) -> str:
    if torch_name == "tok_embd.weight":
        return "token_embd.weight"
    if torch_name == "output_norm.weight":
        return "output_norm.weight"
    if torch_name == "output.weight":
        return "output.weight"
    _, idx, rest = torch_name.split(".", 2)  # blocks.N.xxx
    return f"blk.{idx}.{_BLOCK_NAMES[rest]}"


def write_gguf(
    path: Path,
    cfg: dict[str, int | float],
    weights: dict[str, np.ndarray],
    tokenizer: Tokenizer,
    name: str = "LlamaDesk Demo",
    description: str = "",
) -> None:
    tokens = vocab_list(tokenizer)
    specials = {BOS, IM_START, IM_END}
    types = [
        int(gguf.TokenType.CONTROL) if t in specials else int(gguf.TokenType.NORMAL) for t in tokens
    ]
    if len(tokens) != cfg["vocab_size"]:
        raise ValueError(f"vocab {len(tokens)} != model vocab {cfg['vocab_size']}")
    head_dim = int(cfg["d_model"]) // int(cfg["n_head"])

    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    if description:
        w.add_description(description)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    w.add_vocab_size(len(tokens))
    w.add_context_length(int(cfg["context_length"]))
    w.add_embedding_length(int(cfg["d_model"]))
    w.add_block_count(int(cfg["n_layer"]))
    w.add_feed_forward_length(int(cfg["d_ff"]))
    w.add_head_count(int(cfg["n_head"]))
    w.add_head_count_kv(int(cfg["n_kv_head"]))
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(cfg["rope_base"]))
    w.add_layer_norm_rms_eps(float(cfg["norm_eps"]))

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(GGUF_PRE)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges_list(tokenizer))
    w.add_bos_token_id(tokens.index(BOS))
    w.add_eos_token_id(tokens.index(IM_END))
    w.add_eot_token_id(tokens.index(IM_END))
    w.add_pad_token_id(tokens.index(BOS))
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    for tname in sorted(weights, key=_order):
        arr = np.ascontiguousarray(weights[tname], dtype=np.float32)
        w.add_tensor(gguf_tensor_name(tname), arr)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _order(torch_name: str) -> tuple[int, int, str]:
    if torch_name.startswith("tok_embd"):
        return (0, 0, torch_name)
    if torch_name.startswith("blocks."):
        return (1, int(torch_name.split(".")[1]), torch_name)
    return (2, 0, torch_name)
